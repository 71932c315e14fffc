"""Canary rollouts against the Vertex AI stand-in: deploy beside, promote, roll back, interrupted.

The real ``google-cloud-aiplatform`` client runs against ``vertex_emulator/rest_service.py``
(tests/test_deploy.py says how); the rollout's state is read back from the stand-in's endpoint
and registry only. An interruption is the stand-in failing one call before it changes anything
(``fail_next``): the same as the process dying between the step before and that one. The
retry must end where an uninterrupted run ends (docs/rollouts.md).
"""

# No `from __future__ import annotations`: KFP reads the component annotations at runtime.
import pytest
from conftest import PROJECT, REGION
from test_deploy import _default_version, _deploy, _register, _stranger_model

from components.deploy_model import deploy_model, promote_canary
from pipelines import cli, yaml_io
from training_core.serving import deploy, model_line

DOWN = "The service is currently unavailable."


def _canary(vertex, tmp_path, percent=20):
    """Version 1 serving (the default), version 2 deployed beside it as a canary."""
    v1 = _register(tmp_path, "run-1")
    model = v1.metadata["resourceName"]
    _deploy("run-1", v1)
    v2 = _register(tmp_path, "run-2", parent=model, make_default=False)
    done = _deploy("run-2", v2, rollout="canary", canary_percent=percent)
    return model, done


def _served(vertex, name) -> dict[str, int]:
    """Version id -> its traffic, as the stand-in's endpoint holds it."""
    endpoint = vertex.endpoints[name]
    split = endpoint.get("trafficSplit", {})
    return {d["modelVersionId"]: split.get(d["id"], 0) for d in endpoint["deployedModels"]}


def _endpoint(name):
    from google.cloud import aiplatform

    return aiplatform.Endpoint(name)


def test_a_canary_serves_its_share_beside_the_default_and_is_not_deployed_twice(vertex, tmp_path):
    model, done = _canary(vertex, tmp_path, percent=20)
    name = done.metadata["resourceName"]
    assert _served(vertex, name) == {"1": 80, "2": 20}
    assert _default_version(vertex, model) == "1"  # The registry's default does not move.
    assert done.metadata["rollout"] == "canary" and done.metadata["undeployed"] == []
    assert sorted(done.metadata["trafficSplit"].values()) == [20, 80]
    state = deploy.read_rollout(_endpoint(name), model)
    assert (state.stable.version_id, state.canary.version_id) == ("1", "2")
    assert state.describe().startswith("canary:")

    # The step's retry: deployModel is one operation, the canary is there: nothing sent.
    before = len(vertex.requests)
    again = _deploy("run-2", _version_artifact(model, "2"), rollout="canary", canary_percent=20)
    sent = [r for r in vertex.requests[before:] if r.method != "GET"]
    assert sent == [] and again.metadata["deployedModelId"] == done.metadata["deployedModelId"]

    # A third version while the canary is unfinished is refused, naming what to do.
    v3 = _register(tmp_path, "run-3", parent=model, make_default=False)
    with pytest.raises(ValueError, match=r"unfinished .*versions \['1', '2'\].*rollout status"):
        _deploy("run-3", v3, rollout="canary")
    assert _served(vertex, name) == {"1": 80, "2": 20}


def _version_artifact(model, version):
    from kfp import dsl

    art = dsl.Artifact(uri="gs://x/vertex_model")
    art.metadata.update({"resourceName": model, "versionId": version})
    return art


def test_a_canary_whose_deployment_fails_changes_nothing_and_its_retry_deploys_it(vertex, tmp_path):
    v1 = _register(tmp_path, "run-1")
    model = v1.metadata["resourceName"]
    name = _deploy("run-1", v1).metadata["resourceName"]
    v2 = _register(tmp_path, "run-2", parent=model, make_default=False)
    vertex.deploy_failure = "Model server never became ready. Please validate your model."
    with pytest.raises(Exception, match="never became ready"):
        _deploy("run-2", v2, rollout="canary", canary_percent=30)
    assert _served(vertex, name) == {"1": 100}
    _deploy("run-2", v2, rollout="canary", canary_percent=30)  # The step's retry.
    assert _served(vertex, name) == {"1": 70, "2": 30}
    assert _default_version(vertex, model) == "1"


