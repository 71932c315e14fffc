import json
import os
import re
import site
import stat
import sys
import tempfile

import pytest
from kfp import dsl

from components import custom_job_launcher
from components._image import image_for
from components.train_model import train_model
from pipelines import cli, pipeline, placement, profiles, yaml_io
from training_core.training import strategy as st

DISPLAY = {
    "importer": "Import raw interactions",
    "validate-data": "Validate raw data (TFDV gate)",
    "prepare-data": "Prepare pre-batched TFRecords",
    "evaluate-model": "Evaluate HR@10 / NDCG@10",
    "export-model": "Export serving SavedModel",
}


def prep_params_of(tasks):
    return tasks["prepare-data"]["inputs"]["parameters"]


# What each built-in profile makes the compiled steps do, written out (not read from
# ``profiles.BUILTIN``): a change to a profile or to how it compiles shows up here.
# Training: a plain task as (cpuLimit, memoryLimit in G), or the custom job's worker pools as
# (replica_count, machine_type, accelerator_type, accelerator_count, tpu_topology, image family).
A100_1 = (1, "a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, "", "gpu")
A100_8 = (1, "a2-highgpu-8g", "NVIDIA_TESLA_A100", 8, "", "gpu")
TRAINING = {
    "cpu": {"strategy": "default", "task": (16.0, 60.0)},
    "gpu-t4": {
        "strategy": "one_device",
        "pools": [(1, "n1-standard-8", "NVIDIA_TESLA_T4", 1, "", "gpu")],
    },
    "gpu-l4": {
        "strategy": "one_device",
        "pools": [(1, "g2-standard-8", "NVIDIA_L4", 1, "", "gpu")],
    },
    "gpu-a100": {"strategy": "one_device", "pools": [A100_1]},
    "gpu-a100x8": {"strategy": "mirrored", "pools": [A100_8]},
    "gpu-h100": {
        "strategy": "one_device",
        "pools": [(1, "a3-highgpu-1g", "NVIDIA_H100_80GB", 1, "", "gpu")],
    },
    "gpu-h100x8": {
        "strategy": "mirrored",
        "pools": [(1, "a3-highgpu-8g", "NVIDIA_H100_80GB", 8, "", "gpu")],
    },
    # Chief pool and worker pool, one machine each.
    "gpu-a100-2workers": {"strategy": "multi_worker_mirrored", "pools": [A100_1, A100_1]},
    "tpu-v5e-8": {
        "strategy": "tpu",
        "pools": [(1, "ct5lp-hightpu-8t", "TPU_V5_LITEPOD", 8, "2x4", "tpu")],
    },
    "gpu-a100x8-dataflow": {"strategy": "mirrored", "pools": [A100_8]},
}
# Data steps (validate, prepare): (cpuLimit, memoryLimit in G) and prepare-data's runner.
DATA = {"gpu-a100x8-dataflow": ((4.0, 15.0), "beam")}  # Only launches Beam jobs.
DEFAULT_DATA = ((8.0, 52.0), "local")
EVALUATE = (8.0, 30.0)  # evaluate-model and export-model, on every profile.


@pytest.fixture(scope="module")
def compiled_text(tmp_path_factory):
    """Each built-in profile's compiled YAML, as written."""
    out = {}
    root = tmp_path_factory.mktemp("compiled")
    for name, profile in profiles.BUILTIN.items():
        path = root / f"{name}.yaml"
        pipeline.compile_pipeline(profile, str(path), defaults={"train_batch_size": 1024})
        out[name] = path.read_text()
    return out


@pytest.fixture(scope="module")
def compiled(compiled_text):
    return {name: yaml_io.load(text) for name, text in compiled_text.items()}


def test_the_compiled_documents_are_what_kfp_s_compiler_writes(tmp_path):
    # compile_pipeline takes the documents from the pipeline's protos instead of having KFP's
    # compiler write YAML and reading it back: both must be the same documents, keys in order.
    # The profile with the most in it: custom jobs (train, refit) and the Beam steps.
    from kfp import compiler

    profile = profiles.BUILTIN["gpu-a100x8-dataflow"]
    images = placement.Images.for_profile(profile)
    compiler.Compiler().compile(
        pipeline.build_pipeline(profile, images=images), str(tmp_path / "k.yaml")
    )
    written = yaml_io.load_all((tmp_path / "k.yaml").read_text())
    ours = pipeline.compiled_documents(pipeline.build_pipeline(profile, images=images))
    assert ours == written
    assert [list(d) for d in ours] == [list(d) for d in written]


def test_the_expectations_cover_every_built_in_profile():
    assert set(TRAINING) == set(RESOLVED) == set(profiles.BUILTIN)


def _train_constants(spec) -> dict:
    params = spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
    return {k: v["runtimeValue"]["constant"] for k, v in params.items() if "runtimeValue" in v}


@pytest.mark.parametrize("name", sorted(profiles.BUILTIN))
def test_every_profile_compiles_with_its_machines(compiled, name):
    spec, want = compiled[name], TRAINING[name]
    tasks = spec["root"]["dag"]["tasks"]
    executors = spec["deploymentSpec"]["executors"]
    for task, display in DISPLAY.items():
        assert tasks[task]["taskInfo"]["name"] == display
    assert tasks["train-model"]["taskInfo"]["name"] == f"Train NeuMF ({name})"
    # CPU steps: resource setters with the sizes the profile gives them, and no accelerator.
    (data_sizes, runner) = DATA.get(name, DEFAULT_DATA)
    for task, sizes in (
        ("validate-data", data_sizes),
        ("prepare-data", data_sizes),
        ("evaluate-model", EVALUATE),
        ("export-model", EVALUATE),
    ):
        res = executors[f"exec-{task}"]["container"]["resources"]
        assert (res["cpuLimit"], res["memoryLimit"]) == sizes, task
        assert "accelerator" not in res
        assert executors[f"exec-{task}"]["container"]["image"] == image_for("cpu")
        if task != "validate-data":
            assert tasks[task]["retryPolicy"]["maxRetryCount"] == 2
    # The data fingerprint keys both data steps' caches.
    for task in ("validate-data", "prepare-data"):
        fp = tasks[task]["inputs"]["parameters"]["data_fingerprint"]
        assert fp == {"componentInputParameter": "data_fingerprint"}
    # The profile picks the data-prep path; Beam options are a pipeline parameter.
    prep_params = prep_params_of(tasks)
    assert prep_params["runner"]["runtimeValue"]["constant"] == runner
    assert prep_params["beam_pipeline_args"] == {"componentInputParameter": "beam_pipeline_args"}
    # Whole eval users per replica: a multiple of 8 covers every built-in replica count.
    assert prep_params["eval_users_multiple"]["runtimeValue"]["constant"] == 8
    const = _train_constants(spec)
    train_params = tasks["train-model"]["inputs"]["parameters"]
    assert const["distribution_strategy"] == want["strategy"]
    if "task" in want:
        # A plain task in the CPU image, sized by its resource setters.
        res = executors["exec-train-model"]["container"]
        assert res["image"] == image_for("cpu")
        assert (res["resources"]["cpuLimit"], res["resources"]["memoryLimit"]) == want["task"]
        assert "accelerator" not in res["resources"]
        assert "worker_pool_specs" not in train_params
        assert (const["expect_accelerator"], int(const["expect_accelerator_count"])) == ("", 0)
        return
    # A custom job, launched by ours, not GCPC's launcher: a retry creates a new job
    # (components/custom_job_launcher).
    launcher = executors["exec-train-model"]["container"]
    assert launcher["command"][-1] == custom_job_launcher.MODULE
    assert launcher["image"] == image_for("cpu")
    pools = [
        (
            int(p["replica_count"]),
            p["machine_spec"]["machine_type"],
            p["machine_spec"]["accelerator_type"],
            int(p["machine_spec"]["accelerator_count"]),
            p["machine_spec"].get("tpu_topology", ""),
            p["container_spec"]["image_uri"],
        )
        for p in const["worker_pool_specs"]
    ]
    assert pools == [(*pool[:5], image_for(pool[5])) for pool in want["pools"]]
    # The step fails on a machine without the accelerator it was compiled for.
    _, _, accelerator, count, _, _ = want["pools"][0]
    assert (const["expect_accelerator"], int(const["expect_accelerator_count"])) == (
        accelerator,
        count,
    )
    # Region, identity and network are the pipeline job's own, filled in by Vertex AI.
    wrapper = spec["components"]["comp-train-model"]["inputDefinitions"]["parameters"]
    assert wrapper["location"]["defaultValue"] == "{{$.pipeline_google_cloud_location}}"
    assert wrapper["service_account"]["defaultValue"] == "{{$.pipeline_service_account}}"
    assert wrapper["network"]["defaultValue"] == "{{$.pipeline_network}}"
    assert "location" not in train_params and "strategy" not in train_params
    assert const.get("tpu_address", "") == ("local" if want["strategy"] == "tpu" else "")


# On the machines its custom job asks for, the compiled training step builds this strategy over
# this many GPUs (training_core.training.strategy.resolve, fed as components/train_model.py
# feeds it).
RESOLVED = {
    "cpu": ("default", 0),
    "gpu-t4": ("one_device", 1),
    "gpu-l4": ("one_device", 1),
    "gpu-a100": ("one_device", 1),
    "gpu-h100": ("one_device", 1),
    "gpu-a100x8": ("mirrored", 8),
    "gpu-h100x8": ("mirrored", 8),
    "gpu-a100x8-dataflow": ("mirrored", 8),
    "gpu-a100-2workers": ("multi_worker_mirrored", 1),
    "tpu-v5e-8": ("tpu", 0),
}


def _strategy_config(const) -> st.StrategyConfig:
    """What train_model builds from its compiled inputs."""
    return st.StrategyConfig(
        name=const["distribution_strategy"],
        tpu_address=const.get("tpu_address") or None,
        expect_accelerator=const["expect_accelerator"] or None,
        expect_accelerator_count=int(const["expect_accelerator_count"]),
    )


@pytest.mark.parametrize("name", sorted(profiles.BUILTIN))
def test_the_compiled_strategy_uses_all_of_the_profile_s_hardware(compiled, name):
    """The training step's strategy, resolved on the machines the compiled job requests."""
    const = _train_constants(compiled[name])
    pools = const.get("worker_pool_specs", [])
    gpus = 0
    local_tpu = False
    env = {}
    if pools:
        ms = pools[0]["machine_spec"]
        local_tpu = ms["accelerator_type"].startswith("TPU_")
        gpus = 0 if local_tpu else int(ms["accelerator_count"])
        hosts = {
            f"workerpool{i}": [f"host{i}-{r}:2222" for r in range(int(p["replica_count"]))]
            for i, p in enumerate(pools)
        }
        # What Vertex AI sets on the chief of a job with these pools.
        env["CLUSTER_SPEC"] = json.dumps(
            {"cluster": hosts, "task": {"type": "workerpool0", "index": 0}}
        )
    got = st.resolve(_strategy_config(const), env, visible_gpus=gpus, local_tpu=local_tpu)
    assert (got.name, got.num_gpus) == RESOLVED[name]
    if got.name == "multi_worker_mirrored":
        cluster = got.tf_config["cluster"]
        assert len(cluster["chief"]) + len(cluster["worker"]) == 2
    if got.name == "tpu":
        assert got.tpu_address == "local"
    if pools:
        # The same step on a host without the accelerator refuses to train on the CPU.
        with pytest.raises(ValueError, match="this training step was compiled for"):
            st.resolve(_strategy_config(const), {}, visible_gpus=0, local_tpu=False)


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
    # The model line: unset in the template, so compare-models names it after the run's
    # data_uri (training_core/serving/model_line.py), whatever submits the template.
    assert params["model_display_name"]["defaultValue"] == ""
    gate_inputs = tasks["compare-models"]["inputs"]["parameters"]
    for name in ("model_display_name", "data_uri"):
        assert gate_inputs[name] == {"componentInputParameter": name}, name
    art = tasks["train-model"]["inputs"]["artifacts"]["examples"]["taskOutputArtifact"]
    assert art == {"outputArtifactKey": "examples", "producerTask": "prepare-data"}
    ev = tasks["evaluate-model"]["inputs"]["artifacts"]["model"]["taskOutputArtifact"]
    assert ev["producerTask"] == "train-model"
    # Registration only when asked and only for a blessed challenger: register-model sits only
    # inside a condition on the `register` pipeline parameter, inside a condition on the
    # compare-models task's `blessed` output; both `== true`.
    assert params["register"]["parameterType"] == "BOOLEAN"
    assert params["register"]["defaultValue"] is False
    conditional = {n: t for n, t in tasks.items() if "triggerPolicy" in t}
    assert list(conditional) == ["condition-1", "condition-4", "condition-7"]
    assert "register-model" not in tasks
    outer = conditional["condition-1"]
    assert outer["taskInfo"]["name"] == "register-requested"
    assert sorted(outer["dependentTasks"]) == ["compare-models", "export-model"]
    outer_body = spec["components"][outer["componentRef"]["name"]]["dag"]["tasks"]
    assert list(outer_body) == ["condition-2"]
    inner = outer_body["condition-2"]
    assert inner["taskInfo"]["name"] == "challenger-blessed"
    # Without a refit (tests/test_refit.py has the refit's branch): the held-out model.
    (held_out,) = spec["components"][inner["componentRef"]["name"]]["dag"]["tasks"].values()
    assert held_out["taskInfo"]["name"] == "held-out-model-served"
    inner_body = spec["components"][held_out["componentRef"]["name"]]["dag"]["tasks"]
    assert list(inner_body) == ["register-model"]

    def source(binding, *enclosing):
        """Where a task input comes from, followed out through the enclosing condition tasks."""
        for task in enclosing:  # Innermost first.
            name = binding.get("componentInputParameter") or binding.get("componentInputArtifact")
            if name is None:
                break
            kind = "parameters" if "componentInputParameter" in binding else "artifacts"
            binding = task["inputs"][kind][name]
        return binding

    def condition_source(task, *enclosing):
        m = re.fullmatch(
            r"inputs\.parameter_values\['([^']+)'\] == (true|false)",
            task["triggerPolicy"]["condition"],
        )
        assert m and m.group(2) == "true", task["triggerPolicy"]["condition"]
        return source(task["inputs"]["parameters"][m.group(1)], *enclosing)

    assert condition_source(outer) == {"componentInputParameter": "register"}
    assert condition_source(inner, outer) == {
        "taskOutputParameter": {"outputParameterKey": "blessed", "producerTask": "compare-models"}
    }
    reg_task = inner_body["register-model"]
    wiring = {
        ("artifacts", "exported_model"): ("taskOutputArtifact", "export-model", "exported_model"),
        ("artifacts", "decision"): ("taskOutputArtifact", "compare-models", "decision"),
        ("parameters", "parent_model"): (
            "taskOutputParameter",
            "compare-models",
            "champion_model",
        ),
        # The model line the gate looked its champion up in (model_line.py): one per dataset.
        ("parameters", "display_name"): ("taskOutputParameter", "compare-models", "model_line"),
    }
    for (kind, name), (how, producer, key) in wiring.items():
        got = source(reg_task["inputs"][kind][name], held_out, inner, outer)
        key_name = "outputArtifactKey" if how == "taskOutputArtifact" else "outputParameterKey"
        assert got == {how: {key_name: key, "producerTask": producer}}, name
    # The version's labels: the run's data fingerprint and training parameters.
    for name in ("data_fingerprint", "preset", "architecture", "epochs", "seed"):
        got = source(reg_task["inputs"]["parameters"][name], held_out, inner, outer)
        assert got == {"componentInputParameter": name}, name
    # In the pipeline's own project and region.
    reg = reg_task["inputs"]
    assert reg["parameters"]["project"]["runtimeValue"]["constant"] == (
        "{{$.pipeline_google_cloud_project_id}}"
    )
    assert reg["parameters"]["location"]["runtimeValue"]["constant"] == (
        "{{$.pipeline_google_cloud_location}}"
    )
    assert "location" not in params and "project" not in params

    # Batch recommendations the same way: only when asked, only from a blessed model.
    rec_outer = conditional["condition-4"]
    assert rec_outer["taskInfo"]["name"] == "recommend-requested"
    assert condition_source(rec_outer) == {"componentInputParameter": "batch_recommend"}
    assert params["batch_recommend"]["defaultValue"] is False
    (rec_inner,) = spec["components"][rec_outer["componentRef"]["name"]]["dag"]["tasks"].values()
    assert rec_inner["taskInfo"]["name"] == "recommend-blessed"
    assert condition_source(rec_inner, rec_outer) == {
        "taskOutputParameter": {"outputParameterKey": "blessed", "producerTask": "compare-models"}
    }
    (rec_held_out,) = spec["components"][rec_inner["componentRef"]["name"]]["dag"]["tasks"].values()
    assert rec_held_out["taskInfo"]["name"] == "held-out-model-recommends"
    rec_body = spec["components"][rec_held_out["componentRef"]["name"]]["dag"]["tasks"]
    assert list(rec_body) == ["recommend"]
    for name, producer, key in (
        ("exported_model", "export-model", "exported_model"),
        ("examples", "prepare-data", "examples"),
    ):
        got = source(
            rec_body["recommend"]["inputs"]["artifacts"][name], rec_held_out, rec_inner, rec_outer
        )
        assert got == {
            "taskOutputArtifact": {"outputArtifactKey": key, "producerTask": producer}
        }, name


# How the raw table is read (its columns, id type, which rows are positives): pipeline
# parameters passed to validation, data prep and the refit's data prep alike.
READER = (
    "user_col",
    "item_col",
    "time_col",
    "rating_col",
    "event_col",
    "id_type",
    "min_rating",
    "positive_events",
)


def _all_tasks(spec):
    """Every task of the compiled pipeline, inside conditions too: name -> task."""
    dags = [spec["root"]["dag"]]
    dags += [c["dag"] for c in spec["components"].values() if "dag" in c]
    return {name: task for dag in dags for name, task in dag["tasks"].items()}


def test_the_reader_parameters_reach_validation_data_prep_and_the_refit(compiled):
    spec = compiled["cpu"]
    declared = spec["root"]["inputDefinitions"]["parameters"]
    reading = {
        name: task
        for name, task in _all_tasks(spec).items()
        if task["componentRef"]["name"].startswith(("comp-validate-data", "comp-prepare-data"))
    }
    assert sorted(reading) == ["prepare-data", "prepare-data-2", "validate-data"]
    for param in READER:
        assert declared[param]["isOptional"], param  # Not set: detect, every row positive.
        for name, task in reading.items():
            binding = task["inputs"]["parameters"][param]["componentInputParameter"]
            # Inside a condition KFP names the pipeline's parameter pipelinechannel--NAME.
            assert binding in (param, f"pipelinechannel--{param}"), (name, param)


def test_every_parameter_a_message_names_is_a_pipeline_parameter(compiled):
    """A step's message says ``--param NAME=VALUE`` (training_core.common.hints): each NAME is
    a parameter of the compiled pipeline, and each flag one that a command line takes."""
    from training_core.common import hints

    declared = compiled["cpu"]["root"]["inputDefinitions"]["parameters"]
    for flag, assignment in hints.PIPELINE_PARAMETERS.items():
        name, _, value = assignment.partition("=")
        assert name in declared and value, flag
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    flags = {
        flag
        for command in ("prepare-data", "validate", "train")
        for action in commands[command]._actions
        for flag in action.option_strings
    }
    assert set(hints.PIPELINE_PARAMETERS) <= flags


def test_image_override_reaches_every_component_and_custom_job(tmp_path):
    out = tmp_path / "p.yaml"
    image = "europe-docker.pkg.dev/acme/ml/ncf:7"
    pipeline.compile_pipeline(profiles.BUILTIN["gpu-a100x8"], str(out), image=image)
    spec = yaml_io.load(out.read_text())
    executors = spec["deploymentSpec"]["executors"].values()
    images = {ex["container"]["image"] for ex in executors if "container" in ex}
    assert images == {image}
    pools = spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"][
        "worker_pool_specs"
    ]["runtimeValue"]["constant"]
    assert pools[0]["container_spec"]["image_uri"] == image


