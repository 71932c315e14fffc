"""The machine's own faults, each said in one paragraph: disk, permissions, mounts, memory.

A full disk, a read-only or forbidden folder, a vanished mount, too little memory, a worker
process killed.

One rule turns such an exception into a message (:func:`describe`): what was being written, where,
how much room it needed and how much the file system has (``os.statvfs``), and what to do. The
CLI's ``main`` and every component's body (:func:`reported`) print it instead of a traceback
(``-v`` or ``NCF_VERBOSE=1`` show the traceback too). Work that writes says what it writes with
:func:`writing`: the exception is tagged with that context (also across a worker pool: the tag
pickles with the exception), so a ``write()`` that fails without a file name still names a path.
Work that can tell its need in advance refuses early with the numbers: :func:`check_room` and
:func:`check_memory` raise :class:`MachineFault`.

Recognised: ``OSError`` with errno ENOSPC, EDQUOT, EROFS, EACCES, EPERM, ENOMEM, ENOTCONN, ESTALE,
ENODEV, or ENOENT where the folder being written vanished or its mount changed; TensorFlow's
``OpError`` subclasses whose message carries one of those errno texts (TensorFlow reports the C
library's ``strerror``) or says OOM; ``MemoryError``; :class:`WorkerKilled` (a pool worker killed
by a signal, most often the kernel's out-of-memory killer). Anything else is not a machine fault:
:func:`describe` returns ``None`` and the caller handles it as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import signal
import sys
from collections.abc import Iterator

_CONTEXT_ATTR = "ncf_writing"  # The attribute :func:`writing` sets on an exception (pickles).

_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_READ_ONLY = (errno.EROFS,)
_FORBIDDEN = (errno.EACCES, errno.EPERM)
_GONE = (errno.ENOTCONN, errno.ESTALE, errno.ENODEV)
_NO_MEMORY = (errno.ENOMEM,)
_KNOWN = _NO_SPACE + _READ_ONLY + _FORBIDDEN + _GONE + _NO_MEMORY

# TensorFlow's ``OpError`` classes that carry file system and memory faults (tensorflow/python/
# framework/errors_impl.py); matched by name so this module never imports TensorFlow.
_TF_ERRORS = {
    "ResourceExhaustedError",
    "PermissionDeniedError",
    "FailedPreconditionError",
    "UnknownError",
    "InternalError",
    "NotFoundError",
    "UnavailableError",
}
_TF_OOM = re.compile(r"\bOOM\b|out of memory", re.IGNORECASE)
_PATH_IN_TEXT = re.compile(r"(/[^\s'\";,]+)")

RERUN = "run the command again: it starts over or resumes cleanly"


class MachineFault(Exception):
    """A fault of the machine (room, memory) found before or while working; the message says all."""


class WorkerKilled(Exception):
    """A worker process of a pool died of a signal; ``signum``: the signal, ``None`` if unknown."""

    def __init__(self, what: str, signum: int | None, workers: int):
        super().__init__(what, signum, workers)
        self.what, self.signum, self.workers = what, signum, workers

    def __str__(self) -> str:
        return describe(self) or "a worker process died"


@dataclasses.dataclass(frozen=True)
class Writing:
    """What a block was writing when it failed (:func:`writing`)."""

    what: str
    path: str
    need: int | None = None  # Bytes the whole output needs, when known.
    option: str | None = None  # The option that names another place, e.g. ``--output``.
    after: str | None = None  # What the failure left, e.g. "the old dataset is kept".
    device: int | None = None  # st_dev of the nearest existing folder when the block began.


@dataclasses.dataclass(frozen=True)
class Room:
    """The file system under a path: its mount point, and bytes free (to this user) and in all."""

    mount: str
    free: int
    total: int


def is_local(path: str) -> bool:
    """Whether ``path`` is on this machine's file system (not ``gs://...`` and the like)."""
    return "://" not in os.fspath(path)


