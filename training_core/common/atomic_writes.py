"""How outputs are written: one writer per folder, private builds, files published by rename.

- :func:`atomic_output` publishes a file in one step: written aside under a new private name
  (:func:`partial_name`, created exclusively), synced, renamed over ``path``; removed instead if
  the writing fails. :func:`write_text_atomic` is its one-call form for text. Every file this
  project publishes by rename goes through it (other file systems, such as Beam's
  ``FileSystems`` for ``gs://``, plug in their own :class:`Files`).
- :func:`hold` makes a process the only writer of a folder for a while: an exclusive ``flock``
  on ``<folder>/.lock``, released by the kernel when the process dies, however it dies. The file
  also says who holds it, for the message a second writer gets. It is opened without following
  a link and only if it is a plain file of its own, through a descriptor of the folder it checked.
- :func:`check_output_folder` refuses a folder that another local user could plant files or
  links in, or move away from under its name: every folder on the way to it must be this
  user's or root's. :func:`make_output_folder` creates a missing one, a folder at a time.
- :func:`die_with_parent` makes a worker process die with the process that started it.
- :func:`terminate_as_exit` turns SIGTERM into ``SystemExit`` so that ``finally`` blocks clean up.
- :func:`replace_folder` publishes a folder built aside: swapped in with one rename where the
  file system renames folders (a local disk); where it does not (the Cloud Storage FUSE mount,
  see below) its files are moved in one by one and the folder's completion marker last.

On the Cloud Storage FUSE mount (``/gcs/...`` on Vertex AI) ``flock`` is not shared between
machines, and a folder cannot be renamed (``ENOSYS`` on a flat-namespace bucket; with
``--rename-dir-limit`` only folders with few descendants, object by object); renaming a file
works (a copy, then a delete). There each pipeline task writes its own artifact folder, and
readers still see only published states because the last step of a publish is one object
write: the folder's completion marker (``metadata.json``, ``serving_metadata.json``,
``manifest.json``), which readers check.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import grp
import json
import logging
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Protocol

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
PARTIAL_SUFFIX = ".partial"


class FolderBusyError(RuntimeError):
    """Another live process is writing to the folder."""


class UnsafeOutputError(ValueError):
    """Another local user could redirect this folder's writes (planted files or links)."""


class Files(Protocol):
    """How :func:`atomic_output` opens, publishes and discards its temporary file."""

    def open(self, path: str, mode: str) -> IO:
        """Opens ``path`` for writing."""

    def publish(self, tmp: str, path: str) -> None:
        """Puts the closed ``tmp`` at ``path``, replacing what is there."""

    def discard(self, tmp: str) -> None:
        """Removes ``tmp`` if it is there."""


