"""What a validation run found: each anomaly with what to do about it, and the run's result.

TFDV's anomalies (``anomaly_list``) and the gate's own for text ids (``add_id_text_anomalies``,
from ``IdTextStats``'s counts: CUSTOM_VALIDATION, each naming the option to pass), each with its
advice (``advice_for``). Every message that advises an option names it through ``hints.option``:
``--user-col`` on the command line, ``--param user_col=COLUMN`` in a pipeline step.
"""

from __future__ import annotations

import dataclasses
import re

from training_core.common import hints
from training_core.data.beam_source import EVENT, IDS, ITEM, RATING, TIME, USER
from training_core.data.read_errors import NEGATIVE_ID_ADVICE
from training_core.data.validation_stats import id_text_counts


@dataclasses.dataclass(frozen=True)
class Anomaly:
    """One reason TFDV gave for one feature (or for the dataset)."""

    feature: str
    kind: str  # TFDV's AnomalyInfo.Type name, e.g. SCHEMA_MISSING_COLUMN.
    description: str
    severity: str
    advice: str

    def line(self) -> str:
        """``feature: KIND: description. What to do: advice``."""
        return f"{self.feature}: {self.kind}: {self.description} What to do: {self.advice}"


@dataclasses.dataclass(frozen=True)
class ValidationResult:
    """What a validation run found and wrote."""

    input_path: str
    format: str
    statistics_path: str  # The FeatureStats.pb file.
    schema_path: str  # The schema.pbtxt file.
    anomalies_path: str  # The anomalies.pbtxt file.
    report_path: str
    anomalies: tuple[Anomaly, ...]
    num_examples: int
    schema_source: str  # "inferred" or the baseline schema's path.
    drift_checked: bool
    seconds: float
    statistics_seconds: float
    checked: tuple[str, ...] = ()  # What the schema enforces, one line per feature.
    not_checked: tuple[str, ...] = ()  # Columns (or parts of them) nothing checked.

    @property
    def passed(self) -> bool:
        """True when TFDV found no anomaly."""
        return not self.anomalies


# The kind of the anomalies the gate adds for what data prep refuses in text ids (IdTextStats).
CUSTOM = "CUSTOM_VALIDATION"

# Anomalies of a column data prep reads (user, item, time) that it would refuse as well: a
# missing column, one with no values, values of another type, and the text id checks.
PREP_CANNOT_READ = frozenset(
    {"SCHEMA_MISSING_COLUMN", "FEATURE_TYPE_NOT_PRESENT", "UNEXPECTED_DATA_TYPE", CUSTOM}
)

# Advice texts name options as ``{--flag}`` or ``{--flag VALUE}``; ``name_options`` writes each as
# the user sets it where the message is read (hints.option), at the time it is built.
_OPTION = re.compile(r"\{(--[a-z-]+)(?: ([^{}]+))?\}")


def name_options(text: str) -> str:
    """``text`` with each ``{--flag}`` written as the user sets it here (``hints.option``)."""
    return _OPTION.sub(lambda m: _set(m.group(1), m.group(2)), text)


def _set(flag: str, value: str | None = None) -> str:
    """``--id-type string`` on the command line; its pipeline parameter in a pipeline step.

    The parameter's value is hints.PIPELINE_PARAMETERS's (``id_type=string``).
    """
    named = hints.option(flag)
    return f"{flag} {value}" if value and named == flag else named


