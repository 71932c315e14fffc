"""What the readers say about input they cannot take: :class:`DataError` and its messages.

The one home of the rules that the readers and the validation gate both state (``MIN_ID``,
``NEGATIVE_ID_ADVICE``) and of the messages more than one reader raises (a text file's line
check in ``delimited``; a table's columns in ``id_columns``, ``times`` and ``positive_rules``),
so that a bad id, time or rating reads the same whichever reader finds it.
"""

from __future__ import annotations

from training_core.common import hints
from training_core.data.ids import ID_STRING

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


class DataError(ValueError):
    """Raw input that cannot be read as interactions; the message says where and what to do."""


def string_ids_option() -> str:
    """How to read every id as text here: ``--id-type string`` or the pipeline's parameter."""
    named = hints.option("--id-type")
    return f"{named} {ID_STRING}" if named == "--id-type" else named


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


def negative_id_message(where: str, role: str, value: int, column: str) -> str:
    """The reader's message for a negative id (validate's advice uses NEGATIVE_ID_ADVICE too).

    ``column`` says where in the row: ``column 'user_id'`` or ``field 1``.
    """
    return f"{where}: {role} {value} in {column} is negative; {NEGATIVE_ID_ADVICE}."


def bad_time_message(where: str, value: str, column: str) -> str:
    """The reader's message for a timestamp that is not a time (``column`` as above)."""
    return f"{where}: timestamp {value!r} in {column} is not a valid time; {TIME_ADVICE}."


def bad_rating_message(where: str, value: str, column: str) -> str:
    """The readers' message for a rating that is not a number."""
    return (
        f"{where}: rating {value!r} in {column} is not a number; "
        f"{hints.option('--min-rating')} compares ratings: fix or drop this row."
    )