def existing_folder(path: str) -> str:
    """``path`` or the nearest folder above it that exists."""
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def mount_point(path: str) -> str:
    """The mount point of the file system that holds ``path`` (or would hold it)."""
    path = existing_folder(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def room(path: str) -> Room | None:
    """Free and total bytes of the file system holding ``path``; ``None`` if unreadable."""
    if not is_local(path):
        return None
    try:
        st = os.statvfs(existing_folder(path))
    except OSError:
        return None
    return Room(mount_point(path), st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)


def size_text(n: int) -> str:
    """``1.4 MB``: bytes in decimal units, as ``df -H`` and the data prep logs give them."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def available_memory() -> int | None:
    """Bytes of memory this process may still use; ``None`` where it cannot be read.

    The machine's ``MemAvailable``, or less where a cgroup (a container's limit) allows less.
    """
    found = []
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    with contextlib.suppress(OSError, ValueError):
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max":
            found.append(max(int(limit) - used, 0))
    return min(found) if found else None


def check_room(path: str, need: int, what: str, option: str, detail: str = "") -> None:
    """Refuses (:class:`MachineFault`) when the file system under ``path`` has less than ``need``.

    ``detail`` says how ``need`` was estimated (e.g. "rows x epochs x bytes per row").
    """
    free = room(path)
    if free is None or need <= free.free:
        return
    how = f" ({detail})" if detail else ""
    raise MachineFault(
        f"not enough room to write {what} to {path}: it needs about {size_text(need)}{how}, "
        f"and the file system at {free.mount} has {size_text(free.free)} free of "
        f"{size_text(free.total)}. Stopped before writing any of it. Free space there, or "
        f"choose another {option} on a disk with room, then {RERUN}."
    )


def check_memory(
    need: int, what: str, advice: str, available: int | None = None, detail: str = ""
) -> None:
    """Refuses (:class:`MachineFault`) when ``need`` bytes exceed the memory available.

    ``available``: as :func:`available_memory` reads it unless given.
    """
    available = available_memory() if available is None else available
    if available is None or need <= available:
        return
    how = f" ({detail})" if detail else ""
    raise MachineFault(
        f"not enough memory for {what}: it needs about {size_text(need)}{how}, and this "
        f"machine has {size_text(available)} available. Stopped before writing any of it. "
        f"{advice}"
    )


def _device(path: str) -> int | None:
    if not is_local(path):
        return None
    try:
        return os.stat(existing_folder(path)).st_dev
    except OSError:
        return None


@contextlib.contextmanager
def writing(
    what: str,
    path: str,
    need: int | None = None,
    option: str | None = None,
    after: str | None = None,
) -> Iterator[None]:
    """Tags an exception raised in the block with what it was writing, unless an inner block did.

    Args:
        what: what is written, e.g. "the prepared dataset".
        path: where (a file or the output folder).
        need: the bytes the whole output needs, when known.
        option: the option that picks another place (``--output``).
        after: what a failure leaves, e.g. "the folder keeps what it held before".
    """
    context = Writing(what, os.fspath(path), need, option, after, _device(os.fspath(path)))
    try:
        yield
    except BaseException as e:
        if getattr(e, _CONTEXT_ATTR, None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(e, _CONTEXT_ATTR, context)
        raise


@contextlib.contextmanager
def naming(path: str) -> Iterator[None]:
    """Names ``path`` in an ``OSError`` raised in the block without a file name.

    A failed ``write()`` names no file; named, it still does after crossing a worker pool.
    """
    try:
        yield
    except OSError as e:
        if e.filename is None:
            e.filename = os.fspath(path)
        raise


def _tf_errno(e: BaseException) -> int | None:
    """The errno a TensorFlow error's message names (by its ``strerror`` text), if any."""
    text = str(getattr(e, "message", e))
    for code in _KNOWN:
        if os.strerror(code) in text:
            return code
    return None


def _is_tf_error(e: BaseException) -> bool:
    return any(
        c.__name__ in _TF_ERRORS and c.__module__.startswith("tensorflow") for c in type(e).__mro__
    )


def _fault(e: BaseException) -> tuple[str, int | None, str | None] | None:
    """(kind, errno, path named by the error) of a machine fault; ``None`` for anything else."""
    if isinstance(e, MemoryError):
        return "memory", None, None
    if isinstance(e, WorkerKilled):
        return "killed", None, None
    if isinstance(e, OSError) and e.errno is not None:
        path = e.filename if isinstance(e.filename, str) else None
        if e.errno in _KNOWN:
            return "errno", e.errno, path
        if e.errno == errno.ENOENT and _vanished(e):
            return "errno", errno.ENOTCONN, path
        return None
    if _is_tf_error(e):
        text = str(getattr(e, "message", e))
        code = _tf_errno(e)
        found = _PATH_IN_TEXT.findall(text)
        path = found[-1] if found else None
        if code is not None:
            return "errno", code, path
        if type(e).__name__ == "ResourceExhaustedError" and _TF_OOM.search(text):
            return "memory", None, None
    return None


