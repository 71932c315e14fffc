"""Our own serving image's model server (training_core/serving/prediction_server.py).

The real Custom Prediction Routines server (``python3 -m
google.cloud.aiplatform.prediction.model_server``, what the serve image runs) is started in a
child process on a free port with Vertex AI's environment (``AIP_*``) and the image's
(``SERVER_ENV``), serving ``tiny_export``; requests go over HTTP on 127.0.0.1, and the answers
must equal the SavedModel's own signatures called here on the same inputs. The upload that names
the image is checked against the Vertex AI REST stand-in: the Model resource carries the routes
and the port as Vertex AI's API names them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from conftest import BUCKET, PROJECT, ChildProcesses, load_script

from components import _image
from training_core.serving import prediction_server, vertex_registry

image_check = load_script("tools/image_check.py")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(url: str, body: dict | None = None) -> tuple[int, dict]:
    """``(status, JSON answer)`` of a GET (no body) or a JSON POST."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


class Server:
    """The CPR server as the serve image starts it, and its URLs."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.predict_url = self.base + vertex_registry.OWN_PREDICT_ROUTE
        self.health_url = self.base + vertex_registry.OWN_HEALTH_ROUTE

    def predict(self, body: dict) -> tuple[int, dict]:
        return _call(self.predict_url, body)


def server_env(port: int, model: str) -> dict[str, str]:
    """The environment Vertex AI and the serve image give the server (one worker here)."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIP_", "PYTHON"))},
        **prediction_server.SERVER_ENV,
        "AIP_HTTP_PORT": str(port),
        "AIP_PREDICT_ROUTE": vertex_registry.OWN_PREDICT_ROUTE,
        "AIP_HEALTH_ROUTE": vertex_registry.OWN_HEALTH_ROUTE,
        "AIP_STORAGE_URI": model,
        "VERTEX_CPR_WEB_CONCURRENCY": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


