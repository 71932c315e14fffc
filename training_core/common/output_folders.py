"""Which output folders are safe to write: this user's or root's all the way up, no planted links.

:func:`check_output_folder` refuses a folder that another local user could plant files or links
in, or move away from under its name: every folder on the way to it must be this user's or
root's. :func:`make_output_folder` creates a missing one, a folder at a time, each checked as it
is made; :func:`open_folder` opens the folder a checked name leads to, by inode. Nothing on the
Cloud Storage FUSE mount is judged (``mount_kind``).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import stat
from collections.abc import Iterator

from training_core.common.mount_kind import on_gcsfuse

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # How a folder is opened (its fd).


class UnsafeOutputError(ValueError):
    """Another local user could redirect this folder's writes (planted files or links)."""


def check_output_folder(path: str, what: str) -> None:
    """Refuses an output folder that another local user could plant files or links in.

    The one rule for every folder a command writes (the dataset folder, the model folder, an
    export, recommendations, the local registry). Each name a lookup of ``path`` passes must be
    this user's or root's: ``path`` itself (if it is there) and every folder above it up to
    ``/``, and where one is a link, the link and every folder on the way to what it points at.
    Whoever owns a folder on the way can rename what is in it and put a link in its place, and
    every later write of the run would land where they chose. None of those folders, nor
    ``path``, may be writable by other users either, unless it is sticky (as ``/tmp`` is: others
    cannot remove or rename what is ours; the folder under it that leads to ``path`` must then
    be ours too, as every folder on the way must). Group write counts as others' unless the
    group is the owner's own (a user private group: same name, no other members). Names not
    there yet are not judged: :func:`make_output_folder` creates them and checks each. On the
    Cloud Storage FUSE mount (``/gcs/`` on Vertex AI) permission bits are not what guards a
    bucket (IAM is), and nothing on it is checked.

    Args:
        path: the output folder (it need not exist yet).
        what: the command or step that writes it, for the message.

    Raises:
        UnsafeOutputError: naming the folder, each folder or link on the way that fails the rule
            with its owner and mode, and what to do.
    """
    path = os.path.abspath(path)
    problems = [
        problem
        for where, problem in _problems_on_the_way(path)
        if not on_gcsfuse(where)  # A link's folder, for a link.
    ]
    if not problems:
        return
    raise UnsafeOutputError(
        f"{what}: refusing to write in {path}: {'; '.join(dict.fromkeys(problems))}. Another "
        "user could move it away or plant links there that redirect this program's writes. "
        "Write to a folder of your own (under your home folder or the clone, e.g. out/), with "
        "only your own or root's folders above it, or make this one yours (chown it to "
        "yourself, chmod go-w it; a shared parent needs chmod +t)."
    )


_MAX_LINKS = 40  # The kernel's limit on links followed in one lookup.


def _problems_on_the_way(path: str) -> Iterator[tuple[str, str]]:
    """Where a lookup of the absolute ``path`` passes a name that fails the rule, and why.

    Looked at (lstat): ``path``, then each folder above it up to ``/``; for a link, the link,
    then its target and each folder above that. Names that are not there are passed over.
    Yields the folder the name is in for a link, the name itself for a folder.
    """
    parent, todo, links = os.path.dirname(path), [(path, True)], 0
    while todo:
        start, is_path = todo.pop()
        here = start
        while True:
            try:
                info = os.lstat(here)
            except (FileNotFoundError, NotADirectoryError):
                info = None
            if info is not None:
                itself = is_path and here == start
                name = "it" if itself else f"its parent {here}" if here == parent else here
                link, problem = stat.S_ISLNK(info.st_mode), _problem(name, info)
                if problem:
                    yield (os.path.dirname(here) if link else here), problem
                if link:
                    links += 1
                    if links > _MAX_LINKS:
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                    target = os.path.join(os.path.dirname(here), os.readlink(here))
                    todo.append((target, itself))
            up = os.path.dirname(here)
            if up == here:
                break
            here = up


