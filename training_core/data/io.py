"""Readers for raw interaction tables: every MovieLens layout, and any CSV or Parquet table.

All readers return the same :class:`Interactions` (user and item ids, int64 timestamps, in file
order), from the columns a :class:`Columns` names (or the common names: ``USER_ALIASES``, ...).
Parsing uses pyarrow for speed; when the fast parser rejects a file, a line-by-line pass finds
the first bad line so that the error names the file, the line and what to do.

Both engines read with the same functions, file by file (here) or chunk by chunk
(``prepare_beam``): :func:`read_columns` names the columns to read, ``delimited.parse_ids``
parses text with the id types to try, :func:`table_columns` turns one table into
:class:`ChunkRows` (ids as read, with an ``IdScan`` of each id column), and
``id_columns.resolve_kinds`` decides each column's kind from every chunk's scans. What they
stand on, one concern a module: ``formats`` (which layout, a file's :class:`FileLayout`),
``input_files`` (opening, .gz bounded), ``delimited`` (text parsing, the first bad line),
``id_columns`` (the ids' kinds), ``times``, ``positive_rules`` (``--min-rating``,
``--positive-events``) and ``read_errors`` (:class:`DataError` and the messages).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pyarrow as pa

from training_core.common import hints
from training_core.data.delimited import ReadColumns, locate_error, parse_delimited, parse_ids
from training_core.data.formats import PARQUET, FileLayout, describe_file, resolve_input
from training_core.data.id_columns import (
    IdColumn,
    IdScan,
    RowPlace,
    Sighting,
    convert,
    id_column,
    resolve_kinds,
)
from training_core.data.ids import ID_AUTO, ID_INT64, ID_TYPES
from training_core.data.input_files import open_source, split_lines
from training_core.data.positive_rules import NO_RULE, PositiveRule, positives
from training_core.data.read_errors import DataError
from training_core.data.times import epoch_seconds

# Column names tried, in order, when the caller names none.
USER_ALIASES = ("user_id", "userId", "user", "uid", "UserID")
ITEM_ALIASES = ("item_id", "itemId", "movieId", "movie_id", "item", "iid", "MovieID")
TIME_ALIASES = ("timestamp", "ts", "time", "event_time", "Timestamp")
RATING_ALIASES = ("rating", "Rating", "score", "stars")
EVENT_ALIASES = ("event", "event_type", "action")


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
class ChunkRows:
    """One table (a file, a chunk of one) as :func:`table_columns` reads it."""

    users: IdColumn
    items: IdColumn
    timestamps: np.ndarray  # int64 seconds (``epoch_seconds``).
    positive: np.ndarray | None  # bool per row; None: the rule is inactive (every row).
    rule_counts: dict[str, int]  # Rows per failed rule (the active rules' keys); sum over chunks.

    @property
    def scans(self) -> tuple[IdScan, IdScan]:
        """The user and item columns' scans, for ``id_columns.resolve_kinds``."""
        return self.users.scan, self.items.scan

    def __len__(self) -> int:
        return len(self.timestamps)


def read_interactions(
    path: str,
    fmt: str = "auto",
    columns: Columns | None = None,
    id_type: str = ID_AUTO,
    rule: PositiveRule = NO_RULE,
) -> Interactions:
    """Reads a ratings file or folder: ids of their kind, int64 timestamps, the positive rows.

    Args:
        path: a file (plain or .gz) or a folder holding one MovieLens ratings file or Parquet files.
        fmt: a format name or alias (``auto`` detects it from the name or the content).
        columns: column names for ``csv`` and ``parquet`` (detected from common names when absent).
        id_type: ``ids.ID_TYPES``: how the id columns are read (``id_columns``).
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
    for number, line, _ in split_lines(layout.path, layout.delimiter):
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
        with open_source(path) as source:
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


def table_columns(
    table: pa.Table,
    cols: ReadColumns,
    path: str,
    id_type: str = ID_AUTO,
    rule: PositiveRule = NO_RULE,
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
        positive, counts = positives(table, rule, cols.rating, cols.event, path, RowPlace(path))
        return ChunkRows(
            IdColumn(none, IdScan(cols.user, "user id")),
            IdColumn(none, IdScan(cols.item, "item id")),
            none,
            positive,
            counts,
        )

    where = RowPlace(path, first_row, note)
    users = id_column(table.column(cols.user), cols.user, "user id", id_type, parquet, path, where)
    items = id_column(table.column(cols.item), cols.item, "item id", id_type, parquet, path, where)
    timestamps = epoch_seconds(table.column(cols.timestamp), cols.timestamp, path, where)
    positive, counts = positives(table, rule, cols.rating, cols.event, path, where)
    return ChunkRows(users, items, timestamps, positive, counts)