@pytest.fixture(scope="module")
def server(tiny_export, tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("cpr") / "server.log"
    with ChildProcesses() as procs, open(log, "w") as out:
        # The image's entrypoint (components/_image.py's SERVE_ENTRYPOINT), with this venv's python.
        proc = procs.popen(
            [sys.executable, *_image.SERVE_ENTRYPOINT[1:]],
            env=server_env(port, tiny_export.export_dir),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(log.parent),
        )
        deadline = time.monotonic() + STARTUP_S
        running = Server(port)
        while True:
            try:
                if _call(running.health_url)[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the model server did not come up:\n{log.read_text()[-4000:]}")
            time.sleep(0.5)
        yield running


@pytest.fixture(scope="module")
def loaded(tiny_export):
    import tensorflow as tf

    return tf.saved_model.load(tiny_export.export_dir)


def _direct(loaded, signature: str, **inputs) -> dict:
    """The signature's outputs called in this process, as lists."""
    import tensorflow as tf

    fn = loaded.signatures[signature]
    _, specs = fn.structured_input_signature
    tensors = {k: tf.constant(v, dtype=specs[k].dtype) for k, v in inputs.items()}
    return {k: v.numpy().tolist() for k, v in fn(**tensors).items()}


def _examples(tiny_export) -> dict:
    with open(os.path.join(tiny_export.export_dir, vertex_registry.SERVING_METADATA_FILE)) as f:
        return json.load(f)["example_requests"]


def test_the_health_route_answers_once_the_model_is_loaded(server):
    assert _call(server.health_url) == (200, {})


def test_score_is_the_default_signature_and_equals_the_savedmodels(server, loaded, tiny_export):
    """No signature_name: serving_default (score, the export's default), as TF Serving."""
    body = _examples(tiny_export)["score"]
    instances = body["instances"]
    want = _direct(
        loaded,
        "score",
        user_id=[i["user_id"] for i in instances],
        item_id=[i["item_id"] for i in instances],
    )
    for request in ({"instances": instances}, body):  # Without and with signature_name.
        status, answer = server.predict(request)
        assert status == 200, answer
        predictions = answer["predictions"]
        assert [p["known"] for p in predictions] == want["known"] == [True, True, False]
        assert [p["score"] for p in predictions] == want["score"]  # Exact.
        assert set(predictions[0]) == {"score", "known"}


def test_recommend_through_signature_name_equals_the_savedmodels(server, loaded, tiny_export):
    from conftest import TINY_TOP_K

    user = _examples(tiny_export)["recommend"]["instances"][0]["user_id"]
    body = {
        "signature_name": "recommend",
        "instances": [
            {"user_id": user, "exclude_seen": True},
            {"user_id": user, "exclude_seen": False},
            {"user_id": 999_999_999, "exclude_seen": True},  # Unknown: empty slots.
        ],
    }
    status, answer = server.predict(body)
    assert status == 200, answer
    want = _direct(
        loaded, "recommend", user_id=[user, user, 999_999_999], exclude_seen=[True, False, True]
    )
    predictions = answer["predictions"]
    assert [p["item_ids"] for p in predictions] == want["item_ids"]
    assert [p["scores"] for p in predictions] == want["scores"]  # Exact: JSON carries the float32s.
    assert len(predictions[0]["item_ids"]) == TINY_TOP_K
    assert predictions[2] == {"item_ids": [-1] * TINY_TOP_K, "scores": [0.0] * TINY_TOP_K}
    # recommend_unseen: user ids only, objects or (one input, as TF Serving) bare values.
    unseen = {"signature_name": "recommend_unseen", "instances": [{"user_id": user}, user]}
    status, answer = server.predict(unseen)
    assert status == 200, answer
    assert [p["item_ids"] for p in answer["predictions"]] == [want["item_ids"][0]] * 2


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"instances": [{"user_id": 1}]}, r"instance 0 has \['user_id'\]; signature"),
        (
            {"signature_name": "recommend", "instances": [{"user_id": 1}]},
            r"takes exactly \['exclude_seen', 'user_id'\]",
        ),
        ({"signature_name": "nope", "instances": []}, "'nope' not found in signature def"),
        ({"inputs": {"user_id": [1]}}, '"instances": a list'),
        ({"instances": [{"user_id": "x", "item_id": 1}]}, "do not fit"),
        ({"instances": [{"user_id": [1, 2], "item_id": [1]}]}, "must be 1-D"),
    ],
)
def test_a_request_the_model_cannot_run_answers_400_with_the_reason(server, body, reason):
    import re

    status, answer = server.predict(body)
    assert status == 400, answer
    assert re.search(reason, answer["detail"]), answer


def test_the_serve_stage_starts_this_server_with_the_routes_the_upload_names():
    """The Dockerfile's serve stage: the entrypoint, the predictor, and AIP_* defaults equal to
    what the upload names (Vertex AI sets AIP_* from the upload; the defaults let the image run
    alone, as make image-check runs it)."""
    stages = image_check.dockerfile_stages(image_check.REPO / "Dockerfile")
    env = {"PATH": image_check.DEFAULT_PATH}
    entrypoint = None
    for stage in image_check.stage_chain(stages, "serve"):
        for keyword, text in stage["instructions"]:
            if keyword == "ENV":
                image_check.apply_env(env, text)
            elif keyword == "ENTRYPOINT":
                entrypoint = json.loads(text)
    assert entrypoint == _image.SERVE_ENTRYPOINT
    assert prediction_server.SERVER_ENV.items() <= env.items()
    assert env["AIP_PREDICT_ROUTE"] == vertex_registry.OWN_PREDICT_ROUTE
    assert env["AIP_HEALTH_ROUTE"] == vertex_registry.OWN_HEALTH_ROUTE
    assert env["AIP_HTTP_PORT"] == str(vertex_registry.OWN_HTTP_PORT)
    assert env["NCF_PIPELINES_IMAGE_VARIANT"] == "serve"
    assert "serve" in _image.VARIANTS and stages["serve"]["parent"] == "runtime"


