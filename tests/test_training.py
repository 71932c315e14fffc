"""Training end to end on planted synthetic data, under every strategy that runs on a CPU host.

Strategy runs happen in fresh processes (tests/train_worker.py): logical CPU devices and
multi-worker collectives must be set up before TensorFlow initializes. Every process is started
through conftest's ``procs`` (or a ``ChildProcesses`` block), so none outlives its test.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import (
    ChildProcesses,
    checkpoint_values,
    communicate,
    kill_group,
    read_split,
)
from conftest import (
    latest_checkpoint_step as _latest_step,
)
from ncf_numpy import ranking_reference

from training_core.data.metadata import read_metadata
from training_core.training.model_dir import WORKER_SCRATCH_PREFIX, checkpoint_dir

# A port found free may be taken before a worker binds it: the runs here retry on ADDRESS_IN_USE.
from vertex_emulator.replicas import ADDRESS_IN_USE
from vertex_emulator.replicas import free_port as _free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "train_worker.py")
EPOCHS = 3
# Patience: a learning rate at which HR@10 on tiny_data stalls or dips before epoch 7, so a run
# with patience 1 stops early and leaves an earlier epoch's weights (test_train_core checks the
# curve; where it stalls differs between CPUs, so no epoch number is assumed).
PATIENT = ["--learning-rate", "0.1", "--epochs", "7", "--patience", "1"]


@pytest.fixture(scope="session")
def popularity_hr(tiny_data):
    """HR@10 of ranking the candidates of the split training measures (validation where there is
    one) by training popularity (what the model must beat)."""
    meta = read_metadata(tiny_data)
    train = read_split(tiny_data, meta, training=True)
    pos = (train["labels"] == 1) & (train["valid_point_mask"] == 1)
    counts = np.bincount(train["item_id"][pos], minlength=meta.num_items).astype(np.float64)
    ev = read_split(tiny_data, meta.split(meta.selection_split), training=False)
    hits, _, users = ranking_reference(
        counts[ev["item_id"]], ev["duplicate_mask"], 1 + meta.eval_negatives
    )
    return hits / users


def _run(procs: ChildProcesses, args, devices=1, env=None, log=None) -> subprocess.Popen:
    """tests/train_worker.py with these arguments, started through ``procs``.

    Output goes to a pipe, read when the process ends; a run that logs more than a pipe holds
    (64 KiB: a few hundred steps at --steps-per-loop 1) before anyone reads it would block on
    it, so give such runs a ``log`` file instead (``_wait`` reads it back).
    """
    full_env = dict(os.environ, NCF_TEST_CPU_DEVICES=str(devices))
    full_env.pop("TF_CONFIG", None)  # Only the multi-worker test's own.
    full_env.update(env or {})
    proc = procs.popen(
        [sys.executable, WORKER, *args],
        env=full_env,
        cwd=ROOT,
        stdout=open(log, "w") if log else subprocess.PIPE,  # noqa: SIM115 - the child's now.
        stderr=subprocess.STDOUT,
        text=True,
    )
    proc.log = log  # type: ignore[attr-defined]
    return proc


def _wait(proc, timeout=300):
    out = communicate(proc, timeout)
    if getattr(proc, "log", None):
        with open(proc.log) as f:
            out = f.read()
    assert proc.returncode == 0, out[-4000:]
    return out


def _train_args(data, model_dir, metrics, *extra):
    return [
        "train",
        "--data",
        data,
        "--model-dir",
        model_dir,
        "--preset",
        "tiny",
        "--epochs",
        str(EPOCHS),
        "--steps-per-loop",
        "50",
        "--metrics-out",
        metrics,
        *extra,
    ]


def _evaluate_in_process(data, model_dir):
    from training_core.evaluation.evaluate import evaluate

    return evaluate(data, model_dir)  # Default strategy: one device.


def _chosen(ev):
    """``evaluate``'s numbers on the split the epochs were measured on (validation if any)."""
    return ev.validation or ev


def _same_test(ev, result):
    """The test split's numbers training reported equal ``evaluate``'s on one device."""
    assert result["test"]["hr_at_10"] == pytest.approx(ev.hr_at_10, abs=1e-9)
    assert result["test"]["ndcg_at_10"] == pytest.approx(ev.ndcg_at_10, rel=1e-5)


