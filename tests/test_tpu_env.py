"""The training path under the tpu image's TensorFlow (images/tpu), and checkpoints across.

The tpu image carries TensorFlow's TPU build 2.19 (its own lock, images/tpu/uv.lock), the rest
of the project TensorFlow 2.16. ``make test-tpu-env`` builds that set into ``.venv-tpu`` (and the
same release's CPU build into ``.venv-tpu-xla``, for XLA on the CPU, which the TPU build lacks)
and runs these tests with ``NCF_TPU_PYTHON`` and ``NCF_XLA_PYTHON`` naming their interpreters.
The training runs in those environments (tests/tpu_env_worker.py, tests/xla_step.py); this
process, in the project's environment, prepares the data and reads what they wrote with
``evaluate`` and ``export``, as the pipeline's cpu steps do after a TPU step.

Marked ``tpu_env``: ``make test`` leaves them out, ``make test-tpu-env`` (CI) runs them; without
the environments they fail, naming the target that builds them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import tomllib

import pytest
from conftest import ROOT, communicate, latest_checkpoint_step

pytestmark = [pytest.mark.tpu_env, pytest.mark.slow]

WORKER = os.path.join(ROOT, "tests", "tpu_env_worker.py")
XLA_STEP = os.path.join(ROOT, "tests", "xla_step.py")
TPU_PYPROJECT = os.path.join(ROOT, "images", "tpu", "pyproject.toml")


def _locked_tpu_version() -> str:
    with open(TPU_PYPROJECT, "rb") as f:
        groups = tomllib.load(f)["dependency-groups"]
    (spec,) = [s for s in groups["tpu"] if s.startswith("tensorflow-tpu==")]
    return spec.split("==", 1)[1].split(";")[0].strip()


def _python(variable: str) -> str:
    path = os.environ.get(variable, "")
    if not (path and os.access(path, os.X_OK)):
        pytest.fail(f"{variable} names no interpreter ({path!r}): run `make test-tpu-env`")
    return path


@pytest.fixture(scope="module")
def tpu_python() -> str:
    return _python("NCF_TPU_PYTHON")


def _env(image: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NCF_LIBTPU_OFF")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if image:
        # As the tpu image sets them (Dockerfile): the PJRT plugin, which tpu_runtime must turn
        # off on this host without a TPU before TensorFlow loads it.
        env["NEXT_PLUGGABLE_DEVICE_USE_C_API"] = "true"
        env["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"] = "/lib/libtpu.so"
    return env


def _start(python: str, mode: str, spec: dict, tmp_path, name: str) -> subprocess.Popen:
    path = tmp_path / f"{name}.spec.json"
    spec = {**spec, "out": str(tmp_path / f"{name}.out.json")}
    path.write_text(json.dumps(spec))
    return subprocess.Popen(
        [python, WORKER, mode, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
        start_new_session=True,
    )


def _run(python, mode, spec, tmp_path, name, timeout=600) -> dict:
    proc = _start(python, mode, spec, tmp_path, name)
    out = communicate(proc, timeout)
    assert proc.returncode == 0, out[-4000:]
    result = json.loads((tmp_path / f"{name}.out.json").read_text())
    # It ran in the tpu image's TensorFlow, with libtpu kept off (no TPU here).
    assert result["tensorflow"] == _locked_tpu_version() and result["libtpu_off"] == "1", result
    return result


def test_the_train_step_in_tpu_tensorflow_is_evaluated_and_exported_here(
    tpu_python, tiny_data, tmp_path
):
    """train_model (the image's step) in TF 2.19; its checkpoint read by evaluate_model and
    export here in TF 2.16: the same test HR@10, and a SavedModel that recommends."""
    import tensorflow as tf
    from kfp import dsl

    from components.evaluate_model import evaluate_model
    from training_core.serving import export

    model_dir = str(tmp_path / "model")
    params = {"preset": "tiny", "epochs": 2, "distribution_strategy": "default"}
    got = _run(tpu_python, "component", {"data": tiny_data, "model": model_dir, "params": params},
               tmp_path, "train")  # fmt: skip
    trained = got["metrics"]
    assert trained["epochs"] == 2 and 0 < trained["test_hr_at_10"] <= 1
    assert tf.__version__.startswith("2.16.")  # This process: the project's TensorFlow.

    ev = dsl.Metrics(uri=str(tmp_path / "eval"))
    evaluate_model.python_func(
        examples=dsl.Dataset(uri=tiny_data), model=dsl.Model(uri=model_dir), metrics=ev
    )
    assert ev.metadata["step"] == trained["global_step"]
    assert ev.metadata["hr_at_10"] == pytest.approx(trained["test_hr_at_10"], abs=1e-9)
    assert ev.metadata["ndcg_at_10"] == pytest.approx(trained["test_ndcg_at_10"], rel=1e-5)

    out = str(tmp_path / "saved")
    export.export(export.ExportConfig(model_dir, tiny_data, out, top_k=5))
    loaded = tf.saved_model.load(out)
    answer = loaded.signatures["recommend"](
        user_id=tf.constant([1], tf.int64), exclude_seen=tf.constant([False])
    )
    assert answer["item_ids"].shape == (1, 5)


def test_the_tpu_step_refuses_in_one_line_on_a_host_without_a_tpu(tpu_python, tiny_data, tmp_path):
    """What the image does on a machine without its TPU: one line naming the missing device,
    at once (libtpu kept off), never minutes waiting for a metadata server or a traceback."""
    params = {"preset": "tiny", "epochs": 1, "distribution_strategy": "tpu",
              "expect_accelerator": "TPU_V5_LITEPOD", "expect_accelerator_count": 8}  # fmt: skip
    proc = _start(tpu_python, "component",
                  {"data": tiny_data, "model": str(tmp_path / "m"), "params": params},
                  tmp_path, "refused")  # fmt: skip
    out = communicate(proc, 300)
    assert proc.returncode == 1, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out[-3000:]
    assert "compiled for 8 x TPU_V5_LITEPOD" in errors[0] and "no TPU device" in errors[0]
    assert "image variant:" in errors[0]
    assert "Traceback" not in out, out[-3000:]


def test_a_kill_mid_epoch_then_resume_in_tpu_tensorflow_matches_the_clean_run(
    tpu_python, tiny_data, tmp_path
):
    """SIGKILL after a mid-epoch checkpoint, resume: the same steps, losses and HR@10 as a run
    that was never stopped, all in the tpu image's TensorFlow."""
    from training_core.data.metadata import read_metadata

    options = {"preset": "tiny", "epochs": 2, "steps_per_loop": 1, "checkpoint_every_steps": 10}
    clean = _run(tpu_python, "train",
                 {"data": tiny_data, "model": str(tmp_path / "clean"), "options": options},
                 tmp_path, "clean")  # fmt: skip
    run_dir = str(tmp_path / "run")
    spec = {"data": tiny_data, "model": run_dir, "options": options}
    victim = _start(tpu_python, "train", spec, tmp_path, "run")
    spe = read_metadata(tiny_data).train_steps_per_epoch
    deadline = time.time() + 300
    while latest_checkpoint_step(run_dir) <= spe + 10 and victim.poll() is None:
        assert time.time() < deadline
        time.sleep(0.005)
    os.killpg(victim.pid, signal.SIGKILL)
    communicate(victim, 60)
    assert victim.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    killed_at = latest_checkpoint_step(run_dir)
    assert spe < killed_at < 2 * spe and killed_at % spe  # Mid-epoch.
    assert not (tmp_path / "run.out.json").exists()

    resumed = _run(tpu_python, "train", spec, tmp_path, "run")
    assert resumed["global_step"] == clean["global_step"] == 2 * spe
    for a, b in zip(clean["epochs"], resumed["epochs"], strict=True):
        assert a[0] == b[0] and a[2] == b[2]  # Step and HR@10.
        assert a[1] == pytest.approx(b[1], rel=1e-6) and a[3] == pytest.approx(b[3], rel=1e-6)
    assert clean["test"] == resumed["test"]


def test_a_warm_start_from_an_export_made_here_trains_in_tpu_tensorflow(
    tpu_python, tiny_data, tiny_export, tmp_path
):
    """The other way: a champion exported here (TF 2.16) starts the tpu step (TF 2.19)."""
    from training_core.training import warm_start

    model_dir = str(tmp_path / "warm")
    params = {"preset": "tiny", "epochs": 1, "distribution_strategy": "default",
              "warm_start_uri": tiny_export.export_dir}  # fmt: skip
    got = _run(tpu_python, "component", {"data": tiny_data, "model": model_dir, "params": params},
               tmp_path, "warm")  # fmt: skip
    record = warm_start.recorded(model_dir)
    assert record is not None and record["dense_copied"] > 0, record
    assert record["users"]["carried"] > 0 and record["items"]["carried"] > 0, record
    assert got["metrics"]["epochs"] == 1


def test_the_steps_compile_under_xla_in_bfloat16_in_the_tpu_release(tiny_data, tmp_path):
    """tests/xla_step.py in the tpu set's TensorFlow release (its CPU build: the TPU build has
    no XLA:CPU): static shapes, bfloat16, every trained variable moved by the compiled step."""
    python = _python("NCF_XLA_PYTHON")
    done = subprocess.run(
        [python, XLA_STEP, tiny_data, str(tmp_path / "model")],
        capture_output=True,
        text=True,
        env=_env(image=False),  # Not the image: TensorFlow's CPU build, no libtpu.
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["tensorflow"] == _locked_tpu_version()
    assert result["variables_moved"] == result["variables"] > 0
    assert result["train_shapes"]["user_id"][0] > 0 and result["eval"][2] > 0


def test_verify_runs_the_tpu_profile_s_training_in_the_tpu_image_s_environment(
    tpu_python, tmp_path
):
    """The tpu-v5e-8 template as Vertex AI runs it (verify): the train step's custom-job replica
    executes the compiled command in the tpu image's set (``--image-python tpu=...``), and the
    cpu image's steps after it (evaluate, export) read its model in the project's TensorFlow."""
    import vertex_emulator
    from pipelines import cli
    from vertex_emulator import run as verify_run

    template = str(tmp_path / "tpu.yaml")
    assert cli.main(["compile", "--profile", "tpu-v5e-8", "--output", template]) == 0
    report = vertex_emulator.verify(
        template,
        work_dir=str(tmp_path / "verify"),
        image_pythons={"tpu": tpu_python},
    )
    assert report.ok, vertex_emulator.format_report(report)
    train = report.task("train-model")
    (job,) = train.jobs
    assert job.state == "JOB_STATE_SUCCEEDED"
    model = train.artifacts["model"]["metadata"]
    assert model["framework_version"] == _locked_tpu_version()
    evaluated = report.task("evaluate-model").artifacts["metrics"]["metadata"]
    assert evaluated["step"] == model["global_step"] and 0 < evaluated["hr_at_10"] <= 1
    assert report.task("export-model").status == vertex_emulator.SUCCEEDED
    assert verify_run.images_note({"tpu": tpu_python}) in vertex_emulator.format_report(report)
