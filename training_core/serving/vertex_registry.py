"""Registers an exported SavedModel in the Vertex AI Model Registry, with its serving image.

No TensorFlow here: registering reads the TensorFlow version the export recorded in its
``serving_metadata.json`` (:data:`SERVING_METADATA_FILE`, written by
``training_core.serving.export``), picks the prebuilt serving image for it
(:func:`serving_container_for`), or names this project's own serve image with its routes
(:data:`SERVING_OWN`), and uploads (:func:`register`), labelling every version with
:data:`FAMILY_LABEL`; :func:`find_champion` finds this pipeline's model again by that label (or by
resource name) and checks where its SavedModel lives before anyone loads it (docs/after-training.md,
"What the gate and the deployment trust"). ``google.cloud.aiplatform`` is imported only inside the
functions that call the service.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re

log = logging.getLogger(__name__)

# Where Vertex AI mounts Cloud Storage in a task's container (gs://B/X is /gcs/B/X there).
GCS_MOUNT = "/gcs/"


def gs_uri(path: str) -> str:
    """``/gcs/B/X`` as ``gs://B/X``; other paths and URIs as given."""
    return "gs://" + path[len(GCS_MOUNT) :] if path.startswith(GCS_MOUNT) else path


def mounted_path(uri: str) -> str:
    """``gs://B/X`` as the task's ``/gcs/B/X``; other paths as given."""
    return GCS_MOUNT + uri[len("gs://") :] if uri.startswith("gs://") else uri


# The metadata file inside an exported SavedModel folder (what export.serving_metadata returns).
SERVING_METADATA_FILE = "serving_metadata.json"

# Vertex AI's prebuilt TensorFlow prediction images (TensorFlow Serving), newest first. The list
# ends at 2.15 (checked against docs "Prebuilt containers for inference" and the SDK's
# google/cloud/aiplatform/constants/prediction.py, aiplatform 1.165): there is no tf2-*.2-16.
PREBUILT_TF_SERVING_VERSIONS: tuple[tuple[int, int], ...] = tuple((2, m) for m in range(15, 10, -1))

# Which image serves a registered model (a hardware profile's ``serving_image``): Vertex AI's
# prebuilt TF Serving image above (the default while 2.15 lasts: Google ends its availability on
# 2027-01-14), or this project's own ``serve`` image (the Dockerfile's serve stage:
# ``training_core.serving.prediction_server`` behind Vertex AI's Custom Prediction Routines server).
SERVING_PREBUILT = "prebuilt"
SERVING_OWN = "own"
SERVING_IMAGES = (SERVING_PREBUILT, SERVING_OWN)
# What the own image answers on, as Vertex AI's custom-container contract has the upload name them
# (containerSpec.predictRoute, healthRoute, ports): Vertex AI passes them to the container as
# AIP_PREDICT_ROUTE, AIP_HEALTH_ROUTE and AIP_HTTP_PORT, which the server reads. The Dockerfile's
# serve stage sets the same values as its defaults (tests/test_prediction_server.py compares).
OWN_PREDICT_ROUTE = "/predict"
OWN_HEALTH_ROUTE = "/health"
OWN_HTTP_PORT = 8080


@dataclasses.dataclass(frozen=True)
class RegisteredModel:
    """A model in the Vertex AI Model Registry."""

    resource_name: str  # projects/P/locations/L/models/ID
    uri: str  # The model's REST URL.
    serving_image: str
    version_id: str = "1"


