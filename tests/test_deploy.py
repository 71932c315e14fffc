"""``deploy_model`` against the Vertex AI stand-in: versions, an endpoint, traffic, failures.

The component's own function runs with the real ``google-cloud-aiplatform`` client over REST to
``tests/vertex_standin.py`` on 127.0.0.1, which parses every request as the service's message
types and applies the v1 reference's traffic rules (a split adds up to 100; a deployed model that
still receives traffic is not undeployed). The endpoint's ``:predict`` and ``:rawPredict`` are
answered by a real exported SavedModel run the way the prebuilt TensorFlow serving container runs
it (tests/serve_check.py in an isolated interpreter: the TF Serving REST row format).
"""

# No `from __future__ import annotations`: KFP reads the component annotations at runtime.
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import requests
import tensorflow as tf
from kfp import dsl
from vertex_standin import BUCKET, PROJECT

from components.deploy_model import deploy_model
from components.export_model import register_model
from training_core import export, registry, train, train_config
from training_core.registry import SERVING_METADATA_FILE

LOCATION = "europe-west4"
SERVE_CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_check.py")


@pytest.fixture
def vertex(standin, adc, tmp_path, monkeypatch):
    """The stand-in with the SDK pointed at it and /gcs/ mounted at a temporary folder."""
    from google.cloud import aiplatform
    from kfp.dsl.types import artifact_types

    monkeypatch.setattr(artifact_types, "_GCS_LOCAL_MOUNT_PREFIX", f"{tmp_path}/gcs/")
    aiplatform.init(api_endpoint=standin.url, api_transport="rest")
    return standin


def _local(tmp_path, uri: str) -> str:
    return str(tmp_path / "gcs" / uri.removeprefix("gs://"))


def _exported(tmp_path, run: str, source: str | None = None) -> dsl.Model:
    """An export under the /gcs/ mount: a real SavedModel copied there, or just its metadata."""
    uri = f"gs://{BUCKET}/pipeline-root/{run}/export-model/exported_model"
    folder = _local(tmp_path, uri)
    if source:
        import shutil

        shutil.copytree(source, folder)
    else:
        os.makedirs(folder)
        with open(os.path.join(folder, SERVING_METADATA_FILE), "w") as f:
            json.dump({"tensorflow_version": "2.16.2"}, f)
    return dsl.Model(uri=uri)


def _register(tmp_path, run: str, parent: str = "", make_default: bool = True, source=None):
    out = dsl.Artifact(uri=f"gs://{BUCKET}/{run}/vertex_model")
    register_model.python_func(
        exported_model=_exported(tmp_path, run, source),
        vertex_model=out,
        project=PROJECT,
        location=LOCATION,
        display_name="ncf-neumf",
        parent_model=parent,
        make_default=make_default,
    )
    return out


def _deploy(run: str, vertex_model: dsl.Artifact, **kw) -> dsl.Artifact:
    endpoint = dsl.Artifact(uri=f"gs://{BUCKET}/{run}/endpoint")
    args = dict(
        vertex_model=vertex_model,
        endpoint=endpoint,
        project=PROJECT,
        location=LOCATION,
        endpoint_display_name="",
        machine_type="n1-standard-4",
        make_default=True,
    )
    args.update(kw)
    deploy_model.python_func(**args)
    return endpoint


def _default_version(standin, model: str) -> str:
    return next(
        v["versionId"] for v in standin.model_versions[model] if "default" in v["versionAliases"]
    )


def _paths(standin, pattern: str) -> list[str]:
    return [r.path for r in standin.requests if r.method == "POST" and pattern in r.path]