def test_a_missing_model_is_refused_with_the_variable_to_set(tmp_path):
    with pytest.raises(ValueError, match="AIP_STORAGE_URI is not set"):
        prediction_server.local_model_dir("")
    with pytest.raises(ValueError, match="is not a folder"):
        prediction_server.local_model_dir(str(tmp_path / "nothing"))
    assert prediction_server.local_model_dir(str(tmp_path)) == str(tmp_path)


# --- the upload that names the image, against the Vertex AI REST stand-in -----------------------


def test_the_own_image_is_uploaded_with_its_routes_and_port(vertex, tmp_path):
    """register_model as the pipeline calls it with serving_image: own; the Model resource the
    stand-in receives names the image, predictRoute, healthRoute and ports (the REST field
    names of Vertex AI's ModelContainerSpec)."""
    from google.cloud.aiplatform_v1 import types
    from kfp import dsl

    from components.export_model import register_model

    uri = f"gs://{BUCKET}/pipeline-root/run/export-model/exported_model"
    folder = tmp_path / "gcs" / uri.removeprefix("gs://")
    folder.mkdir(parents=True)
    (folder / vertex_registry.SERVING_METADATA_FILE).write_text(
        json.dumps({"tensorflow_version": "2.16.2"})
    )
    image = _image.image_for("serve", "europe-docker.pkg.dev/p/r/ncf-pipelines")
    vertex_model = dsl.Artifact(uri=f"gs://{BUCKET}/run/vertex_model")
    register_model.python_func(
        exported_model=dsl.Model(uri=uri),
        vertex_model=vertex_model,
        project=PROJECT,
        location="europe-west4",
        display_name="ncf-neumf",
        serving_image=image,
        own_serving_image=True,
    )
    (upload,) = vertex.find("POST", r"/models:upload$")
    spec = json.loads(upload.raw)["model"]["containerSpec"]
    assert spec["imageUri"] == image
    assert spec["predictRoute"] == vertex_registry.OWN_PREDICT_ROUTE == "/predict"
    assert spec["healthRoute"] == vertex_registry.OWN_HEALTH_ROUTE == "/health"
    assert spec["ports"] == [{"containerPort": vertex_registry.OWN_HTTP_PORT}]
    # The service's own message reads them (no unknown field).
    model = types.UploadModelRequest.from_json(upload.raw, ignore_unknown_fields=False).model
    assert model.container_spec.ports[0].container_port == 8080
    assert vertex_model.metadata["serving_image"] == image


def test_the_prebuilt_image_names_no_routes():
    args = vertex_registry.upload_args("gs://b/m", "n", "2.16.2")
    assert args["serving_container_image_uri"].endswith("/tf2-cpu.2-15:latest")
    assert not {k for k in args if k.endswith(("_route", "_ports"))}
    with pytest.raises(ValueError, match="own_serving_image needs serving_image"):
        vertex_registry.upload_args("gs://b/m", "n", "2.16.2", own_serving_image=True)


# --- the profile switch: preflight, the compiled register step, make push ----------------------

OWN_DEPLOY = (
    "own-serve:\n"
    "  train: {machine_type: n1-standard-8, cpu_limit: 8, memory_limit: 30G}\n"
    "  deploy: true\n"
    "  serving_image: own\n"
)
REPOSITORY = "europe-docker.pkg.dev/my-project/ml/ncf-pipelines"


def _profile(tmp_path, text: str):
    from pipelines import profiles

    path = tmp_path / "profiles.yaml"
    path.write_text(text)
    return profiles.get_profile(text.split(":", 1)[0], str(path)), str(path)


