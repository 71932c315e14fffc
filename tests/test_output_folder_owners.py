"""Every folder on the way to an output folder is this user's or root's (issue 53, item 3).

Whoever owns a folder above an output folder can rename the output folder away and put a link
in its place, and every later write of the run lands where they chose: writing that folder is
refused (``output_folders.check_output_folder``), whether or not others may write it, for a
folder another user owns anywhere on the way, a link another user owns on the way, and the
folders on the way to a link's target. A sticky folder owned by root (``/tmp``) is fine on the
way, the folder under it must be ours. Missing folders are made one at a time and each is
looked at as it is made (``output_folders.make_output_folder``); a file is published in the
folder it was written in (through that folder's descriptor), and a folder is checked again
before it is published (``atomic_writes.replace_folder``).
"""

from __future__ import annotations

import os
import stat

import pytest

from training_core.common import atomic_writes, folder_lock, output_folders

NOBODY = 65534  # A uid that is not this process's (nobody, on most systems).
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid")
Refused = output_folders.UnsafeOutputError


def _theirs(folder, mode: int = 0o755):
    """A folder of another user's; by default only they may write it."""
    folder.mkdir()
    os.chmod(folder, mode)
    os.chown(folder, NOBODY, NOBODY)
    return folder


def _sticky(folder):
    """A folder as /tmp is: this user's (root's, under root), everyone may write, sticky."""
    folder.mkdir()
    os.chmod(folder, 0o1777)
    return folder


def _refused(path, match: str) -> str:
    with pytest.raises(Refused, match=match) as refused:
        output_folders.check_output_folder(str(path), "train")
    message = str(refused.value)
    assert f"train: refusing to write in {path}" in message
    return message


def _held(path) -> None:
    with folder_lock.hold(str(path), "train", wait=False):
        pass


@needs_root
@pytest.mark.parametrize("made", [False, True], ids=["missing", "ours"])
def test_a_folder_in_another_users_folder_is_refused_though_only_they_may_write_it(tmp_path, made):
    theirs = _theirs(tmp_path / "theirs")  # drwxr-xr-x: no group or other write.
    out = theirs / "out"
    if made:
        out.mkdir()  # Ours, and private: their folder still lets them rename it away.
    message = _refused(out, "its parent")
    assert f"its parent {theirs} is owned by " in message
    assert f"uid {NOBODY}" in message and "drwxr-xr-x" in message
    assert "folder of your own" in message
    with pytest.raises(Refused):
        _held(out)
    assert os.path.exists(out) == made  # Not made when refused,
    assert not os.path.lexists(out / folder_lock.LOCK_FILE)  # nor anything written in it.


@needs_root
@pytest.mark.parametrize("mode", [0o755, 0o1777], ids=["private", "sticky"])
def test_a_folder_another_user_owns_higher_up_is_refused(tmp_path, mode):
    middle = _theirs(tmp_path / "a", mode)  # Sticky or not: its owner renames what is in it.
    below = middle / "b"
    below.mkdir(mode=0o700)  # Ours and private: what an older check looked at.
    out = below / "out"
    out.mkdir()
    message = _refused(out, "is owned by")
    assert f"{middle} is owned by " in message and f"uid {NOBODY}" in message
    assert str(below) not in message.replace(str(out), "")  # Ours: not named.
    with pytest.raises(Refused):
        _held(out)


def test_a_folder_of_ours_under_a_sticky_folder_is_accepted(tmp_path):
    shared = _sticky(tmp_path / "tmp")
    mine = shared / "mine"
    mine.mkdir()
    output_folders.check_output_folder(str(mine / "out"), "train")
    _held(mine / "out")
    assert (mine / "out" / folder_lock.LOCK_FILE).is_file()
    _held(shared / "new" / "deeper")  # Made here under the sticky folder: ours.
    assert os.lstat(shared / "new").st_uid == os.geteuid()


@needs_root
def test_another_users_folder_under_a_sticky_folder_is_refused(tmp_path):
    shared = _sticky(tmp_path / "tmp")
    theirs = _theirs(shared / "theirs")
    _refused(theirs / "out", f"its parent {theirs} is owned by")


