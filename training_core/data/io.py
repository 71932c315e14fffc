"""Readers for raw interaction tables: every MovieLens layout, and any CSV or Parquet table.

All readers return the same :class:`Interactions` (user and item ids, int64 timestamps, in file
order). Parsing uses pyarrow for speed; when the fast parser rejects a file, a line-by-line pass
finds the first bad line so that the error names the file, the line and what to do.

Ids (``ids.ID_KINDS``): each id column is int64 or string, as ``--id-type`` says (``auto``:
a text column whose every value is an integer is int64, one with no integer value is string, one
that mixes them is an error; a Parquet column's own type decides). An id is kept exactly as
written: an empty id, one with spaces at either end, or one holding a line break or another
control character is refused.

Positives (:class:`PositiveRule`): ``--min-rating`` and ``--positive-events`` mark the rows that
are positives; the others are "seen only" (``Interactions.positive``).

Both engines read with the same functions, file by file (here) or chunk by chunk
(``prepare_beam``): :func:`read_columns` names the columns to read, :func:`parse_ids` parses text
with the id types to try, :func:`table_columns` turns one table into :class:`ChunkRows` (ids as
read, with an :class:`IdScan` of each id column), :func:`resolve_kinds` decides each column's kind
from every chunk's scans, and :func:`convert` gives a chunk's ids that kind.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import datetime
import functools
import glob
import gzip
import hashlib
import io
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from training_core.common import faults, hints
from training_core.data.ids import ID_AUTO, ID_INT64, ID_KINDS, ID_STRING, ID_TYPES

log = logging.getLogger(__name__)

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

# Column names tried, in order, when the caller names none.
USER_ALIASES = ("user_id", "userId", "user", "uid", "UserID")
ITEM_ALIASES = ("item_id", "itemId", "movieId", "movie_id", "item", "iid", "MovieID")
TIME_ALIASES = ("timestamp", "ts", "time", "event_time", "Timestamp")
RATING_ALIASES = ("rating", "Rating", "score", "stars")
EVENT_ALIASES = ("event", "event_type", "action")

# Keys of Interactions.rule_counts: the rows each rule of PositiveRule made seen-only.
BELOW_MIN_RATING = "below_min_rating"
NOT_POSITIVE_EVENT = "not_positive_event"

_KNOWN_FILES = ("u.data", "ratings.dat", "ratings.csv")

# The one rule for ids, shared by the reader (prepare-data) and the validation gate's schema.
MIN_ID = 0
NEGATIVE_ID_ADVICE = (
    f"ids must be integers >= {MIN_ID} (a -1 usually marks a missing value): drop those rows or "
    "fill in the ids"
)
TIME_ADVICE = (
    "write times as integer epoch seconds or ISO-8601 (2020-01-31, 2020-01-31T12:00:00Z); "
    "fix or drop this row"
)
_BLOCK_BYTES = 1 << 24  # pyarrow's CSV block; types are inferred from the first one.


# The Arrow extension type that pickles a Python object (refused by pyarrow_hotfix).
PICKLED_ARROW_TYPE = "arrow.py_extension_type"


class DataError(ValueError):
    """Raw input that cannot be read as interactions; the message says where and what to do."""


@dataclasses.dataclass(frozen=True)
class Interactions:
    """Raw interactions in file order, with where they came from."""

    users: np.ndarray  # Raw user ids: int64, or an object array of str (user_id_type).
    items: np.ndarray  # Raw item ids, likewise (item_id_type).
    timestamps: np.ndarray  # int64 (seconds for MovieLens; any monotone unit elsewhere).
    source_files: tuple[str, ...]
    format: str
    user_id_type: str = ID_INT64  # ids.ID_KINDS.
    item_id_type: str = ID_INT64
    # Which rows are positives (PositiveRule); None: every row. The others are "seen only".
    positive: np.ndarray | None = None
    # Rows each positive rule turned into seen-only rows, by rule ("below_min_rating", ...).
    rule_counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.users)


@dataclasses.dataclass(frozen=True)
class Columns:
    """Names of the user, item and timestamp columns of a generic table (None: detect)."""

    user: str | None = None
    item: str | None = None
    timestamp: str | None = None
    rating: str | None = None  # The rating column (PositiveRule.min_rating); None: detect/none.
    event: str | None = None  # The event column (PositiveRule.positive_events); None: detect/none.


@dataclasses.dataclass(frozen=True)
class FileLayout:
    """How one input file is laid out, as its header or schema tells (no row read).

    Every reader starts here: :func:`read_interactions`, the Beam engine (``prepare_beam``) and
    the TFDV source (``beam_source``).
    """

    path: str
    format: str
    names: tuple[str, ...]  # Every column in file order (text) or in the schema (Parquet).
    delimiter: str = ""  # As written in the file ("::" for ratings.dat); "" for Parquet.
    has_header: bool = False  # Text whose first line names the columns.


def parse_events(text: str) -> tuple[str, ...]:
    """The event names of ``--positive-events`` text ("purchase, add_to_cart"), stripped."""
    return tuple(name for name in (part.strip() for part in text.split(",")) if name)


@dataclasses.dataclass(frozen=True)
class PositiveRule:
    """Which rows are positives; a row that fails a rule is "seen only".

    ``min_rating``: rows rated below it are seen only (None: no rating rule). ``positive_events``:
    rows of other events are seen only (empty: no event rule). A row is counted under the first
    rule it fails (``rule_counts``), in that order.
    """

    min_rating: float | None = None
    positive_events: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, min_rating: float | None, positive_events: str) -> PositiveRule:
        """The rule of ``--min-rating`` and ``--positive-events`` ("a,b": parse_events)."""
        return cls(min_rating, parse_events(positive_events or ""))

    @property
    def active(self) -> bool:
        """Whether any row can be seen only (else every row is a positive)."""
        return self.min_rating is not None or bool(self.positive_events)


@dataclasses.dataclass(frozen=True)
class ReadColumns:
    """The columns of one file to read (:func:`read_columns`): ids, time, and the rule's."""

    user: str
    item: str
    timestamp: str
    rating: str | None = None  # Read only when PositiveRule.min_rating is set.
    event: str | None = None  # Read only when PositiveRule.positive_events is set.

    @property
    def names(self) -> tuple[str, ...]:
        """Every column to read (``include_columns``), ids first."""
        named = (self.user, self.item, self.timestamp, self.rating, self.event)
        return tuple(n for n in named if n is not None)

    def text_types(self, ids_as_text: bool) -> dict[str, pa.DataType]:
        """``column_types`` to parse delimited text with (``parse_delimited``).

        Ids as int64 (the fast path) or as text; a rating as float64 and an event as text, so
        that every block of a file parses alike whatever its first values look like.
        """
        id_type = pa.string() if ids_as_text else pa.int64()
        types = {self.user: id_type, self.item: id_type}
        if self.rating is not None:
            types[self.rating] = pa.float64()
        if self.event is not None:
            types[self.event] = pa.string()
        return types


