"""``deploy_model`` against the Vertex AI stand-in: versions, an endpoint, traffic, failures.

Also what the pipeline trusts in the registry: ``compare_models``' registry champion and
``deploy_model``'s endpoint are this pipeline's own (its label, a resource name, its bucket),
never a stranger's model or endpoint of the same display name; the filters the real client sends
are asserted as the stand-in received them.

The component's own function runs with the real ``google-cloud-aiplatform`` client over REST to
``vertex_emulator/rest_service.py`` on 127.0.0.1, which parses every request as the service's
message types and applies the v1 reference's traffic rules (a split adds up to 100; a deployed model
that still receives traffic is not undeployed). The endpoint's ``:predict`` and ``:rawPredict`` are
answered by a real exported SavedModel run the way the prebuilt TensorFlow serving container runs
it (tests/serve_check.py in an isolated interpreter: the TF Serving REST row format).
"""

# No `from __future__ import annotations`: KFP reads the component annotations at runtime.
import json
import os

import numpy as np
import pytest
import requests
import tensorflow as tf
from conftest import BUCKET, PROJECT, REGION, TINY_TOP_K, serve_check
from kfp import dsl

from components.deploy_model import deploy_model
from components.export_model import register_model
from training_core.serving import vertex_registry
from training_core.serving.vertex_registry import SERVING_METADATA_FILE

ROOT = f"gs://{BUCKET}/"  # Where this pipeline writes its models (compare_models' model_root).
OUR_FILTER = 'display_name="ncf-neumf" AND labels.ncf_pipelines_model="ncf-neumf"'


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
        location=REGION,
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
        location=REGION,
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
    assert first.uri == f"https://{REGION}-aiplatform.googleapis.com/v1/{name}"

    # Second run, deploying: registered as version 2 but NOT the default yet.
    v2 = _register(tmp_path, "run-2", parent=model, make_default=False)
    assert v2.metadata["versionId"] == "2"
    assert _default_version(vertex, model) == "1"
    assert vertex_registry.find_champion(PROJECT, REGION, "ncf-neumf", ROOT).version_id == "1"
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
    assert vertex_registry.find_champion(PROJECT, REGION, "ncf-neumf", ROOT).version_id == "2"


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
    assert vertex_registry.find_champion(PROJECT, REGION, "ncf-neumf", ROOT).version_id == "1"

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


