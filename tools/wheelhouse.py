"""Which locked requirements a wheelhouse still lacks (used by ``install_locked.sh wheels``).

``python3 tools/wheelhouse.py missing REQUIREMENTS WHEELHOUSE OUT`` reads a hash-pinned
requirements file (``uv export`` format), keeps every entry that has no wheel in WHEELHOUSE whose
sha256 is one of the entry's locked hashes, and writes those entries to OUT. Wheels that were
built from a source distribution never match a locked hash, so they are always handed to
``pip wheel`` again, which rebuilds them from the hash-checked sdist (or reuses pip's own
wheel cache, which records the sdist's hash). It prints how many entries were already present.

Only the standard library: this runs with the builder's bare ``python3``.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def parse_entries(text: str) -> list[str]:
    """Splits a requirements file into entries (one requirement with its hash lines)."""
    entries: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not line[0].isspace() and current:
            entries.append("\n".join(current))
            current = []
        current.append(line)
    if current:
        entries.append("\n".join(current))
    return entries


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def missing(requirements: Path, wheelhouse: Path, out: Path) -> int:
    """Writes the entries lacking a hash-matching wheel to ``out``; returns how many had one."""
    present = 0
    keep: list[str] = []
    wheels = sorted(wheelhouse.glob("*.whl")) if wheelhouse.is_dir() else []
    have = {_sha256(w) for w in wheels}
    for entry in parse_entries(requirements.read_text()):
        if have & set(_HASH.findall(entry)):
            present += 1
        else:
            keep.append(entry)
    out.write_text("".join(f"{e}\n" for e in keep))
    return present


def main(argv: list[str]) -> None:
    """Command line: ``missing REQUIREMENTS WHEELHOUSE OUT``."""
    if len(argv) != 4 or argv[0] != "missing":
        sys.exit("usage: wheelhouse.py missing REQUIREMENTS WHEELHOUSE OUT")
    present = missing(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    print(f"{present} locked wheels already in {argv[2]} (hash-checked)")


if __name__ == "__main__":
    main(sys.argv[1:])