T = TypeVar("T")


def parse_ids(parse: Callable[[dict[str, pa.DataType]], T], cols: ReadColumns, id_type: str) -> T:
    """``parse(column_types)`` of delimited text, with the id types ``id_type`` allows.

    ``auto`` and ``int64`` parse the ids as int64 first (fast; every integer-id file); ``auto``
    parses them again as text when a value fails to convert, ``string`` only as text. Both
    engines call it (per file, per chunk), so that :func:`table_columns` sees the same columns.

    Raises:
        pa.ArrowInvalid, pa.ArrowTypeError: the last try's; ``locate_error`` names the line.
    """
    if id_type == ID_STRING:
        return parse(cols.text_types(ids_as_text=True))
    try:
        return parse(cols.text_types(ids_as_text=False))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        # Text ids fail as a conversion; a line of the wrong shape fails as a parse error, which
        # a second parse would only repeat (and two failed threaded parses can abort pyarrow 10
        # at exit: "terminate called without an active exception").
        if id_type != ID_AUTO or "conversion error" not in str(e):
            raise
    return parse(cols.text_types(ids_as_text=True))


@dataclasses.dataclass(frozen=True)
class Sighting:
    """A value seen in an id column, and where: ``"events.csv: data row 7"``."""

    where: str
    value: str
    row: int = 0  # The data row ``where`` names (1-based, header excluded).


@dataclasses.dataclass(frozen=True)
class IdScan:
    """What one chunk's id column holds, for :func:`resolve_kinds` (small: send it anywhere).

    ``first_int``: its first integer value (an int64 column's first value); ``first_other``: its
    first value that is not an integer (a Parquet string column's first value, whatever it
    holds). Both None: no rows (or ``--id-type string``, which needs none).
    """

    column: str
    role: str  # "user id" or "item id".
    first_int: Sighting | None = None
    first_other: Sighting | None = None


@dataclasses.dataclass(frozen=True)
class IdColumn:
    """One chunk's ids as read: int64, or a numpy object array of str (before :func:`convert`)."""

    values: np.ndarray
    scan: IdScan


@dataclasses.dataclass(frozen=True)
class ChunkRows:
    """One table (a file, a chunk of one) as :func:`table_columns` reads it."""

    users: IdColumn
    items: IdColumn
    timestamps: np.ndarray  # int64 seconds (``_timestamps``).
    positive: np.ndarray | None  # bool per row; None: the rule is inactive (every row).
    rule_counts: dict[str, int]  # Rows per failed rule (the active rules' keys); sum over chunks.

    @property
    def scans(self) -> tuple[IdScan, IdScan]:
        """The user and item columns' scans, for :func:`resolve_kinds`."""
        return self.users.scan, self.items.scan

    def __len__(self) -> int:
        return len(self.timestamps)


def string_ids_option() -> str:
    """How to read every id as text here: ``--id-type string`` or the pipeline's parameter."""
    named = hints.option("--id-type")
    return f"{named} {ID_STRING}" if named == "--id-type" else named


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


def _open_text(path: str):
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


def _sniff_format(path: str) -> str:
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"PAR1":
        return PARQUET
    with _open_text(path) as f:
        first = f.readline()
    if not first.strip():
        raise DataError(f"{path}: the file is empty (no interactions)")
    if "::" in first:
        return MOVIELENS_DAT
    fields = first.rstrip("\n").split("\t")
    if len(fields) == 4 and all(_is_int(x) for x in fields):
        return MOVIELENS_100K
    delim = header_delimiter(first)
    header = [h.strip() for h in first.split(delim)]
    if delim == "," and header[:4] == ["userId", "movieId", "rating", "timestamp"]:
        return MOVIELENS_CSV
    if len(header) >= 3 and not all(_is_int(h) for h in header):
        return CSV
    raise DataError(
        f"{path}: cannot tell the layout from the name or the first line {first.strip()!r}; "
        f"pass {hints.option('--format')} (one of {', '.join(FORMATS)})"
    )


def _is_int(text: str) -> bool:
    try:
        int(text.strip())
    except ValueError:
        return False
    return True


