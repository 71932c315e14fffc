"""verify's Cloud Storage FUSE emulation: the ``/gcs/`` stand-in refuses what gcsfuse refuses.

On Vertex AI a component's artifact paths are on a gcsfuse mount, where (flat-namespace bucket,
default ``--rename-dir-limit`` 0) renaming a directory fails with ``ENOSYS``, ``renameat2`` with
flags fails with ``EINVAL``, hard links fail with ``ENOSYS`` and renaming a file works (a copy,
then a delete). A plain local folder allows all of it, so a step that publishes a folder by
renaming it passed verify and failed on Vertex AI at every attempt.

Two ways to make the stand-in folder answer as gcsfuse does, for the processes verify starts:

- :data:`PRELOAD`: ``gcsfuse_preload.c`` (next to this module), compiled with the machine's C
  compiler into the verification's work folder and put on ``LD_PRELOAD``. It interposes
  ``rename``, ``renameat``, ``renameat2``, ``link`` and ``linkat`` in libc, so it holds for
  TensorFlow's C++ file system, Beam and ``ctypes`` callers as much as for Python's ``os``.
- :data:`PYTHON`, where there is no C compiler: the ``sitecustomize`` shim
  (``vertex_emulator/shim.py``) refuses the same in Python's ``os.rename``, ``os.replace`` and
  ``os.link`` only.

:func:`prepare` picks one; docs/verify.md lists what neither emulates.
"""

from __future__ import annotations

import os

from vertex_emulator import preload

MODE_ENV = "NCF_VERIFY_GCSFUSE"  # Which emulation a process runs under (read by the shim).
PRELOAD = "preload"
PYTHON = "python"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gcsfuse_preload.c")


def build(directory: str, cc: str | None = None) -> str | None:
    """Compiles the preload library into ``directory``; returns its path (None: no compiler).

    Raises:
        RuntimeError: the compiler failed (its message is included).
    """
    return preload.build(SOURCE, "ncf-gcsfuse", directory, cc)


def prepare(directory: str) -> tuple[str, str | None]:
    """The emulation for this machine: (:data:`PRELOAD`, library) or (:data:`PYTHON`, None)."""
    library = build(directory)
    return (PRELOAD, library) if library else (PYTHON, None)


def process_env(env: dict[str, str], mode: str, library: str | None) -> None:
    """Puts the emulation into a process's environment ``env`` (in place)."""
    env[MODE_ENV] = mode
    if mode == PRELOAD and library:
        preload.add(env, library)


def describe(mode: str) -> str:
    """One line for the report: what the ``/gcs/`` stand-in refuses, and through what."""
    if mode == PRELOAD:
        return (
            "gcsfuse rules on the /gcs/ stand-in (LD_PRELOAD library, every caller): directory "
            "renames fail with ENOSYS, renameat2 flags with EINVAL, hard links with ENOSYS"
        )
    return (
        "gcsfuse rules on the /gcs/ stand-in (no C compiler: Python's os module only): "
        "directory renames fail with ENOSYS, hard links with ENOSYS"
    )