def test_a_first_canary_with_nothing_serving_takes_the_traffic_as_replace_would(vertex, tmp_path):
    v1 = _register(tmp_path, "run-1")
    done = _deploy("run-1", v1, rollout="canary", canary_percent=10)
    assert _served(vertex, done.metadata["resourceName"]) == {"1": 100}
    assert done.metadata["rollout"] == "replace"


# Each call promote makes, in order (failing one is an interruption just before it), and what
# the endpoint serves then; the default is still version 1 at each.
PROMOTE_STEPS = [
    ("PATCH", "/endpoints/", {"1": 80, "2": 20}),
    ("POST", ":undeployModel", {"1": 0, "2": 100}),
    ("POST", ":mergeVersion", {"2": 100}),
]


@pytest.mark.parametrize(
    "method, path, interrupted", PROMOTE_STEPS, ids=["traffic", "undeploy", "alias"]
)
def test_promote_interrupted_before_each_step_is_finished_by_a_retry(
    vertex, tmp_path, method, path, interrupted
):
    model, done = _canary(vertex, tmp_path)
    name = done.metadata["resourceName"]
    vertex.fail_next(503, DOWN, path, method)
    with pytest.raises(Exception, match="unavailable"):
        deploy.promote(_endpoint(name), model)
    assert _served(vertex, name) == interrupted and _default_version(vertex, model) == "1"
    state = deploy.promote(_endpoint(name), model)  # The retry (no version: from state only).
    assert _served(vertex, name) == {"2": 100}
    assert _default_version(vertex, model) == "2"
    assert state.describe().startswith("serving:")
    # Once more: nothing to promote; with the version, done (a retry after the last step).
    with pytest.raises(ValueError, match="no canary to promote: serving: .*version 2"):
        deploy.promote(_endpoint(name), model)
    before = len(vertex.requests)
    deploy.promote(_endpoint(name), model, version_id="2")
    assert not [r for r in vertex.requests[before:] if r.method != "GET"]


@pytest.mark.parametrize(
    "method, path, interrupted",
    [("PATCH", "/endpoints/", {"1": 80, "2": 20}), ("POST", ":undeployModel", {"1": 100, "2": 0})],
    ids=["traffic", "undeploy"],
)
def test_rollback_interrupted_before_each_step_is_finished_by_a_retry(
    vertex, tmp_path, method, path, interrupted
):
    model, done = _canary(vertex, tmp_path)
    name = done.metadata["resourceName"]
    vertex.fail_next(503, DOWN, path, method)
    with pytest.raises(Exception, match="unavailable"):
        deploy.rollback(_endpoint(name), model)
    assert _served(vertex, name) == interrupted
    deploy.rollback(_endpoint(name), model)
    assert _served(vertex, name) == {"1": 100}
    assert _default_version(vertex, model) == "1"
    assert not [r for r in vertex.requests if ":mergeVersionAliases" in r.path and "@2" in r.path]
    with pytest.raises(ValueError, match="no canary to roll back: serving:"):
        deploy.rollback(_endpoint(name), model)
    deploy.rollback(_endpoint(name), model, version_id="2")  # Done already: no error.


def test_a_rollback_after_a_promote_undeployed_the_old_version_is_refused(vertex, tmp_path):
    model, done = _canary(vertex, tmp_path)
    name = done.metadata["resourceName"]
    vertex.fail_next(503, DOWN, ":mergeVersion")
    with pytest.raises(Exception, match="unavailable"):
        deploy.promote(_endpoint(name), model)
    before = len(vertex.requests)
    with pytest.raises(ValueError, match="no canary to roll back: promoting: .*run promote"):
        deploy.rollback(_endpoint(name), model)
    assert not [r for r in vertex.requests[before:] if r.method != "GET"]
    assert deploy.read_rollout(_endpoint(name), model).unaliased.version_id == "2"
    deploy.promote(_endpoint(name), model)  # What the refusal says to do.
    assert _served(vertex, name) == {"2": 100} and _default_version(vertex, model) == "2"