def file_sha256(paths: list[str]) -> str:
    """Content hash of the source files (names excluded, so a moved file hashes the same)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda f=f: f.read(1 << 23), b""):
                h.update(chunk)
    return h.hexdigest()


def read_interactions(
    path: str,
    fmt: str = "auto",
    columns: Columns | None = None,
    id_type: str = ID_AUTO,
    rule: PositiveRule = PositiveRule(),
) -> Interactions:
    """Reads a ratings file or folder: ids of their kind, int64 timestamps, the positive rows.

    Args:
        path: a file (plain or .gz) or a folder holding one MovieLens ratings file or Parquet files.
        fmt: a format name or alias (``auto`` detects it from the name or the content).
        columns: column names for ``csv`` and ``parquet`` (detected from common names when absent).
        id_type: ``ids.ID_TYPES``: how the id columns are read (the module's docstring).
        rule: which rows are positives (``positive`` and ``rule_counts`` of the result).

    Raises:
        DataError: with the file, the line (or data row) where known, and what to change.
    """
    if id_type not in ID_TYPES:
        raise DataError(f"unknown id type {id_type!r}; use one of {', '.join(ID_TYPES)}")
    files, fmt = resolve_input(path, fmt)
    columns = columns or Columns()
    layouts = [describe_file(f, fmt) for f in files]
    parts = [_read_file(layout, columns, id_type, rule) for layout in layouts]
    try:
        user_kind, item_kind = resolve_kinds([p.scans for p in parts], id_type)
    except DataError:
        if fmt == PARQUET:
            raise
        # Name lines, as a text file's other errors do (a pass over the file, on this path only).
        resolve_kinds(
            [scans_at_lines(lo, p.scans) for lo, p in zip(layouts, parts, strict=True)], id_type
        )
        raise
    users = _joined([convert(p.users, user_kind) for p in parts])
    if len(users) == 0:
        raise DataError(f"{path}: no interactions (the table has a header but no rows)")
    positive = _joined([p.positive for p in parts]) if rule.active else None
    counts: dict[str, int] = {}
    for p in parts:
        for key, n in p.rule_counts.items():
            counts[key] = counts.get(key, 0) + n
    return Interactions(
        users=users,
        items=_joined([convert(p.items, item_kind) for p in parts]),
        timestamps=_joined([p.timestamps for p in parts]),
        source_files=tuple(files),
        format=fmt,
        user_id_type=user_kind,
        item_id_type=item_kind,
        positive=positive,
        rule_counts=counts,
    )


def scans_at_lines(layout: FileLayout, scans: tuple[IdScan, ...]) -> tuple[IdScan, ...]:
    """``scans`` of a text file whose sightings name the line (``path:LINE``), not the data row.

    For the message of ``resolve_kinds`` (call it again with these): other errors of a text file
    name lines too. ``Sighting.row`` counts data rows from the file's first; one pass over the
    file, up to the last row named.
    """
    seen = [s for scan in scans for s in (scan.first_int, scan.first_other) if s is not None]
    wanted = {s.row for s in seen}
    lines: dict[int, int] = {}
    row = 0
    for number, line, _ in _split_lines(layout.path, layout.delimiter):
        if (layout.has_header and number == 1) or not line.strip():
            continue
        row += 1
        if row in wanted:
            lines[row] = number
        if len(lines) == len(wanted):
            break

    def at_line(s: Sighting | None) -> Sighting | None:
        if s is None or s.row not in lines:
            return s
        return dataclasses.replace(s, where=f"{layout.path}:{lines[s.row]}")

    return tuple(
        dataclasses.replace(
            scan, first_int=at_line(scan.first_int), first_other=at_line(scan.first_other)
        )
        for scan in scans
    )


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    # One file's array is used as it is (a concatenation would copy it).
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _read_file(layout: FileLayout, columns: Columns, id_type: str, rule: PositiveRule) -> ChunkRows:
    cols = read_columns(layout, columns, rule)
    if layout.format == PARQUET:
        import pyarrow.parquet as pq

        table = pq.read_table(layout.path, columns=list(cols.names))
        return table_columns(table, cols, layout.path, id_type, rule, parquet=True)
    return _read_delimited(layout, cols, id_type, rule)


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
    with _open_text(path) as f:
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


def interaction_columns(layout: FileLayout, columns: Columns) -> tuple[str, str, str]:
    """A file's user, item and timestamp columns: as ``columns`` names them, else by alias.

    Headerless layouts (``u.data``, ``ratings.dat``) have fixed names and ignore ``columns``.

    Raises:
        DataError: a column that is not there, naming the file, the columns and the flag.
    """
    if layout.format != PARQUET and not layout.has_header:
        return "user", "item", "timestamp"
    return _select(list(layout.names), columns, layout.path)


def read_columns(layout: FileLayout, columns: Columns, rule: PositiveRule) -> ReadColumns:
    """The columns to read from a file: ``interaction_columns``' and those ``rule`` needs.

    A rating column only when ``rule.min_rating`` is set (MovieLens layouts: their own; a headed
    table: ``columns.rating`` or ``RATING_ALIASES``), an event column only when
    ``rule.positive_events`` is set (``columns.event`` or ``EVENT_ALIASES``).

    Raises:
        DataError: a column that is not there, naming the file, the columns and the option.
    """
    user, item, timestamp = interaction_columns(layout, columns)
    fixed = layout.format != PARQUET and not layout.has_header
    available = list(layout.names)
    rating = event = None
    if rule.min_rating is not None:
        if fixed:
            rating = "rating"
        else:
            rating = _pick(
                available,
                columns.rating,
                RATING_ALIASES,
                "rating",
                layout.path,
                "--rating-col",
                "--min-rating",
            )
    if rule.positive_events:
        if fixed:
            raise DataError(
                f"{layout.path}: a {layout.format} file has no event column (its columns are "
                f"{', '.join(available)}); {hints.option('--positive-events')} needs one: "
                "leave it unset for this file"
            )
        event = _pick(
            available,
            columns.event,
            EVENT_ALIASES,
            "event",
            layout.path,
            "--event-col",
            "--positive-events",
        )
    return ReadColumns(user, item, timestamp, rating, event)


def parse_delimited(
    data: bytes | pa.NativeFile,
    delimiter: str,
    column_names: Sequence[str] | None,
    skip_rows: int,
    include_columns: Sequence[str],
    column_types: dict[str, pa.DataType],
) -> pa.Table:
    """Delimited text (a whole file or a range of its lines) as an Arrow table, with pyarrow.

    ``column_names`` None: the first line is the header, as pyarrow reads it. ``data`` is bytes
    (a temporary or a range: a ``::`` file is rewritten with tabs, a copy) or an open Arrow file,
    which pyarrow reads while it parses.

    Raises:
        pa.ArrowInvalid, pa.ArrowTypeError: text the parser rejects; the caller names the line.
    """
    if delimiter == "::":
        # pyarrow takes one-character delimiters. A tab in a .dat field splits it: the line then
        # has a field too many, or the id a control character (locate_error says which).
        if isinstance(data, pa.NativeFile):
            data = data.read()
        data, delimiter = data.replace(b"::", b"\t"), "\t"
    return pacsv.read_csv(
        data if isinstance(data, pa.NativeFile) else pa.py_buffer(data),
        read_options=pacsv.ReadOptions(
            column_names=None if column_names is None else list(column_names),
            skip_rows=skip_rows,
            block_size=_BLOCK_BYTES,
        ),
        parse_options=pacsv.ParseOptions(delimiter=delimiter),
        convert_options=pacsv.ConvertOptions(
            include_columns=list(include_columns), column_types=column_types
        ),
    )


def _layout(fmt: str) -> tuple[str, list[str] | None, int]:
    """(delimiter, column names if the file has no header, number of fields)."""
    if fmt == MOVIELENS_100K:
        return "\t", ["user", "item", "rating", "timestamp"], 4
    if fmt == MOVIELENS_DAT:
        return "::", ["user", "item", "rating", "timestamp"], 4
    if fmt in (MOVIELENS_CSV, CSV):
        return ",", None, 0
    raise DataError(f"format {fmt!r} is not a delimited text layout")


def _pick(
    available: list[str],
    wanted: str | None,
    aliases: tuple[str, ...],
    role: str,
    where: str,
    flag: str,
    needed_by: str = "",
) -> str:
    """The column for ``role``: ``wanted``, else the first alias present.

    ``flag``: the option that names it (``--user-col``), as ``hints.option`` names it here;
    ``needed_by``: the option that needs the column, where not every run does.
    """
    flag = hints.option(flag)
    needs = f"{hints.option(needed_by)} needs one. " if needed_by else ""
    if wanted:
        if wanted not in available:
            raise DataError(
                f"{where}: no column named {wanted!r} for the {role}; the columns are "
                f"{', '.join(available)}. {needs}Fix {flag}."
            )
        return wanted
    for name in aliases:
        if name in available:
            return name
    raise DataError(
        f"{where}: no {role} column (looked for {', '.join(aliases)}); the columns are "
        f"{', '.join(available)}. {needs}Name it with {flag}."
    )


def _select(available: list[str], columns: Columns, where: str) -> tuple[str, str, str]:
    return (
        _pick(available, columns.user, USER_ALIASES, "user id", where, "--user-col"),
        _pick(available, columns.item, ITEM_ALIASES, "item id", where, "--item-col"),
        _pick(available, columns.timestamp, TIME_ALIASES, "timestamp", where, "--time-col"),
    )


def _read_delimited(
    layout: FileLayout, cols: ReadColumns, id_type: str, rule: PositiveRule
) -> ChunkRows:
    path = layout.path
    locate = functools.partial(locate_error, layout, cols, id_type=id_type)

    def parse(types: dict[str, pa.DataType]) -> pa.Table:
        with _source(path) as source:
            return parse_delimited(
                source,
                layout.delimiter,
                # The names as describe_file cleaned them (a header may pad its commas with
                # spaces), as the Beam readers pass them; a blank header line is left to the
                # parser.
                layout.names or None,
                1 if layout.has_header and layout.names else 0,
                cols.names,
                types,
            )

    try:
        table = parse_ids(parse, cols, id_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise locate(str(e)) from None
    try:
        return table_columns(table, cols, path, id_type, rule)
    except DataError as e:
        # The table only knows row numbers: name the line, as for a line that did not parse.
        raise locate(str(e), fallback=e) from None


@contextlib.contextmanager
def _source(path: str) -> Iterator[bytes | pa.NativeFile]:
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
    with _open_text(path) as f:
        for number, line in enumerate(f, start=1):
            yield number, line.rstrip("\r\n")


def _split_lines(path: str, delim: str) -> Iterator[tuple[int, str, list[str]]]:
    """(line number, line, fields); a CSV's quoted fields may hold its delimiter (and newlines)."""
    if delim in ("\t", "::"):
        for number, line in _lines(path):
            yield number, line, line.split(delim)
        return
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter=delim)
        start = 1
        try:
            for fields in reader:
                yield start, delim.join(fields), fields
                start = reader.line_num + 1
        except csv.Error:
            return  # Past what the csv module reads; the caller falls back to its message.


