"""Publishing a folder where folders cannot be renamed: the Cloud Storage FUSE mount (issue 34).

On Vertex AI every artifact path is on a gcsfuse mount, where a directory rename fails with
ENOSYS (EMFILE past ``--rename-dir-limit`` on newer releases) and a file rename works. Each
publish here runs in a subprocess under verify's gcsfuse emulation (``vertex_emulator/
gcsfuse.py``: the LD_PRELOAD library, and the Python-level fallback used where there is no C
compiler), with the environment verify gives its task processes. ``atomic_writes.replace_folder``
must publish there (a first time, over an earlier folder, and again after an attempt killed
midway), never showing a part as complete, and keep the one-step swap on a local disk.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import subprocess

import pytest

from training_core.common import atomic_writes
from vertex_emulator import gcsfuse, shim

MARKER = "manifest.json"
OLD = {"a.txt": "old a", "only-old.txt": "gone after", "sub/deep/x.bin": "old x", MARKER: "old"}
NEW = {
    "a.txt": "new a",
    "b.txt": "new b",
    "sub/deep/x.bin": "new x",
    "variables/v.data": "weights",
    "variables/v.index": "index",
    MARKER: "new",
}
# One publish. With a count, the process dies (os._exit(9)) once that many os.replace calls
# are done, as a task killed midway.
PUBLISH = """
import os, sys
from training_core.common import atomic_writes
new, target, marker, kill_after = sys.argv[1:5]
if kill_after != "-":
    left, real = [int(kill_after)], os.replace
    def replace(*args, **kwargs):
        if left[0] == 0:
            os._exit(9)
        left[0] -= 1
        return real(*args, **kwargs)
    os.replace = replace
atomic_writes.replace_folder(new, target, marker=marker)
"""


@dataclasses.dataclass(frozen=True)
class Mount:
    """A bucket folder of the /gcs/ stand-in, and the environment verify gives a task there."""

    bucket: str
    env: dict[str, str]

    def run(self, code: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["python3", "-c", code, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def publish(self, new: str, target: str, kill_after: int | None = None):
        kill = "-" if kill_after is None else str(kill_after)
        return self.run(PUBLISH, new, target, MARKER, kill)


def _write(folder, files: dict[str, str]) -> str:
    for rel, text in files.items():
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return str(folder)


def _read(folder) -> dict[str, str]:
    found = {}
    for parent, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(parent, name)
            with open(path) as f:
                found[os.path.relpath(path, folder)] = f.read()
    return found


def _mount(tmp_path, mode: str) -> Mount:
    library = None
    if mode == gcsfuse.PRELOAD:
        library = gcsfuse.build(str(tmp_path / "lib"))
        if library is None:
            pytest.skip("no C compiler here: the LD_PRELOAD emulation cannot be built")
    gcs = tmp_path / "gcs"
    (gcs / "bucket").mkdir(parents=True)
    shim_dir = shim.write_shim(str(tmp_path / "shim"))
    env = shim.process_env(dict(os.environ), shim_dir, str(gcs), gcsfuse=(mode, library))
    return Mount(str(gcs / "bucket"), env)


@pytest.fixture(params=[gcsfuse.PRELOAD, gcsfuse.PYTHON])
def mount(request, tmp_path) -> Mount:
    """Either emulation: both refuse Python's folder renames."""
    return _mount(tmp_path, request.param)


@pytest.fixture
def preload_mount(tmp_path) -> Mount:
    """The LD_PRELOAD emulation: it also refuses ``renameat2(RENAME_EXCHANGE)`` (EINVAL), which
    the Python-level fallback cannot (``publish`` calls it through ctypes)."""
    return _mount(tmp_path, gcsfuse.PRELOAD)


def test_a_folder_rename_fails_there_as_it_did_for_export_and_recommend(mount):
    new = _write(os.path.join(mount.bucket, "out.partial-1"), NEW)
    done = mount.run("import os, sys; os.rename(*sys.argv[1:])", new, f"{mount.bucket}/out")
    assert done.returncode != 0 and "[Errno 38] Function not implemented" in done.stderr


