"""Builds verify's ``LD_PRELOAD`` libraries (``*_preload.c`` here) with the machine's C compiler."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

from training_core.common import atomic_writes


def compiler(cc: str | None = None) -> str | None:
    """The C compiler to use: ``cc``, ``$CC``, ``cc`` or ``gcc`` on ``PATH`` (None: none)."""
    cc = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    return cc if cc and shutil.which(cc) else None


def build(source: str, stem: str, directory: str, cc: str | None = None) -> str | None:
    """Compiles ``source`` into ``directory/lib{stem}-{digest}.so``; returns it (None: no compiler).

    The name carries a digest of the source, so an existing build is reused. The compiler writes
    to ``atomic_writes.partial_name(library)``, renamed into place when done; what a killed build
    left there is removed first (``atomic_writes.remove_stale_partials``).

    Raises:
        RuntimeError: the compiler failed (its message is included).
    """
    cc = compiler(cc)
    if cc is None:
        return None
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    os.makedirs(directory, exist_ok=True)
    library = os.path.join(directory, f"lib{stem}-{digest}.so")
    atomic_writes.remove_stale_partials(library)
    if os.path.exists(library):
        return library
    partial = atomic_writes.partial_name(library)
    open(partial, "x").close()  # Ours alone (partial_name's rule); the compiler writes over it.
    try:
        done = subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", "-o", partial, source, "-ldl"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{cc} could not build {source}: {done.stderr.strip()}")
        os.replace(partial, library)
    finally:
        if os.path.lexists(partial):
            os.remove(partial)
    return library


def add(env: dict[str, str], library: str) -> None:
    """Puts ``library`` first on ``env``'s ``LD_PRELOAD`` (in place).

    Raises:
        ValueError: the path holds a space or a colon, which ``LD_PRELOAD`` takes as separators
            (the dynamic loader would skip the library with a warning, and its guard with it).
    """
    if any(c.isspace() or c == ":" for c in library):
        raise ValueError(
            f"LD_PRELOAD cannot carry {library!r} (a space or ':' in the path); give verify a "
            "work folder (--work-dir) whose path has neither"
        )
    env["LD_PRELOAD"] = " ".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)