@pytest.fixture(scope="session")
def trained(tiny_data, tmp_path_factory):
    """One run per single-host strategy, started together to overlap TensorFlow start-up."""
    root = tmp_path_factory.mktemp("runs")
    specs = {"default": 1, "one_device": 1, "mirrored": 2}
    out = {}
    with ChildProcesses() as procs:
        runs = {}
        for name, devices in specs.items():
            d = str(root / name)
            args = _train_args(tiny_data, d, f"{d}.json", "--strategy", name)
            runs[name] = (d, _run(procs, args, devices=devices))
        for name, (d, proc) in runs.items():
            _wait(proc)
            with open(f"{d}.json") as f:
                out[name] = (d, json.load(f))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name,replicas", [("default", 1), ("one_device", 1), ("mirrored", 2)])
def test_strategy_learns_beyond_popularity(trained, popularity_hr, name, replicas):
    _, result = trained[name]
    assert result["num_replicas"] == replicas
    assert result["global_step"] == EPOCHS * result["steps_per_epoch"]
    hr = [e["hr_at_10"] for e in result["epochs"]]
    assert len(hr) == EPOCHS
    for key in ("epoch", "loss", "hr_at_10", "ndcg_at_10", "examples_per_sec"):
        assert key in result["epochs"][0]
    assert result["epochs"][-1]["loss"] < result["epochs"][0]["loss"]
    assert hr[-1] > popularity_hr + 0.1, (hr, popularity_hr)


@pytest.mark.slow
def test_mirrored_checkpoint_restores_on_one_device(trained, tiny_data):
    model_dir, result = trained["mirrored"]
    ev = _evaluate_in_process(tiny_data, model_dir)
    last = result["last"]
    assert ev.step == result["global_step"]
    assert _chosen(ev).hr_at_10 == pytest.approx(last["hr_at_10"], abs=1e-9)
    assert _chosen(ev).ndcg_at_10 == pytest.approx(last["ndcg_at_10"], rel=1e-5)
    _same_test(ev, result)


def _wait_all(started, timeout=300):
    """Every worker's output, or None if one failed to bind its port (all are killed then).

    Workers wait for each other, so as soon as one fails the rest are killed, not waited for.
    """
    deadline = time.monotonic() + timeout
    outs = {}
    while len(outs) < len(started):
        for i, proc in enumerate(started):
            if i in outs:
                continue
            try:
                outs[i] = proc.communicate(timeout=0.5)[0]
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    pytest.fail(f"worker {i} still ran after {timeout}s")  # procs kills them.
                continue
            if proc.returncode != 0:
                for other in started:
                    kill_group(other)
                outs.update({j: p.communicate()[0] for j, p in enumerate(started) if j not in outs})
                if any(ADDRESS_IN_USE in out for out in outs.values()):
                    return None
                pytest.fail(f"worker {i} failed (exit {proc.returncode}):\n{outs[i][-4000:]}")
    return [outs[i] for i in range(len(started))]