def test_a_retried_deploy_moves_the_traffic_to_the_version_already_deployed(vertex, tmp_path):
    """An earlier try left version 2 deployed with none of the traffic (version 1 keeps all of
    it): the retry does not deploy again, moves the traffic to version 2 with an endpoint
    update, and only then undeploys version 1 (which the service refuses while it has
    traffic)."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform_v1 import types

    v1 = _register(tmp_path, "run-1")
    model = v1.metadata["resourceName"]
    _deploy("run-1", v1)
    (name,) = vertex.endpoints
    (old,) = vertex.endpoints[name]["deployedModels"]
    v2 = _register(tmp_path, "run-2", parent=model, make_default=False)
    aiplatform.Endpoint(name).deploy(
        aiplatform.Model(model, version="2"),
        traffic_split={old["id"]: 100, "0": 0},
        machine_type="n1-standard-4",
        sync=True,
    )
    (new,) = [d for d in vertex.endpoints[name]["deployedModels"] if d["id"] != old["id"]]
    assert vertex.endpoints[name]["trafficSplit"] == {old["id"]: 100}  # The earlier try's end.

    before = len(vertex.requests)
    done = _deploy("run-2", v2)
    sent = vertex.requests[before:]
    steps = [r.method + " " + r.path.rsplit("/", 1)[-1] for r in sent if r.method != "GET"]
    endpoint_id = name.rsplit("/", 1)[-1]
    assert steps == [
        f"PATCH {endpoint_id}",
        f"POST {endpoint_id}:undeployModel",
        f"POST {model.rsplit('/', 1)[-1]}@2:mergeVersionAliases",
    ], steps
    (patch,) = [r for r in sent if r.method == "PATCH"]
    assert patch.query["updateMask"] == ["trafficSplit"]
    update = types.Endpoint.from_json(patch.raw, ignore_unknown_fields=False)
    assert dict(update.traffic_split) == {new["id"]: 100}
    assert vertex.endpoints[name]["trafficSplit"] == {new["id"]: 100}
    assert [d["id"] for d in vertex.endpoints[name]["deployedModels"]] == [new["id"]]
    assert done.metadata["deployedModelId"] == new["id"]
    assert done.metadata["undeployed"] == [old["id"]]
    assert _default_version(vertex, model) == "2"


@pytest.mark.parametrize(
    "split, expected",
    [
        ({"old": 60, "new": 30}, "must add up to 100, not 90"),
        ({"old": 50, "new": 60}, "must add up to 100, not 110"),
        ({"old": 50, "999": 50}, "names deployed models ['999'] that endpoint"),
    ],
    ids=["sum-90", "sum-110", "unknown-deployed-model"],
)
def test_the_standin_refuses_an_endpoint_update_the_service_refuses(
    vertex, tmp_path, split, expected
):
    """Endpoint.update's traffic split, as the v1 reference states it: over the endpoint's own
    deployed models, adding up to 100; refused with 400 INVALID_ARGUMENT naming the field, the
    endpoint unchanged."""
    from google.api_core import exceptions
    from google.cloud import aiplatform

    v1 = _register(tmp_path, "run-1")
    model = v1.metadata["resourceName"]
    _deploy("run-1", v1)
    (name,) = vertex.endpoints
    (old,) = vertex.endpoints[name]["deployedModels"]
    endpoint = aiplatform.Endpoint(name)
    endpoint.deploy(
        aiplatform.Model(model, version="1"),
        traffic_split={old["id"]: 100, "0": 0},
        machine_type="n1-standard-4",
        sync=True,
    )
    (new,) = [d for d in vertex.endpoints[name]["deployedModels"] if d["id"] != old["id"]]
    ids = {"old": old["id"], "new": new["id"]}
    with pytest.raises(exceptions.BadRequest) as e:
        endpoint.update(traffic_split={ids.get(k, k): v for k, v in split.items()})
    assert expected in e.value.message
    error = e.value.response.json()["error"]  # The service's error shape.
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    (violation,) = error["details"][0]["fieldViolations"]
    assert violation["field"] == "endpoint.traffic_split"
    (refused, why) = vertex.rejected[-1]
    assert refused.method == "PATCH" and expected in why
    assert vertex.endpoints[name]["trafficSplit"] == {old["id"]: 100}
    vertex.rejected.clear()  # Refused on purpose.
    # The same endpoint takes a split that adds up, over deployed models it has.
    endpoint.update(traffic_split={old["id"]: 25, new["id"]: 75})
    assert vertex.endpoints[name]["trafficSplit"] == {old["id"]: 25, new["id"]: 75}


# --- only this pipeline's models and endpoints are trusted ----------------------------------------


def _stranger_model(display_name: str, uri: str, labels: dict | None = None) -> str:
    """A model someone else in the project uploads (the real SDK's upload), newer than ours."""
    from google.cloud import aiplatform

    return aiplatform.Model.upload(
        display_name=display_name,
        artifact_uri=uri,
        serving_container_image_uri="us-docker.pkg.dev/someone/else/serving:latest",
        labels=labels or {},
        project=PROJECT,
        location=REGION,
        sync=True,
    ).resource_name


def _gate(tmp_path, monkeypatch, **kw) -> tuple[str, str | None]:
    """compare_models' own function with the registry on: the registry model it returns and the
    champion folder it would load (the scoring itself is test_compare.py's; here it records)."""
    from components.compare_models import compare_models
    from training_core.evaluation import gate

    loaded = []

    def record(challenger_dir, data_dir, champion_dir=None, metric="", tolerance=0.0):
        loaded.append(champion_dir)
        scores = gate.Scores(challenger_dir, 0.5, 0.3, 10, 1.0, 1.0)
        return gate.Decision(True, "recorded", metric, tolerance, scores, None)

    monkeypatch.setattr(gate, "compare", record)
    args = dict(
        challenger=dsl.Model(uri=f"gs://{BUCKET}/pipeline-root/run-9/export-model/exported_model"),
        examples=dsl.Dataset(uri=str(tmp_path / "examples")),
        decision=dsl.Metrics(uri=str(tmp_path / "decision")),
        report=dsl.HTML(uri=str(tmp_path / "report.html")),
        use_registry=True,
        project=PROJECT,
        location=REGION,
        model_display_name="ncf-neumf",
    )
    args.update(kw)
    _, champion_model, _ = compare_models.python_func(**args)
    return champion_model, loaded[0]


def _list_filters(standin, kind: str) -> list[str]:
    found = standin.find("GET", rf"^/v1/projects/{PROJECT}/locations/{REGION}/{kind}$")
    return [f for r in found for f in r.query.get("filter", [])]


def test_a_strangers_newer_model_of_the_same_name_is_not_the_champion(
    vertex, tmp_path, monkeypatch
):
    from google.cloud.aiplatform_v1 import types

    ours = _register(tmp_path, "run-1").metadata["resourceName"]
    upload = types.UploadModelRequest.from_json(
        vertex.find("POST", r"/models:upload$")[-1].raw, ignore_unknown_fields=False
    )
    # Someone who may upload models publishes "ncf-neumf" too, later: in our bucket, even.
    theirs = _stranger_model("ncf-neumf", f"gs://{BUCKET}/pipeline-root/x/planted")
    assert vertex.models[theirs]["updateTime"] > vertex.models[ours]["updateTime"]

    champion_model, loaded = _gate(tmp_path, monkeypatch)
    assert champion_model == ours
    assert loaded == f"/gcs/{BUCKET}/pipeline-root/run-1/export-model/exported_model"
    assert _list_filters(vertex, "models") == [OUR_FILTER]  # As the real client sent it.
    assert upload.model.labels["ncf_pipelines_model"] == "ncf-neumf"  # Our register sets it.

    # By resource name: that model, no lookup by name at all.
    before = len(vertex.requests)
    assert _gate(tmp_path, monkeypatch, registry_model=ours)[0] == ours
    assert not [r for r in vertex.requests[before:] if r.path.endswith("/models")]


@pytest.mark.parametrize("option", ["model_display_name", "endpoint_display_name"])
def test_a_display_name_cannot_widen_the_registry_filter(vertex, tmp_path, monkeypatch, option):
    from google.cloud import aiplatform

    ours = _register(tmp_path, "run-1")
    _deploy("run-1", ours)
    (our_endpoint,) = vertex.endpoints
    v2 = _register(tmp_path, "run-2", parent=ours.metadata["resourceName"], make_default=False)
    # A stranger's model and endpoint named "theirs", newer than ours.
    _stranger_model("theirs", f"gs://{BUCKET}/pipeline-root/x/planted", {"team": "other"})
    aiplatform.Endpoint.create(display_name="theirs", project=PROJECT, location=REGION)
    injected = 'ncf-neumf" OR display_name="theirs'
    before = len(vertex.requests)
    with pytest.raises(ValueError, match=f"{option} .*cannot be used") as e:
        if option == "model_display_name":
            _gate(tmp_path, monkeypatch, model_display_name=injected)
        else:
            _deploy("run-2", v2, endpoint_display_name=injected)
    assert "'\"'" in str(e.value)  # The character is named.
    # The injected text never reached the service; nothing was deployed anywhere.
    assert not [r for r in vertex.requests[before:] if "theirs" in json.dumps(r.query)]
    others = [e for n, e in vertex.endpoints.items() if n != our_endpoint]
    assert [e.get("deployedModels", []) for e in others] == [[]]
    assert [d["modelVersionId"] for d in vertex.endpoints[our_endpoint]["deployedModels"]] == ["1"]
    for name in ("bad\\name", "x" * 129, "tab\tname", ""):
        with pytest.raises(ValueError, match="cannot be used"):
            vertex_registry.family_filter(name, "ncf-neumf", option)


@pytest.mark.parametrize(
    "planted",
    [
        "gs://other-bucket/models/theirs",
        f"gs://{BUCKET}-lookalike/pipeline-root/theirs",
        f"gs://{BUCKET}/pipeline-root/../../other-bucket/theirs",
    ],
)
def test_a_champion_stored_outside_the_pipelines_bucket_is_not_loaded(
    vertex, tmp_path, monkeypatch, planted
):
    _register(tmp_path, "run-1")
    # A stranger copies our label too: the location of the SavedModel still gives it away.
    theirs = _stranger_model("ncf-neumf", planted, {"ncf_pipelines_model": "ncf-neumf"})
    with pytest.raises(ValueError, match=f"outside gs://{BUCKET}/ .*not loaded") as e:
        _gate(tmp_path, monkeypatch)
    assert theirs in str(e.value) and planted in str(e.value)
    # The same by resource name, and under a narrower model_root than the bucket.
    with pytest.raises(ValueError, match="outside"):
        _gate(tmp_path, monkeypatch, registry_model=theirs)
    with pytest.raises(ValueError, match=f"outside gs://{BUCKET}/elsewhere/"):
        _gate(tmp_path, monkeypatch, model_root=f"gs://{BUCKET}/elsewhere")
    # A challenger outside Cloud Storage gives no default for model_root: asked for by name.
    with pytest.raises(ValueError, match="model_root: give the gs:// folder"):
        _gate(tmp_path, monkeypatch, challenger=dsl.Model(uri=str(tmp_path / "local-export")))


def test_deploy_keeps_other_models_and_other_peoples_endpoints(vertex, tmp_path):
    from google.cloud import aiplatform

    v1 = _register(tmp_path, "run-1")
    model = v1.metadata["resourceName"]
    _deploy("run-1", v1)
    (ours,) = vertex.endpoints
    (mine,) = vertex.endpoints[ours]["deployedModels"]
    # Another team serves its model on our endpoint with 30% of the traffic...
    other = aiplatform.Model(_stranger_model("their-model", "gs://other-bucket/m"))
    endpoint = aiplatform.Endpoint(ours)
    endpoint.deploy(
        other, traffic_split={"0": 30, mine["id"]: 70}, machine_type="n1-standard-2", sync=True
    )
    (their_id,) = {d["id"] for d in vertex.endpoints[ours]["deployedModels"]} - {mine["id"]}
    # ...and someone makes a newer endpoint with our endpoint's name (without our label).
    planted = aiplatform.Endpoint.create(
        display_name="ncf-neumf", project=PROJECT, location=REGION
    ).resource_name

    v2 = _register(tmp_path, "run-2", parent=model, make_default=False)
    done = _deploy("run-2", v2)
    assert done.metadata["resourceName"] == ours
    assert not vertex.endpoints[planted].get("deployedModels")
    assert _list_filters(vertex, "endpoints")[-1] == OUR_FILTER
    assert vertex.endpoints[ours]["labels"] == {"ncf_pipelines_model": "ncf-neumf"}
    served = {d["id"]: d for d in vertex.endpoints[ours]["deployedModels"]}
    assert their_id in served  # The other team's model stays, with its share.
    new_id = done.metadata["deployedModelId"]
    assert vertex.endpoints[ours]["trafficSplit"] == {their_id: 30, new_id: 70}
    assert done.metadata["undeployed"] == [mine["id"]]
    assert (served[new_id]["model"], served[new_id]["modelVersionId"]) == (model, "2")

    # By resource name: that endpoint, even one without our label.
    v3 = _register(tmp_path, "run-3", parent=model, make_default=False)
    done = _deploy("run-3", v3, endpoint_display_name=planted)
    assert done.metadata["resourceName"] == planted
    assert their_id in {d["id"] for d in vertex.endpoints[ours]["deployedModels"]}


# --- the endpoint answers Vertex AI's requests with the real exported model ----------------------


@pytest.fixture
def real_export(tiny_export):
    """The session's export of the tiny model (read-only: _register copies it)."""
    return tiny_export.export_dir


def _container(tmp_path):
    """A predictor for the stand-in: the deployed version's artifact served as the prebuilt
    TensorFlow container serves it (TF Serving's REST mapping, tests/serve_check.py)."""

    def serve(deployed, version, body):
        export_dir = _local(tmp_path, version["artifactUri"])
        got, err = serve_check(export_dir, [body], tmp_path)
        return {"error": err[-2000:]} if got is None else got["responses"][0]

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
    assert len(rows[0]["item_ids"]) == TINY_TOP_K
    (raw,) = vertex.find("POST", r":rawPredict$")
    assert raw.path == f"/v1/{endpoint.resource_name}:rawPredict"
