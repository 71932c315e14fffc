"""verify's ``/gcs/`` stand-in behaves as Cloud Storage FUSE (issue 34), and the pipeline holds.

On Vertex AI a folder rename on the ``/gcs/`` mount fails with ENOSYS, so export and recommend,
which published their folders by renaming them, failed at every attempt while verify, on a plain
local folder, passed. The emulation (``vertex_emulator/gcsfuse.py``) is checked here from
TensorFlow's C++ file system and from Python's ``os``, in the environment verify gives its
processes; then a compiled template's export and recommend run on it, and run again (a task
retry) over the folders an attempt killed midway would leave.

That template is the cpu profile's, verified over the run's shared execution cache after
conftest's ``verified("cpu")`` (tests/test_verify.py's cpu verification, on the same stand-in,
emulation on): validate to export are served from its cache, so the first export checked here is
the one that verification published (read from the cache's copy of its task folder), while
recommend (off in that run, ``batch_recommend`` is on here) and both retries run here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

import vertex_emulator
from pipelines import pipeline, profiles
from training_core.common import atomic_writes
from training_core.serving.batch_recommend import MANIFEST_FILE
from training_core.serving.vertex_registry import SERVING_METADATA_FILE
from vertex_emulator import gcsfuse, shim

# What a process on the mount gets for each operation: "ok" or the errno's name.
PROBE = """
import ctypes, errno, json, os, sys
gcs, outside = sys.argv[1:3]
os.makedirs(f"{gcs}/b/dir/sub"); os.makedirs(f"{outside}/dir"); os.makedirs(f"{gcs}/b/other")
open(f"{gcs}/b/dir/file", "w").write("x")
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
    except Exception as e:  # TensorFlow's errors carry the C++ status, not an errno.
        out[name] = f"{type(e).__name__}: {e}"
attempt("os.rename folder", lambda: os.rename(f"{gcs}/b/dir", f"{gcs}/b/moved"))
attempt("os.replace folder", lambda: os.replace("/gcs/b/dir", "/gcs/b/moved"))
attempt("os.rename file", lambda: os.rename(f"{gcs}/b/dir/file", f"{gcs}/b/dir/renamed"))
attempt("os.link", lambda: os.link(f"{gcs}/b/dir/renamed", f"{gcs}/b/dir/linked"))
attempt("rename out of the mount", lambda: os.rename(f"{gcs}/b/dir/renamed", f"{outside}/f"))
attempt("folder rename elsewhere", lambda: os.rename(f"{outside}/dir", f"{outside}/moved"))
if sys.argv[3] == "tf":
    import tensorflow as tf
    attempt("tf.io.gfile.rename folder", lambda: tf.io.gfile.rename(f"{gcs}/b/dir", f"{gcs}/b/m"))
    attempt("tf.io.gfile.rename file", lambda: tf.io.gfile.rename(
        f"{gcs}/b/dir/renamed", f"{gcs}/b/dir/again"))
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.renameat2(-100, f"{gcs}/b/dir".encode(), -100, f"{gcs}/b/other".encode(), 2)
    out["renameat2 RENAME_EXCHANGE"] = "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()]
