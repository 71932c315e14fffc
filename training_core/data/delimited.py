"""Delimited text: parsing it with pyarrow, and naming the first line the parser could not take.

:func:`parse_delimited` parses a file, or a range of its lines, into an Arrow table of the
:class:`ReadColumns`, and :func:`parse_ids` with the id types ``--id-type`` allows. When the
fast parser (or a table's checks after it) refuses the text, :func:`locate_error` reads the file
line by line and names the first bad line, its field and what to do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa
import pyarrow.csv as pacsv

from training_core.common import hints
from training_core.data.formats import FileLayout, is_int
from training_core.data.id_columns import CONTROL_PY
from training_core.data.ids import ID_AUTO, ID_INT64, ID_STRING
from training_core.data.input_files import split_lines
from training_core.data.positive_rules import is_number
from training_core.data.read_errors import (
    MIN_ID,
    DataError,
    bad_rating_message,
    bad_time_message,
    control_id_message,
    empty_id_message,
    negative_id_message,
    non_integer_id_message,
    padded_id_message,
)
from training_core.data.times import is_time

_BLOCK_BYTES = 1 << 24  # pyarrow's CSV block; types are inferred from the first one.


@dataclasses.dataclass(frozen=True)
class ReadColumns:
    """The columns of one file to read (``io.read_columns``): ids, time, and the rule's."""

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
    engines call it (per file, per chunk), so that ``io.table_columns`` sees the same columns.

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
    for number, line, fields in split_lines(path, delim):
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
            return None if is_number(value) else bad_rating_message(where, value, column)
        return None if is_time(value) else bad_time_message(where, value, column)
    if id_type == ID_INT64 or (id_type == ID_AUTO and is_int(value)):
        if not value:
            return empty_id_message(where, role, column)
        if not is_int(value):
            return non_integer_id_message(where, role, value, column)
        if int(value) < MIN_ID:
            return negative_id_message(where, role, int(value), column)
        return None
    if not raw:
        return empty_id_message(where, role, column)
    if CONTROL_PY.search(raw):
        return control_id_message(where, role, raw, column)
    if raw != raw.strip():
        return padded_id_message(where, role, raw, column)
    return None
