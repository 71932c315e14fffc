"""KFP component ``prepare_data``: raw ratings artifact to pre-batched TFRecords."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def prepare_data(
    raw_data: Input[Dataset],
    examples: Output[Dataset],
    data_format: str = "auto",
    user_col: str = "",
    item_col: str = "",
    time_col: str = "",
    rating_col: str = "",
    event_col: str = "",
    id_type: str = "auto",
    min_rating: float = 0.0,
    positive_events: str = "",
    min_ratings: int = 20,
    num_epochs: int = 0,
    train_preset: str = "auto",
    train_epochs: int = 0,
    num_neg: int = 4,
    recency_boost: float = 8.0,
    recency_scale: float = 20.0,
    eval_negatives: int = 999,
    eval_sampling: str = "distinct",
    validation: bool = True,
    refit: bool = False,
    train_batch_size: int = 1024,
    eval_batch_size: int = 0,
    seed: int = 0,
    eval_users_multiple: int = 8,
    data_fingerprint: str = "",
    runner: str = "local",
    beam_pipeline_args: list = None,
    worker_image: str = "",
):
    """Held-out splits by time, negative sampling and pre-batched TFRecords (training_core.data).

    The options are ``training_core.data.config.PrepareConfig``'s, with its defaults (a test
    holds them equal); 0 or "" is "not set" (training_core.common.not_set): the columns ""
    (``user_col`` ... ``event_col``, the config's ``columns``) are detected, ``min_rating`` 0
    keeps every row a positive, ``eval_batch_size`` 0 picks
    whole users, a multiple of ``eval_users_multiple`` (the training replica count);
    ``num_epochs`` 0 prepares one epoch of fresh negatives per epoch the train step runs, which
    ``train_preset`` and ``train_epochs`` say (the train step's ``preset`` and ``epochs``: the
    epochs of ``auto``'s preset depend on the data's size, known here once it is read).
    ``validation`` False: no validation split, the reference's leave-one-out (--no-validation).
    ``refit`` True: every interaction is a training positive, for the model that ships after
    evaluation (--refit); its held-out records are written but measure nothing.
    ``data_fingerprint`` (the content hash submit computes) only keys the step's cache, so
    changed data behind an unchanged path is prepared again. ``runner`` "beam" runs the same
    preparation as an Apache Beam job (Dataflow when ``beam_pipeline_args`` name
    ``--runner=DataflowRunner`` and its options; docs/beam.md); the output is the same.
    ``worker_image`` (the compiled Dataflow worker image) becomes the job's
    ``--sdk_container_image`` on Dataflow unless the options name one.
    ``examples`` gets the dataset folder and its counts as artifact metadata.
    """
    parameters = dict(locals())
    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    first_run.at_step_start(examples.path)  # /gcs writable? docs/submit.md
    from components._image import with_worker_image
    from training_core.common import faults, hints
    from training_core.data import config, prep_result, prepare
    from training_core.data import io as rio
    from training_core.training.train_config import with_training_epochs

    # Messages name the pipeline's parameters (--param user_col=...), not the command line's.
    with hints.in_pipeline():
        names = (user_col, item_col, time_col, rating_col, event_col)
        columns = rio.Columns(*(name or None for name in names))  # "": detect.
        # The epochs training runs (train_preset, train_epochs) decide the epochs prepared.
        settings = with_training_epochs(
            config.from_parameters(raw_data.path, examples.path, {**parameters, "columns": columns})
        )
        beam_args = with_worker_image(beam_pipeline_args or (), worker_image)
        with faults.reported():  # A full disk or too little memory: one paragraph.
            result = prepare.run(settings, runner, beam_args)
    print(prep_result.summary(result))
    examples.metadata.update(prep_result.artifact_metadata(result))