def _vanished(e: OSError) -> bool:
    """Whether a missing file means the folder being written is gone (removed or unmounted)."""
    context: Writing | None = getattr(e, _CONTEXT_ATTR, None)
    if context is None:
        return False
    if context.device is None:
        return False
    return not os.path.exists(context.path) or _device(context.path) != context.device


def describe(e: BaseException) -> str | None:
    """One paragraph for a machine fault (see the module docstring); ``None`` for other errors."""
    if isinstance(e, MachineFault):
        return str(e)
    found = _fault(e)
    if found is None:
        return None
    kind, code, named = found
    context: Writing | None = getattr(e, _CONTEXT_ATTR, None)
    where = named or (context.path if context else None)
    doing = f"writing {context.what}" if context else "working"
    place = f" to {where}" if where and context else (f" on {where}" if where else "")
    after = f" {context.after[0].upper()}{context.after[1:]}." if context and context.after else ""
    other = f"another {context.option}" if context and context.option else "another folder"
    if kind == "memory":
        return _memory_message(doing, place, after)
    if kind == "killed":
        return _killed_message(e, doing, place, after)
    free = room(where) if where else None
    numbers = ""
    if free is not None:
        numbers = (
            f" The file system at {free.mount} has {size_text(free.free)} free of "
            f"{size_text(free.total)}"
        )
        numbers += (
            f"; this needs about {size_text(context.need)}." if context and context.need else "."
        )
    elif context and context.need:
        numbers = f" This needs about {size_text(context.need)}."
    if code in _NO_SPACE:
        problem = "the disk quota is used up" if code == errno.EDQUOT else "the disk is full"
        advice = f"Free space there, or choose {other} on a disk with room, then {RERUN}."
    elif code in _READ_ONLY:
        problem, numbers = "the file system is read-only", ""
        advice = f"Choose {other} on a writable disk (or remount it read-write), then {RERUN}."
    elif code in _FORBIDDEN:
        problem, numbers = f"permission denied (running as {_user()})", ""
        advice = (
            f"Choose {other} this user may write to, or grant it access, then {RERUN}."
            if context
            else f"Grant this user access to it, then {RERUN}."
        )
    elif code in _NO_MEMORY:
        return _memory_message(doing, place, after)
    else:
        problem, numbers = "the folder or the disk under it vanished (unmounted or removed)", ""
        advice = f"Mount the disk again (or choose {other}), then {RERUN}."
    return f"{problem} while {doing}{place}.{numbers}{after} {advice}"


def _memory_message(doing: str, place: str, after: str) -> str:
    free = available_memory()
    have = f" This machine has {size_text(free)} of memory available now." if free else ""
    return (
        f"out of memory while {doing}{place}.{have}{after} Use a machine with more memory, "
        "fewer worker processes (--workers), or --runner beam for data prep (Dataflow spreads "
        "it over machines), then run the command again."
    )


def _killed_message(e: WorkerKilled, doing: str, place: str, after: str) -> str:
    name = signal.Signals(e.signum).name if e.signum else "a signal"
    oom = (
        " (most often the kernel's out-of-memory killer: see `dmesg`)"
        if e.signum in (None, signal.SIGKILL)
        else ""
    )
    free = available_memory()
    have = f" This machine has {size_text(free)} of memory available now." if free else ""
    return (
        f"a {e.what} worker process was killed by {name}{oom} while {doing}{place}; "
        f"{e.workers} workers were running.{have}{after} Run with fewer workers (--workers), "
        "on a machine with more memory, or with --runner beam, then run the command again."
    )


def _user() -> str:
    import pwd

    uid = os.geteuid()
    with contextlib.suppress(KeyError):
        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    return f"uid {uid}"


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """A component's body: a machine fault ends the process with its paragraph, no traceback.

    Raises ``SystemExit`` with the message (the interpreter prints it to stderr, exit status 1);
    verbose output (``NCF_VERBOSE``) prints the paragraph and lets the traceback through.
    """
    from training_core.common import console

    try:
        yield
    except Exception as e:
        message = describe(e)
        if message is None:
            raise
        if console.verbose():
            print(f"error: {message}", file=sys.stderr)
            raise
        raise SystemExit(f"error: {message}") from None