def parse_time(text: str) -> int:
    """Epoch seconds (floored) from an integer or an ISO-8601 date/time; UTC when no zone is given.

    The one reading of a time: the readers' timestamp column and ``validate``'s time bounds.

    Raises:
        ValueError: the text is neither (the message says what a time looks like).
    """
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.fromisoformat(text)  # Python 3.11: "Z", offsets, any fraction.
    except ValueError:
        raise ValueError(f"{text!r} is not a time: use epoch seconds or YYYY-MM-DD") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    delta = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return delta.days * 86_400 + delta.seconds


def _time_to_seconds(text: str) -> int:
    """``parse_time``, or a number of seconds with a fraction (floored)."""
    try:
        return parse_time(text)
    except ValueError:
        try:
            return math.floor(float(text))
        except OverflowError:  # inf
            raise ValueError(text) from None


def _is_time(text: str) -> bool:
    try:
        _time_to_seconds(text)
    except ValueError:  # Also nan.
        return False
    return True


def negative_id_message(where: str, role: str, value: int, column: str) -> str:
    """The reader's message for a negative id (validate's advice uses NEGATIVE_ID_ADVICE too).

    ``column`` says where in the row: ``column 'user_id'`` or ``field 1``.
    """
    return f"{where}: {role} {value} in {column} is negative; {NEGATIVE_ID_ADVICE}."


