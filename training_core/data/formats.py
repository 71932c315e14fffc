"""Input layouts: the format names, which one a file or folder holds, how one file is laid out.

:func:`resolve_input` finds the files to read and their format (from the file's name, else its
first bytes; :func:`normalize_format` takes the aliases people type); :func:`describe_file`
reads one file's header or schema, no row, into the :class:`FileLayout` every reader starts from.
"""

from __future__ import annotations

import dataclasses
import glob
import os

import pyarrow as pa

from training_core.common import hints
from training_core.data.input_files import open_text
from training_core.data.read_errors import DataError

# Canonical format names and the aliases people type.
MOVIELENS_100K = "movielens-100k"  # u.data: user \t item \t rating \t timestamp, no header.
MOVIELENS_DAT = "movielens-dat"  # ml-1m / ml-10m ratings.dat: user::item::rating::timestamp.
MOVIELENS_CSV = (
    "movielens-csv"  # ml-20m/25m/32m/latest ratings.csv: userId,movieId,rating,timestamp.
)
CSV = "csv"  # Any headed table with named user, item and timestamp columns (CSV_DELIMITERS).

# The separators a headed table may use (CSV's comma, a tab-separated .tsv, the semicolon of
# spreadsheets where the comma is the decimal mark, a pipe): the header line picks one.
CSV_DELIMITERS = (",", "\t", ";", "|")
PARQUET = "parquet"  # Any Parquet file (or folder of files) with those columns.
FORMATS = (MOVIELENS_100K, MOVIELENS_DAT, MOVIELENS_CSV, CSV, PARQUET)
FORMAT_ALIASES = {
    "auto": "auto",
    "ml-100k": MOVIELENS_100K,
    "ml-1m": MOVIELENS_DAT,
    "ml-10m": MOVIELENS_DAT,
    "ml-20m": MOVIELENS_CSV,
    "ml-25m": MOVIELENS_CSV,
    "ml-32m": MOVIELENS_CSV,
    "ml-latest": MOVIELENS_CSV,
    "ml-latest-small": MOVIELENS_CSV,
    **{f: f for f in FORMATS},
}
_KNOWN_FILES = ("u.data", "ratings.dat", "ratings.csv")

# The Arrow extension type that pickles a Python object (refused by pyarrow_hotfix).
PICKLED_ARROW_TYPE = "arrow.py_extension_type"


@dataclasses.dataclass(frozen=True)
class FileLayout:
    """How one input file is laid out, as its header or schema tells (no row read).

    Every reader starts here: ``io.read_interactions``, the Beam engine (``prepare_beam``) and
    the TFDV source (``beam_source``).
    """

    path: str
    format: str
    names: tuple[str, ...]  # Every column in file order (text) or in the schema (Parquet).
    delimiter: str = ""  # As written in the file ("::" for ratings.dat); "" for Parquet.
    has_header: bool = False  # Text whose first line names the columns.


def normalize_format(name: str) -> str:
    """Canonical format name for a name or alias."""
    key = name.strip().lower() if name else "auto"
    if key not in FORMAT_ALIASES:
        raise DataError(f"unknown format {name!r}; use one of: {', '.join(sorted(FORMAT_ALIASES))}")
    return FORMAT_ALIASES[key]


def resolve_input(path: str, fmt: str = "auto") -> tuple[list[str], str]:
    """The files to read and their format, for a file or a folder (an unzipped MovieLens folder).

    Raises:
        DataError: nothing readable there, or the format cannot be told.
    """
    fmt = normalize_format(fmt)
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file or folder; pass --input a ratings file or folder")
    if os.path.isdir(path):
        parquet = sorted(glob.glob(os.path.join(path, "*.parquet")))
        if fmt == PARQUET or (fmt == "auto" and parquet):
            if not parquet:
                raise DataError(f"{path}: no *.parquet files in this folder")
            return parquet, PARQUET
        for name in _KNOWN_FILES:
            for candidate in (name, name + ".gz"):
                full = os.path.join(path, candidate)
                if os.path.isfile(full):
                    return [full], fmt if fmt != "auto" else _format_from_name(full)
        raise DataError(
            f"{path}: found none of {', '.join(_KNOWN_FILES)} or *.parquet in this folder; pass "
            f"the ratings file itself with --input and its layout with {hints.option('--format')}"
        )
    if fmt == "auto":
        fmt = _format_from_name(path) or _sniff_format(path)
    return [path], fmt


