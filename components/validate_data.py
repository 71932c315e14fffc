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
    See training_core.data.validate and docs/validation.md.
    """
    from training_core.common import console

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    from components._image import with_worker_image
    from training_core.common import faults
    from training_core.data import validate as v

    with faults.reported():  # A full disk or too little memory: one paragraph.
        result = v.validate(
            v.ValidateConfig(
                input_path=raw_data.path,
                outputs=v.OutputPaths(statistics.path, schema.path, anomalies.path, report.path),
                format=data_format,
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