@pytest.mark.slow
def test_image_repository_gives_each_family_its_tag(tmp_path):
    repo = "europe-docker.pkg.dev/acme/ml/ncf"
    for name, family in (("cpu", "cpu"), ("gpu-t4", "gpu"), ("tpu-v5e-8", "tpu")):
        out = tmp_path / f"{name}.yaml"
        pipeline.compile_pipeline(profiles.BUILTIN[name], str(out), image_repository=repo)
        spec = yaml_io.load(out.read_text())
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


@pytest.mark.slow
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
    spec = yaml_io.load(out.read_text())
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
    assert cli.main(["compile", "--profile", "tpu-v5e-8", "--output", str(out)]) == 0


def test_compiled_file_is_readable_like_any_new_file(tmp_path):
    out = tmp_path / "p.yaml"
    old = os.umask(0o022)
    try:
        pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(out))
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["p.yaml"]  # No scratch left beside it.


def _machine_paths(*extra: str) -> set[str]:
    """Absolute paths of this machine a compiled spec must not carry (each with realpath)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = {
        repo,
        os.getcwd(),
        os.path.expanduser("~"),
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(sys.executable),
        tempfile.gettempdir(),
        os.environ.get("TMPDIR", "/tmp"),
        site.getusersitepackages(),
        *site.getsitepackages(),
        *(p for p in sys.path if "site-packages" in p),
        *extra,
    }
    paths |= {os.path.realpath(p) for p in paths}
    paths = {p.rstrip("/") for p in paths if p}
    assert all(p.startswith("/") and len(p) > 1 for p in paths), paths  # Never "/" itself.
    return paths


def _leaks(text: str, paths: set[str]) -> list[str]:
    found = [p for p in sorted(paths) if re.search(re.escape(p) + r"(/|\b|$)", text)]
    if re.search(r"(/root/|/home/|/work/|/Users/|site-packages|/tmp/)", text):
        found.append("a home, checkout, temp or site-packages path")
    return found


@pytest.mark.parametrize("name", sorted(profiles.BUILTIN))
def test_no_credentials_or_local_paths_in_compiled_spec(compiled_text, tmp_path_factory, name):
    text = compiled_text[name]  # The YAML as written, not re-dumped.
    for secret in ("Bearer", "private_key", "access_token"):
        assert secret not in text
    # Any absolute path of the compiling machine: checkout, venv, interpreter, home, temp folders
    # (this test's too), site-packages.
    paths = _machine_paths(str(tmp_path_factory.getbasetemp()))
    assert _leaks(text, paths) == []


@pytest.mark.parametrize(
    "planted",
    [
        lambda: os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + "/data/x.csv",
        lambda: sys.prefix + "/share/x.csv",
        lambda: site.getsitepackages()[0] + "/x.csv",
        lambda: os.path.expanduser("~") + "/x.csv",
    ],
    ids=["repo", "venv", "site-packages", "home"],
)
def test_the_path_check_sees_a_planted_path(tmp_path, planted):
    """The check above is not vacuous: a machine path in a compiled default is reported."""
    out = tmp_path / "p.yaml"
    path = planted()
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(out), defaults={"data_uri": path})
    text = out.read_text()
    assert path in text
    found = _leaks(text, _machine_paths(str(tmp_path)))
    assert any(path.startswith(p + "/") for p in found), found  # Named by the path list itself.


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


@pytest.mark.slow
def test_a_deploying_profile_deploys_the_registered_version_on_its_serve_machine(tmp_path):
    """``deploy: true`` (a profile switch, off in every built-in profile): deploy-model follows
    register-model inside the blessed branch, on the profile's ``serve`` machine, and the upload
    leaves the default alias to it; without the switch there is no deploy task and the upload
    is the default at once."""
    from pipelines import profiles

    path = tmp_path / "profiles.yaml"
    path.write_text(
        "serving:\n"
        "  train: {machine_type: n1-standard-8, cpu_limit: 8, memory_limit: 30G}\n"
        "  deploy: true\n"
        "  serve: {machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_T4, "
        "accelerator_count: 1, replica_count: 2}\n"
    )
    profile = profiles.get_profile("serving", str(path))
    out = tmp_path / "p.yaml"
    pipeline.compile_pipeline(profile, str(out))
    spec = yaml_io.load(out.read_text())

    def branch_tasks(spec):
        found = {}
        for comp in spec["components"].values():
            found.update(comp.get("dag", {}).get("tasks", {}))
        return found

    tasks = branch_tasks(spec)
    dep, reg = tasks["deploy-model"], tasks["register-model"]
    assert dep["dependentTasks"] == ["register-model"]
    assert dep["inputs"]["artifacts"]["vertex_model"]["taskOutputArtifact"] == {
        "outputArtifactKey": "vertex_model",
        "producerTask": "register-model",
    }
    constants = {
        k: v["runtimeValue"]["constant"]
        for k, v in dep["inputs"]["parameters"].items()
        if "runtimeValue" in v
    }
    assert constants["machine_type"] == "n1-standard-8"
    assert constants["accelerator_type"] == "NVIDIA_TESLA_T4"
    assert (constants["accelerator_count"], constants["replica_count"]) == (1, 2)
    assert constants["project"] == "{{$.pipeline_google_cloud_project_id}}"
    assert dep["inputs"]["parameters"]["endpoint_display_name"] == {
        "componentInputParameter": "pipelinechannel--endpoint_display_name"
    }
    assert reg["inputs"]["parameters"]["make_default"]["runtimeValue"]["constant"] is False
    assert dep["retryPolicy"]["maxRetryCount"] >= 1
    # Both in the same branch: a refused challenger is neither registered nor deployed.
    assert any(
        set(c.get("dag", {}).get("tasks", {})) == {"register-model", "deploy-model"}
        for c in spec["components"].values()
    )

    plain = tmp_path / "cpu.yaml"
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(plain))
    cpu_tasks = branch_tasks(yaml_io.load(plain.read_text()))
    assert "deploy-model" not in cpu_tasks
    assert (
        cpu_tasks["register-model"]["inputs"]["parameters"]["make_default"]["runtimeValue"][
            "constant"
        ]
        is True
    )
    assert not any(p.deploy for p in profiles.BUILTIN.values())


def test_profile_deploy_and_serve_are_checked(tmp_path):
    from pipelines import profiles

    path = tmp_path / "profiles.yaml"
    path.write_text("bad:\n  train: {machine_type: n1-standard-8}\n  deploy: 'yes'\n")
    with pytest.raises(
        profiles.ProfileError, match=r"profile 'bad'\.deploy: expected true or false"
    ):
        profiles.get_profile("bad", str(path))
    path.write_text(
        "tpu:\n  train: {machine_type: n1-standard-8}\n  deploy: true\n"
        "  serve: {machine_type: ct5lp-hightpu-8t, accelerator_type: TPU_V5_LITEPOD, "
        "accelerator_count: 8}\n"
    )
    with pytest.raises(profiles.ProfileError, match="serve: the prebuilt TensorFlow serving"):
        profiles.preflight(profiles.get_profile("tpu", str(path)))
    path.write_text(
        "tune-tpu:\n  train: {machine_type: ct5lp-hightpu-8t, accelerator_type: TPU_V5_LITEPOD, "
        "accelerator_count: 8, tpu_topology: 2x4}\n  strategy: tpu\n  tune: true\n"
    )
    with pytest.raises(profiles.ProfileError, match="tune: each tuning trial trains on one CPU"):
        profiles.preflight(profiles.get_profile("tune-tpu", str(path)))
    assert not any(p.tune for p in profiles.BUILTIN.values())