class LocalFiles:
    """:class:`Files` on the local file system: synced to disk, then renamed in one step.

    The temporary file is created, never opened where it is: the opener gets ``"x"`` for
    ``"w"`` (``"xb"``, ``"xt"``), so a name that is already there, a planted link included, fails
    with ``FileExistsError`` instead of being written through. Its folder is opened first and
    held until the publish, which goes through that descriptor (``renameat``): the file is
    published in the folder it was written in, even if a folder on the way to it was renamed or
    replaced by a link meanwhile (it is created by name, so that the opener may be any).

    Args:
        opener: opens the temporary file: ``open`` (default), or e.g. ``gzip.open`` to write a
            gzip file (its header names the temporary file, as ``gzip.open`` on it always did).
    """

    def __init__(self, opener: Callable[[str, str], IO] = open):
        self._opener = opener
        self._folders: dict[str, int] = {}  # A temporary file's name -> its folder's descriptor.
        self._guard = threading.Lock()

    def open(self, path: str, mode: str) -> IO:
        """Creates ``path`` (it must not exist) and opens it for writing."""
        folder = os.open(os.path.dirname(path) or ".", _DIR_FLAGS)
        try:
            opened = self._opener(path, mode.replace("w", "x"))
        except BaseException:
            os.close(folder)
            raise
        with self._guard:
            self._folders[path] = folder
        return opened

    def publish(self, tmp: str, path: str) -> None:
        """Syncs the closed ``tmp`` to disk, then renames it over ``path`` in one step."""
        folder = self._take(tmp)
        if folder is None or os.path.dirname(tmp) != os.path.dirname(path):
            if folder is not None:
                os.close(folder)
            _sync(tmp)
            os.replace(tmp, path)
            return
        try:
            name = os.path.basename(tmp)
            _sync(name, folder)
            os.replace(name, os.path.basename(path), src_dir_fd=folder, dst_dir_fd=folder)
        finally:
            os.close(folder)

    def discard(self, tmp: str) -> None:
        """Removes ``tmp`` if it is there."""
        folder = self._take(tmp)
        try:
            with contextlib.suppress(FileNotFoundError):
                if folder is None:
                    os.remove(tmp)
                else:
                    os.remove(os.path.basename(tmp), dir_fd=folder)
        finally:
            if folder is not None:
                os.close(folder)

    def _take(self, tmp: str) -> int | None:
        with self._guard:
            return self._folders.pop(tmp, None)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _sync(path: str, dir_fd: int | None = None) -> None:
    """Syncs the file at ``path`` to disk, never through a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


LOCAL_FILES = LocalFiles()


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike, mode: str = "wb", files: Files = LOCAL_FILES
) -> Iterator[IO]:
    """Yields a file to write ``path``'s new content into, published when the block ends.

    The file is a new sibling of ``path`` named by :func:`partial_name` (this process's id and
    random bytes; :data:`LOCAL_FILES` creates it exclusively, so nothing planted under that name
    is written through); once the block ends without an exception it is closed, synced and
    renamed over ``path`` (a link at ``path`` is replaced, not followed), so a reader sees the old
    content or the new, never part. If the block (or the publish) raises, the partial file is
    removed and ``path`` is left as it was; one left by a killed process is removed by
    :func:`remove_stale_partials`, or with its folder's other partials by the folder's writer.

    Args:
        path: the file to publish.
        mode: the writing mode (``"wb"``, ``"w"``).
        files: how to open, publish and discard the file: :data:`LOCAL_FILES`, a
            :class:`LocalFiles` with another opener, or :class:`Files` for another file system.
    """
    path = os.fspath(path)
    tmp = partial_name(path)
    opened = files.open(tmp, mode)  # Outside the try: a name it could not create is not ours.
    try:
        with opened as f:
            yield f
        files.publish(tmp, path)
    except BaseException:
        files.discard(tmp)
        raise


def write_text_atomic(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` so that a reader sees the old content or the new, never part.

    UTF-8 whatever the locale (a vocabulary of string ids may hold any character).
    """
    with atomic_output(path, "wb") as f:
        f.write(text.encode("utf-8"))


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a folder's lock: what they run, where and since when."""

    what: str
    pid: int
    host: str
    since: float

    def describe(self) -> str:
        """``train (pid 123 on host h, since 2026-11-23 10:00:00)``."""
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"{self.what} (pid {self.pid} on host {self.host}, since {started})"


def _read_holder(fd: int) -> Holder | None:
    try:
        raw = os.pread(fd, 4096, 0)
        return Holder(**json.loads(raw.decode()))
    except (OSError, ValueError, TypeError):
        return None


_UNSUPPORTED = {errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOLCK}
_HELD: set[int] = set()  # Lock fds of this process, closed in forked workers.