def _run_cluster(procs, args_for, workers=2, attempts=3):
    """Runs ``workers`` train_worker.py processes as one TF_CONFIG cluster over loopback.

    TF_CONFIG must name every port before any worker starts, so the ports cannot come from the
    servers themselves (bind port 0, report it): they are found free beforehand and may be taken
    in between. A run whose worker could not bind is thrown away and started again on new ports;
    ``args_for(attempt, index)`` gives each attempt its own folders. Returns (attempt, outputs).
    """
    for attempt in range(attempts):
        cluster = [f"127.0.0.1:{_free_port()}" for _ in range(workers)]
        started = []
        for i in range(workers):
            tf_config = {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": i}}
            env = {"TF_CONFIG": json.dumps(tf_config)}
            started.append(_run(procs, args_for(attempt, i), env=env))
        outs = _wait_all(started)
        if outs is not None:
            return attempt, outs
    pytest.fail(f"no free ports for a {workers}-worker cluster in {attempts} attempts")


@pytest.mark.slow
def test_multi_worker_trains_and_restores_on_one_device(tiny_data, tmp_path, popularity_hr, procs):
    def args_for(attempt, i):
        model_dir, metrics = str(tmp_path / f"mw{attempt}"), str(tmp_path / f"m{attempt}-{i}.json")
        return _train_args(tiny_data, model_dir, metrics, "--strategy", "auto", "--epochs", "2")

    attempt, outs = _run_cluster(procs, args_for)
    model_dir = str(tmp_path / f"mw{attempt}")
    assert "multi_worker_mirrored (TF_CONFIG describes 2 workers)" in outs[0]
    results = [json.load(open(tmp_path / f"m{attempt}-{i}.json")) for i in range(2)]
    for key in ("step", "loss", "hr_at_10", "ndcg_at_10"):  # Workers agree exactly.
        assert results[0]["last"][key] == results[1]["last"][key]
    assert results[0]["num_replicas"] == 2
    assert results[0]["last"]["hr_at_10"] > popularity_hr + 0.05
    # Only the chief's checkpoints remain; scratch folders of the other worker are gone.
    assert not [n for n in os.listdir(model_dir) if n.startswith(WORKER_SCRATCH_PREFIX)]
    ev = _evaluate_in_process(tiny_data, model_dir)
    assert _chosen(ev).hr_at_10 == pytest.approx(results[0]["last"]["hr_at_10"], abs=1e-9)
    assert results[0]["test"] == results[1]["test"]  # Every worker scored it, together.
    _same_test(ev, results[0])


@pytest.mark.slow
def test_multi_worker_with_patience_keeps_the_chief_s_best_epoch(tiny_data, tmp_path, procs):
    """Every worker saves the best epoch's weights (the others into scratch they remove) and
    reads the chief's copy back at the end: the model is the best epoch's on both."""

    def args_for(attempt, i):
        model_dir, metrics = str(tmp_path / f"mw{attempt}"), str(tmp_path / f"m{attempt}-{i}.json")
        return _train_args(tiny_data, model_dir, metrics, "--strategy", "auto", *PATIENT)

    attempt, _ = _run_cluster(procs, args_for)
    model_dir = str(tmp_path / f"mw{attempt}")
    chief, other = (json.load(open(tmp_path / f"m{attempt}-{i}.json")) for i in range(2))
    curve = lambda r: [(e["epoch"], e["loss"], e["hr_at_10"]) for e in r["epochs"]]  # noqa: E731
    assert curve(chief) == curve(other) and chief["kept_epoch"] == other["kept_epoch"]
    kept = chief["kept_epoch"]
    assert kept is not None and kept < len(chief["epochs"]), chief["epochs"]  # Not the last.
    assert not [n for n in os.listdir(model_dir) if n.startswith(WORKER_SCRATCH_PREFIX)]
    ev = _evaluate_in_process(tiny_data, model_dir)
    assert _chosen(ev).hr_at_10 == pytest.approx(chief["epochs"][kept - 1]["hr_at_10"], abs=1e-9)
    assert _chosen(ev).hr_at_10 > chief["last"]["hr_at_10"]
    _same_test(ev, chief)


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(tiny_data, tmp_path, procs):
    extra = ["--strategy", "default", "--steps-per-loop", "1", "--checkpoint-every", "10"]
    ref_dir, run_dir = str(tmp_path / "ref"), str(tmp_path / "run")
    ref = _run(
        procs,
        _train_args(tiny_data, ref_dir, str(tmp_path / "ref.json"), *extra),
        log=str(tmp_path / "ref.log"),
    )
    victim = _run(procs, _train_args(tiny_data, run_dir, str(tmp_path / "run.json"), *extra))
    spe = read_metadata(tiny_data).train_steps_per_epoch  # Global batch = pre-batch here.
    deadline = time.time() + 240
    while _latest_step(run_dir) <= spe + 10 and victim.poll() is None:
        assert time.time() < deadline
        time.sleep(0.005)
    victim.send_signal(signal.SIGKILL)
    communicate(victim, 120)
    assert victim.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    killed_at = _latest_step(run_dir)
    assert spe < killed_at < EPOCHS * spe and killed_at % spe  # Mid-epoch.
    assert not os.path.exists(tmp_path / "run.json")

    resumed = _run(procs, _train_args(tiny_data, run_dir, str(tmp_path / "run.json"), *extra))
    resumed_out = _wait(resumed)
    assert f"at step {killed_at}" in resumed_out
    _wait(ref)
    a = json.load(open(tmp_path / "ref.json"))
    b = json.load(open(tmp_path / "run.json"))
    assert a["global_step"] == b["global_step"] == EPOCHS * spe
    assert len(a["epochs"]) == len(b["epochs"]) == EPOCHS
    for x, y in zip(a["epochs"], b["epochs"], strict=True):
        assert x["step"] == y["step"]
        assert x["hr_at_10"] == y["hr_at_10"]
        assert x["ndcg_at_10"] == pytest.approx(y["ndcg_at_10"], rel=1e-6)
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-6)
    assert a["test"] == b["test"]