# What to do, by TFDV anomaly kind; prefixes match families of kinds.
_ADVICE = {
    "SCHEMA_MISSING_COLUMN": (
        "the column is not in the data: check the export, {--format}, and {--user-col}, "
        "{--item-col} or {--time-col} for a CSV or Parquet table."
    ),
    "FEATURE_TYPE_LOW_FRACTION_PRESENT": (
        "some rows have no value here: fix or drop those rows before data prep."
    ),
    "FEATURE_TYPE_LOW_NUMBER_PRESENT": "too few rows have a value here: check the export.",
    "FEATURE_TYPE_NOT_PRESENT": "no row has a value here: check the export and the column names.",
    "UNEXPECTED_DATA_TYPE": (
        "values are not of the schema's type: timestamps must be epoch seconds (or ISO-8601 in "
        "Parquet/CSV), ratings numbers; fix the rows, or the schema passed with "
        "{--baseline-schema}."
    ),
    "INT_TYPE_SMALL_INT": (
        "values below the allowed minimum: negative ids, or timestamps before the plausible "
        "start (check the unit and time zone); fix the rows, or lower the bound in the schema."
    ),
    "INT_TYPE_BIG_INT": (
        "values above the allowed maximum: timestamps in the future (milliseconds instead of "
        "seconds?), or ids past the schema's bound; fix the rows, or raise the bound."
    ),
    "FLOAT_TYPE_SMALL_FLOAT": (
        "values below the allowed minimum: fix the rows, or lower the bound in the schema."
    ),
    "FLOAT_TYPE_BIG_FLOAT": (
        "values above the allowed maximum: fix the rows, or raise the bound in the schema."
    ),
    "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH": (
        "the distribution moved away from the baseline statistics: if the change is expected "
        "(new catalogue, season), review it and make this run's statistics the new baseline, "
        "or raise the threshold with {--drift}; if not, find what changed upstream."
    ),
    "COMPARATOR_L_INFTY_HIGH": (
        "the value frequencies moved away from the baseline statistics: if expected, make this "
        "run's statistics the new baseline or raise the threshold with {--drift}; if not, find "
        "what changed upstream."
    ),
    "COMPARATOR_CONTROL_DATA_MISSING": (
        "the baseline statistics have no such feature: recompute the baseline on data that has it."
    ),
    "SCHEMA_NEW_COLUMN": "a column the schema does not know: add it to the schema or drop it.",
    "DATASET_LOW_NUM_EXAMPLES": "too few rows: check that the export is complete.",
}
_ADVICE_BY_PREFIX = {
    "INT_TYPE_": _ADVICE["UNEXPECTED_DATA_TYPE"],
    "FLOAT_TYPE_": _ADVICE["UNEXPECTED_DATA_TYPE"],
    "STRING_TYPE_": _ADVICE["UNEXPECTED_DATA_TYPE"],
    "FEATURE_TYPE_": "values missing or repeated: every row needs exactly one value here.",
    "COMPARATOR_": _ADVICE["COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH"],
}
_DEFAULT_ADVICE = (
    "fix the data; if the schema is too strict, edit schema.pbtxt and pass it back with "
    "{--baseline-schema}."
)
_ID_TYPE_ADVICE = (
    "the ids are read as integers here (id type int64, or a baseline schema whose ids are "
    "integers): for text ids (UUIDs, SKUs, ISBNs) pass {--id-type string}, or fix the rows."
)
# Advice for (feature, kind) where the feature says more than the kind.
_FEATURE_ADVICE = {
    (USER, "INT_TYPE_SMALL_INT"): f"{NEGATIVE_ID_ADVICE}; prepare-data rejects them too.",
    (ITEM, "INT_TYPE_SMALL_INT"): f"{NEGATIVE_ID_ADVICE}; prepare-data rejects them too.",
    **{
        (feature, kind): _ID_TYPE_ADVICE
        for feature in IDS
        for kind in ("UNEXPECTED_DATA_TYPE", "INT_TYPE_NOT_INT_STRING")
    },
    (TIME, "INT_TYPE_SMALL_INT"): (
        "timestamps before {--min-time} (default 1995-01-01): check the unit and the time zone; "
        "fix or drop those rows, or lower {--min-time}."
    ),
    (TIME, "INT_TYPE_BIG_INT"): (
        "timestamps after {--max-time} (default: now + 1 day): milliseconds instead of seconds? "
        "Fix or drop those rows, or raise {--max-time}."
    ),
    (RATING, "SCHEMA_MISSING_COLUMN"): (
        "{--min-rating} needs a rating column: name it with {--rating-col}, or leave "
        "{--min-rating} out (every row a positive)."
    ),
    (RATING, "UNEXPECTED_DATA_TYPE"): (
        "{--min-rating} compares numbers and this column holds text: name the rating column "
        "with {--rating-col}, or fix the rows."
    ),
    (EVENT, "SCHEMA_MISSING_COLUMN"): (
        "{--positive-events} needs an event column: name it with {--event-col}, or leave "
        "{--positive-events} out (every event a positive)."
    ),
    **{
        (RATING, kind): (
            "ratings off the layout's scale (the rating domain in schema.pbtxt): fix or drop "
            "those rows (a 99 or a -1 often marks a missing rating); if the data really uses "
            "another scale, edit the domain and pass the schema with {--baseline-schema}."
        )
        for kind in (
            "INT_TYPE_SMALL_INT",
            "INT_TYPE_BIG_INT",
            "FLOAT_TYPE_SMALL_FLOAT",
            "FLOAT_TYPE_BIG_FLOAT",
            "FLOAT_TYPE_HAS_NAN",
        )
    },
}


