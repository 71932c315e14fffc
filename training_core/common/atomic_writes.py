"""How outputs are published: files and whole folders built under private names, then renamed.

- :func:`atomic_output` publishes a file in one step: written aside under a new private name
  (:func:`partial_name`, created exclusively), synced, renamed over ``path``; removed instead if
  the writing fails. :func:`write_text_atomic` is its one-call form for text. Every file this
  project publishes by rename goes through it (other file systems, such as Beam's
  ``FileSystems`` for ``gs://``, plug in their own :class:`Files`).
- :func:`replace_folder` publishes a folder built aside: swapped in with one rename where the
  file system renames folders (a local disk); where it does not (the Cloud Storage FUSE mount,
  see below) its files are moved in one by one and the folder's completion marker last.
- :func:`remove_stale_partials` removes what a killed process left under a private name.

Who may write a folder is decided elsewhere: ``output_folders`` (which folders are safe) and
``folder_lock`` (one writer at a time).

On the Cloud Storage FUSE mount (``/gcs/...`` on Vertex AI) a folder cannot be renamed (``ENOSYS``
on a flat-namespace bucket; with ``--rename-dir-limit`` only folders with few descendants, object
by object); renaming a file works (a copy, then a delete). There each pipeline task writes its own
artifact folder, and readers still see only published states because the last step of a publish
is one object write: the folder's completion marker (``metadata.json``,
``serving_metadata.json``, ``manifest.json``), which readers check.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Protocol

from training_core.common.folder_lock import LOCK_FILE
from training_core.common.output_folders import DIR_FLAGS, check_output_folder

log = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"


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
        folder = os.open(os.path.dirname(path) or ".", DIR_FLAGS)
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
