"""Fault injection: kills at random moments and concurrent writers never lose or mix output.

Each case runs the real CLI in its own process group, kills it (SIGKILL or SIGTERM, the parent
only: its workers must die with it) at a moment drawn from a seeded generator over the length
of a clean run, then checks what a reader would see:

- the published dataset is the complete previous one or the complete new one, never a mix;
- after SIGTERM the folder is exactly as found (or complete): the run cleaned up after itself;
- no process of the run survives it;
- a rerun gives a folder byte-identical to a clean run's.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ChildProcesses, kill_group, tree_bytes

from training_core.common import folder_lock
from training_core.data import dataset_folder, synthetic
from training_core.data.metadata import METADATA_FILE, read_metadata

pytestmark = pytest.mark.slow

OPTIONS_A = ["--num-epochs", "3", "--num-shards", "6", "--eval-negatives", "100"]
OPTIONS_B = ["--num-epochs", "2", "--num-shards", "4", "--eval-negatives", "50", "--seed", "7"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> str:
    cfg = synthetic.SyntheticConfig(
        num_users=6000, num_items=2000, num_interactions=500_000, seed=3
    )
    folder = tmp_path_factory.mktemp("faults-src")
    return synthetic.write(synthetic.generate(cfg), str(folder / "ratings.parquet"), "parquet")


def _command(source: str, out, options: list[str], *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pipelines.cli",
        "prepare-data",
        "--input",
        source,
        "--output",
        str(out),
        "--min-ratings",
        "0",
        "--workers",
        "2",
        *options,
        *extra,
    ]


def _start(procs: ChildProcesses, cmd: list[str], log_path) -> subprocess.Popen:
    """The command in its own process group (so its pid is the group's id), output to log_path."""
    with open(log_path, "w") as log:  # The child has its own copy of the descriptor.
        proc = procs.popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = log_path  # type: ignore[attr-defined]
    return proc


def _wait_until_holding(proc: subprocess.Popen, out, deadline: float) -> None:
    """Returns once ``out``'s lock names ``proc``: it is then between its start and its publish."""
    lock = os.path.join(out, folder_lock.LOCK_FILE)
    while True:
        try:
            with open(lock) as f:
                holder = json.loads(f.read() or "null")
        except (OSError, ValueError):
            holder = None
        if holder and holder.get("pid") == proc.pid:
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{proc.args!r} never held {out} (exit {proc.poll()})")
        time.sleep(0.01)


def _start_while_held(procs, first: subprocess.Popen, out, cmd: list[str], log_path):
    """Starts ``cmd`` while ``first`` surely holds ``out``: no sleep decides who goes first.

    ``first`` is paused (SIGSTOP, its whole group) from the moment ``out``'s lock names it until
    the new run has said that it waits, then let go; however slow or fast this machine is, the
    runs overlap.
    """
    deadline = time.monotonic() + 120
    _wait_until_holding(first, out, deadline)
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        second = _start(procs, cmd, log_path)
        while second.poll() is None and time.monotonic() < deadline:
            with open(log_path) as f:
                if "waiting for it to finish" in f.read():
                    break
            time.sleep(0.02)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    return second


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    try:
        rc = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        proc.wait()
        pytest.fail(f"{proc.args!r} still ran after {timeout}s; killed")
    with open(proc.log_path) as f:  # type: ignore[attr-defined]
        return rc, f.read()


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, read from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            members.append(int(entry))
    return members


def _listing(out) -> dict[str, int]:
    return {
        os.path.relpath(os.path.join(d, f), out): os.path.getsize(os.path.join(d, f))
        for d, _, files in os.walk(out)
        for f in files
    }


def _assert_no_survivors(pgid: int, out) -> None:
    """No process of the run outlives its parent by more than a moment, or writes after it."""
    before = _listing(out)
    deadline = time.time() + 3.0
    while _group_members(pgid) and time.time() < deadline:
        time.sleep(0.02)
    survivors = _group_members(pgid)
    if survivors:
        os.killpg(pgid, signal.SIGKILL)
        pytest.fail(f"processes {survivors} of the killed run (group {pgid}) outlived it")
    time.sleep(0.3)
    assert _listing(out) == before, "files changed after the run's parent died"


def _published_view(out) -> dict[str, bytes] | None:
    """What a reader sees: metadata.json and every file it names, or None if nothing is there."""
    if not dataset_folder.is_published(str(out)):
        return None
    meta = read_metadata(out)
    names = [f.path for fs in meta.train_files.values() for f in fs]
    names += [f.path for f in meta.eval_files] + [meta.user_vocab, meta.item_vocab]
    view = {METADATA_FILE: (out / METADATA_FILE).read_bytes()}
    for name in names:
        path = out / name
        view[name] = path.read_bytes() if path.exists() else b"<missing>"
    return view


@pytest.fixture(scope="module")
def clean(source, tmp_path_factory):
    """Clean runs of options A and B (and how long A takes, start to end)."""
    root = tmp_path_factory.mktemp("faults-clean")
    runs = {}
    for name, options in (("A", OPTIONS_A), ("B", OPTIONS_B)):
        t0 = time.perf_counter()
        done = subprocess.run(
            _command(source, root / name, options), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        runs[name] = (root / name, time.perf_counter() - t0)
    return runs


def _kill_at(proc: subprocess.Popen, delay: float, sig: int) -> None:
    try:
        proc.wait(delay)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, sig)  # The parent only: its workers must follow by themselves.


def test_killed_overwrite_keeps_the_old_dataset_or_publishes_the_new(
    source, clean, tmp_path, procs
):
    ref_a, seconds = clean["A"]
    ref_b, _ = clean["B"]
    view_a, view_b = _published_view(ref_a), _published_view(ref_b)
    tree_a, tree_b = tree_bytes(str(ref_a)), tree_bytes(str(ref_b))
    rng = random.Random(12)
    outcomes = set()
    for i in range(8):
        out = tmp_path / f"run{i}"
        shutil.copytree(ref_b, out)  # A complete previous dataset, replaced with --overwrite.
        sig = signal.SIGKILL if i % 2 == 0 else signal.SIGTERM
        delay = rng.uniform(0.2, seconds)
        proc = _start(procs, _command(source, out, OPTIONS_A, "--overwrite"), tmp_path / f"log{i}")
        _kill_at(proc, delay, sig)
        rc, log = _finish(proc)
        _assert_no_survivors(proc.pid, out)
        view = _published_view(out)
        what = f"run {i}: {signal.Signals(sig).name} after {delay:.2f}s, exit {rc}\n{log[-2000:]}"
        assert view in (view_a, view_b), what
        outcomes.add("new" if view == view_a else "old")
        if sig == signal.SIGTERM and view == view_b:  # Failed, and cleaned up after itself.
            assert tree_bytes(str(out)) == tree_b, what
        rerun = subprocess.run(
            _command(source, out, OPTIONS_A, "--overwrite"),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert rerun.returncode == 0, rerun.stderr
        assert tree_bytes(str(out)) == tree_a, what
    assert "old" in outcomes  # Some kills landed mid-run (the schedule is seeded).


def test_killed_first_run_never_looks_complete_and_rerun_is_byte_identical(
    source, clean, tmp_path, procs
):
    ref_a, seconds = clean["A"]
    view_a, tree_a = _published_view(ref_a), tree_bytes(str(ref_a))
    rng = random.Random(5)
    killed = 0
    for i in range(6):
        out = tmp_path / f"run{i}"
        sig = signal.SIGTERM if i % 2 == 0 else signal.SIGKILL
        proc = _start(procs, _command(source, out, OPTIONS_A), tmp_path / f"log{i}")
        if i < 4:  # At a seeded moment of a clean run's length (which load may stretch).
            delay = rng.uniform(0.2, seconds * 0.8)
            _kill_at(proc, delay, sig)
        else:  # Surely mid-run, however fast or slow this machine is: once it holds the folder.
            _wait_until_holding(proc, out, time.monotonic() + 120)
            delay = float("nan")
            os.kill(proc.pid, sig)
        rc, log = _finish(proc)
        killed += rc != 0
        _assert_no_survivors(proc.pid, out)
        what = f"run {i}: {signal.Signals(sig).name} after {delay:.2f}s, exit {rc}\n{log[-2000:]}"
        assert _published_view(out) in (None, view_a), what
        if sig == signal.SIGTERM and _published_view(out) is None:  # Gone again, as found.
            assert not out.exists(), what
        rerun = subprocess.run(
            _command(source, out, OPTIONS_A), capture_output=True, text=True, timeout=300
        )
        assert rerun.returncode == 0, rerun.stderr
        assert tree_bytes(str(out)) == tree_a, what
    assert killed >= 2, "the runs killed while holding the folder did not fail"


def test_concurrent_writers_wait_and_never_mix(source, clean, tmp_path, procs):
    ref_a, _ = clean["A"]
    ref_b, _ = clean["B"]
    tree_a, tree_b = tree_bytes(str(ref_a)), tree_bytes(str(ref_b))

    # Identical runs: the second waits for the first, then reuses its dataset.
    out = tmp_path / "same"
    first = _start(procs, _command(source, out, OPTIONS_A), tmp_path / "same1")
    second = _start_while_held(
        procs, first, out, _command(source, out, OPTIONS_A), tmp_path / "same2"
    )
    results = [_finish(first), _finish(second)]
    assert [rc for rc, _ in results] == [0, 0], results
    assert sum("Reused" in log for _, log in results) == 1, results
    assert tree_bytes(str(out)) == tree_a

    # Different options, no --overwrite: the later one is refused and names the way out.
    out = tmp_path / "different"
    first = _start(procs, _command(source, out, OPTIONS_A), tmp_path / "diff1")
    second = _start_while_held(
        procs, first, out, _command(source, out, OPTIONS_B), tmp_path / "diff2"
    )
    (rc1, log1), (rc2, log2) = _finish(first), _finish(second)
    assert rc1 == 0, log1
    assert rc2 == 2 and "different prepared dataset" in log2 and "--overwrite" in log2, log2
    assert "waiting for it to finish" in log2
    assert tree_bytes(str(out)) == tree_a

    # Both with --overwrite: one after the other; the folder ends as one clean run, not a mix.
    out = tmp_path / "overwrite"
    first = _start(procs, _command(source, out, OPTIONS_A, "--overwrite"), tmp_path / "ow1")
    second = _start_while_held(
        procs, first, out, _command(source, out, OPTIONS_B, "--overwrite"), tmp_path / "ow2"
    )
    results = [_finish(first), _finish(second)]
    assert [rc for rc, _ in results] == [0, 0], results
    # The second waited for the first, then replaced its dataset: it published last.
    assert "waiting for it to finish" in results[1][1], results
    assert tree_bytes(str(out)) == tree_b


def test_a_damaged_dataset_is_prepared_again_not_reused(source, clean, tmp_path):
    ref_a, _ = clean["A"]
    out = tmp_path / "damaged"
    shutil.copytree(ref_a, out)
    meta = read_metadata(out)
    shard = out / meta.train_files["epoch_001"][2].path
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    (out / meta.item_vocab).unlink()
    done = subprocess.run(
        _command(source, out, OPTIONS_A), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "damaged" in done.stderr and meta.train_files["epoch_001"][2].path in done.stderr
    assert "Prepared" in done.stdout and "Reused" not in done.stdout
    assert tree_bytes(str(out)) == tree_bytes(str(ref_a))