def advice_for(kind: str, feature: str | None = None, check: str = "") -> str:
    """What to do about an anomaly of TFDV kind ``kind`` (in ``feature``, when given).

    ``check``: the short description of a CUSTOM_VALIDATION anomaly (one of ``ID_TEXT_CHECKS``).
    """
    return name_options(_advice_template(kind, feature, check))


def _advice_template(kind: str, feature: str | None, check: str) -> str:
    if kind == CUSTOM and check in ID_TEXT_CHECKS:
        return ID_TEXT_CHECKS[check].advice
    if (feature, kind) in _FEATURE_ADVICE:
        return _FEATURE_ADVICE[(feature, kind)]
    if kind in _ADVICE:
        return _ADVICE[kind]
    for prefix, text in _ADVICE_BY_PREFIX.items():
        if kind.startswith(prefix):
            return text
    return _DEFAULT_ADVICE


@dataclasses.dataclass(frozen=True)
class IdTextCheck:
    """One check of text ids: the counter that must be 0, what is wrong, what to do."""

    counter: str
    what: str  # "{n} ids ... (e.g. {example})"
    advice: str  # Names options as {--flag}.


# By the anomaly's short description. The mixed check applies to text files under --id-type auto
# only (a Parquet column's own type decides its kind); "integer" then counts the integer ids of a
# column that also holds others.
ID_TEXT_CHECKS = {
    "Integer and text ids mixed": IdTextCheck(
        "integer",
        "{n} of the ids are integers (e.g. {example}) and {text} not (e.g. {text_example})",
        "id type auto reads a column as integers or as text, not both, and data prep refuses "
        "this one: if the ids are text (ISBNs such as 080652121X, SKUs) pass {--id-type string}; "
        "else fix the rows that are not integers.",
    ),
    "Empty ids": IdTextCheck(
        "empty",
        "{n} ids are empty",
        "every row needs a user and an item id; data prep refuses empty ones: fill them in or "
        "drop those rows.",
    ),
    "Ids with surrounding whitespace": IdTextCheck(
        "padded",
        "{n} ids begin or end with whitespace (e.g. {example})",
        "data prep keeps ids exactly as written and refuses these rather than strip them (the "
        "stripped id would not be the one sent at serving time): fix the export so that ids "
        "are written without spaces around them.",
    ),
    "Ids with control characters": IdTextCheck(
        "control",
        "{n} ids hold a line break, a tab or another control character (e.g. {example})",
        "a vocabulary holds one id per line, so data prep refuses these: fix or drop those rows.",
    ),
}


def add_id_text_anomalies(anomalies_proto, stats, checks: dict[str, bool]) -> None:
    """Adds a CUSTOM_VALIDATION reason to ``anomalies_proto`` for each failed text id check.

    ``checks`` maps each id feature to check to whether its mixed check applies.
    """
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    for feature, mixed in checks.items():
        counts = id_text_counts(stats, feature)
        for short, check in ID_TEXT_CHECKS.items():
            n, example = counts.get(check.counter, (0, None))
            text, text_example = counts.get("text", (0, None))
            if not n or (check.counter == "integer" and (not mixed or not text)):
                continue
            info = anomalies_proto.anomaly_info[feature]
            if not info.reason:
                info.path.step.append(feature)
                info.severity = anomalies_pb2.AnomalyInfo.ERROR
                info.short_description = short
                info.description = check.what.split(" (")[0].format(n=n, text=text)
            else:
                info.short_description = "Multiple errors"
            info.reason.add(
                type=anomalies_pb2.AnomalyInfo.CUSTOM_VALIDATION,
                short_description=short,
                description=check.what.format(
                    n=n, example=repr(example), text=text, text_example=repr(text_example)
                )
                + ".",
            )


def anomaly_list(anomalies_proto) -> tuple[Anomaly, ...]:
    """One :class:`Anomaly` per reason TFDV gives, sorted by feature then kind."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    out = []
    infos = list(anomalies_proto.anomaly_info.items())
    if anomalies_proto.HasField("dataset_anomaly_info"):
        infos.append(("(dataset)", anomalies_proto.dataset_anomaly_info))
    for feature, info in infos:
        severity = anomalies_pb2.AnomalyInfo.Severity.Name(info.severity)
        reasons = list(info.reason) or [info]
        for r in reasons:
            kind = anomalies_pb2.AnomalyInfo.Type.Name(r.type) if hasattr(r, "type") else "UNKNOWN"
            text = r.description or r.short_description
            desc = f"{r.short_description}: {text}" if r.short_description != text else text
            advice = advice_for(kind, feature, r.short_description)
            out.append(Anomaly(feature, kind, desc.strip(), severity, advice))
    return tuple(sorted(out, key=lambda a: (a.feature, a.kind)))