@pytest.mark.slow
def test_a_second_train_into_a_busy_model_folder_is_refused_and_harms_nothing(
    tiny_data, tmp_path, procs
):
    model_dir = str(tmp_path / "model")
    extra = ["--strategy", "default", "--steps-per-loop", "1", "--checkpoint-every", "10"]
    long_run = [*extra, "--epochs", "1000"]  # Still running when the second one starts.
    first = _run(
        procs,
        _train_args(tiny_data, model_dir, str(tmp_path / "a.json"), *long_run),
        log=str(tmp_path / "a.log"),
    )
    deadline = time.time() + 240
    while _latest_step(model_dir) == 0 and first.poll() is None:  # The first one holds it now.
        assert time.time() < deadline
        time.sleep(0.01)
    second = _run(procs, _train_args(tiny_data, model_dir, str(tmp_path / "b.json"), *extra))
    out = communicate(second, 300)
    assert first.poll() is None, "the first run ended before the second one tried"
    assert second.returncode == 2, out[-3000:]
    assert f"is being written by train (pid {first.pid}" in out and "another folder" in out
    assert not os.path.exists(tmp_path / "b.json")
    step = _latest_step(model_dir)
    deadline = time.time() + 60  # A loaded machine may take a while for 10 more steps.
    while _latest_step(model_dir) == step and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert _latest_step(model_dir) > step  # The first run went on, undisturbed.
    # `procs` kills the first run (the whole process group) at teardown.


@pytest.mark.slow
@pytest.mark.parametrize("variant", [[], PATIENT], ids=["every-epoch", "patience"])
def test_kills_at_random_moments_then_resume_end_with_the_clean_run_s_model(
    tiny_data, tmp_path, procs, variant
):
    """Killed at random moments and resumed, a run ends with the clean run's model: with
    patience too, where the best epoch's weights are saved apart and put back at the end."""
    import random

    extra = ["--strategy", "default", "--steps-per-loop", "1", "--checkpoint-every", "7"]
    extra += variant
    ref_dir, run_dir = str(tmp_path / "ref"), str(tmp_path / "run")
    ref = _run(
        procs,
        _train_args(tiny_data, ref_dir, str(tmp_path / "ref.json"), *extra),
        log=str(tmp_path / "ref.log"),
    )
    spe = read_metadata(tiny_data).train_steps_per_epoch
    total = (7 if variant else EPOCHS) * spe
    if variant:  # Where patience stops is the clean run's to say: the kills land before it.
        _wait(ref)
        total = json.load(open(tmp_path / "ref.json"))["global_step"]
    rng = random.Random(4)
    kills = 0
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL):
        start = _latest_step(run_dir)
        victim = _run(procs, _train_args(tiny_data, run_dir, str(tmp_path / "run.json"), *extra))
        target = rng.randint(start + 1, start + (total - start) // 2)
        deadline = time.time() + 240
        while _latest_step(run_dir) < target and victim.poll() is None:
            assert time.time() < deadline
            time.sleep(0.002 * rng.random())
        victim.send_signal(sig)
        out = communicate(victim, 120)
        kills += victim.returncode == -sig
        # What a reader sees is always one whole checkpoint, never a half-written one.
        assert checkpoint_values(checkpoint_dir(run_dir)), out[-2000:]
    assert kills >= 2, "the runs ended before they could be killed"
    _wait(_run(procs, _train_args(tiny_data, run_dir, str(tmp_path / "run.json"), *extra)))
    _wait(ref)
    a, b = checkpoint_values(checkpoint_dir(ref_dir)), checkpoint_values(checkpoint_dir(run_dir))
    ra, rb = json.load(open(tmp_path / "ref.json")), json.load(open(tmp_path / "run.json"))
    assert a.keys() == b.keys() and _latest_step(run_dir) == _latest_step(ref_dir)
    assert _latest_step(ref_dir) == ra["global_step"] == rb["global_step"]
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert [e["hr_at_10"] for e in ra["epochs"]] == [e["hr_at_10"] for e in rb["epochs"]]
    assert ra["kept_epoch"] == rb["kept_epoch"]
    assert ra["test"] == rb["test"]  # Scored after the loop: a resumed run ends with it too.
    if variant:  # Stopped early; the model is the best epoch's, one before the last.
        hr = [e["hr_at_10"] for e in ra["epochs"]]
        assert ra["global_step"] == len(hr) * spe < 7 * spe
        assert ra["kept_epoch"] == int(np.argmax(hr)) + 1 == len(hr) - 1
    else:
        assert ra["global_step"] == total and ra["kept_epoch"] is None


def test_training_more_epochs_than_prepared_warns_naming_both(caplog):
    from training_core.training.trainer import reused_negatives_warning

    assert (
        reused_negatives_warning(3, 3, "d") is None and reused_negatives_warning(2, 5, "d") is None
    )
    with caplog.at_level("WARNING"):
        message = reused_negatives_warning(20, 1, "data/x")
    assert "training runs 20 epochs but data/x holds 1 prepared epoch(s)" in message
    assert "--num-epochs 20" in message and message in caplog.text
