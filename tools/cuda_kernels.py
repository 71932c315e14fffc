"""Which GPU architectures a shared object carries CUDA kernels for: SASS (cubins) and PTX.

``python3 tools/cuda_kernels.py FILE.so ...`` reads each file's ``.nv_fatbin`` section (the CUDA
fat binaries nvcc/clang embed) and prints, per architecture, how many entries are SASS (machine
code for exactly that compute capability: runs as is) and how many PTX (compiled by the driver
at load time, the JIT, and cached in ``CUDA_CACHE_PATH``). docs/images.md ("GPU: H100") uses it
on TensorFlow's libraries: a GPU with SASS for its architecture starts without a PTX JIT.

The fat binary layout read here (container header ``0xBA55ED50``, then entries with a kind, 1
PTX or 2 ELF, and a compute capability) is NVIDIA's ``fatbinary_section.h``; no CUDA tool is
needed, so it runs on any machine.
"""

from __future__ import annotations

import argparse
import collections
import struct
import sys
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "PTX", 2: "SASS"}


def nv_fatbin(path: Path) -> bytes:
    """The bytes of an ELF file's ``.nv_fatbin`` section (b"" when it has none)."""
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:
            raise ValueError(f"{path} is not a 64-bit ELF file")
        (shoff,) = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
        _, _, _, _, names_offset, names_size = sections[shstrndx]
        f.seek(names_offset)
        names = f.read(names_size)
        for name, _, _, _, offset, size in sections:
            if names[name : names.index(b"\0", name)] == b".nv_fatbin":
                f.seek(offset)
                return f.read(size)
    return b""


def kernels(path: Path) -> dict[tuple[str, int], int]:
    """``{(kind, compute capability): entries}`` of a file's fat binaries, e.g. ("SASS", 90)."""
    data = nv_fatbin(path)
    found: collections.Counter = collections.Counter()
    pos = 0
    while pos + 16 <= len(data):
        magic, _, header_size, body_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # Containers are 8-byte aligned; padding between them.
            continue
        entry, end = pos + header_size, pos + header_size + body_size
        while entry < end:
            kind, _, entry_header, entry_size = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            found[(KINDS.get(kind, str(kind)), arch)] += 1
            entry += entry_header + entry_size
        pos = end
    return dict(found)


def main(argv: list[str] | None = None) -> int:
    """Prints each file's kernels per architecture."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.files:
        found = kernels(path)
        listed = ", ".join(f"{kind} sm_{arch}: {n}" for (kind, arch), n in sorted(found.items()))
        print(f"{path}: {listed or 'no CUDA kernels'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
