"""Id columns as read: each table's ids checked and scanned, their kind over all, the conversion.

Ids (``ids.ID_KINDS``): each id column is int64 or string, as ``--id-type`` says (``auto``: a
text column whose every value is an integer is int64, one with no integer value is string, one
that mixes them is an error; a Parquet column's own type decides). An id is kept exactly as
written: an empty id, one with spaces at either end, or one holding a line break or another
control character is refused.

:func:`id_column` reads one table's column into an :class:`IdColumn` (its values as read, and an
:class:`IdScan` of its first integer and first other value), :func:`resolve_kinds` decides each
column's kind from every table's scans, and :func:`convert` gives a table's ids that kind.
:func:`integer_ids` is the one rule of what an integer id is (the reader's and the validation
gate's). ``ids`` keeps the kinds' names apart, free of imports, for the modules that read no
table (serving, training).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from training_core.data.arrow_columns import first_true, to_int64
from training_core.data.ids import ID_AUTO, ID_INT64, ID_KINDS, ID_STRING, ID_TYPES
from training_core.data.read_errors import (
    MIN_ID,
    DataError,
    control_id_message,
    empty_id_message,
    negative_id_message,
    padded_id_message,
    string_ids_option,
)

# An id that is an integer as int64 holds it: ASCII digits, at most 19 and at most int64's
# largest (pyarrow's int64 parse takes the same, leading zeros included); a longer one is text.
# "-" and digits is an integer too (refused as negative, but "-0" is 0, as pyarrow reads it).
_INT64_MAX = str(np.iinfo(np.int64).max)  # 19 digits: compared as text with 19-digit values.

# Line breaks and other control characters (C0, DEL, C1, Unicode's line and paragraph separators).
CONTROL_PATTERN = r"[\x00-\x1f\x7f-\x9f\x{2028}\x{2029}]"  # RE2, for pyarrow.compute.
CONTROL_PY = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


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
class RowPlace:
    """How messages name a table's rows: ``path: data row N`` from ``first_row``, then ``note``."""

    path: str
    first_row: int = 1
    note: str = ""

    def __call__(self, row: int) -> str:
        """The table's row ``row`` (0-based), as a message names it."""
        return f"{self.path}: data row {self.first_row + row}{self.note}"

    def sighting(self, row: int, value: str) -> Sighting:
        """``value``, seen in the table's row ``row``."""
        return Sighting(self(row), value, self.first_row + row)


def resolve_kinds(scans: Iterable[tuple[IdScan, IdScan]], id_type: str) -> tuple[str, str]:
    """The kinds (``ids.ID_KINDS``) of the user and item columns over every chunk.

    ``scans``: each chunk's ``io.ChunkRows.scans``, in input order (the first sightings are named).
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

    Text ids of an int64 column are integers (``io.table_columns`` classified them); int64 ids of a
    string column (never under ``auto``: the kinds would mix) become their decimal text.
    """
    values = column.values
    is_text = values.dtype == object
    if kind == ID_STRING and not is_text:
        return pa.array(values, pa.int64()).cast(pa.string()).to_numpy(zero_copy_only=False)
    if kind == ID_INT64 and is_text:
        return np.asarray(pa.array(values, pa.string()).cast(pa.int64()).to_numpy(), np.int64)
    return values


def id_column(
    col: pa.ChunkedArray,
    name: str,
    role: str,
    id_type: str,
    parquet: bool,
    path: str,
    where: RowPlace,
) -> IdColumn:
    """One id column as ``io.table_columns`` reads it.

    ``name``: the column; ``role``: "user id" or "item id", as messages name it.
    """
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
        ids = to_int64(col, name, where)
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
    negative = first_true(negatives)
    if negative is not None:
        value = int(values[negative])
        raise DataError(negative_id_message(where(negative), role, value, column))
    first_int, first_other = first_true(is_int), first_true(~is_int)
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
        raise DataError(empty_id_message(where(first_true(pc.is_null(col))), role, column))


def _check_texts(col: pa.ChunkedArray, role: str, column: str, where: Callable[[int], str]) -> None:
    """Refuses an empty id, one with spaces at either end and one with a control character."""
    _check_present(col, role, column, where)
    empty = first_true(pc.equal(pc.binary_length(col), 0))
    if empty is not None:
        raise DataError(empty_id_message(where(empty), role, column))
    # Only values with a byte that is not printable ASCII can hold one (the regex is slow).
    suspects = np.flatnonzero(~pc.ascii_is_printable(col).to_numpy())
    if len(suspects):
        found = first_true(pc.match_substring_regex(col.take(suspects), CONTROL_PATTERN))
        if found is not None:
            row = int(suspects[found])
            raise DataError(control_id_message(where(row), role, col[row].as_py(), column))
    padded = first_true(pc.not_equal(pc.utf8_trim_whitespace(col), col))
    if padded is not None:
        value = col[padded].as_py()
        raise DataError(padded_id_message(where(padded), role, value, column))