def _format_from_name(path: str) -> str:
    base = os.path.basename(path).lower()
    if base.endswith(".gz"):
        base = base[:-3]
    if base.endswith(".parquet"):
        return PARQUET
    if base == "u.data":
        return MOVIELENS_100K
    if base == "ratings.dat":
        return MOVIELENS_DAT
    if base == "ratings.csv":
        return MOVIELENS_CSV
    return ""


def _sniff_format(path: str) -> str:
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PAR1":
        return PARQUET
    with open_text(path) as f:
        first = f.readline()
    if not first.strip():
        raise DataError(f"{path}: the file is empty (no interactions)")
    if "::" in first:
        return MOVIELENS_DAT
    fields = first.rstrip("\n").split("\t")
    if len(fields) == 4 and all(is_int(x) for x in fields):
        return MOVIELENS_100K
    delim = header_delimiter(first)
    header = [h.strip() for h in first.split(delim)]
    if delim == "," and header[:4] == ["userId", "movieId", "rating", "timestamp"]:
        return MOVIELENS_CSV
    if len(header) >= 3 and not all(is_int(h) for h in header):
        return CSV
    raise DataError(
        f"{path}: cannot tell the layout from the name or the first line {first.strip()!r}; "
        f"pass {hints.option('--format')} (one of {', '.join(FORMATS)})"
    )


def is_int(text: str) -> bool:
    """Whether ``text`` (spaces aside) is an integer, as ``int`` reads it."""
    try:
        int(text.strip())
    except ValueError:
        return False
    return True


def describe_file(path: str, fmt: str) -> FileLayout:
    """The layout of one file of a canonical format (``resolve_input``'s); reads no rows.

    A header line that is blank gives no names.

    Raises:
        DataError: an empty file, or a Parquet file whose schema cannot be read.
    """
    if os.path.getsize(path) == 0:
        raise DataError(f"{path}: the file is empty (no interactions)")
    if fmt == PARQUET:
        import pyarrow.parquet as pq

        try:
            names = tuple(pq.read_schema(path).names)
        except (pa.ArrowInvalid, OSError) as e:
            raise DataError(f"{path}: not a readable Parquet file ({e})") from None
        except RuntimeError as e:  # pyarrow_hotfix (training_core/data/__init__.py).
            if PICKLED_ARROW_TYPE not in str(e):
                raise
            raise DataError(
                f"{path}: refused: it declares a column of type {PICKLED_ARROW_TYPE}, a pickled "
                "Python object that would run code as the file is read (CVE-2023-47248). Write "
                "the file again with plain column types"
            ) from None
        return FileLayout(path, fmt, names)
    delim, fixed, _ = _layout(fmt)
    if fixed is not None:
        return FileLayout(path, fmt, tuple(fixed), delim, has_header=False)
    with open_text(path) as f:
        first = f.readline()
    if fmt == CSV:
        delim = header_delimiter(first)
    names = (
        tuple(h.strip().strip('"') for h in first.rstrip("\r\n").split(delim))
        if first.strip()
        else ()
    )
    return FileLayout(path, fmt, names, delim, has_header=True)


def header_delimiter(header: str) -> str:
    """The delimiter of a headed table: the one of ``CSV_DELIMITERS`` seen most in its header.

    A comma where none is seen (a one-column header, refused later with its columns named).
    """
    counts = [(header.count(d), -i, d) for i, d in enumerate(CSV_DELIMITERS)]
    count, _, delim = max(counts)
    return delim if count else ","


def _layout(fmt: str) -> tuple[str, list[str] | None, int]:
    """(delimiter, column names if the file has no header, number of fields)."""
    if fmt == MOVIELENS_100K:
        return "\t", ["user", "item", "rating", "timestamp"], 4
    if fmt == MOVIELENS_DAT:
        return "::", ["user", "item", "rating", "timestamp"], 4
    if fmt in (MOVIELENS_CSV, CSV):
        return ",", None, 0
    raise DataError(f"format {fmt!r} is not a delimited text layout")
