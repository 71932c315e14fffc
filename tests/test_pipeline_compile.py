import os
import re
import stat

import pytest
import yaml
from kfp import dsl

from components import custom_job_launcher
from components._image import image_for
from components.train_model import train_model
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
        pipeline.compile_pipeline(profile, str(path), defaults={"train_batch_size": 1024})
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
    const = {
        k: v["runtimeValue"]["constant"] for k, v in train_params.items() if "runtimeValue" in v
    }
    assert const["distribution_strategy"] == profile.strategy
    t = profile.train
    # Plain steps run the CPU image; training the image of the profile's accelerator family.
    family = "tpu" if t.is_tpu else "gpu" if t.accelerator_type else "cpu"
    for task in ("validate-data", "prepare-data", "evaluate-model", "export-model"):
        assert executors[f"exec-{task}"]["container"]["image"] == image_for("cpu")
    # The step fails on a machine without the accelerator it was compiled for.
    assert const["expect_accelerator"] == t.accelerator_type
    assert int(const["expect_accelerator_count"]) == (t.accelerator_count if family != "cpu" else 0)
    if t.custom_job:
        # Ours, not GCPC's launcher: a retry creates a new job (components/custom_job_launcher).
        launcher = executors["exec-train-model"]["container"]
        assert launcher["command"][-1] == custom_job_launcher.MODULE
        assert launcher["image"] == image_for("cpu")
        pools = const["worker_pool_specs"]
        assert sum(int(p["replica_count"]) for p in pools) == t.replica_count
        assert len(pools) == (2 if t.replica_count > 1 else 1)
        for pool in pools:
            ms = pool["machine_spec"]
            assert ms["machine_type"] == t.machine_type
            assert ms["accelerator_type"] == t.accelerator_type
            assert int(ms["accelerator_count"]) == t.accelerator_count
            assert ms.get("tpu_topology", "") == t.tpu_topology
            assert pool["container_spec"]["image_uri"] == image_for(family)
        # Region, identity and network are the pipeline job's own, filled in by Vertex AI.
        wrapper = spec["components"]["comp-train-model"]["inputDefinitions"]["parameters"]
        assert wrapper["location"]["defaultValue"] == "{{$.pipeline_google_cloud_location}}"
        assert wrapper["service_account"]["defaultValue"] == "{{$.pipeline_service_account}}"
        assert wrapper["network"]["defaultValue"] == "{{$.pipeline_network}}"
        assert "location" not in train_params and "strategy" not in train_params
        if t.is_tpu:
            assert const["tpu_address"] == "local"
    else:
        res = executors["exec-train-model"]["container"]
        assert res["image"] == image_for("cpu")
        assert res["resources"]["cpuLimit"] == float(t.cpu_limit)
        assert "accelerator" not in res["resources"]


def test_train_parameters_do_not_collide_with_the_custom_job_wrapper():
    """The wrapper adds its own inputs (strategy = scheduling strategy, ...) beside the component's.

    A train_model parameter of the same name would be shadowed by the wrapper's input and its
    value would land in the CustomJob payload instead (issue: `strategy` went to
    job_spec.scheduling.strategy).
    """
    from google_cloud_pipeline_components.v1.custom_job import (
        create_custom_training_job_from_component,
    )

    @dsl.component(base_image="python:3.11-slim")
    def nothing():
        pass

    wrapper_inputs = set(create_custom_training_job_from_component(nothing).component_spec.inputs)
    assert {"strategy", "location", "service_account", "worker_pool_specs"} <= wrapper_inputs
    assert not set(train_model.component_spec.inputs) & wrapper_inputs


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
    # Registration only when asked, in the pipeline's own project and region.
    cond = tasks["condition-1"]
    assert cond["triggerPolicy"]["condition"] == (
        "inputs.parameter_values['pipelinechannel--register'] == true"
    )
    reg = spec["components"]["comp-condition-1"]["dag"]["tasks"]["register-model"]["inputs"]
    assert reg["parameters"]["project"]["runtimeValue"]["constant"] == (
        "{{$.pipeline_google_cloud_project_id}}"
    )
    assert reg["parameters"]["location"]["runtimeValue"]["constant"] == (
        "{{$.pipeline_google_cloud_location}}"
    )
    assert "location" not in params and "project" not in params


def test_image_override_reaches_every_component_and_custom_job(tmp_path):
    out = tmp_path / "p.yaml"
    image = "europe-docker.pkg.dev/acme/ml/ncf:7"
    pipeline.compile_pipeline(profiles.BUILTIN["gpu-a100x8"], str(out), image=image)
    spec = yaml.safe_load(out.read_text())
    executors = spec["deploymentSpec"]["executors"].values()
    images = {ex["container"]["image"] for ex in executors if "container" in ex}
    assert images == {image}
    pools = spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"][
        "worker_pool_specs"
    ]["runtimeValue"]["constant"]
    assert pools[0]["container_spec"]["image_uri"] == image


