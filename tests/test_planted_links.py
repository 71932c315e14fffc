"""Links and files another local user plants in an output folder redirect no write (issue 35, 5).

A symbolic (or hard) link planted at a folder's lock file, or at the name a file is built under
before its rename, must not be written through: the victim it points at stays as it was. An
output folder that another user owns, or that others may write in (not sticky), is refused with
a message naming it, its owner and mode, and what to do (``output_folders.check_output_folder``,
called by ``folder_lock.hold`` and by ``export`` and ``recommend``). The run-local "Try it" line
quotes its path for the shell (issue 35, 8).
"""

from __future__ import annotations

import ast
import os
import shlex
import stat
import subprocess
import sys

import pytest

from pipelines.commands import run_local
from training_core.common import atomic_writes, folder_lock, mount_kind, output_folders
from training_core.data import dataset_folder

VICTIM_TEXT = "the victim's own content\n"
NOBODY = 65534  # A uid that is not this process's (nobody, on most systems).


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


@pytest.fixture
def out(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def test_link_planted_at_the_lock_is_not_followed(out, victim):
    os.symlink(victim, out / folder_lock.LOCK_FILE)
    with pytest.raises(output_folders.UnsafeOutputError, match="symbolic link") as refused:
        with dataset_folder.holding(str(out)):  # What prepare-data holds its --output with.
            pass
    assert str(out / folder_lock.LOCK_FILE) in str(refused.value)
    assert victim.read_text() == VICTIM_TEXT
    assert os.path.islink(out / folder_lock.LOCK_FILE)  # Left for the user to look at.


def test_hard_link_planted_at_the_lock_is_not_written(out, victim):
    os.link(victim, out / folder_lock.LOCK_FILE)
    with pytest.raises(output_folders.UnsafeOutputError, match="hard link"):
        with folder_lock.hold(str(out), "train", wait=False):
            pass
    assert victim.read_text() == VICTIM_TEXT


def test_a_lock_of_our_own_is_still_held_and_reused(out):
    for _ in range(2):
        with folder_lock.hold(str(out), "train", wait=False):
            info = os.lstat(out / folder_lock.LOCK_FILE)
            assert stat.S_ISREG(info.st_mode)
            assert b'"what": "train"' in (out / folder_lock.LOCK_FILE).read_bytes()


@pytest.mark.parametrize("name", ["metadata.json", "_SUCCESS"])
def test_link_planted_at_the_old_partial_name_is_not_followed(out, victim, name):
    target = out / name
    os.symlink(victim, str(target) + atomic_writes.PARTIAL_SUFFIX)  # The fixed name writes used.
    atomic_writes.write_text_atomic(str(target), "new content\n")
    assert victim.read_text() == VICTIM_TEXT
    assert not os.path.islink(target) and target.read_text() == "new content\n"


def test_a_name_that_is_already_there_is_not_written_through(out, victim, monkeypatch):
    """Even a planted link at the very name chosen (a guess that came true) is not followed."""
    planted = str(out / "x.tfrecord.partial-1-00")
    os.symlink(victim, planted)
    monkeypatch.setattr(atomic_writes, "partial_name", lambda path: planted)
    with pytest.raises(FileExistsError):
        with atomic_writes.atomic_output(str(out / "x.tfrecord")) as f:
            f.write(b"records")
    assert victim.read_text() == VICTIM_TEXT
    assert os.path.islink(planted)  # Not ours: not removed either.
    assert not os.path.lexists(out / "x.tfrecord")


def test_partials_are_private_names_and_killed_ones_are_cleaned(out):
    """Each write builds under a new name; the dataset folder's writer removes a dead one's."""
    names = {atomic_writes.partial_name(str(out / "metadata.json")) for _ in range(3)}
    assert len(names) == 3 and all(atomic_writes.is_partial(os.path.basename(n)) for n in names)
    dead = 2**22 + 7  # Above the default pid_max: no live process has it.
    top = out / f"metadata.json.partial-{dead}-0badc0de"
    top.write_text("half")
    build = "data-0123456789abcdef"
    inner = out / build / "train" / "epoch_000"
    inner.mkdir(parents=True)
    (inner / f"part-0.tfrecord.partial-{dead}-00ff").write_bytes(b"half")
    assert dataset_folder.decide(str(out), (), build, overwrite=False) is None  # Not foreign.
    dataset_folder.begin(str(out), build, num_epochs=1)
    assert not top.exists()
    assert not [n for n in os.listdir(inner) if atomic_writes.is_partial(n)]
    assert not atomic_writes.is_partial("ratings.partial-notes.csv")


def _refused(folder, match: str) -> output_folders.UnsafeOutputError:
    with pytest.raises(output_folders.UnsafeOutputError, match=match) as refused:
        with folder_lock.hold(str(folder), "prepare-data", wait=False):
            pass
    assert str(folder) in str(refused.value)
    assert isinstance(refused.value, ValueError)  # The CLI prints it as a plain error.
    return refused.value


def test_a_folder_others_may_write_is_refused(out):
    os.chmod(out, 0o777)
    message = str(_refused(out, "writable by every user"))
    assert "drwxrwxrwx" in message and "chmod go-w" in message
    assert not os.path.lexists(out / folder_lock.LOCK_FILE)  # Refused before anything was written.


def test_a_new_folder_in_a_parent_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    _refused(shared / "mine", "its parent")
    assert not os.path.lexists(shared / "mine")  # Not even made.


def test_a_sticky_folder_and_a_private_one_are_accepted(out):
    os.chmod(out, 0o1777)  # As /tmp: others cannot remove or rename what is ours.
    with folder_lock.hold(str(out / "data"), "prepare-data", wait=False):
        pass
    os.chmod(out, 0o755)
    with folder_lock.hold(str(out), "prepare-data", wait=False):
        pass


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root")
def test_a_folder_another_user_owns_is_refused(out):
    os.chown(out, NOBODY, NOBODY)
    message = str(_refused(out, "owned by"))
    assert f"uid {NOBODY}" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another uid needs root")
def test_an_output_folder_that_is_another_users_link_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    link = tmp_path / "ncf-data"
    os.symlink(mine, link)
    os.lchown(link, NOBODY, NOBODY)
    _refused(link, "link owned by")
    assert os.listdir(mine) == []


def test_export_recommend_and_prepare_refuse_before_the_work(out):
    """The check comes first: the model and data named here do not even exist."""
    from training_core.serving import batch_recommend, export

    os.chmod(out, 0o777)
    missing = str(out.parent / "missing")
    with pytest.raises(output_folders.UnsafeOutputError, match="export: refusing"):
        export.export(export.ExportConfig(missing, missing, str(out / "export")))
    with pytest.raises(output_folders.UnsafeOutputError, match="recommend: refusing"):
        batch_recommend.recommend(batch_recommend.RecommendConfig(missing, missing, str(out)))
    # prepare-data too, before it reads its input (which does not exist either).
    from training_core.data import config, prepare

    with pytest.raises(output_folders.UnsafeOutputError, match="prepare-data: refusing"):
        prepare.prepare(config.prepare_config(missing, str(out)))


def test_try_it_line_quotes_its_path(tmp_path):
    """The printed command, run by bash, hands the exact path to Python and runs nothing else."""
    exported = str(tmp_path / "my runs $(touch PWNED) 'quoted'" / "export-model")
    line = run_local.try_it_command("python", exported, 7)
    argv = shlex.split(line)
    assert argv[:2] == ["python", "-c"] and len(argv) == 3
    load = next(
        node
        for node in ast.walk(ast.parse(argv[2]))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "load"
    )
    assert ast.literal_eval(load.args[0]) == exported
    # Run by bash, with a stand-in python that records what it was given.
    record = tmp_path / "argv.txt"
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\nopen({str(record)!r}, 'w').write(repr(sys.argv[1:]))\n"
    )
    fake.chmod(0o755)
    subprocess.run(
        ["bash", "-c", line],
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"},
        check=True,
    )
    assert ast.literal_eval(record.read_text()) == ["-c", argv[2]]
    assert not (tmp_path / "PWNED").exists()


def test_the_cloud_storage_fuse_mount_is_not_judged_by_its_mode(tmp_path):
    """Its permission bits are the mount's options (IAM guards a bucket): not checked there."""
    mounts = tmp_path / "mounts"
    mounts.write_text(
        f"/dev/sda1 / ext4 rw 0 0\nmy-bucket {tmp_path}/gcs fuse.gcsfuse rw 0 0\n"
        f"gcsfuse {tmp_path}/old\\040mount fuse rw 0 0\n"
    )
    assert mount_kind.on_gcsfuse(str(tmp_path / "gcs" / "bucket" / "model"), str(mounts))
    assert mount_kind.on_gcsfuse(str(tmp_path / "old mount" / "x"), str(mounts))
    assert not mount_kind.on_gcsfuse(str(tmp_path / "elsewhere"), str(mounts))
