"""Which rows are positives: ``--min-rating`` and ``--positive-events`` (:class:`PositiveRule`).

A row that fails a rule is "seen only" (``io.Interactions.positive``): :func:`positives` applies
the rule to one table and counts the rows each rule made seen only (``BELOW_MIN_RATING``,
``NOT_POSITIVE_EVENT``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from training_core.common import hints
from training_core.data.arrow_columns import first_true
from training_core.data.read_errors import DataError, bad_rating_message

# Keys of Interactions.rule_counts: the rows each rule of PositiveRule made seen-only.
BELOW_MIN_RATING = "below_min_rating"
NOT_POSITIVE_EVENT = "not_positive_event"


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


# The rule of every run that sets neither option: every row is a positive.
NO_RULE = PositiveRule()


def positives(
    table: pa.Table,
    rule: PositiveRule,
    rating: str | None,
    event: str | None,
    path: str,
    where: Callable[[int], str],
) -> tuple[np.ndarray | None, dict[str, int]]:
    """(positive per row or None, rows per failed rule); a row counts under its first failure.

    ``rating`` and ``event``: the table's columns that ``rule``'s rating and event rules read.
    """
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
        ratings = _ratings(table.column(rating), rating, path, where)
        below = ~(ratings >= rule.min_rating)  # A NaN rating is no rating >= X.
        counts[BELOW_MIN_RATING] = int(below.sum())
        failed |= below
    if rule.positive_events:
        events = table.column(event)
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
            f"{where(first_true(pc.is_null(col)))}: the rating in {column} is empty; "
            f"{hints.option('--min-rating')} needs every row's rating: fill it in or drop the row."
        )
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        try:
            col = col.cast(pa.float64())
        except pa.ArrowInvalid:
            # Arrow's message names no row: find it (only on this error path).
            for row, text in enumerate(col.to_pylist()):
                if not is_number(text):
                    raise DataError(bad_rating_message(where(row), text, column)) from None
            raise
    elif not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        raise DataError(
            f"{path}: the rating {column} has type {col.type}, not a "
            f"number; fix it, or name another with {hints.option('--rating-col')}."
        )
    return np.asarray(col.cast(pa.float64()).to_numpy(), dtype=np.float64)


def is_number(text: str) -> bool:
    """Whether ``text`` is a number, as a rating must be (``float`` reads it)."""
    try:
        float(text)
    except ValueError:
        return False
    return True