out["left"] = sorted(os.listdir(f"{gcs}/b/dir"))
print(json.dumps(out))
"""


def _probe(tmp_path, mode: str, library: str | None, with_tf: bool) -> dict[str, str]:
    gcs = tmp_path / "gcs"
    gcs.mkdir()
    shim_dir = shim.write_shim(str(tmp_path / "shim"))
    env = shim.process_env(dict(os.environ), shim_dir, str(gcs), gcsfuse=(mode, library))
    args = [str(gcs), str(tmp_path / "outside"), "tf" if with_tf else "-"]
    done = subprocess.run(
        ["python3", "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_the_preload_library_refuses_folder_renames_from_tensorflow_and_os(tmp_path):
    library = gcsfuse.build(str(tmp_path / "lib"))
    if library is None:
        pytest.skip("no C compiler here: the LD_PRELOAD emulation cannot be built")
    got = _probe(tmp_path, gcsfuse.PRELOAD, library, with_tf=True)
    assert got.pop("tf.io.gfile.rename folder").startswith("UnimplementedError")
    assert got == {
        "os.rename folder": "ENOSYS",
        "os.replace folder": "ENOSYS",  # Through the shim's /gcs/ mapping, then libc.
        "os.rename file": "ok",  # gcsfuse copies the object, then deletes the old one.
        "os.link": "ENOSYS",
        "rename out of the mount": "EXDEV",
        "folder rename elsewhere": "ok",
        "tf.io.gfile.rename file": "ok",
        "renameat2 RENAME_EXCHANGE": "EINVAL",
        "left": ["again", "sub"],
    }


def test_without_a_compiler_the_shim_refuses_the_same_in_python(tmp_path):
    got = _probe(tmp_path, gcsfuse.PYTHON, None, with_tf=False)
    assert got == {
        "os.rename folder": "ENOSYS",
        "os.replace folder": "ENOSYS",
        "os.rename file": "ok",
        "os.link": "ENOSYS",
        "rename out of the mount": "EXDEV",
        "folder rename elsewhere": "ok",
        "left": ["renamed", "sub"],
    }


@pytest.mark.slow  # About 5-10 s with the suite beside it.
def test_verify_turns_the_emulation_on_by_default_and_off_on_request(tmp_path):
    base = {"LD_PRELOAD": "/other.so", gcsfuse.MODE_ENV: "python"}
    env = shim.process_env(base, "shim", "gcs", gcsfuse=(gcsfuse.PRELOAD, "/lib.so"))
    assert env["LD_PRELOAD"] == "/lib.so /other.so" and env[gcsfuse.MODE_ENV] == "preload"
    off = shim.process_env(base, "shim", "gcs")
    assert gcsfuse.MODE_ENV not in off and off["LD_PRELOAD"] == "/other.so"
    template = str(tmp_path / "cpu.yaml")
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], template)
    assert vertex_emulator.Verification(template, work_dir=str(tmp_path / "a")).gcsfuse
    assert not vertex_emulator.Verification(
        template, work_dir=str(tmp_path / "b"), gcsfuse=False
    ).gcsfuse


def _interrupt(folder: str, marker: str) -> None:
    """Leaves ``folder`` as an attempt killed while moving files in would: no marker."""
    os.remove(os.path.join(folder, marker))
    with open(os.path.join(folder, atomic_writes.PUBLISHING_FILE), "w") as f:
        f.write("{}\n")
    with open(os.path.join(folder, "left-by-the-killed-attempt.tmp"), "w") as f:
        f.write("x")


@pytest.mark.slow
def test_export_and_recommend_publish_on_the_gcsfuse_stand_in_and_retry_over_a_killed_attempt(
    tmp_path, verified, verify_cache
):
    verified("cpu")  # First: its tasks run there, and serve this run's from the cache.
    template = str(tmp_path / "cpu.yaml")
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], template)
    with vertex_emulator.Verification(
        template,
        work_dir=str(tmp_path / "work"),
        cache_dir=verify_cache,
        parameter_values={"batch_recommend": True},
    ) as verification:
        report = verification.run()
        assert report.ok, vertex_emulator.format_report(report)
        if gcsfuse.build(verification.shim_dir):  # The same library the run used.
            assert any("LD_PRELOAD library" in note for note in report.notes), report.notes
        outputs = {
            "export-model": ("exported_model", SERVING_METADATA_FILE),
            "recommend": ("recommendations", MANIFEST_FILE),
        }
        published = {}
        for task, (name, marker) in outputs.items():
            assert report.task(task).status == vertex_emulator.SUCCEEDED
            folder = verification.local_path(report.task(task).artifacts[name]["uri"])
            names = sorted(os.listdir(folder))
            assert marker in names and atomic_writes.PUBLISHING_FILE not in names, names
            # Nothing built aside is left beside the artifact (its task folder holds the
            # artifact and executor_output.json only).
            assert len(os.listdir(os.path.dirname(folder))) == 2, os.listdir(
                os.path.dirname(folder)
            )
            published[task] = (folder, names)
        for task, (name, marker) in outputs.items():
            # A retry writes this run's own output folder, where its killed first attempt left
            # it; a task served from the cache had none here: put its published copy there.
            folder, names = published[task]
            attempt = verification.local_path(f"{verification.ctx.task_root(task)}/{name}")
            if attempt != folder:
                shutil.copytree(folder, attempt)
            _interrupt(attempt, marker)
            record = verification.run_task(task)
            assert record.status == vertex_emulator.SUCCEEDED, record.reason
            assert verification.local_path(record.artifacts[name]["uri"]) == attempt
            assert sorted(os.listdir(attempt)) == names
