"""The schema's interaction-data checks: domains written into a TFDV schema, and what they cover.

Domain checks that inference alone would miss for interaction data are written into the schema,
so TFDV enforces them and a person can read them in ``schema.pbtxt``: ``user_id``, ``item_id`` and
``timestamp`` present in every row, integer ids >= ``read_errors.MIN_ID`` (the rule prepare-data
applies), timestamps integers in a plausible range, for the MovieLens layouts ratings on their
scale (``RATING_SCALES``), and with ``min_rating`` / ``positive_events`` (data prep's positive
rules) a numeric ``rating`` / an ``event`` column. ``coverage`` says what was checked and which
columns were not.

Ids follow data prep's ``--id-type`` (``text_ids``): an id column read as integers is an INT
feature with the ">= 0" domain; one read as text (``string``, or ``auto`` where the column is not
all integers) is a BYTES feature with no domain (a catalogue grows, so no list of allowed ids
either). A baseline schema's id type stands under ``auto``, so a column that changed kind since
the baseline is an anomaly.
"""

from __future__ import annotations

import dataclasses
import datetime
import math

from tensorflow_metadata.proto.v0 import statistics_pb2

from training_core.common import hints
from training_core.data import beam_source, formats
from training_core.data.beam_source import EVENT, IDS, ITEM, RATING, TIME, USER
from training_core.data.ids import ID_INT64, ID_STRING
from training_core.data.read_errors import MIN_ID


@dataclasses.dataclass(frozen=True)
class RatingScale:
    """The ratings a layout allows: ``low`` to ``high`` in steps of ``step``."""

    low: float
    high: float
    step: float

    def __str__(self) -> str:
        return f"{self.low:g}..{self.high:g} in steps of {self.step:g}"


# Ratings of the MovieLens layouts (training_core/data/formats.py). ml-100k's u.data and ml-1m's
# ratings.dat hold whole stars 1..5; ml-10m's ratings.dat (the same layout) and the ratings.csv
# of ml-20m and later hold half stars 0.5..5. Generic CSV and Parquet tables have no known scale.
RATING_SCALES = {
    formats.MOVIELENS_100K: RatingScale(1, 5, 1),
    formats.MOVIELENS_DAT: RatingScale(0.5, 5, 0.5),
    formats.MOVIELENS_CSV: RatingScale(0.5, 5, 0.5),
}


def apply_domain_checks(
    schema,
    min_timestamp: int,
    max_timestamp: int,
    rating_scale: RatingScale | None = None,
    text_ids: tuple[str, ...] = (),
    rating_required: bool = False,
    event_required: bool = False,
) -> None:
    """Writes the interaction-data checks into ``schema`` (in place).

    ``user_id``, ``item_id`` and ``timestamp`` are required in every row, single-valued;
    timestamps integers within [min_timestamp, max_timestamp]; ids integers >= ``MIN_ID``, as
    prepare-data requires (an id's upper bound stays free: catalogues grow), except those named
    in ``text_ids``: text (BYTES) with no domain. A feature the data lacks is added, so TFDV
    reports it missing. With ``rating_scale`` (a MovieLens layout), a numeric ``rating`` without
    a domain of its own gets the scale's range; the steps cannot be written into a schema and
    stay unchecked. ``rating_required`` (``--min-rating``): a numeric ``rating`` must be in
    every row; ``event_required`` (``--positive-events``): an ``event`` column must be there.
    """
    from tensorflow_metadata.proto.v0 import schema_pb2

    by_name = {f.name: f for f in schema.feature}
    for name in (USER, ITEM, TIME):
        feature = by_name.get(name)
        if feature is None:
            feature = schema.feature.add(name=name)
        kind = schema_pb2.BYTES if name in text_ids else schema_pb2.INT
        if feature.type != kind or kind == schema_pb2.BYTES:
            feature.type = kind
            # A string domain inferred from text ids (a catalogue grows), an int domain of a
            # baseline whose ids were integers.
            feature.ClearField("domain_info")
        feature.presence.min_fraction = 1.0
        feature.presence.min_count = max(feature.presence.min_count, 1)
        if not feature.HasField("value_count") and not feature.HasField("shape"):
            feature.shape.dim.add(size=1)
        if name == TIME:
            feature.int_domain.min = min_timestamp
            feature.int_domain.max = max_timestamp
        elif kind == schema_pb2.BYTES:
            pass
        elif not feature.int_domain.HasField("min") or feature.int_domain.min < MIN_ID:
            feature.int_domain.min = MIN_ID
    for name, required in ((RATING, rating_required), (EVENT, event_required)):
        if not required:
            continue
        feature = by_name.get(name)
        if feature is None:
            feature = by_name[name] = schema.feature.add(
                name=name, type=schema_pb2.FLOAT if name == RATING else schema_pb2.BYTES
            )
        if name == RATING and feature.type not in (schema_pb2.INT, schema_pb2.FLOAT):
            feature.type = schema_pb2.FLOAT  # Text ratings: a type anomaly.
            feature.ClearField("domain_info")
        if name == RATING:  # Data prep compares every row's rating.
            feature.presence.min_fraction = 1.0
        feature.presence.min_count = max(feature.presence.min_count, 1)
    rating = by_name.get(RATING)
    if rating_scale is not None and rating is not None and not _has_range(rating):
        if rating.type == schema_pb2.INT:
            rating.int_domain.min = math.ceil(rating_scale.low)
            rating.int_domain.max = math.floor(rating_scale.high)
        elif rating.type == schema_pb2.FLOAT:
            rating.float_domain.min = rating_scale.low
            rating.float_domain.max = rating_scale.high
            rating.float_domain.disallow_nan = True
    # A string domain TFDV inferred for a text column would hide the type anomaly above.
    used = {f.domain for f in schema.feature if f.HasField("domain")}
    kept = [d for d in schema.string_domain if d.name in used]
    del schema.string_domain[:]
    schema.string_domain.extend(kept)