def test_a_folder_publishes_there_first_and_over_an_earlier_one(mount):
    target = f"{mount.bucket}/out"
    first = mount.publish(_write(f"{mount.bucket}/out.partial-1", OLD), target)
    assert first.returncode == 0, first.stderr
    assert _read(target) == OLD
    done = mount.publish(_write(f"{mount.bucket}/out.partial-2", NEW), target)
    assert done.returncode == 0, done.stderr
    assert _read(target) == NEW  # The old-only file is gone, and nothing else is there.
    assert os.listdir(mount.bucket) == ["out"]  # No build folder, nothing left aside.


@pytest.mark.slow
def test_a_publish_killed_at_any_step_looks_incomplete_and_a_retry_completes(preload_mount):
    """Killed after each file rename in turn, the folder lacks its marker, and says why.

    The next attempt (a task retry: the same target, a new build) publishes the new folder
    exactly; ``atomic_writes.interrupted`` tells a retry that the leftovers are a publish's.
    """
    mount = preload_mount
    target = f"{mount.bucket}/out"
    for k in range(len(NEW)):  # The marker's is the last rename: each k stops before it.
        shutil.rmtree(target, ignore_errors=True)
        assert mount.publish(_write(f"{mount.bucket}/old-{k}", OLD), target).returncode == 0
        killed = mount.publish(_write(f"{mount.bucket}/out.partial-{k}", NEW), target, k)
        assert killed.returncode == 9, killed.stderr  # Killed midway, not finished.
        state = _read(target)
        assert MARKER not in state, f"killed after {k} file renames: {sorted(state)}"
        assert atomic_writes.interrupted(target)
        retry = mount.publish(_write(f"{mount.bucket}/retry-{k}", NEW), target)
        assert retry.returncode == 0, retry.stderr
        assert _read(target) == NEW and not atomic_writes.interrupted(target)


def test_past_the_rename_dir_limit_newer_gcsfuse_answers_emfile_and_files_move_in(
    tmp_path, monkeypatch
):
    """gcsfuse 2.x/3.x with ``--rename-dir-limit`` renames small folders, refuses bigger ones."""
    real = os.rename

    def rename(src, dst):
        if os.path.isdir(src) and len(os.listdir(src)) > 1:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), src)
        return real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(atomic_writes, "_exchange", lambda a, b: False)  # FUSE: no RENAME_EXCHANGE.
    target = str(tmp_path / "out")
    atomic_writes.replace_folder(_write(tmp_path / "old", OLD), target, marker=MARKER)
    atomic_writes.replace_folder(_write(tmp_path / "new", NEW), target, marker=MARKER)
    assert _read(target) == NEW
    assert os.listdir(tmp_path) == ["out"]


def test_a_local_disk_keeps_the_one_step_swap(tmp_path):
    target = tmp_path / "out"
    atomic_writes.replace_folder(_write(tmp_path / "old", OLD), str(target), marker=MARKER)
    new = _write(tmp_path / "new", NEW)
    inode = os.stat(new).st_ino
    atomic_writes.replace_folder(new, str(target), marker=MARKER)
    assert os.stat(target).st_ino == inode  # The folder itself was swapped in, not copied.
    assert _read(target) == NEW and os.listdir(tmp_path) == ["out"]


def test_a_folder_without_its_marker_is_refused_before_anything_moves(tmp_path):
    target = tmp_path / "out"
    atomic_writes.replace_folder(_write(tmp_path / "old", OLD), str(target), marker=MARKER)
    half = _write(tmp_path / "half", {"a.txt": "x"})
    with pytest.raises(FileNotFoundError, match="holds no manifest.json"):
        atomic_writes.move_in(half, str(target), MARKER)
    assert _read(target) == OLD and _read(half) == {"a.txt": "x"}