def test_a_new_version_serves_before_the_old_one_goes_and_then_becomes_the_default(
    vertex, tmp_path
):
    from google.cloud.aiplatform_v1 import types

    # First run: a new model (version 1) and a new endpoint named after it.
    v1 = _register(tmp_path, "run-1")
    model = v1.metadata["resourceName"]
    first = _deploy("run-1", v1, replica_count=2)
    (name,) = vertex.endpoints
    endpoint = vertex.endpoints[name]
    assert endpoint["displayName"] == "ncf-neumf"  # The model's name when none is given.
    (only,) = endpoint["deployedModels"]
    assert (only["model"], only["modelVersionId"]) == (model, "1")
    assert endpoint["trafficSplit"] == {only["id"]: 100}
    request = types.DeployModelRequest.from_json(
        vertex.find("POST", r":deployModel$")[0].raw, ignore_unknown_fields=False
    )
    resources = request.deployed_model.dedicated_resources
    assert request.deployed_model.model == f"{model}@1"
    assert resources.machine_spec.machine_type == "n1-standard-4"
    assert (resources.min_replica_count, resources.max_replica_count) == (2, 2)
    assert first.metadata["createdEndpoint"] is True
    assert first.uri == f"https://{LOCATION}-aiplatform.googleapis.com/v1/{name}"

    # Second run, deploying: registered as version 2 but NOT the default yet.
    v2 = _register(tmp_path, "run-2", parent=model, make_default=False)
    assert v2.metadata["versionId"] == "2"
    assert _default_version(vertex, model) == "1"
    assert registry.find_champion(PROJECT, LOCATION, "ncf-neumf").version_id == "1"
    before = len(vertex.requests)
    second = _deploy("run-2", v2)
    calls = [r.path.rsplit(":", 1)[-1] for r in vertex.requests[before:] if ":" in r.path]
    # Deployed with all the traffic first, the old one undeployed after, the alias last.
    assert calls == ["deployModel", "undeployModel", "mergeVersionAliases"], calls
    request = types.DeployModelRequest.from_json(
        vertex.find("POST", r":deployModel$")[-1].raw, ignore_unknown_fields=False
    )
    assert dict(request.traffic_split) == {"0": 100}  # Not listed: no traffic.
    (now,) = vertex.endpoints[name]["deployedModels"]
    assert (now["modelVersionId"], vertex.endpoints[name]["trafficSplit"]) == (
        "2",
        {now["id"]: 100},
    )
    assert second.metadata["undeployed"] == [only["id"]]
    assert second.metadata["createdEndpoint"] is False  # The same endpoint, found by name.
    assert _default_version(vertex, model) == "2"
    assert registry.find_champion(PROJECT, LOCATION, "ncf-neumf").version_id == "2"


def test_a_failed_deployment_or_upload_leaves_the_previous_version_serving(vertex, tmp_path):
    v1 = _register(tmp_path, "run-1")
    model = v1.metadata["resourceName"]
    _deploy("run-1", v1)
    (name,) = vertex.endpoints
    serving = json.dumps(vertex.endpoints[name]["deployedModels"])

    # The registry refuses the upload: nothing new, the default and the endpoint unchanged.
    vertex.fail_next(503, "The service is currently unavailable.", "/models:upload")
    with pytest.raises(Exception, match="unavailable"):
        _register(tmp_path, "run-2", parent=model, make_default=False)
    assert [v["versionId"] for v in vertex.model_versions[model]] == ["1"]

    # The upload works but the new model server never becomes healthy.
    v2 = _register(tmp_path, "run-3", parent=model, make_default=False)
    vertex.deploy_failure = "Model server never became ready. Please validate your model."
    before = len(vertex.requests)
    with pytest.raises(Exception, match="never became ready"):
        _deploy("run-3", v2)
    assert json.dumps(vertex.endpoints[name]["deployedModels"]) == serving
    assert list(vertex.endpoints[name]["trafficSplit"].values()) == [100]
    after = [r.path.rsplit(":", 1)[-1] for r in vertex.requests[before:] if ":" in r.path]
    assert after == ["deployModel"], after  # Nothing undeployed, the default not moved.
    assert _default_version(vertex, model) == "1"
    assert registry.find_champion(PROJECT, LOCATION, "ncf-neumf").version_id == "1"

    # The step's retry finishes the job.
    _deploy("run-3", v2)
    (now,) = vertex.endpoints[name]["deployedModels"]
    assert now["modelVersionId"] == "2" and _default_version(vertex, model) == "2"


def test_a_retried_step_does_not_deploy_a_served_version_twice(vertex, tmp_path):
    v1 = _register(tmp_path, "run-1")
    _deploy("run-1", v1)
    _deploy("run-1", v1)  # The retry of a step whose first try had deployed.
    assert len(_paths(vertex, ":deployModel")) == 1
    ((name, endpoint),) = vertex.endpoints.items()
    assert len(endpoint["deployedModels"]) == 1