def _has_range(feature) -> bool:
    for name in ("int_domain", "float_domain"):
        if feature.HasField(name):
            domain = getattr(feature, name)
            if domain.HasField("min") or domain.HasField("max"):
                return True
    return False


def coverage(
    schema, source: beam_source.Source, rating_scale: RatingScale | None, domain_checks: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What ``schema`` checks, one line per feature, and what nothing checks.

    Not checked: columns of the input that are not read (only the user, item, timestamp, rating
    and event columns are), a rating without a range (no known scale for the layout), and a
    fractional rating scale's steps (a schema cannot express them).
    """
    from tensorflow_metadata.proto.v0 import schema_pb2

    checked = tuple(_describe(f) for f in schema.feature)
    not_checked = []
    read = {column for column, _ in source.rename}
    unread = [c for c in source.column_names if c not in read]
    if unread:
        not_checked.append(
            f"{', '.join(unread)}: not read (only the user, item, timestamp, rating and event "
            "columns are validated)"
        )
    rating = next((f for f in schema.feature if f.name == RATING), None)
    if rating is not None and rating.type in (schema_pb2.INT, schema_pb2.FLOAT):
        if not _has_range(rating):
            why = (
                f"no known rating scale for {source.format} data"
                if rating_scale is None
                else "domain checks are off"
            )
            not_checked.append(
                f"rating: values not range-checked ({why}); to check them, add an int_domain or "
                f"float_domain to schema.pbtxt and pass it with {hints.option('--baseline-schema')}"
            )
        elif rating.type == schema_pb2.FLOAT and rating_scale is not None:
            not_checked.append(
                f"rating: steps of {rating_scale.step:g} (only the range is checked; a schema "
                "cannot express steps)"
            )
    if not domain_checks:
        not_checked.append(
            f"user_id, item_id, timestamp: domain checks off ({hints.option('--no-domain-checks')}"
            "); only the schema's own checks apply"
        )
    return checked, tuple(not_checked)


def _describe(feature) -> str:
    """``timestamp: integer, in every row, 788918400..1732406400 (1995-01-01..2024-11-24)``."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    kinds = {schema_pb2.INT: "integer", schema_pb2.FLOAT: "number", schema_pb2.BYTES: "text"}
    parts = [kinds.get(feature.type, "any type")]
    if feature.presence.min_fraction >= 1.0:
        parts.append("in every row")
    for name in ("int_domain", "float_domain"):
        domain = getattr(feature, name)
        if not feature.HasField(name) or not (domain.HasField("min") or domain.HasField("max")):
            continue
        low = f"{domain.min:g}" if domain.HasField("min") else ""
        high = f"{domain.max:g}" if domain.HasField("max") else ""
        if feature.name == TIME and low and high:
            days = (_day(domain.min), _day(domain.max))
            parts.append(f"{domain.min}..{domain.max} ({days[0]}..{days[1]} UTC)")
        elif low and high:
            parts.append(f"{low}..{high}")
        else:
            parts.append(f">= {low}" if low else f"<= {high}")
    if feature.HasField("domain") or feature.HasField("string_domain"):
        parts.append("values from the schema's list")
    if feature.HasField("drift_comparator"):
        parts.append("drift against the baseline")
    return f"{feature.name}: {', '.join(parts)}"


def _day(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).date().isoformat()


# What the text id checks add to a text id feature's line of ``checked``.
ID_TEXT_CHECKED = ", no empty ids, none with surrounding whitespace or control characters"
ID_TEXT_CHECKED_MIXED = ID_TEXT_CHECKED + ", not mixed with integer ids"


def with_id_text_checks(checked: tuple[str, ...], id_checks: dict[str, bool]) -> tuple[str, ...]:
    """``checked`` with what the text id checks add to each checked text id feature's line.

    ``id_checks``: each text id feature checked -> whether its mixed check applies.
    """
    return tuple(
        c + (ID_TEXT_CHECKED_MIXED if id_checks.get(c.split(":")[0]) else ID_TEXT_CHECKED)
        if c.split(":")[0] in id_checks
        else c
        for c in checked
    )


def text_ids(id_type: str, stats, baseline_schema) -> tuple[str, ...]:
    """The id features that are text: all with ``string``, none with ``int64``.

    With ``auto``, a baseline schema's type stands (a column that changed kind is an anomaly);
    without one, the type the statistics found (``beam_source`` reads a column that is not all
    integers as text).
    """
    from tensorflow_metadata.proto.v0 import schema_pb2

    if id_type == ID_STRING:
        return IDS
    if id_type == ID_INT64:
        return ()
    found = {}
    for feat in stats.datasets[0].features if stats.datasets else ():
        name = ".".join(feat.path.step)
        text = feat.type in (
            statistics_pb2.FeatureNameStatistics.STRING,
            statistics_pb2.FeatureNameStatistics.BYTES,
        )
        found[name] = text
    if baseline_schema is not None:
        for feat in baseline_schema.feature:
            if feat.name in IDS and feat.type in (schema_pb2.INT, schema_pb2.BYTES):
                found[feat.name] = feat.type == schema_pb2.BYTES
    return tuple(name for name in IDS if found.get(name))