def _problem(name: str, info: os.stat_result) -> str | None:
    """Why the folder or link ``name`` (its lstat ``info``) fails the rule; None if it does not."""
    mode = stat.filemode(info.st_mode)
    if info.st_uid not in _trusted_uids():
        kind = "a link owned" if stat.S_ISLNK(info.st_mode) else "owned"
        return f"{name} is {kind} by {user_name(info.st_uid)} (mode {mode})"
    if not stat.S_ISLNK(info.st_mode) and _others_write(info):
        owner = user_name(info.st_uid)
        return f"{name} is writable by {_others(info)} (owner {owner}, mode {mode})"
    return None


def make_output_folder(path: str, what: str) -> None:
    """Checks ``path`` (:func:`check_output_folder`) and makes it, with any missing folder above.

    Missing folders are made one at a time, mode ``0o755`` less the umask (never writable by
    others), and each is looked at (lstat) as soon as it is made: it must be a folder, not a
    link, and this user's or root's (under a sticky folder such as ``/tmp`` another user could
    have made that name first). Then ``path`` is checked again as a whole.

    Raises:
        UnsafeOutputError: as :func:`check_output_folder`, or a folder made here turned out to be
            a link, not a folder, or another user's.
    """
    path = os.path.abspath(path)
    check_output_folder(path, what)
    missing, head = [], path
    while not os.path.lexists(head) and os.path.dirname(head) != head:
        missing.append(head)
        head = os.path.dirname(head)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # Judged below, whoever made it.
            os.mkdir(folder, 0o755)
        info = os.lstat(folder)
        ours = info.st_uid in _trusted_uids() or on_gcsfuse(folder)
        if stat.S_ISDIR(info.st_mode) and ours:
            continue
        mode = stat.filemode(info.st_mode)
        kind = {"l": "a link", "d": "a folder"}.get(mode[0], "a file")
        raise UnsafeOutputError(
            f"{what}: refusing to write in {path}: {folder}, to be made for it just now, is "
            f"{kind} owned by {user_name(info.st_uid)} (mode {mode}): "
            "someone else made that name first. Write to a folder of your own (under your home "
            "folder or the clone, e.g. out/), with only your own or root's folders above it."
        )
    check_output_folder(path, what)


def open_folder(folder: str, what: str) -> int:
    """A descriptor of the checked ``folder``: the folder its name leads to now, by inode."""
    try:
        fd = os.open(os.path.realpath(folder), DIR_FLAGS | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        fd = None
    if fd is not None:
        opened, named = os.fstat(fd), os.stat(folder)
        if (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino):
            return fd
        os.close(fd)
    raise UnsafeOutputError(
        f"{what}: {folder} changed while it was checked (a folder on the way to it was moved "
        "or replaced by a link). Find out who else writes there, or write to a folder of your "
        "own."
    )


def _trusted_uids() -> tuple[int, ...]:
    return (os.geteuid(), 0)


def _others_write(info: os.stat_result) -> bool:
    """Whether users other than the owner may create or rename entries (sticky folders aside)."""
    if info.st_mode & stat.S_ISVTX:
        return False
    if info.st_mode & stat.S_IWOTH:
        return True
    return bool(info.st_mode & stat.S_IWGRP) and not _private_group(info.st_uid, info.st_gid)


def _private_group(uid: int, gid: int) -> bool:
    """Whether ``gid`` is ``uid``'s own group (same name, no other listed members)."""
    try:
        user, group = pwd.getpwuid(uid), grp.getgrgid(gid)
    except KeyError:
        return False
    return group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def _others(info: os.stat_result) -> str:
    return "every user" if info.st_mode & stat.S_IWOTH else f"group {_group(info.st_gid)}"


def user_name(uid: int) -> str:
    """``name (uid N)`` for messages, or ``uid N`` where the user has no name here."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"