@contextlib.contextmanager
def hold(folder: str, what: str, wait: bool) -> Iterator[None]:
    """Holds ``folder`` (created if missing) as its only writer until the block ends.

    The folder is checked and made (:func:`make_output_folder`); its lock file is opened in it
    through the folder's descriptor without following a link, and must be a plain file with no
    other name (a hard link), before the lock is taken; only then is what it says replaced.

    Args:
        folder: the output folder.
        what: what this process is, for another writer's message (``prepare-data``).
        wait: wait for a writer that holds it (logging who); else raise at once.

    Raises:
        FolderBusyError: ``wait`` is false and another process holds the folder.
        UnsafeOutputError: another local user could plant files or links in ``folder`` or move
            it away, or its lock file is a link or not a plain file.
    """
    make_output_folder(folder, what)
    path = os.path.join(folder, LOCK_FILE)
    fd = _open_lock(folder, what)
    _HELD.add(fd)
    try:
        locked = _acquire(fd, folder, path, what, wait)
        while locked and not _same_file(fd, path):  # Removed by a writer that gave up: again.
            _HELD.discard(fd)
            os.close(fd)
            make_output_folder(folder, what)
            fd = _open_lock(folder, what)
            _HELD.add(fd)
            locked = _acquire(fd, folder, path, what, wait)
        if locked:
            me = Holder(what, os.getpid(), socket.gethostname(), time.time())
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(dataclasses.asdict(me)).encode(), 0)
        yield
    finally:
        _HELD.discard(fd)
        os.close(fd)  # Releases the lock (workers drop their copy: see die_with_parent).


def _open_lock(folder: str, what: str) -> int:
    """The lock file's descriptor: never through a link, never truncated, a plain file only.

    Opened in the checked folder's descriptor (:func:`_open_folder`), not by its full name.
    """
    path = os.path.join(folder, LOCK_FILE)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    dir_fd = _open_folder(folder, what)
    try:
        # O_NONBLOCK: a planted FIFO does not hang the open.
        fd = os.open(LOCK_FILE, flags, 0o644, dir_fd=dir_fd)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        info = os.stat(LOCK_FILE, dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISLNK(info.st_mode):
            raise
        raise UnsafeOutputError(
            f"{path} is a symbolic link (to {os.readlink(LOCK_FILE, dir_fd=dir_fd)!r}), not a "
            f"lock file this program wrote; {what} does not write through it. Someone else may "
            f"have put it there: remove it (rm {path}) once you know why it is there, or write "
            "to another folder."
        ) from None
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        kind = "not a plain file" if not stat.S_ISREG(info.st_mode) else "a hard link"
        raise UnsafeOutputError(
            f"{path} is {kind} ({info.st_nlink} names, mode {stat.filemode(info.st_mode)}, "
            f"owner {_user(info.st_uid)}), not a lock file this program wrote; {what} does not "
            f"write to it. Remove it (rm {path}) once you know why it is there, or write to "
            "another folder."
        )
    return fd


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.lstat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


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
        if not _on_gcsfuse(where)  # A link's folder, for a link.
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
        return f"{name} is {kind} by {_user(info.st_uid)} (mode {mode})"
    if not stat.S_ISLNK(info.st_mode) and _others_write(info):
        return f"{name} is writable by {_others(info)} (owner {_user(info.st_uid)}, mode {mode})"
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
        ours = info.st_uid in _trusted_uids() or _on_gcsfuse(folder)
        if stat.S_ISDIR(info.st_mode) and ours:
            continue
        mode = stat.filemode(info.st_mode)
        kind = {"l": "a link", "d": "a folder"}.get(mode[0], "a file")
        raise UnsafeOutputError(
            f"{what}: refusing to write in {path}: {folder}, to be made for it just now, is "
            f"{kind} owned by {_user(info.st_uid)} (mode {mode}): "
            "someone else made that name first. Write to a folder of your own (under your home "
            "folder or the clone, e.g. out/), with only your own or root's folders above it."
        )
    check_output_folder(path, what)


def _open_folder(folder: str, what: str) -> int:
    """A descriptor of the checked ``folder``: the folder its name leads to now, by inode."""
    try:
        fd = os.open(os.path.realpath(folder), _DIR_FLAGS | os.O_NOFOLLOW)
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


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return f"{grp.getgrgid(gid).gr_name} (gid {gid})"
    except KeyError:
        return f"gid {gid}"


def _on_gcsfuse(path: str, mounts_file: str = "/proc/self/mounts") -> bool:
    """Whether ``path`` is on a Cloud Storage FUSE mount (by ``mounts_file``; Linux).

    gcsfuse mounts show as type ``fuse.gcsfuse`` (releases since early 2022), older ones as
    ``fuse`` whose source names gcsfuse.
    """
    real, best = os.path.realpath(path), ("", "", "")
    try:
        with open(mounts_file) as f:
            mounts = [line.split()[:3] for line in f if len(line.split()) > 2]
    except OSError:
        return False
    for source, point, kind in mounts:
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[1]):
            best = (source, point, kind)
    source, _, kind = best
    return kind.startswith("fuse.gcsfuse") or (kind == "fuse" and "gcsfuse" in source)


