"""KFP components ``export_model`` (serving SavedModel) and ``register_model`` (Vertex AI upload).

The logic lives in ``training_core.serving.export`` (the SavedModel) and
``training_core.serving.vertex_registry`` (the upload, without TensorFlow). KFP embeds only each
function's source in the container, so the imports stay inside the bodies.
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Model, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def export_model(
    model: Input[Model],
    examples: Input[Dataset],
    exported_model: Output[Model],
    top_k: int = 10,
    default_signature: str = "score",
):
    """Writes a SavedModel that scores and recommends by raw ids (see docs/serving.md)."""
    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    first_run.at_step_start(exported_model.path)  # /gcs writable? docs/submit.md
    from training_core.common import faults
    from training_core.serving import export

    with faults.reported():  # A full disk or too little memory: one paragraph.
        result = export.export(
            export.ExportConfig(
                model_dir=model.path,
                data_dir=examples.path,
                export_dir=exported_model.path,
                top_k=top_k,
                default_signature=default_signature,
                # The folder is this task's own output: a retry replaces what an attempt that died
                # after publishing left there (the earlier attempt's executor output never came).
                overwrite=True,
            )
        )
    exported_model.metadata.update(
        {
            "framework": "tensorflow",
            "framework_version": result.tensorflow_version,
            "signatures": sorted(result.signatures),
            "default_signature": result.default_signature,
            "top_k": result.top_k,
            "num_users": result.num_users,
            "num_items": result.num_items,
            "global_step": result.step,
        }
    )


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def register_model(
    exported_model: Input[Model],
    vertex_model: Output[Artifact],
    project: str,
    location: str,
    display_name: str,
    serving_image: str = "",
    gpu: bool = False,
    parent_model: str = "",
    decision: Input[Metrics] = None,
    local_registry: str = "",
    make_default: bool = True,
    data_fingerprint: str = "",
    preset: str = "",
    architecture: str = "",
    epochs: int = 0,
    seed: int = 0,
    own_serving_image: bool = False,
):
    """Uploads the SavedModel to the Vertex AI Model Registry with its serving image.

    The image is Vertex AI's prebuilt TF Serving one for the export's TensorFlow, or
    ``serving_image``; with ``own_serving_image`` that is this project's serve image, and the
    upload names its predict and health routes and its port (docs/serving.md, "Our own
    serving image").

    With ``parent_model`` (``compare_models``' ``champion_model``) the upload is a new version
    of that model, else a new model; it becomes the default version unless ``make_default`` is
    false (the pipeline registers only a blessed model, and leaves the default to
    ``deploy_model`` when it deploys: the default moves once the version serves).
    ``decision`` (``compare_models``' metrics), when given, puts the challenger's metrics on
    the version as labels, beside the run's facts: the data fingerprint and the training
    parameters (``preset``, ``architecture``, ``epochs``, ``seed``; empty or 0 ones, "the
    preset's", are left out). ``local_registry`` (run-local):
    the registry is that folder (training_core/serving/local_registry.py), not Vertex AI's.
    """
    from training_core.common import console, first_run

    console.setup()  # First: the cloud libraries' import warnings stay quiet.
    first_run.at_step_start(vertex_model.path)  # /gcs writable? docs/submit.md
    from training_core.serving import vertex_registry

    measured = {}
    if decision is not None:
        measured = {
            k.removeprefix("challenger_"): v
            for k, v in decision.metadata.items()
            if k.startswith("challenger_") and isinstance(v, (int, float))
        }
    labels = vertex_registry.version_labels(
        measured,
        data_fingerprint=data_fingerprint,
        preset=preset,
        architecture=architecture,
        epochs=epochs or "",
        seed=seed,
    )
    if local_registry:
        from training_core.serving import local_registry as local

        version = local.register(local_registry, display_name, exported_model.path, labels)
        vertex_model.uri = version.path
        vertex_model.metadata.update(
            {"resourceName": version.resource_name, "versionId": version.version_id}
        )
        return
    registered = vertex_registry.register(
        export_dir=exported_model.path,
        artifact_uri=exported_model.uri,
        project=project,
        location=location,
        display_name=display_name,
        serving_image=serving_image,
        gpu=gpu,
        parent_model=parent_model,
        labels=labels,
        is_default_version=make_default,
        own_serving_image=own_serving_image,
    )
    vertex_model.uri = registered.uri
    vertex_model.metadata.update(
        {
            "resourceName": registered.resource_name,
            "versionId": registered.version_id,
            "serving_image": registered.serving_image,
        }
    )
