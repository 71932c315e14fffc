"""Opening raw input files: a .gz bounded by the memory available, text as UTF-8, lines split.

Every reader opens its input through here: :func:`open_gz` stops a .gz file that decompresses
past :func:`gz_limit` (a decompression bomb), :func:`open_source` gives a file to parse,
:func:`open_text` its text (a byte-order mark dropped), :func:`split_lines` its lines and fields
for the line-by-line checks, and :func:`file_sha256` the files' content hash.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import hashlib
import io
from collections.abc import Iterator

import pyarrow as pa

from training_core.common import faults


def open_text(path: str):
    """A text file (plain or .gz, bounded) opened for reading, as UTF-8."""
    # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8" writes one) is not part of the first
    # column's name; a file without one reads the same as UTF-8.
    return (
        io.TextIOWrapper(open_gz(path), encoding="utf-8-sig", errors="replace")
        if path.endswith(".gz")
        else open(path, encoding="utf-8-sig", errors="replace")
    )


# A .gz input is read whole into memory, and the table parsed from it takes about as much again:
# its decompressed bytes may use this share of the memory available (``faults.available_memory``,
# as the early memory checks read it), or GZ_LIMIT_UNKNOWN where that cannot be read.
GZ_MEMORY_SHARE = 0.5
GZ_LIMIT_UNKNOWN = 16 * 10**9


def gz_limit() -> tuple[int, str]:
    """The most bytes a .gz input may decompress to here, and where that number comes from."""
    available = faults.available_memory()
    if available is None:
        return GZ_LIMIT_UNKNOWN, "the limit where the memory available cannot be read"
    share = f"{GZ_MEMORY_SHARE:.0%}"
    return int(available * GZ_MEMORY_SHARE), (
        f"{share} of the {faults.size_text(available)} of memory available"
    )


class _BoundedGzip(io.RawIOBase):
    """A .gz file's decompressed bytes that refuse to go past :func:`gz_limit` (a gzip bomb)."""

    def __init__(self, file: gzip.GzipFile, path: str):
        self._file, self._path, self._read = file, path, 0
        self._limit, self._why = gz_limit()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._file.readinto(buffer)
        self._read += n
        if self._read > self._limit:
            raise faults.MachineFault(
                f"not enough memory to read {self._path}: it decompresses to more than "
                f"{faults.size_text(self._limit)} ({self._why}), and a .gz input is read whole "
                "into memory. Stopped reading it there; nothing was written. If the file is meant "
                f"to be that large, decompress it yourself (gunzip -k {self._path}) and pass the "
                "plain file with --input, or run on a machine with more memory; if it is not, it "
                "may be a decompression bomb: check where it came from."
            )
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


def open_gz(path: str) -> io.BufferedReader:
    """A .gz file opened for reading, bounded by :func:`gz_limit`.

    Raises:
        faults.MachineFault: once the decompressed bytes pass the limit, naming the file.
    """
    return io.BufferedReader(_BoundedGzip(gzip.GzipFile(path, "rb"), path))


@contextlib.contextmanager
def open_source(path: str) -> Iterator[bytes | pa.NativeFile]:
    """A file to parse: open when plain (pyarrow reads it while it parses), else its bytes.

    Not memory-mapped: a file cut short while it is read would kill the process (SIGBUS).
    """
    if path.endswith(".gz"):
        with open_gz(path) as f:
            yield f.read()
        return
    with pa.OSFile(path) as f:
        yield f


def _lines(path: str) -> Iterator[tuple[int, str]]:
    with open_text(path) as f:
        for number, line in enumerate(f, start=1):
            yield number, line.rstrip("\r\n")


def split_lines(path: str, delim: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line number, line, fields); a CSV's quoted fields may hold its delimiter (and newlines)."""
    if delim in ("\t", "::"):
        for number, line in _lines(path):
            yield number, line, line.split(delim)
        return
    with open_text(path) as f:
        reader = csv.reader(f, delimiter=delim)
        start = 1
        try:
            for fields in reader:
                yield start, delim.join(fields), fields
                start = reader.line_num + 1
        except csv.Error:
            return  # Past what the csv module reads; the caller falls back to its message.


def file_sha256(paths: list[str]) -> str:
    """Content hash of the source files (names excluded, so a moved file hashes the same)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 23), b""):
                h.update(chunk)
    return h.hexdigest()
