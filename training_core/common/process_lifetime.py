"""How long a process lives: a worker dies with its parent, SIGTERM exits through ``finally``.

:func:`die_with_parent` makes a worker process die with the process that started it (and drop the
folder locks it inherited); :func:`terminate_as_exit` turns SIGTERM into ``SystemExit`` so that
``finally`` blocks clean up.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator

from training_core.common import folder_lock

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """In a forked worker: be killed when the parent dies (Linux); drop inherited lock fds.

    If the parent died before this ran, exits at once. Use as a pool's ``initializer``.
    """
    folder_lock.drop_inherited()
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
