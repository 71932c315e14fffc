"""The machine's own faults, provoked for real: one paragraph each, nothing half-done, a rerun.

Each case runs the real CLI in a child process against a real fault: a small tmpfs that is too
small from the start (the early refusal) or filled while the run is paused (SIGSTOP to its process
group, a filler file, SIGCONT), a tmpfs remounted read-only, a folder of mode 0555 written by a
child that runs as root without the capabilities that let root ignore file modes (``setpriv``), a
tmpfs unmounted under the run, a worker killed with SIGKILL, a worker held to its current address
space (``RLIMIT_AS`` through ``prlimit``) so that its next allocation is a ``MemoryError``. Each
asserts the one-paragraph message (the path, the numbers, what to do, no traceback), that nothing
half-written looks complete, and that a rerun with room completes.

Mounting, ``prlimit`` on another process and dropping capabilities need root: without it, or
where ``mount`` fails (a container without CAP_SYS_ADMIN), those cases are skipped with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
from conftest import ROOT, communicate

from training_core.common import faults
from training_core.data import indexing, prep_plan, prepare, sampling
from training_core.data import io as rio
from training_core.data.config import PrepareConfig
from training_core.data.metadata import METADATA_FILE

# setpriv's arguments that run a command as root without the power to ignore file modes.
_CAPS = "-dac_override,-dac_read_search"
NO_FILE_ACCESS_OVERRIDE = ("setpriv", f"--inh-caps={_CAPS}", f"--bounding-set={_CAPS}")
# The embedded sample (98k ratings): big enough that writing takes a while, readable by nobody.
SAMPLE_OPTIONS = ["--min-ratings", "0", "--num-epochs", "2", "--eval-negatives", "50"]
TRAIN_OPTIONS = ["--preset", "tiny", "--epochs", "1"]


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: mounting a tmpfs and switching users are root's")


@contextlib.contextmanager
def tmpfs(size: str):
    """A fresh tmpfs of ``size`` (``mount -o size=``), unmounted at the end."""
    _need_root()
    folder = tempfile.mkdtemp(prefix="ncf-tmpfs-")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        os.rmdir(folder)
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", folder], capture_output=True)
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _remount(folder: str, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", folder], check=True)


def _cli(procs, *args: str, prefix: tuple[str, ...] = (), **kwargs) -> subprocess.Popen:
    return procs.popen(
        [*prefix, sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    """(exit status, stderr) of a CLI run."""
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        communicate(proc, 0.1)  # Kills the group and fails the test.
    return proc.returncode, err


def _paragraph(err: str, *needles: str) -> str:
    """The one error paragraph of ``err``; fails on a traceback or a missing part."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _published(out: str) -> bool:
    return os.path.isfile(os.path.join(out, METADATA_FILE))


def _nothing_complete(out: str) -> None:
    """No metadata.json and no build folder: a reader sees no dataset, not a partial one."""
    assert not _published(out)
    assert not glob.glob(os.path.join(out, "data-*")), os.listdir(out)


