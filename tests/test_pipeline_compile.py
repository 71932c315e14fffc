import pytest
import yaml

from components._image import DEFAULT_IMAGE
from pipelines import cli, pipeline, profiles

DISPLAY = {
    "importer": "Import raw interactions",
    "validate-data": "Validate raw data (TFDV gate)",
    "prepare-data": "Prepare pre-batched TFRecords",
    "evaluate-model": "Evaluate HR@10 / NDCG@10",
    "export-model": "Export serving SavedModel",
}


def prep_params_of(tasks):
    return tasks["prepare-data"]["inputs"]["parameters"]


def _gb(limit: str) -> float:
    return float(limit.rstrip("G"))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = {}
    root = tmp_path_factory.mktemp("compiled")
    for name, profile in profiles.BUILTIN.items():
        path = root / f"{name}.yaml"
        pipeline.compile_pipeline(profile, str(path), train_batch_size=1024)
        out[name] = yaml.safe_load(path.read_text())
    return out


@pytest.mark.parametrize("name", sorted(profiles.BUILTIN))
def test_every_profile_compiles_with_its_machines(compiled, name):
    spec, profile = compiled[name], profiles.BUILTIN[name]
    tasks = spec["root"]["dag"]["tasks"]
    executors = spec["deploymentSpec"]["executors"]
    for task, display in DISPLAY.items():
        assert tasks[task]["taskInfo"]["name"] == display
    assert tasks["train-model"]["taskInfo"]["name"] == f"Train NeuMF ({name})"
    # CPU steps: resource setters with the profile's sizes.
    for task, machine in (
        ("validate-data", profile.data),
        ("prepare-data", profile.data),
        ("evaluate-model", profile.evaluate),
        ("export-model", profile.evaluate),
    ):
        res = executors[f"exec-{task}"]["container"]["resources"]
        assert res["cpuLimit"] == float(machine.cpu_limit)
        assert res["memoryLimit"] == _gb(machine.memory_limit)
        assert "accelerator" not in res
        if task != "validate-data":
            assert tasks[task]["retryPolicy"]["maxRetryCount"] == 2
    # The data fingerprint keys both data steps' caches.
    for task in ("validate-data", "prepare-data"):
        fp = tasks[task]["inputs"]["parameters"]["data_fingerprint"]
        assert fp == {"componentInputParameter": "data_fingerprint"}
    # The profile picks the data-prep path; Beam options are a pipeline parameter.
    assert prep_params_of(tasks)["runner"]["runtimeValue"]["constant"] == profile.data_runner
    assert prep_params_of(tasks)["beam_pipeline_args"] == {
        "componentInputParameter": "beam_pipeline_args"
    }
    # The replica count reaches data prep (whole eval users per replica).
    prep_params = tasks["prepare-data"]["inputs"]["parameters"]
    assert prep_params["eval_users_multiple"]["runtimeValue"][
        "constant"
    ] == profiles.eval_users_multiple(profile)
    train_params = tasks["train-model"]["inputs"]["parameters"]
    assert train_params["strategy"]["runtimeValue"]["constant"] == profile.strategy
    t = profile.train
    if t.custom_job:
        pools = train_params["worker_pool_specs"]["runtimeValue"]["constant"]
        assert sum(int(p["replica_count"]) for p in pools) == t.replica_count
        assert len(pools) == (2 if t.replica_count > 1 else 1)
        for pool in pools:
            ms = pool["machine_spec"]
            assert ms["machine_type"] == t.machine_type
            assert ms["accelerator_type"] == t.accelerator_type
            assert int(ms["accelerator_count"]) == t.accelerator_count
            assert ms.get("tpu_topology", "") == t.tpu_topology
            assert pool["container_spec"]["image_uri"] == DEFAULT_IMAGE
        assert train_params["location"] == {"componentInputParameter": "location"}
        if t.is_tpu:
            assert train_params["tpu_address"]["runtimeValue"]["constant"] == "local"
    else:
        res = executors["exec-train-model"]["container"]["resources"]
        assert res["cpuLimit"] == float(t.cpu_limit)
        assert "accelerator" not in res


def test_pipeline_parameters_and_artifact_wiring(compiled):
    spec = compiled["gpu-a100"]
    params = spec["root"]["inputDefinitions"]["parameters"]
    for p in (
        "data_uri",
        "data_fingerprint",
        "data_format",
        "data_epochs",
        "epochs",
        "num_neg",
        "eval_negatives",
        "train_batch_size",
        "eval_batch_size",
        "preset",
        "target_hr",
        "seed",
        "register",
    ):
        assert p in params
    assert not params["data_uri"].get("isOptional")  # Required.
    tasks = spec["root"]["dag"]["tasks"]
    art = tasks["train-model"]["inputs"]["artifacts"]["examples"]["taskOutputArtifact"]
    assert art == {"outputArtifactKey": "examples", "producerTask": "prepare-data"}
    ev = tasks["evaluate-model"]["inputs"]["artifacts"]["model"]["taskOutputArtifact"]
    assert ev["producerTask"] == "train-model"
    # Registration only when asked.
    cond = tasks["condition-1"]
    assert "register" in cond["triggerPolicy"]["condition"]


def test_image_override_reaches_every_component_and_custom_job(tmp_path):
    out = tmp_path / "p.yaml"
    image = "europe-docker.pkg.dev/acme/ml/ncf:7"
    pipeline.compile_pipeline(profiles.BUILTIN["gpu-a100x8"], str(out), image=image)
    text = out.read_text()
    assert DEFAULT_IMAGE not in text
    spec = yaml.safe_load(text)
    for name, ex in spec["deploymentSpec"]["executors"].items():
        if "container" in ex and name != "exec-train-model":
            assert ex["container"]["image"] == image
    pools = spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"][
        "worker_pool_specs"
    ]["runtimeValue"]["constant"]
    assert pools[0]["container_spec"]["image_uri"] == image


def test_compile_command_preflights_before_writing(tmp_path, capsys):
    out = tmp_path / "x.yaml"
    code = cli.main(
        ["compile", "--profile", "gpu-a100x8", "--train-batch-size", "1001", "--output", str(out)]
    )
    assert code == 2 and not out.exists()
    assert "does not split over 8 replicas" in capsys.readouterr().err
    assert cli.main(["compile", "--profile", "tpu-v3-8", "--output", str(out)]) == 0
    assert "compiled profile tpu-v3-8" in capsys.readouterr().out and out.exists()


def test_no_credentials_or_local_paths_in_compiled_spec(compiled):
    text = yaml.safe_dump(compiled["cpu"])
    for secret in ("Bearer", "private_key", "access_token", "/root/", "/work/"):
        assert secret not in text