def _acquire(fd: int, folder: str, path: str, what: str, wait: bool) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in _UNSUPPORTED:
            log.warning(
                "%s: this file system has no file locks (%s); going on without one. Keep to one "
                "writer per folder here (each Vertex AI task has its own output folder).",
                path,
                e.strerror,
            )
            return False
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
    holder = _read_holder(fd)
    who = holder.describe() if holder else "another process"
    if not wait:
        raise FolderBusyError(
            f"{folder} is being written by {who}; wait for it to finish, or choose another "
            f"folder for this {what}"
        ) from None
    log.warning("%s is being written by %s; waiting for it to finish", folder, who)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return True


def partial_name(path: str) -> str:
    """A private sibling of ``path`` to build in: ``<path>.partial-<pid>-<random>``.

    Create it exclusively (``open(..., "x")``, ``os.mkdir``): a name that is there is not ours.
    """
    return f"{path.rstrip('/')}{PARTIAL_SUFFIX}-{os.getpid()}-{os.urandom(8).hex()}"


_PARTIAL_TAIL = re.compile(r"-\d+-[0-9a-f]+")


def is_partial(name: str) -> bool:
    """Whether ``name`` was made by :func:`partial_name` (or is an older ``<name>.partial``)."""
    _, found, tail = name.rpartition(PARTIAL_SUFFIX)
    return bool(found) and (not tail or _PARTIAL_TAIL.fullmatch(tail) is not None)