def test_image_repository_gives_each_family_its_tag(tmp_path):
    repo = "europe-docker.pkg.dev/acme/ml/ncf"
    for name, family in (("cpu", "cpu"), ("gpu-t4", "gpu"), ("tpu-v5e-8", "tpu")):
        out = tmp_path / f"{name}.yaml"
        pipeline.compile_pipeline(profiles.BUILTIN[name], str(out), image_repository=repo)
        spec = yaml.safe_load(out.read_text())
        train = spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
        if "worker_pool_specs" in train:
            train_image = train["worker_pool_specs"]["runtimeValue"]["constant"][0][
                "container_spec"
            ]["image_uri"]
        else:
            train_image = spec["deploymentSpec"]["executors"]["exec-train-model"]["container"][
                "image"
            ]
        assert train_image == image_for(family, repo)
        for ex in spec["deploymentSpec"]["executors"].values():
            if "container" in ex:  # The importer has none.
                assert ex["container"]["image"] == image_for("cpu", repo)


def test_compile_command_preflights_before_writing(tmp_path, capsys):
    out = tmp_path / "x.yaml"
    code = cli.main(
        ["compile", "--profile", "gpu-a100x8", "--train-batch-size", "1001", "--output", str(out)]
    )
    assert code == 2 and not out.exists()
    assert "train_batch_size 1001 does not split over 8 replicas" in capsys.readouterr().err
    # The flag is the pipeline parameter's compiled default: what preflight checked is what runs.
    assert (
        cli.main(
            [
                "compile",
                "--profile",
                "gpu-a100x8",
                "--param",
                "train_batch_size=2048",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    spec = yaml.safe_load(out.read_text())
    declared = spec["root"]["inputDefinitions"]["parameters"]
    assert declared["train_batch_size"]["defaultValue"] == 2048
    assert "compiled profile gpu-a100x8" in capsys.readouterr().out
    code = cli.main(
        [
            "compile",
            "--profile",
            "gpu-a100x8",
            "--param",
            "eval_batch_size=3000",
            "--output",
            str(tmp_path / "y.yaml"),
        ]
    )
    assert code == 2 and "eval users per batch" in capsys.readouterr().err
    assert cli.main(["compile", "--profile", "tpu-v3-8", "--output", str(out)]) == 0


def test_compiled_file_is_readable_like_any_new_file(tmp_path):
    out = tmp_path / "p.yaml"
    old = os.umask(0o022)
    try:
        pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(out))
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["p.yaml"]  # No scratch left beside it.


@pytest.mark.parametrize("name", sorted(profiles.BUILTIN))
def test_no_credentials_or_local_paths_in_compiled_spec(compiled, name):
    text = yaml.safe_dump(compiled[name])
    for secret in ("Bearer", "private_key", "access_token"):
        assert secret not in text
    # Any absolute path of the compiling machine (home, checkout, venv, temp folders).
    here = {os.path.expanduser("~"), os.getcwd(), os.path.dirname(os.path.dirname(__file__))}
    here |= {os.path.realpath(p) for p in here} | {os.environ.get("TMPDIR", "/tmp")}
    for path in sorted(here):
        assert path + "/" not in text, path
    assert not re.search(r"(/root/|/home/|/work/|/Users/|site-packages)", text)


def test_compile_command_refuses_a_misspelt_machine_type(tmp_path, capsys):
    """It used to compile, and the training task ran with no resources at all."""
    custom = tmp_path / "profiles.yaml"
    custom.write_text("typo:\n  train: {machine_type: n1-standrd-16}\n  strategy: default\n")
    out = tmp_path / "x.yaml"
    argv = ["compile", "--profile", "typo", "--profiles-file", str(custom), "--output", str(out)]
    assert cli.main(argv) == 2 and not out.exists()
    err = capsys.readouterr().err
    assert "train: machine_type 'n1-standrd-16' is not one Vertex AI offers for training" in err
    assert "did you mean 'n1-standard-16'?" in err


@pytest.mark.parametrize(
    "param,message",
    [
        ("preset=nosuch", "parameter 'preset': unknown preset 'nosuch'; choose one of "),
        ("eval_negatives=-5", "parameter 'eval_negatives' must be >= 0, got -5"),
        ("train_batch_size=0", "parameter 'train_batch_size' must be >= 1, got 0"),
    ],
)
def test_compile_command_checks_the_compiled_defaults(tmp_path, capsys, param, message):
    out = tmp_path / "x.yaml"
    assert cli.main(["compile", "--param", param, "--output", str(out)]) == 2
    assert message in capsys.readouterr().err and not out.exists()
