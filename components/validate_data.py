"""KFP component ``validate_data``: the TFDV gate on the raw interactions, before data prep."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def validate_data(
    raw_data: Input[Dataset],
    statistics: Output[Artifact],
    schema: Output[Artifact],
    anomalies: Output[Artifact],
    report: Output[HTML],
    data_format: str = "auto",
    user_col: str = "",
    item_col: str = "",
    time_col: str = "",
    rating_col: str = "",
    event_col: str = "",
    id_type: str = "auto",
    min_rating: float = 0.0,
    positive_events: str = "",
    baseline_schema_uri: str = "",
    baseline_statistics_uri: str = "",
    drift: list = None,
    fail_on_anomalies: bool = True,
    beam_pipeline_args: list = None,
    data_fingerprint: str = "",
    worker_image: str = "",
):
    """Statistics, schema and anomalies of ``raw_data``; fails the step when there are anomalies.

    Baselines are URIs (``gs://...`` or a path) of a reviewed ``schema.pbtxt`` and of earlier
    ``FeatureStats.pb`` (or their folders), not optional artifact inputs: kfp 2.13's local runner
    fails on an optional artifact input left out (kubeflow/pipelines#13061). ``drift`` holds
    ``FEATURE=linf:T`` / ``FEATURE=js:T`` strings (as the CLI's ``--drift``).
    ``fail_on_anomalies=False`` only warns. ``data_fingerprint`` (the content hash ``submit``
    computes) only keys the cache, so changed data behind an unchanged path is checked again.
    ``worker_image`` (the compiled Dataflow worker image) becomes the job's
    ``--sdk_container_image`` on Dataflow unless the options name one.
    The reader's options are ``prepare_data``'s (a pipeline passes both the same values): the
    columns (``user_col`` ... ``event_col``, "" detects), ``id_type``, ``min_rating`` (0: not
    set) and ``positive_events`` ("": every event).
    See training_core.data.validate and docs/validation.md.
    """
    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    # Before any work: /gcs takes this user's writes (docs/submit.md, first-run checklist).
    first_run.at_step_start(statistics.path, schema.path, anomalies.path, report.path)
    from components._image import with_worker_image
    from training_core.common import faults, hints
    from training_core.data import io as rio
    from training_core.data import validate as v

    # Messages name the pipeline's parameters (--param user_col=...), not the command line's.
    with hints.in_pipeline(), faults.reported():  # faults: a full disk, too little memory.
        names = (user_col, item_col, time_col, rating_col, event_col)
        result = v.validate(
            v.ValidateConfig(
                input_path=raw_data.path,
                outputs=v.OutputPaths(statistics.path, schema.path, anomalies.path, report.path),
                format=data_format,
                columns=rio.Columns(*(name or None for name in names)),  # "": detect.
                id_type=id_type,
                min_rating=min_rating or None,  # 0: not set.
                positive_events=positive_events,
                baseline_schema=baseline_schema_uri or None,
                baseline_statistics=baseline_statistics_uri or None,
                drift=tuple(v.parse_drift(s) for s in drift or ()),
                fail_on_anomalies=fail_on_anomalies,
                beam_pipeline_args=tuple(with_worker_image(beam_pipeline_args or (), worker_image)),
            )
        )
    print(v.summary(result))
    for artifact in (statistics, schema, anomalies, report):
        artifact.metadata.update(v.artifact_metadata(result))