@dataclasses.dataclass(frozen=True)
class Champion:
    """The default version of a registry model: what serves today."""

    resource_name: str  # projects/P/locations/L/models/ID (the model; versions share it).
    version_id: str
    artifact_uri: str  # gs:// folder of its SavedModel.
    display_name: str


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
    parent_model: str = "",
    is_default_version: bool = True,
    own_serving_image: bool = False,
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
        labels: resource labels (``version_labels`` makes valid ones).
        parent_model: upload as a new version of this registry model (its resource name);
            empty: a new model.
        is_default_version: make the upload the model's default version.
        own_serving_image: ``serving_image`` is this project's serve image (a custom container,
            not TF Serving): the upload names its predict and health routes and its port.

    Raises:
        ValueError: a model outside Cloud Storage; ``own_serving_image`` without an image.
    """
    artifact_uri = gs_uri(artifact_uri)
    if not artifact_uri.startswith("gs://"):
        raise ValueError(
            f"Vertex AI needs the model in Cloud Storage (gs://...), got {artifact_uri}"
        )
    if own_serving_image and not serving_image:
        raise ValueError("own_serving_image needs serving_image: the serve image's tag")
    args = {
        "display_name": display_name,
        "artifact_uri": artifact_uri.rstrip("/"),
        "serving_container_image_uri": serving_image
        or serving_container_for(tf_version, gpu, location),
        "labels": labels or {},
        "parent_model": parent_model or None,
        "is_default_version": is_default_version,
        "sync": True,
    }
    if own_serving_image:
        args.update(
            serving_container_predict_route=OWN_PREDICT_ROUTE,
            serving_container_health_route=OWN_HEALTH_ROUTE,
            serving_container_ports=[OWN_HTTP_PORT],
        )
    return args


# The label every registry model and endpoint this pipeline makes carries: its value is the
# model's display name as a label value. Lookups ask for it, so a model or an endpoint someone
# else made under the same name is not taken for ours.
FAMILY_LABEL = "ncf_pipelines_model"
# Vertex AI's limit on display names, and the characters that cannot go into a filter's string.
MAX_DISPLAY_NAME = 128
FILTER_UNSAFE = '"\\'


def label_value(value: object) -> str:
    """A Vertex AI label value: lower case, ``[a-z0-9_-]``, at most 63 characters."""
    text = re.sub(r"[^a-z0-9_-]", "_", str(value).lower())
    return text[:63]


def version_labels(metrics: dict[str, float], **facts: object) -> dict[str, str]:
    """Labels for a model version: its metrics (4 decimals, ``0_3512``) and ``facts``.

    Keys become label keys (``hr_at_10``, ``data_fingerprint``, ``preset``...); empty facts are
    left out.
    """
    out = {label_value(k): label_value(f"{v:.4f}") for k, v in metrics.items()}
    out.update({label_value(k): label_value(v) for k, v in facts.items() if v not in ("", None)})
    return out


def check_display_name(name: str, option: str) -> str:
    """``name`` if it can stand in a registry filter's quoted string, else a ``ValueError``.

    Vertex AI allows any UTF-8 in a display name, but a quote or a backslash would end or escape
    the filter's string literal (``x" OR display_name="y`` would widen the lookup to another
    model), and control characters have no place in a name: those are refused, naming
    ``option`` (the parameter the name came from).
    """
    bad = sorted({c for c in name if c in FILTER_UNSAFE or ord(c) < 32 or ord(c) == 127})
    if not name or len(name) > MAX_DISPLAY_NAME or bad:
        why = (
            f"it has {', '.join(repr(c) for c in bad)}"
            if bad
            else f"it must be 1 to {MAX_DISPLAY_NAME} characters"
        )
        raise ValueError(
            f"{option} {name!r} cannot be used to find models or endpoints in Vertex AI: {why}; "
            "use a name of letters, digits, spaces and -_.: (no quotes, backslashes or control "
            "characters)"
        )
    return name


def family_label(display_name: str) -> dict[str, str]:
    """The label this pipeline puts on its registry models and endpoints (:data:`FAMILY_LABEL`)."""
    return {FAMILY_LABEL: label_value(display_name)}


def family_filter(display_name: str, family: str, option: str) -> str:
    """The list filter for resources named ``display_name`` carrying ``family``'s label.

    Only checked text goes into it (:func:`check_display_name`; the label value is
    ``[a-z0-9_-]`` by construction), so it always means exactly these two equalities.
    """
    check_display_name(display_name, option)
    ((key, value),) = family_label(family).items()
    return f'display_name="{display_name}" AND labels.{key}="{value}"'


def bucket_of(uri: str, option: str) -> str:
    """``gs://B/`` for a ``gs://B/...`` URI or its ``/gcs/B/...`` path.

    Raises:
        ValueError: a URI outside Cloud Storage, asking for ``option``.
    """
    uri = gs_uri(uri)
    bucket = uri[len("gs://") :].split("/", 1)[0] if uri.startswith("gs://") else ""
    if not bucket:
        raise ValueError(
            f"{option}: give the gs:// folder this pipeline's models live in (it defaults to the "
            f"bucket of the new model, but that is not in Cloud Storage: {uri!r})"
        )
    return f"gs://{bucket}/"


def check_model_location(artifact_uri: str, model_root: str, what: str) -> str:
    """``artifact_uri`` when it lies under ``model_root`` (both ``gs://``), else ``ValueError``.

    A SavedModel is a program: the gate loads one only from where this pipeline writes its
    models. ``..`` segments and look-alike buckets (``gs://b-evil`` for ``gs://b``) do not pass.
    """
    root = model_root.rstrip("/") + "/"
    if not root.startswith("gs://") or len(root) <= len("gs:///"):
        raise ValueError(
            f"model_root must be a gs://BUCKET[/PREFIX] folder (where this pipeline writes its "
            f"models), got {model_root!r}"
        )
    uri = (artifact_uri or "").rstrip("/") + "/"
    parts = uri[len("gs://") :].split("/")
    if not uri.startswith(root) or any(p in (".", "..") for p in parts):
        raise ValueError(
            f"{what} has its SavedModel at {artifact_uri!r}, outside {root} (model_root: where "
            "this pipeline writes its models). A SavedModel is a program, so it is not loaded: "
            "check who uploaded this version; give model_root if the pipeline's models live "
            "elsewhere, or champion_uri to compare with a model you trust"
        )
    return artifact_uri


def find_champion(
    project: str,
    location: str,
    display_name: str,
    model_root: str,
    model_name: str = "",
) -> Champion | None:
    """The default version of this pipeline's registry model; ``None`` if there is none.

    The model is ``model_name`` (a resource name, ``projects/P/locations/L/models/ID``) when
    given, else the model named ``display_name`` that carries this pipeline's
    :data:`FAMILY_LABEL` (set by :func:`register`): a model someone else uploaded under the same
    name, without the label, is not seen. Whichever is found, its SavedModel must lie under
    ``model_root`` (:func:`check_model_location`). When several labelled models carry the name
    (uploads made without ``parent_model``), the most recently updated one is the champion, and
    the others are named in the log.

    Raises:
        ValueError: a display name that cannot go into a filter (naming ``model_display_name``);
            a champion whose SavedModel lies outside ``model_root``.
    """
    from google.cloud import aiplatform

    if model_name:
        model = aiplatform.Model(model_name=model_name, project=project, location=location)
    else:
        found = aiplatform.Model.list(
            filter=family_filter(display_name, display_name, "model_display_name"),
            order_by="update_time desc",
            project=project,
            location=location,
        )
        if not found:
            log.info(
                "no model named %r with label %s in the registry of %s/%s",
                display_name,
                family_label(display_name),
                project,
                location,
            )
            return None
        if len(found) > 1:
            log.warning(
                "%d models are named %r; the most recently updated one, %s, is the champion (the "
                "others: %s)",
                len(found),
                display_name,
                found[0].resource_name,
                ", ".join(m.resource_name for m in found[1:]),
            )
        model = found[0]
    check_model_location(
        model.uri,
        model_root,
        f"the champion {model.resource_name}@{model.version_id} ({model.display_name!r})",
    )
    return Champion(
        resource_name=model.resource_name,
        version_id=str(model.version_id),
        artifact_uri=model.uri,
        display_name=model.display_name,
    )


def saved_tensorflow_version(export_dir: str) -> str:
    """The TensorFlow version an export recorded in its ``serving_metadata.json``."""
    with open(os.path.join(export_dir, SERVING_METADATA_FILE)) as f:
        return json.load(f)["tensorflow_version"]


def export_items(export_dir: str):
    """The raw item ids an export knows (a NumPy array), read without TensorFlow.

    The same ids as the gate's ``load_export(...).item_ids``: the item vocabulary the export
    carries as an asset (``assets/items.txt``), of the kind its ``serving_metadata.json``
    records; what ``run-local`` checks a champion's catalogue with before any step runs.

    Raises:
        ValueError: the folder holds no export with them (naming the folder).
    """
    from training_core.data.metadata import ITEM_VOCAB, parse_vocab

    vocab = os.path.join(export_dir, "assets", os.path.basename(ITEM_VOCAB))
    try:
        with open(os.path.join(export_dir, SERVING_METADATA_FILE)) as f:
            kind = json.load(f)["item_id_type"]
        with open(vocab, encoding="utf-8") as f:
            return parse_vocab(f.read(), kind)
    except (OSError, KeyError, ValueError) as e:
        raise ValueError(
            f"{export_dir} is no export of ncf-pipelines with its items ({vocab} and "
            f"{SERVING_METADATA_FILE}'s item_id_type): {e}"
        ) from None


def register(
    export_dir: str,
    artifact_uri: str,
    project: str,
    location: str,
    display_name: str,
    serving_image: str = "",
    gpu: bool = False,
    parent_model: str = "",
    labels: dict | None = None,
    is_default_version: bool = True,
    own_serving_image: bool = False,
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
        parent_model: upload as a new version of this model (resource name); empty: new model.
        labels: the version's labels (``version_labels``); :func:`family_label` is added, so
            :func:`find_champion` finds the model.
        is_default_version: make it the model's default version (what serves by default).
        own_serving_image: ``serving_image`` is this project's serve image: the upload names
            its routes and port (:func:`upload_args`).
    """
    from google.cloud import aiplatform

    check_display_name(display_name, "model_display_name")
    tf_version = saved_tensorflow_version(export_dir)
    args = upload_args(
        artifact_uri,
        display_name,
        tf_version,
        serving_image,
        gpu,
        location,
        labels={**(labels or {}), **family_label(display_name)},
        parent_model=parent_model,
        is_default_version=is_default_version,
        own_serving_image=own_serving_image,
    )
    aiplatform.init(project=project, location=location)
    uploaded = aiplatform.Model.upload(**args)
    return RegisteredModel(
        resource_name=uploaded.resource_name,
        uri=f"https://{location}-aiplatform.googleapis.com/v1/{uploaded.resource_name}",
        serving_image=args["serving_container_image_uri"],
        version_id=str(uploaded.version_id),
    )