def test_promote_keeps_another_models_share(vertex, tmp_path):
    from google.cloud import aiplatform

    v1 = _register(tmp_path, "run-1")
    model = v1.metadata["resourceName"]
    first = _deploy("run-1", v1)
    name = first.metadata["resourceName"]
    other = aiplatform.Model(_stranger_model("their-model", "gs://other-bucket/m"))
    mine = first.metadata["deployedModelId"]
    _endpoint(name).deploy(
        other, traffic_split={"0": 30, mine: 70}, machine_type="n1-standard-2", sync=True
    )
    v2 = _register(tmp_path, "run-2", parent=model, make_default=False)
    done = _deploy("run-2", v2, rollout="canary", canary_percent=10)
    split = vertex.endpoints[name]["trafficSplit"]
    canary = done.metadata["deployedModelId"]
    (theirs,) = set(split) - {mine, canary}
    assert (split[theirs], split[mine], split[canary]) == (30, 63, 7)
    deploy.promote(_endpoint(name), model)
    assert vertex.endpoints[name]["trafficSplit"] == {theirs: 30, canary: 70}


def test_the_rollout_command(vertex, tmp_path, capsys):
    model, done = _canary(vertex, tmp_path)
    name = done.metadata["resourceName"]
    where = ["--project", PROJECT, "--location", REGION]
    line = ["--model-display-name", "ncf-neumf"]  # The line test_deploy's versions are of.
    assert cli.main(["rollout", "status", *where, *line]) == 0
    assert capsys.readouterr().out.startswith("canary: ")
    vertex.fail_next(503, DOWN, ":undeployModel")
    with pytest.raises(Exception, match="unavailable"):
        cli.main(["rollout", "rollback", *where, *line, "--endpoint", name])
    assert cli.main(["rollout", "rollback", *where, "--model", model]) == 0
    assert capsys.readouterr().out.startswith("serving: ")
    assert cli.main(["rollout", "promote", *where, *line]) == 2
    assert "error: no canary to promote: serving:" in capsys.readouterr().err
    assert cli.main(["rollout", "status", *where, "--model-display-name", "nothing"]) == 2
    assert "no registry model named 'nothing'" in capsys.readouterr().err
    # Lines are per dataset (model_line.py): no default name to fall back on, the data's line.
    assert cli.main(["rollout", "status", *where]) == 2
    assert "which model? give --model" in capsys.readouterr().err
    assert cli.main(["rollout", "status", *where, "--data", "gs://b/ratings/"]) == 2
    assert f"no registry model named '{model_line.of_data('gs://b/ratings').name}'" in (
        capsys.readouterr().err
    )


# --- the pipeline's promote step ------------------------------------------------------------------


def test_the_promote_step_promotes_a_canary_that_still_serves(vertex, tmp_path):
    model, done = _canary(vertex, tmp_path)
    args = dict(endpoint=done, project=PROJECT, location=REGION, wait_minutes=0.0)
    vertex.fail_next(503, DOWN, ":undeployModel")
    with pytest.raises(Exception, match="unavailable"):
        promote_canary.python_func(**args)
    assert promote_canary.python_func(**args) == deploy.PROMOTED  # The task's retry.
    assert _served(vertex, done.metadata["resourceName"]) == {"2": 100}
    assert _default_version(vertex, model) == "2"
    assert promote_canary.python_func(**args) == deploy.PROMOTED  # And again: nothing to do.


def test_the_promote_step_leaves_a_canary_rolled_back_during_the_wait(vertex, tmp_path):
    model, done = _canary(vertex, tmp_path)
    name = done.metadata["resourceName"]
    waited = []

    def someone_rolls_back(seconds):
        waited.append(seconds)
        deploy.rollback(_endpoint(name), model)

    outcome = deploy.promote_after(name, model, "2", PROJECT, REGION, 30, someone_rolls_back)
    assert (outcome, waited) == (deploy.ROLLED_BACK_MEANWHILE, [1800])
    assert _served(vertex, name) == {"1": 100} and _default_version(vertex, model) == "1"

    # A canary whose traffic was taken away (a rollback half done) is not promoted.
    v3 = _register(tmp_path, "run-3", parent=model, make_default=False)
    _deploy("run-3", v3, rollout="canary")
    ids = {d["modelVersionId"]: d["id"] for d in vertex.endpoints[name]["deployedModels"]}
    with pytest.raises(ValueError, match="no traffic left"):
        deploy.promote_after(
            name,
            model,
            "3",
            PROJECT,
            REGION,
            1,
            lambda s: _endpoint(name).update(traffic_split={ids["1"]: 100}),
        )
    assert _served(vertex, name) == {"1": 100, "3": 0} and _default_version(vertex, model) == "1"


