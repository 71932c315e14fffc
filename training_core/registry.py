"""Registers an exported SavedModel in the Vertex AI Model Registry, with a TF Serving image.

No TensorFlow here: registering reads the TensorFlow version the export recorded in its
``serving_metadata.json`` (:data:`SERVING_METADATA_FILE`, written by ``training_core.export``),
picks the prebuilt serving image for it (:func:`serving_container_for`) and uploads
(:func:`register`). The two pure functions are checked by the tests without a network;
``google.cloud.aiplatform`` is imported only by :func:`register`.
"""

from __future__ import annotations

import dataclasses
import json
import os

# The metadata file inside an exported SavedModel folder (what export.serving_metadata returns).
SERVING_METADATA_FILE = "serving_metadata.json"

# Vertex AI's prebuilt TensorFlow prediction images (TensorFlow Serving), newest first. The list
# ends at 2.15 (checked against docs "Prebuilt containers for inference" and the SDK's
# google/cloud/aiplatform/constants/prediction.py, aiplatform 1.165): there is no tf2-*.2-16.
PREBUILT_TF_SERVING_VERSIONS: tuple[tuple[int, int], ...] = tuple((2, m) for m in range(15, 10, -1))


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    """A model in the Vertex AI Model Registry."""

    resource_name: str  # projects/P/locations/L/models/ID
    uri: str  # The model's REST URL.
    serving_image: str


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


def saved_tensorflow_version(export_dir: str) -> str:
    """The TensorFlow version an export recorded in its ``serving_metadata.json``."""
    with open(os.path.join(export_dir, SERVING_METADATA_FILE)) as f:
        return json.load(f)["tensorflow_version"]


def register(
    export_dir: str,
    artifact_uri: str,
    project: str,
    location: str,
    display_name: str,
    serving_image: str = "",
    gpu: bool = False,
) -> RegisteredModel:
    """Uploads the SavedModel at ``artifact_uri`` (read here at ``export_dir``) to the registry.

    Args:
        export_dir: the exported folder, readable here (on Vertex AI its ``/gcs/`` path).
        artifact_uri: the same folder as a ``gs://`` URI (or its ``/gcs/`` path).
        project: the Google Cloud project.
        location: the Vertex AI region.
        display_name: the model's name in the registry.
        serving_image: an image to use instead of the prebuilt one for its TensorFlow version.
        gpu: pick the GPU prebuilt image.
    """
    from google.cloud import aiplatform

    tf_version = saved_tensorflow_version(export_dir)
    args = upload_args(artifact_uri, display_name, tf_version, serving_image, gpu, location)
    aiplatform.init(project=project, location=location)
    uploaded = aiplatform.Model.upload(**args)
    return RegisteredModel(
        resource_name=uploaded.resource_name,
        uri=f"https://{location}-aiplatform.googleapis.com/v1/{uploaded.resource_name}",
        serving_image=args["serving_container_image_uri"],
    )