def _pause_when(proc: subprocess.Popen, ready, timeout: float = 120) -> None:
    """Stops the run's whole process group once ``ready()`` (polled every 2 ms)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the run never got there"
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGSTOP)


def _resume(proc: subprocess.Popen) -> None:
    # Repeated: a worker forked while the group was being stopped can miss the first SIGCONT.
    for _ in range(5):
        os.killpg(proc.pid, signal.SIGCONT)
        time.sleep(0.05)


def _fill(folder: str, leave: int = 0) -> str:
    """Fills the file system under ``folder`` up to ``leave`` free bytes; returns the filler."""
    filler = os.path.join(folder, "filler")
    st = os.statvfs(folder)
    with open(filler, "wb", buffering=0) as f:  # Unbuffered: a full disk fails the write.
        with contextlib.suppress(OSError):
            f.write(b"\0" * max(st.f_bavail * st.f_frsize - leave, 0))
            if not leave:
                while True:
                    f.write(b"\0" * 4096)
    return filler


def _workers(proc: subprocess.Popen) -> list[int]:
    try:
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        return []


def _prepare(procs, out: str, *extra: str, **kwargs) -> subprocess.Popen:
    return _cli(procs, "prepare-data", "--output", out, *SAMPLE_OPTIONS, *extra, **kwargs)


def _rerun_completes(procs, out: str) -> None:
    rc, err = _finish(_prepare(procs, out))
    assert rc == 0, err
    assert _published(out)


# --- the early estimate ---------------------------------------------------------------------


def test_the_estimate_is_within_a_few_percent_of_the_written_bytes(tmp_path, tiny_csv):
    config = PrepareConfig(
        input_path=tiny_csv,
        output_dir=str(tmp_path / "out"),
        min_ratings=0,
        num_epochs=2,
        eval_negatives=99,
        train_batch_size=256,
        workers=1,
    )
    result = prepare.prepare(config)
    meta = result.metadata
    p = prep_plan.make_plan(
        config, "csv", "x", meta.source["rows_kept"], meta.num_users, meta.num_items
    )
    # Each user holds out two interactions (test, validation); the rest repeat by recency.
    indexed = indexing.index_interactions(rio.read_interactions(tiny_csv), 0)
    trained = np.diff(indexed.offsets) - 2
    copies = sampling.recency_extra_rows(trained, config.recency_boost, config.recency_scale)
    rows, users, items = meta.source["rows_kept"], meta.num_users, meta.num_items
    estimate = prep_plan.estimate(p, config, rows, users, items, recency_rows=copies)
    written = sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(tmp_path / "out")
        for name in names
    )
    assert 0.95 * written <= estimate.bytes <= 1.1 * written, (estimate, written)


def test_prepare_refuses_early_when_the_disk_cannot_hold_the_estimate(procs, tmp_path):
    with tmpfs("256k") as disk:
        out = os.path.join(disk, "data")
        rc, err = _finish(_prepare(procs, out))
        assert rc == 1, err
        _paragraph(err, "not enough room", out, "needs about", "MB", "free of", "--output")
        assert "epoch(s) x" in err  # How the need was reckoned.
        assert not os.path.exists(out) or not os.listdir(out)
    _rerun_completes(procs, str(tmp_path / "data"))


def test_not_enough_memory_for_the_workers_is_refused_with_the_numbers():
    with pytest.raises(faults.MachineFault) as refused:
        faults.check_memory(8 * 10**9, "4 data prep workers", "Use --workers 1.", 10**9)
    message = str(refused.value)
    assert "8.0 GB" in message and "1.0 GB available" in message and "--workers" in message


@pytest.mark.slow
def test_train_refuses_early_when_a_checkpoint_cannot_fit(procs, tiny_data, tmp_path):
    with tmpfs("64k") as disk:
        run = os.path.join(disk, "run")
        rc, err = _finish(
            _cli(procs, "train", "--data", tiny_data, "--model-dir", run, *TRAIN_OPTIONS)
        )
        assert rc == 1, err
        _paragraph(err, "not enough room", run, "needs about", "checkpoint", "--model-dir")
        assert not glob.glob(os.path.join(run, "checkpoints", "checkpoint"))
    rc, err = _finish(
        _cli(
            procs,
            "train",
            "--data",
            tiny_data,
            "--model-dir",
            str(tmp_path / "run"),
            *TRAIN_OPTIONS,
        )
    )
    assert rc == 0, err


# --- a disk that fills while writing --------------------------------------------------------


@pytest.mark.slow
def test_a_disk_that_fills_during_prepare_data(procs):
    with tmpfs("24m") as disk:
        out = os.path.join(disk, "data")
        proc = _prepare(procs, out, "--workers", "2")
        _pause_when(proc, lambda: glob.glob(os.path.join(out, "data-*")))
        filler = _fill(disk)
        _resume(proc)
        rc, err = _finish(proc)
        assert rc == 1, err
        _paragraph(err, "the disk is full", out, "free of", "needs about", "--output")
        _nothing_complete(out)
        os.remove(filler)
        _rerun_completes(procs, out)


@pytest.mark.slow
def test_a_disk_that_fills_at_trains_first_checkpoint(procs, tiny_data):
    import tensorflow as tf

    with tmpfs("4m") as disk:
        run = os.path.join(disk, "run")
        proc = _cli(procs, "train", "--data", tiny_data, "--model-dir", run, *TRAIN_OPTIONS)
        # model_config.json is written just before the first epoch.
        _pause_when(proc, lambda: os.path.exists(os.path.join(run, "model_config.json")))
        filler = _fill(disk, leave=32 * 1024)  # Room for the history file, not the checkpoint.
        _resume(proc)
        rc, err = _finish(proc)
        assert rc == 1, err
        _paragraph(
            err, "the disk is full", "ckpt-", "free of", "last complete checkpoint", "--model-dir"
        )
        assert tf.train.latest_checkpoint(os.path.join(run, "checkpoints")) is None
        os.remove(filler)
        rc, err = _finish(
            _cli(procs, "train", "--data", tiny_data, "--model-dir", run, *TRAIN_OPTIONS)
        )
        assert rc == 0, err
        assert tf.train.latest_checkpoint(os.path.join(run, "checkpoints"))


# --- read-only, forbidden, vanished ---------------------------------------------------------


def test_prepare_data_into_a_read_only_folder(procs):
    with tmpfs("24m") as disk:
        _remount(disk, "ro")
        out = os.path.join(disk, "data")
        rc, err = _finish(_prepare(procs, out))
        assert rc == 1, err
        _paragraph(err, "read-only", out, "writable disk", "--output")
        _remount(disk, "rw")
        assert not os.path.exists(out)
        _rerun_completes(procs, out)


def test_verbose_adds_the_traceback_to_the_paragraph(procs):
    with tmpfs("1m") as disk:
        _remount(disk, "ro")
        rc, err = _finish(_cli(procs, "-v", "prepare-data", "--output", os.path.join(disk, "d")))
        assert rc == 1
        assert "Traceback" in err and "read-only" in err


def test_prepare_data_into_a_folder_this_user_may_not_write(procs, tmp_path):
    # Root ignores permissions; without the capabilities that let it (setpriv drops them), root
    # is held to the folder's mode like any user. A setuid child cannot run this interpreter,
    # which lives under root's private home.
    _need_root()
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to run the command without root's file access")
    parent = tmp_path / "readonly-mode"
    parent.mkdir()
    parent.chmod(0o555)
    out = str(parent / "data")
    rc, err = _finish(_prepare(procs, out, prefix=NO_FILE_ACCESS_OVERRIDE))
    assert rc == 1, err
    _paragraph(err, "permission denied", out, "may write to", "--output")
    assert not os.path.exists(out)
    _rerun_completes(procs, out)  # Root as usual may.


@pytest.mark.slow
def test_export_into_a_read_only_folder(procs, tiny_data, tiny_model):
    run = tiny_model.model_dir  # Read by export, never written.
    with tmpfs("16m") as disk:
        _remount(disk, "ro")
        model = os.path.join(disk, "model")
        export = ("export", "--model-dir", run, "--data", tiny_data, "--output", model)
        rc, err = _finish(_cli(procs, *export))
        assert rc == 1, err
        _paragraph(err, "read-only", disk, "the exported model", "--output")
        _remount(disk, "rw")
        assert not os.path.exists(model)
        rc, err = _finish(_cli(procs, *export))
        assert rc == 0, err
        assert os.path.isfile(os.path.join(model, "saved_model.pb"))


@pytest.mark.slow
def test_a_mount_that_vanishes_under_prepare_data(procs):
    with tmpfs("24m") as disk:
        out = os.path.join(disk, "data")
        proc = _prepare(procs, out, "--workers", "2")
        _pause_when(proc, lambda: glob.glob(os.path.join(out, "data-*")))
        subprocess.run(["umount", "-l", disk], check=True)  # The disk goes; the folder stays.
        _resume(proc)
        rc, err = _finish(proc)
        assert rc == 1, err
        _paragraph(err, "vanished", out, "Mount the disk again")
        assert not os.path.exists(out)  # The mount point is empty again: nothing looks done.
    with tmpfs("24m") as disk:
        _rerun_completes(procs, os.path.join(disk, "data"))


# --- memory ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_prep_worker_killed_by_sigkill(procs, tmp_path):
    out = str(tmp_path / "data")
    proc = _prepare(procs, out, "--workers", "2")
    _pause_when(proc, lambda: _workers(proc))
    os.kill(_workers(proc)[0], signal.SIGKILL)  # As the kernel's out-of-memory killer does.
    _resume(proc)
    rc, err = _finish(proc, timeout=120)  # A multiprocessing.Pool would wait here forever.
    assert rc == 1, err
    _paragraph(err, "killed by SIGKILL", "out-of-memory", out, "--workers", "--runner beam")
    _nothing_complete(out)
    _rerun_completes(procs, out)


@pytest.mark.slow
def test_a_prep_worker_out_of_memory(procs, tmp_path):
    _need_root()  # prlimit on another process.
    out = str(tmp_path / "data")
    # One shard and many negatives: a worker's rows outgrow what it inherited from the parent.
    proc = _prepare(procs, out, "--workers", "2", "--num-shards", "1", "--num-neg", "30")
    _pause_when(proc, lambda: len(_workers(proc)) >= 2)
    for pid in _workers(proc):
        with open(f"/proc/{pid}/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
        resource.prlimit(pid, resource.RLIMIT_AS, (size, size))  # No room to grow.
    _resume(proc)
    rc, err = _finish(proc)
    assert rc == 1, err
    _paragraph(err, "out of memory", out, "--workers", "--runner beam")
    _nothing_complete(out)
    _rerun_completes(procs, out)


# --- the rule itself ------------------------------------------------------------------------


def test_a_workers_error_keeps_its_errno_and_path_across_the_pool():
    with pytest.raises(OSError) as raised, faults.naming("/d/part-0.tfrecord"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    crossed = pickle.loads(pickle.dumps(raised.value))  # As the pool sends it to the parent.
    assert crossed.errno == errno.ENOSPC and crossed.filename == "/d/part-0.tfrecord"
    assert "/d/part-0.tfrecord" in faults.describe(crossed)


def test_a_components_fault_ends_with_the_paragraph_not_a_traceback(tmp_path):
    with pytest.raises(SystemExit) as ended, faults.reported():
        with faults.writing("the exported model", str(tmp_path / "m"), option="output folder"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / "m"))
    assert "read-only" in str(ended.value.code) and str(tmp_path / "m") in str(ended.value.code)
    with pytest.raises(ValueError), faults.reported():  # Not a machine fault: untouched.
        raise ValueError("bad input")


def test_tensorflow_errors_are_read_by_their_errno_text():
    import tensorflow as tf

    message = f"{{function_node SaveV2}} /m/ckpt-4_temp/part-0; {os.strerror(errno.ENOSPC)}"
    text = faults.describe(tf.errors.ResourceExhaustedError(None, None, message))
    assert text.startswith("the disk is full") and "/m/ckpt-4_temp/part-0" in text
    oom = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
    assert faults.describe(oom).startswith("out of memory")
    assert faults.describe(tf.errors.InvalidArgumentError(None, None, "bad shape")) is None


def test_a_cloud_path_is_never_measured_on_the_local_disk():
    assert faults.room("gs://bucket/run") is None
    faults.check_room("gs://bucket/run", 10**18, "checkpoints", "--model-dir")  # No refusal.
    with pytest.raises(FileNotFoundError) as raised, faults.writing("x", "gs://bucket/run"):
        raise FileNotFoundError(errno.ENOENT, "missing", "gs://bucket/run/a")
    assert faults.describe(raised.value) is None  # A missing object, not a vanished mount.