def bad_time_message(where: str, value: str, column: str) -> str:
    """The reader's message for a timestamp that is not a time (``column`` as above)."""
    return f"{where}: timestamp {value!r} in {column} is not a valid time; {TIME_ADVICE}."


def locate_error(
    layout: FileLayout,
    wanted: ReadColumns | tuple[str, str, str],
    arrow_message: str,
    fallback: DataError | None = None,
    id_type: str = ID_INT64,
) -> DataError:
    """Finds the first line that the fast parser (or the checks after it) could not take.

    Checks each line's field count, its ids (``int64``: integers >= MIN_ID; ``string``: text
    that ``table_columns`` takes; ``auto``: either), that the timestamp is present and a time,
    and that a rating read is a number; returns ``fallback`` (or a message quoting
    ``arrow_message``) when every line passes.
    """
    cols = wanted if isinstance(wanted, ReadColumns) else ReadColumns(*wanted)
    path, fmt, delim = layout.path, layout.format, layout.delimiter
    header, has_header = list(layout.names), layout.has_header
    shown = {"\t": "tab", "::": "'::'"}.get(delim, repr(delim))
    checks = [(cols.user, "user id"), (cols.item, "item id"), (cols.timestamp, "timestamp")]
    if cols.rating is not None:
        checks.append((cols.rating, "rating"))
    positions = [(header.index(name), role) for name, role in checks]
    for number, line, fields in _split_lines(path, delim):
        if has_header and number == 1:
            continue
        if not line.strip():
            continue
        if len(fields) != len(header):
            return DataError(
                f"{path}:{number}: expected {len(header)} fields separated by {shown}, got "
                f"{len(fields)}: {line[:120]!r}. Fix or remove this line (or check "
                f"{hints.option('--format')})."
            )
        for pos, role in positions:
            where = f"{path}:{number}"
            column = f"column {header[pos]!r}" if has_header else f"field {pos + 1}"
            problem = _field_problem(fields[pos], role, id_type, where, column)
            if problem is not None:
                return DataError(problem)
    if fallback is not None:
        return fallback
    return DataError(f"{path}: could not be parsed as {fmt}: {arrow_message}")


def _field_problem(raw: str, role: str, id_type: str, where: str, column: str) -> str | None:
    """What is wrong with one field of a line (``locate_error``), or None."""
    value = raw.strip().strip('"')
    if role in ("timestamp", "rating"):
        if not value:
            return (
                f"{where}: the {role} ({column}) is empty; every row needs a user, an item and "
                "a timestamp (and a rating, to compare): fill it in or drop the row."
            )
        if role == "rating":
            return None if _is_number(value) else bad_rating_message(where, value, column)
        return None if _is_time(value) else bad_time_message(where, value, column)
    if id_type == ID_INT64 or (id_type == ID_AUTO and _is_int(value)):
        if not value:
            return empty_id_message(where, role, column)
        if not _is_int(value):
            return non_integer_id_message(where, role, value, column)
        if int(value) < MIN_ID:
            return negative_id_message(where, role, int(value), column)
        return None
    if not raw:
        return empty_id_message(where, role, column)
    if _CONTROL_PY.search(raw):
        return control_id_message(where, role, raw, column)
    if raw != raw.strip():
        return padded_id_message(where, role, raw, column)
    return None


