"""Readers for raw interaction tables: every MovieLens layout, and any CSV or Parquet table.

All readers return the same :class:`Interactions` (int64 user, item and timestamp arrays in file
order). Parsing uses pyarrow for speed; when the fast parser rejects a file, a line-by-line pass
finds the first bad line so that the error names the file, the line and what to do.
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
import logging
import math
import os
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

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

    users: np.ndarray  # int64 raw user ids.
    items: np.ndarray  # int64 raw item ids.
    timestamps: np.ndarray  # int64 (seconds for MovieLens; any monotone unit elsewhere).
    source_files: tuple[str, ...]
    format: str

    def __len__(self) -> int:
        return len(self.users)


@dataclasses.dataclass(frozen=True)
class Columns:
    """Names of the user, item and timestamp columns of a generic table (None: detect)."""

    user: str | None = None
    item: str | None = None
    timestamp: str | None = None


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
            "the ratings file itself with --input and its layout with --format"
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
        gzip.open(path, "rt", encoding="utf-8-sig", errors="replace")
        if path.endswith(".gz")
        else open(path, encoding="utf-8-sig", errors="replace")
    )


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
        f"pass --format (one of {', '.join(FORMATS)})"
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


def read_interactions(path: str, fmt: str = "auto", columns: Columns | None = None) -> Interactions:
    """Reads a ratings file or folder into int64 arrays.

    Args:
        path: a file (plain or .gz) or a folder holding one MovieLens ratings file or Parquet files.
        fmt: a format name or alias (``auto`` detects it from the name or the content).
        columns: column names for ``csv`` and ``parquet`` (detected from common names when absent).

    Raises:
        DataError: with the file, the line where known, and what to change.
    """
    files, fmt = resolve_input(path, fmt)
    columns = columns or Columns()
    parts = []
    for f in files:
        layout = describe_file(f, fmt)
        if fmt == PARQUET:
            parts.append(_read_parquet(layout, columns))
        else:
            parts.append(_read_delimited(layout, columns))
    # One file's arrays are used as they are (a concatenation would copy them).
    users, items, timestamps = (
        parts[0] if len(parts) == 1 else (np.concatenate(col) for col in zip(*parts, strict=True))
    )
    if len(users) == 0:
        raise DataError(f"{path}: no interactions (the table has a header but no rows)")
    return Interactions(
        users=users,
        items=items,
        timestamps=timestamps,
        source_files=tuple(files),
        format=fmt,
    )


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
        # pyarrow takes one-character delimiters; .dat fields are numeric, so a tab is safe.
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
) -> str:
    if wanted:
        if wanted not in available:
            raise DataError(
                f"{where}: no column named {wanted!r} for the {role}; the columns are "
                f"{', '.join(available)}. Fix {flag}."
            )
        return wanted
    for name in aliases:
        if name in available:
            return name
    raise DataError(
        f"{where}: no {role} column (looked for {', '.join(aliases)}); the columns are "
        f"{', '.join(available)}. Name it with {flag}."
    )


def _select(available: list[str], columns: Columns, where: str) -> tuple[str, str, str]:
    return (
        _pick(available, columns.user, USER_ALIASES, "user id", where, "--user-col"),
        _pick(available, columns.item, ITEM_ALIASES, "item id", where, "--item-col"),
        _pick(available, columns.timestamp, TIME_ALIASES, "timestamp", where, "--time-col"),
    )


def _read_delimited(layout: FileLayout, columns: Columns) -> tuple[np.ndarray, ...]:
    path = layout.path
    wanted = interaction_columns(layout, columns)
    user_col, item_col, time_col = wanted
    locate = functools.partial(locate_error, layout, wanted)
    try:
        with _source(path) as source:
            table = parse_delimited(
                source,
                layout.delimiter,
                # The names as describe_file cleaned them (a header may pad its commas with
                # spaces), as the Beam readers pass them; a blank header line is left to the
                # parser.
                layout.names or None,
                1 if layout.has_header and layout.names else 0,
                wanted,
                {user_col: pa.int64(), item_col: pa.int64()},
            )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise locate(str(e)) from None
    try:
        return _columns_to_arrays(table, user_col, item_col, time_col, path)
    except DataError as e:
        # The table only knows row numbers: name the line, as for a line that did not parse.
        raise locate(str(e), fallback=e) from None


@contextlib.contextmanager
def _source(path: str) -> Iterator[bytes | pa.NativeFile]:
    """A file to parse: open when plain (pyarrow reads it while it parses), else its bytes.

    Not memory-mapped: a file cut short while it is read would kill the process (SIGBUS).
    """
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
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
    wanted: tuple[str, str, str],
    arrow_message: str,
    fallback: DataError | None = None,
) -> DataError:
    """Finds the first line that the fast parser (or the checks after it) could not take.

    Checks each line's field count, that ids are integers >= MIN_ID, and that the timestamp is
    present and a time; returns ``fallback`` (or a message quoting ``arrow_message``) when every
    line passes.
    """
    path, fmt, delim = layout.path, layout.format, layout.delimiter
    header, has_header = list(layout.names), layout.has_header
    shown = {"\t": "tab", "::": "'::'"}.get(delim, repr(delim))
    positions = [header.index(w) for w in wanted]
    roles = ("user id", "item id", "timestamp")
    for number, line, fields in _split_lines(path, delim):
        if has_header and number == 1:
            continue
        if not line.strip():
            continue
        if len(fields) != len(header):
            return DataError(
                f"{path}:{number}: expected {len(header)} fields separated by {shown}, got "
                f"{len(fields)}: {line[:120]!r}. Fix or remove this line (or check --format)."
            )
        for pos, role in zip(positions, roles, strict=True):
            value = fields[pos].strip().strip('"')
            where = f"{path}:{number}"
            column = f"column {header[pos]!r}" if has_header else f"field {pos + 1}"
            if not value:
                return DataError(
                    f"{where}: the {role} ({column}) is empty; every row needs a user, an item "
                    "and a timestamp: fill it in or drop the row."
                )
            if role == "timestamp":
                if not _is_time(value):
                    return DataError(bad_time_message(where, value, column))
            elif not _is_int(value):
                return DataError(
                    f"{where}: {role} {value!r} in {column} is not an "
                    "integer; ids must be integers (map string ids to integers first)."
                )
            elif int(value) < MIN_ID:
                return DataError(negative_id_message(where, role, int(value), column))
    if fallback is not None:
        return fallback
    return DataError(f"{path}: could not be parsed as {fmt}: {arrow_message}")


def _read_parquet(layout: FileLayout, columns: Columns) -> tuple[np.ndarray, ...]:
    import pyarrow.parquet as pq

    user_col, item_col, time_col = interaction_columns(layout, columns)
    table = pq.read_table(layout.path, columns=[user_col, item_col, time_col])
    return _columns_to_arrays(table, user_col, item_col, time_col, layout.path)


def _columns_to_arrays(
    table: pa.Table, user_col: str, item_col: str, time_col: str, path: str
) -> tuple[np.ndarray, ...]:
    """int64 user, item and timestamp arrays; errors name the data row (1-based, header excluded).

    Raises:
        DataError: an id column that is not integer, a negative id, an empty value, or a
            timestamp that is not a time.
    """
    if table.num_rows == 0:
        return tuple(np.zeros(0, np.int64) for _ in range(3))
    out = []
    for name, role in ((user_col, "user id"), (item_col, "item id")):
        col = table.column(name)
        if not pa.types.is_integer(col.type):
            raise DataError(
                f"{path}: column {name!r} ({role}) has type {col.type}, not integer; ids must be "
                "integers (map string ids to integers first)."
            )
        ids = _to_int64(col, name, path)
        if len(ids) and ids.min() < MIN_ID:
            row = int(np.argmax(ids < MIN_ID))
            where = f"{path}: data row {row + 1}"
            raise DataError(negative_id_message(where, role, int(ids[row]), f"column {name!r}"))
        out.append(ids)
    out.append(_timestamps(table.column(time_col), time_col, path))
    return tuple(out)


_UNIT_SECONDS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _timestamps(ts: pa.ChunkedArray, name: str, path: str) -> np.ndarray:
    """Epoch seconds (floored) from integer, float, date, timestamp or ISO-8601 text columns."""
    if pa.types.is_string(ts.type) or pa.types.is_large_string(ts.type):
        ts = _parse_time_strings(ts, name, path)
    if pa.types.is_date(ts.type):
        ts = ts.cast(pa.timestamp("s"))
    if pa.types.is_timestamp(ts.type):
        # Stored as UTC in the type's unit; floor to seconds (a cast would refuse fractions).
        return _to_int64(ts.cast(pa.int64()), name, path) // _UNIT_SECONDS[ts.type.unit]
    if pa.types.is_floating(ts.type):
        ts = ts.cast(pa.int64(), safe=False)
    elif not pa.types.is_integer(ts.type):
        raise DataError(f"{path}: column {name!r} (timestamp) has type {ts.type}")
    return _to_int64(ts, name, path)


def _parse_time_strings(ts: pa.ChunkedArray, name: str, path: str) -> pa.ChunkedArray:
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
            where = f"{path}: data row {row + 1}"
            raise DataError(bad_time_message(where, text, f"column {name!r}")) from None
    return pa.chunked_array([pa.array(seconds, pa.int64())]).cast(pa.timestamp("s"))


def _to_int64(col: pa.ChunkedArray, name: str, path: str) -> np.ndarray:
    if col.null_count:
        import pyarrow.compute as pc

        first = int(pc.index(pc.is_null(col), True).as_py())
        raise DataError(
            f"{path}: column {name!r} is empty in data row {first + 1}; every row needs a user, "
            "an item and a timestamp."
        )
    return np.asarray(col.to_numpy(), dtype=np.int64)
