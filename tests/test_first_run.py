"""The first real run's unknowns (issue 54, item 6), each checked at a step's start in one line.

(a) the tuning trial's metric file (``CLOUD_ML_HP_METRIC_FILE``, written by cloudml-hypertune) and
(b) writes to Cloud Storage FUSE (``/gcs/``) as the images' user, uid 1000. A folder that refuses
writes is made with ``chmod 0500``; where the tests run as root, whom permission bits do not
stop, the check runs in a forked child that has dropped to uid 1000 first (nothing is skipped).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import absl.logging  # noqa: F401 (imported before forking: the child cannot read every file)
import hypertune
import pytest
from kfp.dsl import Dataset
from kfp.dsl.types import artifact_types

from components import _image, prepare_data
from pipelines import cli
from training_core import tune
from training_core.common import console, first_run

UID = 1000  # The images' user (Dockerfile: USER 1000:1000).


@pytest.fixture
def shared():
    """A folder under /tmp that uid 1000 can reach (pytest's own tmp_path is root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix="ncf-first-run-", dir="/tmp"))
    path.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(path, UID, UID)
    yield path
    for folder, dirs, _ in os.walk(path):
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o755)
    shutil.rmtree(path)


def refusing(path: Path) -> Path:
    """``path`` made as a folder of uid 1000 (with the folders made for it) that refuses writes."""
    made = [path, *[p for p in path.parents if not p.exists()]]
    path.mkdir(parents=True)
    if os.geteuid() == 0:
        for p in made:
            os.chown(p, UID, UID)
    path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return path