# An id that is an integer as int64 holds it: ASCII digits, at most 19 and at most int64's
# largest (pyarrow's int64 parse takes the same, leading zeros included); a longer one is text.
# "-" and digits is an integer too (refused as negative, but "-0" is 0, as pyarrow reads it).
_INT64_MAX = str(np.iinfo(np.int64).max)  # 19 digits: compared as text with 19-digit values.
# Line breaks and other control characters (C0, DEL, C1, Unicode's line and paragraph separators).
CONTROL_PATTERN = r"[\x00-\x1f\x7f-\x9f\x{2028}\x{2029}]"  # RE2, for pyarrow.compute.
_CONTROL_PY = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def table_columns(
    table: pa.Table,
    cols: ReadColumns,
    path: str,
    id_type: str = ID_AUTO,
    rule: PositiveRule = PositiveRule(),
    *,
    parquet: bool = False,
    first_row: int = 1,
    note: str = "",
) -> ChunkRows:
    """One table (a whole file, or one chunk of it) as ids, timestamps and positives.

    Per id column: an integer column is read as int64 (``id_type`` string: as decimal text); a
    text column is checked (no empty id, no spaces at either end, no control character) and kept
    as text, and under ``auto`` its values are classified (``IdScan``) unless ``parquet`` is set
    (the Parquet column's type decides: a string column is string whatever it holds). A text
    column that ``resolve_kinds`` finds int64 is turned into integers by :func:`convert`.

    Args:
        table: the ``cols.names`` columns, from ``parse_delimited`` (with ``parse_ids``' types)
            or from Parquet.
        cols: the columns (``read_columns``).
        path: the file, as messages name it.
        id_type: ``ids.ID_TYPES``; ``int64`` refuses every id that is not an integer here.
        rule: which rows are positives; its columns must be in ``cols``.
        parquet: the table comes from Parquet (column types decide the ids' kind under ``auto``).
        first_row: the data row number (1-based, header excluded) of the table's first row; a
            chunk that starts further in the file passes its own.
        note: appended to every data row named (e.g. " (counted from byte 4096)").

    Raises:
        DataError: naming the file, the data row, the column and the value, and what to do.
    """
    if table.num_rows == 0:  # A header and no rows: no value to check, no kind to tell.
        none = np.zeros(0, np.int64)
        positive, counts = _positives(table, cols, rule, path, _Place(path))
        return ChunkRows(
            IdColumn(none, IdScan(cols.user, "user id")),
            IdColumn(none, IdScan(cols.item, "item id")),
            none,
            positive,
            counts,
        )

    where = _Place(path, first_row, note)
    users = _id_column(table.column(cols.user), cols.user, "user id", id_type, parquet, path, where)
    items = _id_column(table.column(cols.item), cols.item, "item id", id_type, parquet, path, where)
    timestamps = _timestamps(table.column(cols.timestamp), cols.timestamp, path, where)
    positive, counts = _positives(table, cols, rule, path, where)
    return ChunkRows(users, items, timestamps, positive, counts)


@dataclasses.dataclass(frozen=True)
class _Place:
    """How messages name a table's rows: ``path: data row N`` from ``first_row``, then ``note``."""

    path: str
    first_row: int = 1
    note: str = ""

    def __call__(self, row: int) -> str:
        return f"{self.path}: data row {self.first_row + row}{self.note}"

    def sighting(self, row: int, value: str) -> Sighting:
        return Sighting(self(row), value, self.first_row + row)


def resolve_kinds(scans: Iterable[tuple[IdScan, IdScan]], id_type: str) -> tuple[str, str]:
    """The kinds (``ids.ID_KINDS``) of the user and item columns over every chunk.

    ``scans``: each chunk's ``ChunkRows.scans``, in input order (the first sightings are named).
    ``int64`` and ``string`` are what they say; ``auto``: int64 unless some value is not an
    integer, string unless some value is one.

    Raises:
        DataError: under ``auto``, a column holding both kinds, naming the first of each.
    """
    if id_type in ID_KINDS:
        return id_type, id_type
    if id_type != ID_AUTO:
        raise DataError(f"unknown id type {id_type!r}; use one of {', '.join(ID_TYPES)}")
    firsts: list[dict[str, Sighting | IdScan | None]] = [{}, {}]
    for pair in scans:
        for seen, scan in zip(firsts, pair, strict=True):
            seen.setdefault("scan", scan)
            if seen.get("int") is None:
                seen["int"] = scan.first_int
            if seen.get("other") is None:
                seen["other"] = scan.first_other
    kinds = []
    for seen in firsts:
        integer, other = seen.get("int"), seen.get("other")
        if integer is not None and other is not None:
            scan = seen["scan"]
            raise DataError(
                f"{other.where}: {scan.role} {other.value!r} in column {scan.column!r} is not an "
                f"integer, but {integer.where} holds the integer {integer.value!r}: a column's "
                f"ids are all integers or all text. Pass {string_ids_option()} to read every id "
                "as its text (e.g. ISBNs such as 080652121X), or fix the row."
            )
        kinds.append(ID_STRING if other is not None else ID_INT64)
    return kinds[0], kinds[1]


def convert(column: IdColumn, kind: str) -> np.ndarray:
    """A chunk's ids as ``kind`` (``resolve_kinds``'): int64, or an object array of str.

    Text ids of an int64 column are integers (``table_columns`` classified them); int64 ids of a
    string column (never under ``auto``: the kinds would mix) become their decimal text.
    """
    values = column.values
    is_text = values.dtype == object
    if kind == ID_STRING and not is_text:
        return pa.array(values, pa.int64()).cast(pa.string()).to_numpy(zero_copy_only=False)
    if kind == ID_INT64 and is_text:
        return np.asarray(pa.array(values, pa.string()).cast(pa.int64()).to_numpy(), np.int64)
    return values


def _first(mask: pa.ChunkedArray | pa.Array | np.ndarray) -> int | None:
    """The index of the first true value (nulls false), or None."""
    if isinstance(mask, np.ndarray):
        found = np.flatnonzero(mask)
        return int(found[0]) if len(found) else None
    found = pc.index(pc.fill_null(mask, False), True).as_py()
    return None if found < 0 else found