def remove_stale_partials(path: str) -> list[str]:
    """Removes siblings of ``path`` that :func:`partial_name` made for processes now dead.

    Only for local paths (the pid is this host's). Returns what was removed.
    """
    parent, base = os.path.split(path.rstrip("/"))
    parent = parent or "."
    removed = []
    prefix = f"{base}{PARTIAL_SUFFIX}-"
    for name in os.listdir(parent) if os.path.isdir(parent) else ():
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        full = os.path.join(parent, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            os.remove(full)
        removed.append(full)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: str, b: str) -> bool:
    """Swaps two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    rc = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), b)


# A folder's rename is refused where these come back: ENOSYS (gcsfuse, flat namespace), EMFILE
# (gcsfuse past --rename-dir-limit), EOPNOTSUPP (gcsfuse, a file in it open), EXDEV (overlayfs,
# a folder of a lower layer), EINVAL. Files still rename there.
_NO_FOLDER_RENAME = {errno.ENOSYS, errno.EMFILE, errno.EOPNOTSUPP, errno.EXDEV, errno.EINVAL}
PUBLISHING_FILE = ".publishing"  # In a folder while files are moved into it one by one.


def replace_folder(new: str, target: str, marker: str, what: str = "publish") -> None:
    """Publishes the complete folder ``new`` at ``target`` (a path), replacing what is there.

    ``target`` is checked again first (:func:`check_output_folder`): a folder on the way to it
    that another user made or swapped since the caller checked it (a missing folder under
    ``/tmp`` made first by them, say) stops the publish, nothing renamed. Where the file system
    can, old and new are swapped in one step, so ``target`` is always one complete folder;
    elsewhere the old one is renamed aside first (a moment without ``target``). The old folder is
    removed afterwards.

    Where folders cannot be renamed (the Cloud Storage FUSE mount: see the module doc), the
    files are moved into ``target`` one by one instead (:func:`move_in`): ``marker`` (a file
    in ``new`` that readers check, such as ``serving_metadata.json``) is removed from ``target``
    first and moved in last, so a reader that checks it never takes a part for the whole.

    Args:
        new: the complete folder (on the file system of ``target``).
        target: where to publish it.
        marker: the name of the file in ``new`` that says the folder is complete.
        what: the command or step that publishes it, for the message.

    Raises:
        UnsafeOutputError: another local user could move ``target`` away or plant links in it.
    """
    check_output_folder(target, what)
    if not os.path.lexists(target):
        try:
            os.rename(new, target)
            return
        except OSError as e:
            _no_folder_rename(e, target, marker)
        move_in(new, target, marker)
        return
    if _exchange(new, target):
        shutil.rmtree(new, ignore_errors=True)  # It holds the old folder now.
        return
    aside = partial_name(target)
    try:
        os.rename(target, aside)
    except OSError as e:
        _no_folder_rename(e, target, marker)
        move_in(new, target, marker)
        return
    try:
        os.rename(new, target)
    except OSError as e:
        _no_folder_rename(e, target, marker)
        move_in(new, target, marker)
    shutil.rmtree(aside, ignore_errors=True)


def _no_folder_rename(e: OSError, target: str, marker: str) -> None:
    """Re-raises ``e`` unless it says this file system renames no folders (then logs it)."""
    if e.errno not in _NO_FOLDER_RENAME:
        raise e
    log.info(
        "%s: folders cannot be renamed here (%s); moving the files in one by one, %s last",
        target,
        e.strerror,
        marker,
    )


def move_in(new: str, target: str, marker: str) -> None:
    """Replaces ``target``'s files with ``new``'s, one file rename at a time, ``marker`` last.

    For file systems that rename files but not folders. ``target`` (created if missing) holds
    :data:`PUBLISHING_FILE` from the first step to the last, so a retry can tell an interrupted
    publish (:func:`interrupted`) from someone else's folder. In order: the publishing file is
    written, ``target/marker`` removed, every other old entry removed, ``new``'s files moved in
    (folders made as needed), ``marker`` moved in, the publishing file removed, ``new`` removed.

    Raises:
        FileNotFoundError: ``new`` holds no ``marker``.
    """
    if not os.path.isfile(os.path.join(new, marker)):
        raise FileNotFoundError(f"{new} holds no {marker}; it is not a complete folder")
    os.makedirs(target, exist_ok=True)
    publishing = os.path.join(target, PUBLISHING_FILE)
    # Its presence is the fact; what it says is for people. Never written through a link.
    fd = os.open(publishing, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with open(fd, "w") as f:
        f.write(json.dumps({"from": new, "pid": os.getpid(), "marker": marker}) + "\n")
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(target, marker))
    for name in os.listdir(target):
        if name in (PUBLISHING_FILE, LOCK_FILE):
            continue
        old = os.path.join(target, name)
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old)
        else:
            os.remove(old)
    for folder, dirs, files in os.walk(new):
        rel = os.path.relpath(folder, new)
        there = target if rel == "." else os.path.join(target, rel)
        for name in dirs:
            os.makedirs(os.path.join(there, name), exist_ok=True)
        for name in files:
            if rel == "." and name == marker:
                continue
            os.replace(os.path.join(folder, name), os.path.join(there, name))
    os.replace(os.path.join(new, marker), os.path.join(target, marker))
    os.remove(publishing)
    shutil.rmtree(new, ignore_errors=True)


def interrupted(folder: str) -> bool:
    """Whether ``folder`` holds a :func:`move_in` that did not finish (safe to publish over)."""
    return os.path.isfile(os.path.join(folder, PUBLISHING_FILE))


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """In a forked worker: be killed when the parent dies (Linux); drop inherited lock fds.

    If the parent died before this ran, exits at once. Use as a pool's ``initializer``.
    """
    for fd in tuple(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _raise_exit(signum, frame) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """Within the block, SIGTERM raises ``SystemExit`` (main thread only; else a no-op)."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_exit)
    except ValueError:  # Not the main thread.
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
