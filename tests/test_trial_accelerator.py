"""A tuning trial checks its accelerator as the training job does (issue 34, item 2).

The trial's command is taken from what a compiled GPU tuning pipeline says: the
``tuning-trial-spec`` task's compiled inputs, given to that component's own function, give the
worker pool Vertex AI starts; its command then runs here, a machine without the GPU, as Vertex
AI runs it (the trial's ``--NAME=VALUE`` s appended, ``AIP_MODEL_DIR`` set).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines import yaml_io
from training_core import tune

PROFILE = """gpu-tune:
  train: {machine_type: a3-highgpu-2g, accelerator_type: NVIDIA_H100_80GB, accelerator_count: 2}
  strategy: mirrored
  tune: true
"""


@pytest.fixture(scope="module")
def trial_pool(tmp_path_factory):
    """The trials' worker pool, built from the compiled pipeline's inputs for the spec task."""
    from kfp import dsl

    from components.tuning import tuning_trial_spec
    from pipelines import pipeline, profiles

    root = tmp_path_factory.mktemp("trial-compile")
    (root / "profiles.yaml").write_text(PROFILE)
    profile = profiles.get_profile("gpu-tune", str(root / "profiles.yaml"))
    pipeline.compile_pipeline(profile, str(root / "p.yaml"))
    spec = yaml_io.load((root / "p.yaml").read_text())
    task = spec["root"]["dag"]["tasks"]["tuning-trial-spec"]["inputs"]["parameters"]
    consts = {k: v["runtimeValue"]["constant"] for k, v in task.items() if "runtimeValue" in v}
    # As KFP's executor hands them to the function: cast to the declared types (the compiled
    # YAML holds every number as a double).
    types = tuning_trial_spec.python_func.__annotations__
    consts = {k: int(v) if types.get(k) is int else v for k, v in consts.items()}
    assert (consts["accelerator_type"], consts["accelerator_count"]) == ("NVIDIA_H100_80GB", 2)
    trials = dsl.Artifact(uri="gs://b/run/tuning-trial-spec/trials")
    trials.path = str(root / "trials")
    return tuning_trial_spec.python_func(
        examples=dsl.Dataset(uri="gs://b/run/prepare-data/examples"),
        trials=trials,
        preset="tiny",
        architecture="",
        epochs=1,
        **{k: v for k, v in consts.items() if k not in ("preset", "architecture", "epochs")},
    )[0]


def test_the_trial_pool_asks_for_the_gpus_its_command_expects(trial_pool):
    (pool,) = trial_pool
    machine, command = pool["machine_spec"], pool["container_spec"]["command"]
    assert (machine["accelerator_type"], machine["accelerator_count"]) == ("NVIDIA_H100_80GB", 2)
    i = command.index("--expect-accelerator")
    assert command[i : i + 4] == [
        "--expect-accelerator",
        "NVIDIA_H100_80GB",
        "--expect-accelerator-count",
        "2",
    ]
    # Vertex AI appends the trial's values after the command: the metric flags stay last.
    assert command[-2:] == ["--hypertune-metric", "hr_at_10"]


def test_a_cpu_trial_expects_no_accelerator():
    command = tune.trial_command("/gcs/b/examples", "tiny", "", 0, 0, "hr_at_10")
    assert "--expect-accelerator" not in command


@pytest.mark.slow
def test_the_trial_command_refuses_to_train_without_its_gpus(trial_pool, tiny_data, tmp_path):
    """On a machine without the GPUs the trial fails with the training job's message and
    writes no model (before the check, it trained on the CPU and reported that metric)."""
    command = trial_pool[0]["container_spec"]["command"]
    compiled_data = "/gcs/b/run/prepare-data/examples"
    command = [tiny_data if part == compiled_data else part for part in command]
    assert tiny_data in command
    values = {"learning_rate": 0.004, "num_factors": 4, "mlp_layers": "8,4",
              "l2_regularization": 1e-6, "batch_size": 128}  # fmt: skip
    model_dir = tmp_path / "tuning" / "3" / "model"
    metric_file = tmp_path / "output.metrics"
    env = {k: v for k, v in os.environ.items() if k != "NCF_ALLOW_MISSING_ACCELERATOR"}
    env.update(
        AIP_MODEL_DIR=f"{model_dir}/",
        CLOUD_ML_HP_METRIC_FILE=str(metric_file),
        CLOUD_ML_TRIAL_ID="3",
        CUDA_VISIBLE_DEVICES="",  # No GPU here even where the test machine has one.
    )
    assert command[:2] == ["ncf-pipelines", "train"]
    argv = [sys.executable, "-m", "pipelines.cli", *command[1:], *tune.train_flags(values)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0, done.stdout[-2000:]
    assert "compiled for 2 x NVIDIA_H100_80GB" in done.stderr, done.stderr[-3000:]
    assert "0 GPU(s) visible" in done.stderr
    assert "Refusing to train on the CPU" in done.stderr
    assert not metric_file.exists()
    assert not (model_dir / "model_config.json").exists() and not any(model_dir.glob("**/*.index"))