def _id_column(
    col: pa.ChunkedArray,
    name: str,
    role: str,
    id_type: str,
    parquet: bool,
    path: str,
    where: _Place,
) -> IdColumn:
    """One id column as ``table_columns`` reads it (``name``: the column, ``role``: "user id")."""
    column = f"column {name!r}"
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if pa.types.is_large_string(col.type):
        col = col.cast(pa.string())
    scan = IdScan(name, role)
    if pa.types.is_integer(col.type):
        _check_present(col, role, column, where)
        if id_type == ID_STRING:
            return IdColumn(_texts(col.cast(pa.string())), scan)
        ids = _to_int64(col, name, where)
        if len(ids) and ids.min() < MIN_ID:
            row = int(np.argmax(ids < MIN_ID))
            raise DataError(negative_id_message(where(row), role, int(ids[row]), column))
        first = where.sighting(0, str(ids[0])) if len(ids) else None
        return IdColumn(ids, dataclasses.replace(scan, first_int=first))
    if not pa.types.is_string(col.type):
        raise DataError(
            f"{path}: {column} ({role}) has type {col.type}; ids are "
            "integers or text: write the column as one of those."
        )
    if id_type == ID_INT64:
        raise DataError(
            f"{path}: {column} ({role}) has type {col.type}, not integer, and ids are read as "
            f"int64 here: pass {string_ids_option()} to read them as text."
        )
    _check_texts(col, role, column, where)
    values = _texts(col)
    if id_type == ID_STRING or parquet:
        first = where.sighting(0, values[0]) if len(values) else None
        return IdColumn(values, dataclasses.replace(scan, first_other=first))
    is_int, negatives = integer_ids(col)
    negative = _first(negatives)
    if negative is not None:
        value = int(values[negative])
        raise DataError(negative_id_message(where(negative), role, value, column))
    first_int, first_other = _first(is_int), _first(~is_int)
    return IdColumn(
        values,
        dataclasses.replace(
            scan,
            first_int=None if first_int is None else where.sighting(first_int, values[first_int]),
            first_other=(
                None if first_other is None else where.sighting(first_other, values[first_other])
            ),
        ),
    )