def test_the_standin_refuses_to_undeploy_a_model_with_traffic(vertex, tmp_path):
    from google.api_core import exceptions

    model, done = _canary(vertex, tmp_path)
    name = done.metadata["resourceName"]
    canary = done.metadata["deployedModelId"]
    with pytest.raises(exceptions.BadRequest) as e:
        _endpoint(name).api_client.undeploy_model(endpoint=name, deployed_model_id=canary).result()
    error = e.value.response.json()["error"]
    assert (error["code"], error["status"]) == (400, "FAILED_PRECONDITION")
    assert "still receives 20% of the traffic" in error["message"]
    vertex.rejected.clear()  # Refused on purpose.
    assert _served(vertex, name) == {"1": 80, "2": 20}


# --- profiles and the compiled pipeline ---------------------------------------------------------


def test_the_component_defaults_are_the_cores():
    inputs = deploy_model.component_spec.inputs
    assert inputs["rollout"].default == deploy.ROLLOUT_REPLACE
    assert inputs["canary_percent"].default == deploy.DEFAULT_CANARY_PERCENT


@pytest.mark.parametrize(
    "rollout, message",
    [
        ("{strategy: canary, canary_percent: 100}", "canary_percent 100 must be 1 to 99"),
        ("{strategy: canary, canary_percent: 0}", "canary_percent 0 must be 1 to 99"),
        ("{promote_after_minutes: 30}", "promote_after_minutes promotes a canary"),
        ("blue-green", "strategy 'blue-green' is not one of replace, canary"),
    ],
)
def test_profile_rollout_is_checked(tmp_path, rollout, message):
    from pipelines import profiles

    path = tmp_path / "p.yaml"
    path.write_text(
        f"p:\n  train: {{machine_type: n1-standard-8}}\n  deploy: true\n  rollout: {rollout}\n"
    )
    with pytest.raises(profiles.ProfileError, match=message):
        profiles.preflight(profiles.get_profile("p", str(path)))


def test_profile_rollout_needs_deploy_and_known_keys(tmp_path):
    from pipelines import profiles

    path = tmp_path / "p.yaml"
    path.write_text("p:\n  train: {machine_type: n1-standard-8}\n  rollout: canary\n")
    with pytest.raises(profiles.ProfileError, match="only a deploying profile rolls out"):
        profiles.preflight(profiles.get_profile("p", str(path)))
    path.write_text("p:\n  train: {machine_type: n1-standard-8}\n  rollout: {percent: 5}\n")
    with pytest.raises(profiles.ProfileError, match=r"rollout: unknown keys percent; known: "):
        profiles.get_profile("p", str(path))
    path.write_text(
        "p:\n  train: {machine_type: n1-standard-8}\n  rollout: {canary_percent: '5'}\n"
    )
    with pytest.raises(profiles.ProfileError, match=r"canary_percent: expected int"):
        profiles.get_profile("p", str(path))


@pytest.mark.parametrize("promote_after", [0, 45])
def test_a_canary_profile_compiles_the_deploy_step_with_its_share(tmp_path, promote_after):
    from pipelines import pipeline, profiles

    path = tmp_path / "profiles.yaml"
    path.write_text(
        "canary:\n"
        "  train: {machine_type: n1-standard-8, cpu_limit: 8, memory_limit: 30G}\n"
        "  deploy: true\n"
        f"  rollout: {{strategy: canary, canary_percent: 15, "
        f"promote_after_minutes: {promote_after}}}\n"
    )
    out = tmp_path / "p.yaml"
    pipeline.compile_pipeline(profiles.get_profile("canary", str(path)), str(out))
    spec = yaml_io.load(out.read_text())
    tasks = {}
    for comp in spec["components"].values():
        tasks.update(comp.get("dag", {}).get("tasks", {}))
    params = tasks["deploy-model"]["inputs"]["parameters"]
    assert params["rollout"]["runtimeValue"]["constant"] == "canary"
    assert params["canary_percent"]["runtimeValue"]["constant"] == 15
    if not promote_after:
        assert "promote-canary" not in tasks
        return
    promote = tasks["promote-canary"]
    assert promote["dependentTasks"] == ["deploy-model"]
    assert promote["inputs"]["artifacts"]["endpoint"]["taskOutputArtifact"] == {
        "outputArtifactKey": "endpoint",
        "producerTask": "deploy-model",
    }
    assert promote["inputs"]["parameters"]["wait_minutes"]["runtimeValue"]["constant"] == 45
    assert promote["retryPolicy"]["maxRetryCount"] >= 1