def as_images_user(fn, *args) -> dict:
    """``fn(*args)`` as uid 1000 (a forked child that drops root first; as is when not root).

    Returns:
        ``{"ok": repr}`` or ``{"raised": type name, "message": str}``, and the child's uid.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        out = {}
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(UID)
                os.setuid(UID)
            out["uid"] = os.geteuid()
            try:
                out["ok"] = repr(fn(*args))
            except BaseException as e:  # noqa: BLE001 (reported to the parent)
                out.update(raised=type(e).__name__, message=str(e))
            os.write(write, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        text = f.read()
    os.waitpid(pid, 0)
    out = json.loads(text)
    assert out["uid"] != 0, "the check must run unprivileged"
    return out


def one_line_naming(message: str, *parts: str) -> None:
    assert "\n" not in message, message
    for part in (*parts, "--image-user root", "IMAGE_USER=root"):
        assert part in message, (part, message)


# --- (a) the tuning metric file ---------------------------------------------------------------


def test_a_missing_metric_folder_is_created_and_hypertune_writes_there(shared, monkeypatch):
    metric_file = shared / "not" / "yet" / "output.metrics"
    first_run.check_metric_file(str(metric_file))
    assert list(shared.iterdir()) == []  # The check leaves nothing behind.
    monkeypatch.setenv(first_run.METRIC_FILE_ENV, str(metric_file))
    report = tune.trial_reporter("hr_at_10", str(metric_file))
    report(type("Epoch", (), {"hr_at_10": 0.25, "step": 7})())
    (line,) = metric_file.read_text().splitlines()
    assert json.loads(line)["hr_at_10"] == "0.25"


@pytest.mark.parametrize("missing", [False, True], ids=["folder-refuses", "parent-refuses"])
def test_a_metric_folder_the_user_cannot_write_fails_in_one_line(shared, missing):
    folder = refusing(shared / "hypertune")
    metric_file = (folder / "trial" if missing else folder) / "output.metrics"
    out = as_images_user(first_run.check_metric_file, str(metric_file))
    assert out.get("raised") == "FirstRunError", out
    one_line_naming(out["message"], str(metric_file), "uid 1000", "Permission denied")
    assert list(folder.iterdir()) == []
    # The check is not spurious: cloudml-hypertune itself fails there (at its first report
    # when the folder exists: after an epoch of training).
    os.environ[first_run.METRIC_FILE_ENV] = str(metric_file)
    try:
        hyper = as_images_user(
            lambda: hypertune.HyperTune().report_hyperparameter_tuning_metric("hr_at_10", 0.1)
        )
    finally:
        del os.environ[first_run.METRIC_FILE_ENV]
    assert hyper.get("raised") == "PermissionError", hyper


def test_a_the_default_metric_file_is_named_when_unset():
    with pytest.raises(first_run.FirstRunError, match="no folder"):
        first_run.check_metric_file("output.metrics")
    # Unset: cloudml-hypertune's default, which the check names as such when it fails.
    assert first_run.DEFAULT_METRIC_FILE == hypertune.hypertune._DEFAULT_METRIC_PATH


def test_a_the_trial_fails_at_its_start_not_after_training(tmp_path, tiny_data, capsys):
    """``train --hypertune-metric`` (a trial's command) checks the file before the strategy and
    any training: a path whose folder cannot be made (a file in the way stops root too)."""
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    metric_file = in_the_way / "hypertune" / "output.metrics"
    model_dir = tmp_path / "model"
    env = {first_run.METRIC_FILE_ENV: str(metric_file)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        code = cli.main(["train", "--data", tiny_data, "--model-dir", str(model_dir),
                         "--epochs", "1", "--hypertune-metric", "hr_at_10"])  # fmt: skip
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    (line,) = [x for x in err if "error:" in x]
    one_line_naming(line, str(metric_file), "Not a directory")
    assert line.startswith("ncf-pipelines train: error: tuning metric file")
    assert not model_dir.exists() or not any(model_dir.iterdir())  # Nothing trained.


# --- (b) Cloud Storage FUSE as the images' user -----------------------------------------------


def test_b_a_gcs_folder_that_refuses_writes_fails_in_one_line(shared):
    mount = shared / "gcs"
    task = refusing(mount / "bucket" / "root" / "task")
    output = task / "examples"
    out = as_images_user(first_run.check_outputs, [str(output)], str(mount) + "/")
    assert out.get("raised") == "FirstRunError", out
    one_line_naming(out["message"], str(task), str(output), "uid 1000", "Permission denied")
    assert list(task.iterdir()) == []


def test_b_a_gcs_folder_that_accepts_writes_passes_and_keeps_nothing(shared):
    mount = shared / "gcs"
    task = mount / "bucket" / "root" / "task"
    task.mkdir(parents=True)
    if os.geteuid() == 0:
        for p in (mount, mount / "bucket", mount / "bucket" / "root", task):
            os.chown(p, UID, UID)
    output = task / "model" / "not-yet"  # Its nearest existing folder is probed.
    assert as_images_user(first_run.check_outputs, [str(output)], str(mount) + "/") == {
        "uid": UID if os.geteuid() == 0 else os.geteuid(),
        "ok": "None",
    }
    assert list(task.iterdir()) == []


def test_b_paths_off_the_mount_are_not_probed(tmp_path):
    folder = refusing(tmp_path / "local")
    first_run.check_outputs([str(folder / "out"), "gs://bucket/x", ""])  # No probe, no error.
    first_run.check_outputs([str(tmp_path / "gcs" / "x")])  # Not under /gcs/: nothing.


def component_args(raw: str, examples: Dataset) -> dict:
    return {"raw_data": Dataset(name="raw_data", uri=raw), "examples": examples}


def test_b_a_component_checks_its_outputs_first(shared, monkeypatch):
    """prepare_data, as KFP's executor calls it on Vertex AI: its output artifact on the mount
    (KFP's ``gs://`` to ``/gcs/`` mapping, pointed here) and its parent made by the executor.
    The check fails before the step reads its input (which does not exist here)."""
    mount = shared / "gcs"
    monkeypatch.setattr(artifact_types, "_GCS_LOCAL_MOUNT_PREFIX", f"{mount}/")
    monkeypatch.setattr(first_run, "GCS_MOUNT", f"{mount}/")
    task = refusing(mount / "bucket" / "root" / "prepare-data_1")
    examples = Dataset(name="examples", uri="gs://bucket/root/prepare-data_1/examples")
    assert examples.path == str(task / "examples")
    console.setup()  # What the component calls first, here before forking (its imports).
    args = component_args("gs://bucket/no-such-input", examples)
    out = as_images_user(lambda: prepare_data.prepare_data.python_func(**args))
    assert out.get("raised") == "SystemExit", out
    assert out["message"].startswith("error: Cloud Storage FUSE at ")
    one_line_naming(out["message"], str(task), "uid 1000", "Permission denied")
    # Writable: the check passes, leaves nothing, and the step goes on to its own work (and
    # fails on the missing input, not on the mount).
    task.chmod(0o755)
    with pytest.raises(Exception) as failed:
        prepare_data.prepare_data.python_func(**args)
    assert "Cloud Storage FUSE" not in str(failed.value)
    assert list(task.iterdir()) == []


def test_every_component_that_writes_checks_the_mount_first():
    """Each component body calls ``first_run.at_step_start`` with its outputs right after
    ``console.setup()``, before any other work."""
    import ast

    import components

    folder = Path(components.__file__).parent
    checked = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in [n for n in tree.body if isinstance(n, ast.FunctionDef)]:
            decorated = any("component" in ast.unparse(d) for d in fn.decorator_list)
            annotations = {a.arg: ast.unparse(a.annotation) for a in fn.args.args if a.annotation}
            outputs = [name for name, kind in annotations.items() if kind.startswith("Output[")]
            if not decorated or not outputs or path.stem == "tuning":
                continue
            calls = [ast.unparse(s) for s in fn.body if isinstance(s, ast.Expr)]
            setup = calls.index("console.setup()")
            assert calls[setup + 1].startswith("first_run.at_step_start("), (path.name, fn.name)
            for name in outputs:
                assert f"{name}.path" in calls[setup + 1], (path.name, fn.name, name)
            checked.append(fn.name)
    assert {"prepare_data", "train_model", "validate_data", "export_model"} <= set(checked)


# --- the switch -------------------------------------------------------------------------------


def test_compile_with_image_user_root_names_the_root_variant(tmp_path, capsys):
    out = tmp_path / "gpu.yaml"
    repo = "europe-docker.pkg.dev/my-proj/ml/ncf-pipelines"
    argv = ["compile", "--profile", "gpu-a100", "--image-repository", repo, "--output", str(out)]
    assert cli.main([*argv, "--image-user", "root"]) == 0
    text = out.read_text()
    version = _image.package_version()
    assert f"{repo}:{version}-cpu-root" in text and f"{repo}:{version}-gpu-root" in text
    assert f"{repo}:{version}-cpu\n" not in text
    assert cli.main(argv) == 0  # The default: the unprivileged images, untouched.
    assert "-root" not in out.read_text()
