"""KFP components ``export_model`` (serving SavedModel) and ``register_model`` (Vertex AI upload).

The logic lives in ``training_core.export`` (the SavedModel) and in the two pure functions below
(``serving_container_for`` and ``upload_args``), which the tests check without a network.
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from components._image import DEFAULT_IMAGE

# Vertex AI's prebuilt TensorFlow prediction images (TensorFlow Serving), newest first. The list
# ends at 2.15 (checked against docs "Prebuilt containers for inference" and the SDK's
# google/cloud/aiplatform/constants/prediction.py, aiplatform 1.165): there is no tf2-*.2-16.
PREBUILT_TF_SERVING_VERSIONS: tuple[tuple[int, int], ...] = tuple((2, m) for m in range(15, 10, -1))


def serving_container_for(tf_version: str, gpu: bool = False, location: str = "us-central1") -> str:
    """The prebuilt Vertex AI TensorFlow serving image for a model saved with ``tf_version``.

    The newest prebuilt version not newer than the model's (SavedModels load in the same or a
    newer TensorFlow; one minor version back works when the graph uses no newer ops, which
    ``tests/test_export.py`` cannot check without that TensorFlow: see docs/serving.md). The
    registry is the one nearest ``location`` (us, europe or asia).

    Raises:
        ValueError: a version older than every prebuilt image, or not ``MAJOR.MINOR[...]``.
    """
    try:
        major, minor = (int(p) for p in tf_version.split(".")[:2])
    except ValueError:
        raise ValueError(f"not a TensorFlow version: {tf_version!r}") from None
    match = next((v for v in PREBUILT_TF_SERVING_VERSIONS if v <= (major, minor)), None)
    if match is None:
        raise ValueError(f"no prebuilt Vertex AI serving image for TensorFlow {tf_version}")
    region = location.split("-", 1)[0]
    registry = region if region in ("europe", "asia") else "us"
    return (
        f"{registry}-docker.pkg.dev/vertex-ai/prediction/"
        f"tf2-{'gpu' if gpu else 'cpu'}.{match[0]}-{match[1]}:latest"
    )


def upload_args(
    artifact_uri: str,
    display_name: str,
    tf_version: str,
    serving_image: str = "",
    gpu: bool = False,
    location: str = "us-central1",
    labels: dict | None = None,
) -> dict:
    """Keyword arguments for ``google.cloud.aiplatform.Model.upload``.

    Args:
        artifact_uri: the SavedModel folder, as a ``gs://`` URI (a ``/gcs/`` FUSE path is turned
            into one).
        display_name: the model's name in the registry.
        tf_version: the TensorFlow version that saved it (picks the image).
        serving_image: an image to use instead of the prebuilt one.
        gpu: pick the GPU image.
        location: the Vertex AI region (picks the nearest registry).
        labels: resource labels.
    """
    if artifact_uri.startswith("/gcs/"):
        artifact_uri = "gs://" + artifact_uri[len("/gcs/") :]
    if not artifact_uri.startswith("gs://"):
        raise ValueError(
            f"Vertex AI needs the model in Cloud Storage (gs://...), got {artifact_uri}"
        )
    return {
        "display_name": display_name,
        "artifact_uri": artifact_uri.rstrip("/"),
        "serving_container_image_uri": serving_image
        or serving_container_for(tf_version, gpu, location),
        "labels": labels or {},
        "sync": True,
    }


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def export_model(
    model: Input[Model],
    examples: Input[Dataset],
    exported_model: Output[Model],
    top_k: int = 10,
    default_signature: str = "score",
):
    """Writes a SavedModel that scores and recommends by raw ids (see docs/serving.md)."""
    from training_core import export

    result = export.export(
        export.ExportConfig(
            model_dir=model.path,
            data_dir=examples.path,
            export_dir=exported_model.path,
            top_k=top_k,
            default_signature=default_signature,
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
):
    """Uploads the SavedModel to the Vertex AI Model Registry with a TF Serving image."""
    import json
    import os

    from google.cloud import aiplatform

    from components.export_model import upload_args
    from training_core.export import SERVING_METADATA_FILE

    with open(os.path.join(exported_model.path, SERVING_METADATA_FILE)) as f:
        tf_version = json.load(f)["tensorflow_version"]
    args = upload_args(exported_model.uri, display_name, tf_version, serving_image, gpu, location)
    aiplatform.init(project=project, location=location)
    uploaded = aiplatform.Model.upload(**args)
    vertex_model.uri = f"https://{location}-aiplatform.googleapis.com/v1/{uploaded.resource_name}"
    vertex_model.metadata.update(
        {
            "resourceName": uploaded.resource_name,
            "serving_image": args["serving_container_image_uri"],
        }
    )
