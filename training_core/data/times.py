"""Times: :func:`parse_time`, the one reading of a time, and a timestamp column as epoch seconds.

The readers' timestamp column (:func:`epoch_seconds`: integer, float, date, timestamp or
ISO-8601 text) and ``validate``'s time bounds read a time alike.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from training_core.data.arrow_columns import to_int64
from training_core.data.read_errors import DataError, bad_time_message


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


def is_time(text: str) -> bool:
    """Whether a timestamp column may hold ``text``: a time, or seconds with a fraction."""
    try:
        _time_to_seconds(text)
    except ValueError:  # Also nan.
        return False
    return True


_UNIT_SECONDS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def epoch_seconds(
    ts: pa.ChunkedArray, name: str, path: str, where: Callable[[int], str]
) -> np.ndarray:
    """Epoch seconds (floored) from integer, float, date, timestamp or ISO-8601 text columns."""
    if pa.types.is_string(ts.type) or pa.types.is_large_string(ts.type):
        ts = _parse_time_strings(ts, name, where)
    if pa.types.is_date(ts.type):
        ts = ts.cast(pa.timestamp("s"))
    if pa.types.is_timestamp(ts.type):
        # Stored as UTC in the type's unit; floor to seconds (a cast would refuse fractions).
        return to_int64(ts.cast(pa.int64()), name, where) // _UNIT_SECONDS[ts.type.unit]
    if pa.types.is_floating(ts.type):
        ts = ts.cast(pa.int64(), safe=False)
    elif not pa.types.is_integer(ts.type):
        raise DataError(f"{path}: column {name!r} (timestamp) has type {ts.type}")
    return to_int64(ts, name, where)


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