def integer_ids(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(which values of a text column are integers, which are negative ones); no regex: fast.

    An integer: ASCII digits, at most int64's largest (``_INT64_MAX``), or "-" and digits. The
    one rule of what an integer id is: the reader's and the validation gate's (validate.py).
    """
    if isinstance(col, pa.Array):
        col = pa.chunked_array([col], col.type)
    digits = np.asarray(pc.ascii_is_decimal(col).to_numpy(), dtype=bool)
    length = pc.binary_length(col).to_numpy()
    is_int = digits & (length <= 18)
    long = np.flatnonzero(digits & (length == 19))
    if len(long):
        is_int[long] = pc.less_equal(col.take(long), _INT64_MAX).to_numpy()
    negative = np.zeros(len(col), dtype=bool)
    minus = np.flatnonzero(pc.starts_with(col, "-").to_numpy())
    if len(minus):
        tails = pc.utf8_slice_codeunits(col.take(minus), 1, stop=np.iinfo(np.int32).max)
        is_int[minus] = pc.ascii_is_decimal(tails).to_numpy()
        nonzero = pc.binary_length(pc.utf8_ltrim(tails, characters="0")).to_numpy() > 0
        negative[minus] = is_int[minus] & nonzero
    return is_int, negative


def _texts(col: pa.ChunkedArray) -> np.ndarray:
    """A string column as a numpy object array of Python str."""
    if col.num_chunks == 0:
        return np.zeros(0, dtype=object)
    return col.to_numpy()


def _check_present(
    col: pa.ChunkedArray, role: str, column: str, where: Callable[[int], str]
) -> None:
    if col.null_count:
        raise DataError(empty_id_message(where(_first(pc.is_null(col))), role, column))


def _check_texts(col: pa.ChunkedArray, role: str, column: str, where: Callable[[int], str]) -> None:
    """Refuses an empty id, one with spaces at either end and one with a control character."""
    _check_present(col, role, column, where)
    empty = _first(pc.equal(pc.binary_length(col), 0))
    if empty is not None:
        raise DataError(empty_id_message(where(empty), role, column))
    # Only values with a byte that is not printable ASCII can hold one (the regex is slow).
    suspects = np.flatnonzero(~pc.ascii_is_printable(col).to_numpy())
    if len(suspects):
        found = _first(pc.match_substring_regex(col.take(suspects), CONTROL_PATTERN))
        if found is not None:
            row = int(suspects[found])
            raise DataError(control_id_message(where(row), role, col[row].as_py(), column))
    padded = _first(pc.not_equal(pc.utf8_trim_whitespace(col), col))
    if padded is not None:
        value = col[padded].as_py()
        raise DataError(padded_id_message(where(padded), role, value, column))


def _positives(
    table: pa.Table,
    cols: ReadColumns,
    rule: PositiveRule,
    path: str,
    where: Callable[[int], str],
) -> tuple[np.ndarray | None, dict[str, int]]:
    """(positive per row or None, rows per failed rule); a row counts under its first failure."""
    if not rule.active:
        return None, {}
    failed = np.zeros(table.num_rows, dtype=bool)
    counts: dict[str, int] = {}
    if rule.min_rating is not None:
        counts[BELOW_MIN_RATING] = 0
    if rule.positive_events:
        counts[NOT_POSITIVE_EVENT] = 0
    if table.num_rows == 0:  # A header and no rows: its columns may have no type.
        return failed, counts
    if rule.min_rating is not None:
        ratings = _ratings(table.column(cols.rating), cols.rating, path, where)
        below = ~(ratings >= rule.min_rating)  # A NaN rating is no rating >= X.
        counts[BELOW_MIN_RATING] = int(below.sum())
        failed |= below
    if rule.positive_events:
        events = table.column(cols.event)
        if not pa.types.is_string(events.type):
            events = events.cast(pa.string())
        chosen = pc.is_in(events, value_set=pa.array(rule.positive_events, pa.string()))
        other = ~np.asarray(pc.fill_null(chosen, False).to_numpy(), dtype=bool)
        counts[NOT_POSITIVE_EVENT] = int((other & ~failed).sum())
        failed |= other
    return ~failed, counts


def _ratings(col: pa.ChunkedArray, name: str, path: str, where: Callable[[int], str]) -> np.ndarray:
    """A rating column as float64; an empty rating or one that is not a number is refused."""
    column = f"column {name!r}"
    if col.null_count:
        raise DataError(
            f"{where(_first(pc.is_null(col)))}: the rating in {column} is empty; "
            f"{hints.option('--min-rating')} needs every row's rating: fill it in or drop the row."
        )
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        try:
            col = col.cast(pa.float64())
        except pa.ArrowInvalid:
            # Arrow's message names no row: find it (only on this error path).
            for row, text in enumerate(col.to_pylist()):
                if not _is_number(text):
                    raise DataError(bad_rating_message(where(row), text, column)) from None
            raise
    elif not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise DataError(
            f"{path}: the rating {column} has type {col.type}, not a "
            f"number; fix it, or name another with {hints.option('--rating-col')}."
        )
    return np.asarray(col.cast(pa.float64()).to_numpy(), dtype=np.float64)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def empty_id_message(where: str, role: str, column: str) -> str:
    """The readers' message for a row without a user or an item id."""
    return (
        f"{where}: the {role} ({column}) is empty; every row needs a user, an item and a "
        "timestamp: fill it in or drop the row."
    )


def padded_id_message(where: str, role: str, value: str, column: str) -> str:
    """The readers' message for an id with spaces at its start or end (ids are never stripped)."""
    return (
        f"{where}: {role} {value!r} in {column} has spaces at its start or end; ids are kept "
        "exactly as written (a recommendation is asked for by that id): remove the spaces in the "
        "file, or drop the row."
    )


def control_id_message(where: str, role: str, value: str, column: str) -> str:
    """The readers' message for an id holding a line break or another control character."""
    return (
        f"{where}: {role} {value!r} in {column} holds a line break or another control "
        "character; an id is one line of text (a vocabulary holds one id per line): fix or "
        "drop the row."
    )


def non_integer_id_message(where: str, role: str, value: str, column: str) -> str:
    """The readers' message for an id that is not an integer under ``--id-type int64``."""
    return (
        f"{where}: {role} {value!r} in {column} is not an integer, and ids are read as int64 "
        f"here: pass {string_ids_option()} to read ids as text (e.g. ISBNs, UUIDs), or fix the "
        "row."
    )


def bad_rating_message(where: str, value: str, column: str) -> str:
    """The readers' message for a rating that is not a number."""
    return (
        f"{where}: rating {value!r} in {column} is not a number; "
        f"{hints.option('--min-rating')} compares ratings: fix or drop this row."
    )


_UNIT_SECONDS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _timestamps(
    ts: pa.ChunkedArray, name: str, path: str, where: Callable[[int], str]
) -> np.ndarray:
    """Epoch seconds (floored) from integer, float, date, timestamp or ISO-8601 text columns."""
    if pa.types.is_string(ts.type) or pa.types.is_large_string(ts.type):
        ts = _parse_time_strings(ts, name, where)
    if pa.types.is_date(ts.type):
        ts = ts.cast(pa.timestamp("s"))
    if pa.types.is_timestamp(ts.type):
        # Stored as UTC in the type's unit; floor to seconds (a cast would refuse fractions).
        return _to_int64(ts.cast(pa.int64()), name, where) // _UNIT_SECONDS[ts.type.unit]
    if pa.types.is_floating(ts.type):
        ts = ts.cast(pa.int64(), safe=False)
    elif not pa.types.is_integer(ts.type):
        raise DataError(f"{path}: column {name!r} (timestamp) has type {ts.type}")
    return _to_int64(ts, name, where)


def _parse_time_strings(
    ts: pa.ChunkedArray, name: str, where: Callable[[int], str]
) -> pa.ChunkedArray:
    """Text times as a timestamp column; the first value that is not a time is named by row."""
    for target in (pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")):
        try:
            return ts.cast(target)  # Fast: every value ISO-8601, all with or all without zone.
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    # Mixed forms, integers among times, or a bad value: Arrow's error may quote a good value
    # and names no row, so parse each value here.
    seconds: list[int | None] = []
    for row, text in enumerate(ts.to_pylist()):
        if text is None:
            seconds.append(None)
            continue
        try:
            seconds.append(_time_to_seconds(text))
        except ValueError:
            raise DataError(bad_time_message(where(row), text, f"column {name!r}")) from None
    return pa.chunked_array([pa.array(seconds, pa.int64())]).cast(pa.timestamp("s"))


def _to_int64(col: pa.ChunkedArray, name: str, where: Callable[[int], str]) -> np.ndarray:
    if col.null_count:
        raise DataError(
            f"{where(_first(pc.is_null(col)))}: column {name!r} is empty; every row needs a user, "
            "an item and a timestamp: fill it in or drop the row."
        )
    return np.asarray(col.to_numpy(), dtype=np.int64)
