"""KFP components around Vertex AI's hyperparameter tuning job (GCPC's op runs the job itself).

``tuning_trial_spec`` builds the trials' worker pool (it needs the prepared data's path, known
only when the pipeline runs) and their output folder (its own artifact's: the pipeline never
serves the step from the cache, so every tuning job gets a fresh one); ``best_tuning_options``
reads the finished job's trials and hands the best values to ``train_model``. The logic is in
``training_core.tune``; KFP embeds only the functions' source, so imports stay inside.
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def tuning_trial_spec(
    examples: Input[Dataset],
    trials: Output[Artifact],
    image: str,
    machine_type: str,
    preset: str,
    metric: str,
    accelerator_type: str = "",
    accelerator_count: int = 0,
    architecture: str = "",
    epochs: int = 0,
    seed: int = 0,
) -> NamedTuple("TrialSpec", worker_pool_specs=list, base_output_directory=str):
    """The trials' worker pool (``ncf-pipelines train`` on ``examples``) and output folder.

    The folder is ``trials``' URI: new for every execution, so the pipeline runs this step
    uncached and each tuning job gets a folder no earlier job wrote to.
    """
    import collections

    from training_core import tune

    command = tune.trial_command(
        examples.path, preset, architecture, epochs, seed, metric,
        accelerator_type, accelerator_count,
    )  # fmt: skip
    specs = tune.trial_worker_pool_specs(
        command, image, machine_type, accelerator_type, accelerator_count
    )
    trials.metadata["command"] = command
    out = collections.namedtuple("TrialSpec", ["worker_pool_specs", "base_output_directory"])
    return out(specs, trials.uri)


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def best_tuning_options(
    gcp_resources: str,
    trials: Input[Artifact],
    search_space: str,
    tuned: Output[Metrics],
    max_trial_count: int = 0,
) -> NamedTuple(
    "Best",
    architecture=str,
    learning_rate=float,
    l2_regularization=float,
    num_factors=int,
    mlp_layers=str,
    batch_size=int,
):
    """The best trial's values of the finished tuning job (``gcp_resources``, GCPC's output).

    Read from the trials' own folders under ``trials`` (the job's base output directory:
    each trial's model config and per-epoch history), so no API call is needed. The metric is
    the one each trial reported per epoch: its data's selection split's (validation where the
    prepared data has one, else test; ``train``'s ``--hypertune-metric``); a trial's folder
    does not hold its test-split number, which the final training reports.
    ``search_space`` is the search-space file's text (compiled in). An option the space does
    not search comes out as its zero value, "the preset's" for ``train_model``.
    ``max_trial_count`` (the job's): a folder with more trials than that holds an earlier job's
    and is refused (0: not checked).
    """
    import collections
    import json
    import tempfile

    from training_core import tune

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(search_space)
    space = tune.load_search_space(f.name)
    job = json.loads(gcp_resources)["resources"][0]["resourceUri"].split("/v1/", 1)[-1]
    options, value, trial_id = tune.best_trial_folder(trials.path, space, max_trial_count)
    tuned.log_metric(space.metric, value)
    tuned.metadata.update({"trial": trial_id, "job": job, **options})
    zero = {
        "architecture": "",
        "learning_rate": 0.0,
        "l2_regularization": 0.0,
        "num_factors": 0,
        "mlp_layers": "",
        "batch_size": 0,
    }
    zero.update(options)
    print(
        f"best trial {trial_id} of {job}: {space.metric} {value:.4f} (on the selection split: "
        f"validation where the data has one) with {options}"
    )
    out = collections.namedtuple("Best", list(zero))
    return out(**zero)
