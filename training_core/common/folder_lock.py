"""One writer per output folder: :func:`hold`, an exclusive ``flock`` on ``<folder>/.lock``.

The lock is released by the kernel when the process dies, however it dies. The file also says
who holds it, for the message a second writer gets. It is opened without following a link and
only if it is a plain file of its own, through a descriptor of the folder it checked
(``output_folders``). On the Cloud Storage FUSE mount ``flock`` is not shared between machines:
there each pipeline task writes its own artifact folder, and a lock the file system refuses is
logged and gone without.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from collections.abc import Iterator

from training_core.common.output_folders import (
    UnsafeOutputError,
    make_output_folder,
    open_folder,
    user_name,
)

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class FolderBusyError(RuntimeError):
    """Another live process is writing to the folder."""


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
        os.close(fd)  # Releases the lock (workers drop their copy: drop_inherited).


def drop_inherited() -> None:
    """In a forked worker: closes the lock descriptors the parent held when it forked.

    The lock is the parent's: a worker that outlived it must not keep the folder held
    (``process_lifetime.die_with_parent`` calls this first).
    """
    for fd in tuple(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


def _open_lock(folder: str, what: str) -> int:
    """The lock file's descriptor: never through a link, never truncated, a plain file only.

    Opened in the checked folder's descriptor (:func:`open_folder`), not by its full name.
    """
    path = os.path.join(folder, LOCK_FILE)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    dir_fd = open_folder(folder, what)
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
            f"owner {user_name(info.st_uid)}), not a lock file this program wrote; {what} does not "
            f"write to it. Remove it (rm {path}) once you know why it is there, or write to "
            "another folder."
        )
    return fd


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.lstat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


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