# --- the endpoint answers Vertex AI's requests with the real exported model ----------------------


@pytest.fixture(scope="module")
def real_export(tiny_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy-export")
    model_dir = str(root / "model")
    config = train_config.config_for(tiny_data, model_dir, "tiny", epochs=1, steps_per_loop=50)
    train.train(config, tf.distribute.get_strategy())
    out = str(root / "export")
    export.export(export.ExportConfig(model_dir, tiny_data, out, top_k=5))
    return out


def _container(tmp_path):
    """A predictor for the stand-in: the deployed version's artifact served as the prebuilt
    TensorFlow container serves it (TF Serving's REST mapping, tests/serve_check.py)."""

    def serve(deployed, version, body):
        export_dir = _local(tmp_path, version["artifactUri"])
        req, out = tmp_path / "container-request.json", tmp_path / "container-response.json"
        req.write_text(json.dumps([body]))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        done = subprocess.run(
            [sys.executable, "-I", SERVE_CHECK, export_dir, str(req), str(out)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            return {"error": done.stderr[-2000:]}
        return json.loads(out.read_text())["responses"][0]

    return serve


class _ToStandIn(requests.adapters.HTTPAdapter):
    """Sends the SDK's raw_predict (which builds https://REGION-aiplatform.googleapis.com/...
    itself) to the stand-in: only the scheme and host change, path, headers and body are the
    SDK's own."""

    def __init__(self, url: str):
        super().__init__()
        self.url = url

    def send(self, request, **kw):
        path = request.url.split(".googleapis.com", 1)[1]
        request.url = self.url + path
        return super().send(request, **kw)


@pytest.mark.slow
def test_the_endpoint_answers_predict_and_raw_predict_with_raw_ids(vertex, tmp_path, real_export):
    import google.auth
    from google.auth.transport import requests as google_requests
    from google.cloud import aiplatform

    v1 = _register(tmp_path, "run-1", source=real_export)
    endpoint_artifact = _deploy("run-1", v1)
    vertex.predictor = _container(tmp_path)
    endpoint = aiplatform.Endpoint(endpoint_artifact.metadata["resourceName"])
    with open(os.path.join(real_export, SERVING_METADATA_FILE)) as f:
        examples = json.load(f)["example_requests"]

    # Online prediction: {"instances": [...]} to serving_default (score), raw ids in and out.
    loaded = tf.saved_model.load(real_export)
    score_rows = examples["score"]["instances"]
    answer = endpoint.predict(instances=score_rows)
    (deployed,) = vertex.endpoints[endpoint.resource_name]["deployedModels"]
    assert answer.deployed_model_id == deployed["id"]
    assert answer.model_version_id == "1"
    want = loaded.signatures["score"](
        user_id=tf.constant([r["user_id"] for r in score_rows], tf.int64),
        item_id=tf.constant([r["item_id"] for r in score_rows], tf.int64),
    )
    got = np.array([p["score"] for p in answer.predictions])
    np.testing.assert_allclose(got, want["score"].numpy().reshape(-1), rtol=1e-5)
    assert [p["known"] for p in answer.predictions] == want["known"].numpy().tolist()
    assert answer.predictions[-1]["known"] is False  # The example's unknown user: score 0.

    # rawPredict passes TF Serving's own body through: the recommend signature by name.
    credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    session = google_requests.AuthorizedSession(credentials)
    session.mount("https://", _ToStandIn(vertex.url))
    endpoint.authorized_session = session
    body = {"signature_name": "recommend", "instances": examples["recommend"]["instances"]}
    response = endpoint.raw_predict(
        body=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200, response.text
    rows = response.json()["predictions"]
    user = body["instances"][0]["user_id"]
    want = loaded.signatures["recommend"](
        user_id=tf.constant([user], tf.int64), exclude_seen=tf.constant([True])
    )
    assert rows[0]["item_ids"] == want["item_ids"].numpy()[0].tolist()
    assert len(rows[0]["item_ids"]) == 5
    (raw,) = vertex.find("POST", r":rawPredict$")
    assert raw.path == f"/v1/{endpoint.resource_name}:rawPredict"