def test_preflight_refuses_a_gpu_or_tpu_endpoint_for_the_own_image_and_unknown_choices(tmp_path):
    from pipelines import profiles

    own, _ = _profile(tmp_path, OWN_DEPLOY)
    profiles.preflight(own)
    assert own.serving_image == vertex_registry.SERVING_OWN
    assert profiles.BUILTIN["cpu"].serving_image == vertex_registry.SERVING_PREBUILT
    gpu = (
        "  serve: {machine_type: n1-standard-4, accelerator_type: NVIDIA_TESLA_T4, "
        "accelerator_count: 1}\n"
    )
    with pytest.raises(profiles.ProfileError, match=r"own serving image .* is CPU-only"):
        profiles.preflight(_profile(tmp_path, OWN_DEPLOY + gpu)[0])
    # The prebuilt image serves on that GPU, as before.
    profiles.preflight(_profile(tmp_path, OWN_DEPLOY.replace("own", "prebuilt") + gpu)[0])
    tpu = (
        "  serve: {machine_type: ct5lp-hightpu-1t, accelerator_type: TPU_V5_LITEPOD, "
        "accelerator_count: 1}\n"
    )
    for choice in ("own", "prebuilt"):
        with pytest.raises(profiles.ProfileError, match="remove the TPU"):
            profiles.preflight(_profile(tmp_path, OWN_DEPLOY.replace("own", choice) + tpu)[0])
    with pytest.raises(profiles.ProfileError, match="serving_image 'mine' is unknown"):
        profiles.preflight(_profile(tmp_path, OWN_DEPLOY.replace("own", "mine"))[0])


@pytest.mark.slow
def test_the_own_image_profile_registers_with_the_serve_image_and_make_push_builds_it(
    vertex, tmp_path
):
    """Compiled for the repository: the register step names the serve image's tag and the
    custom-container flag; those very arguments upload the routes and port (stand-in); make push
    builds the serve stage; the prebuilt profile's template names none of it."""
    from kfp import dsl

    from components.export_model import register_model
    from pipelines import compiled, pipeline, push_images
    from pipelines.placeholder_values import movable_tags_warning

    profile, path = _profile(tmp_path, OWN_DEPLOY)
    out = pipeline.compile_pipeline(
        profile, str(tmp_path / "own.yaml"), image_repository=REPOSITORY
    )
    spec = compiled.load_template(out).spec
    tasks = {}
    for comp in [spec["root"], *spec["components"].values()]:
        tasks.update(comp.get("dag", {}).get("tasks", {}))
    params = tasks["register-model"]["inputs"]["parameters"]
    constants = {k: v["runtimeValue"]["constant"] for k, v in params.items() if "runtimeValue" in v}
    tag = _image.image_for("serve", REPOSITORY)
    assert constants["serving_image"] == tag and constants["own_serving_image"] is True
    assert tag in compiled.images_named(spec) and tag in movable_tags_warning(spec, out)
    builds = push_images.images_to_push(profile.name, REPOSITORY, path)
    assert ("serve", tag) in builds
    assert ["--target", "serve", "--tag", tag] == push_images.commands(builds, "0.13.8")[
        2 * builds.index(("serve", tag))
    ][4:8]

    uri = f"gs://{BUCKET}/pipeline-root/run/export-model/exported_model"
    folder = tmp_path / "gcs" / uri.removeprefix("gs://")
    folder.mkdir(parents=True)
    (folder / vertex_registry.SERVING_METADATA_FILE).write_text('{"tensorflow_version": "2.16.2"}')
    register_model.python_func(
        exported_model=dsl.Model(uri=uri),
        vertex_model=dsl.Artifact(uri=f"gs://{BUCKET}/run/vertex_model"),
        project=PROJECT,
        location="europe-west4",
        display_name="ncf-neumf",
        serving_image=constants["serving_image"],
        own_serving_image=constants["own_serving_image"],
    )
    (upload,) = vertex.find("POST", r"/models:upload$")
    container = json.loads(upload.raw)["model"]["containerSpec"]
    assert (container["imageUri"], container["predictRoute"], container["healthRoute"]) == (
        tag,
        "/predict",
        "/health",
    )
    assert container["ports"] == [{"containerPort": 8080}]

    prebuilt, path = _profile(tmp_path, OWN_DEPLOY.replace("own", "prebuilt"))
    out = pipeline.compile_pipeline(
        prebuilt, str(tmp_path / "pre.yaml"), image_repository=REPOSITORY
    )
    text = open(out).read()
    assert tag not in text and "own_serving_image: true" not in text
    assert ("serve", tag) not in push_images.images_to_push(prebuilt.name, REPOSITORY, path)