def test_missing_folders_are_made_ours_and_never_writable_by_others(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    old = os.umask(0)  # Even so: made 0755 at most.
    try:
        _held(out)
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", out):
        info = os.lstat(folder)
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
        assert not info.st_mode & 0o022, stat.filemode(info.st_mode)


@needs_root
@pytest.mark.parametrize("planted", ["folder", "link"])
def test_a_missing_folder_another_user_makes_first_is_refused(tmp_path, monkeypatch, planted):
    """They make the missing folder (or a link to theirs) just before we do, under /tmp."""
    shared = _sticky(tmp_path / "tmp")
    elsewhere = _theirs(tmp_path / "elsewhere")
    name = shared / "run"
    out = name / "out"
    real_mkdir = os.mkdir

    def after_them(path, mode=0o777, **kwargs):
        if os.fspath(path) == str(name) and not os.path.lexists(name):
            if planted == "folder":
                real_mkdir(name)
            else:
                os.symlink(elsewhere, name)
            os.lchown(name, NOBODY, NOBODY)
        return real_mkdir(path, mode, **kwargs)

    monkeypatch.setattr(os, "mkdir", after_them)
    with pytest.raises(Refused) as refused:
        _held(out)
    assert f"{name}, to be made for it just now, is a {planted} owned by" in str(refused.value)
    assert os.listdir(elsewhere) == []  # No write landed where they chose,
    if planted == "folder":
        assert os.listdir(name) == []  # nor in their folder.


@needs_root
def test_a_link_another_user_planted_on_the_way_is_refused(tmp_path):
    shared = _sticky(tmp_path / "tmp")
    target = tmp_path / "target"
    (target / "out").mkdir(parents=True)  # Ours: the link's owner alone is refused.
    link = shared / "runs"
    os.symlink(target, link)
    os.lchown(link, NOBODY, NOBODY)  # In a sticky folder, its owner may replace it at will.
    message = _refused(link / "out", "is a link owned by")
    assert f"its parent {link} is a link owned by " in message and f"uid {NOBODY}" in message
    with pytest.raises(Refused):
        _held(link / "out")
    assert os.listdir(target / "out") == []


@needs_root
def test_a_link_of_ours_into_another_users_folder_is_refused(tmp_path):
    theirs = _theirs(tmp_path / "theirs")
    (theirs / "x").mkdir()  # Ours, in their folder.
    mine = tmp_path / "mine"
    mine.mkdir()
    os.symlink(theirs / "x", mine / "runs")
    message = _refused(mine / "runs" / "out", "is owned by")
    assert f"{theirs} is owned by " in message


def test_links_of_ours_to_folders_of_ours_are_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "alias")
    _held(tmp_path / "alias" / "data")
    assert (real / "data" / folder_lock.LOCK_FILE).is_file()
    os.symlink(real / "data", tmp_path / "data-link")  # The output folder itself a link of ours.
    _held(tmp_path / "data-link")


def test_a_file_is_published_in_the_folder_it_was_written_in(tmp_path):
    out, elsewhere, moved = tmp_path / "out", tmp_path / "elsewhere", tmp_path / "moved"
    out.mkdir()
    elsewhere.mkdir()
    with atomic_writes.atomic_output(out / "metadata.json") as f:
        f.write(b"ours")
        os.rename(out, moved)  # Moved away while written, a link in its place.
        os.symlink(elsewhere, out)
    assert (moved / "metadata.json").read_bytes() == b"ours"
    assert os.listdir(elsewhere) == []
    os.remove(out)
    os.rename(moved, out)
    with pytest.raises(RuntimeError), atomic_writes.atomic_output(out / "model.json") as f:
        f.write(b"half")
        os.rename(out, moved)
        os.symlink(elsewhere, out)
        raise RuntimeError("failed midway")
    assert os.listdir(moved) == ["metadata.json"]  # The partial file removed where it was.
    assert os.listdir(elsewhere) == []


@needs_root
def test_a_folder_is_not_published_where_another_user_made_a_folder_on_the_way(tmp_path):
    shared = _sticky(tmp_path / "tmp")
    out = shared / "run" / "export"
    output_folders.check_output_folder(str(out), "export")  # Missing: nothing to judge yet.
    theirs = _theirs(shared / "run")  # Made first by them; the build goes on in it.
    new = theirs / "export.partial-1"
    new.mkdir()
    (new / "manifest.json").write_text("{}")
    with pytest.raises(Refused, match="publish: refusing"):
        atomic_writes.replace_folder(str(new), str(out), marker="manifest.json")
    assert not os.path.lexists(out) and os.listdir(new) == ["manifest.json"]
