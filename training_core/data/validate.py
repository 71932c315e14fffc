"""A data validation gate on raw interactions, with TensorFlow Data Validation (TFDV).

As TFX's ExampleValidator, but the gate blocks: statistics come from TFDV's ``GenerateStatistics``
in an Apache Beam pipeline (in process unless Beam options name a runner), the schema is inferred
or a reviewed baseline, and the anomalies are TFDV's. When there are any, ``validate``
raises :class:`ValidationFailed` listing each one (feature, kind, description, what to do), unless
``fail_on_anomalies`` is off, in which case it logs them as a warning.

Domain checks that inference alone would miss for interaction data are written into the schema,
so TFDV enforces them and a person can read them in ``schema.pbtxt``: ``user_id``, ``item_id`` and
``timestamp`` present in every row, integer ids >= ``io.MIN_ID`` (the rule prepare-data applies),
timestamps integers in a plausible range, for the MovieLens layouts ratings on their scale
(``RATING_SCALES``), and with ``min_rating`` / ``positive_events`` (data prep's positive rules) a
numeric ``rating`` / an ``event`` column. The result and the report say what was checked and
which columns were not.

Ids follow data prep's ``--id-type`` (``ValidateConfig.id_type``, io.py's rule): an id column read
as integers is an INT feature with the ">= 0" domain, as before string ids existed; one read as
text (``string``, or ``auto`` where the column is not all integers) is a BYTES feature with no
domain (a catalogue grows, so no list of allowed ids either). A baseline schema's id type stands
under ``auto``, so a column that changed kind since the baseline is an anomaly. What data prep
refuses in a text id column and a schema cannot say is counted by ``IdTextStats`` (custom
statistics of ``user_id``/``item_id`` in ``FeatureStats.pb``) and reported as CUSTOM_VALIDATION
anomalies, each naming the option to pass: integer and non-integer ids mixed in one column of a
text file under ``auto`` (data prep asks for ``--id-type string``), empty ids, ids with leading
or trailing whitespace (data prep keeps ids exactly as written and refuses those rather than
strip them) and ids holding a control character such as a line break. The gate names an example
value; data prep names the file and the row.

Every message that advises an option names it through ``hints.option``: ``--user-col`` on the
command line, ``--param user_col=COLUMN`` in a pipeline step.
Artifacts are in TFDV's and TFX's own formats: ``FeatureStats.pb`` (binary
DatasetFeatureStatisticsList, ``tfdv.load_stats_binary``), ``schema.pbtxt``
(``tfdv.load_schema_text``), ``anomalies.pbtxt`` (``tfdv.load_anomalies_text``) and
``SchemaDiff.pb`` (binary Anomalies, as ExampleValidator writes), plus an HTML report.
"""

from __future__ import annotations

import dataclasses
import datetime
import html
import logging
import math
import os
import re
import time

import pyarrow as pa
import pyarrow.compute as pc
from tensorflow_data_validation.statistics.generators import stats_generator
from tensorflow_metadata.proto.v0 import statistics_pb2

from training_core.common import hints
from training_core.data import beam_source
from training_core.data import io as rio
from training_core.data.beam_source import EVENT, IDS, ITEM, RATING, TIME, USER
from training_core.data.ids import ID_AUTO, ID_INT64, ID_STRING, ID_TYPES

log = logging.getLogger(__name__)

STATS_FILE = "FeatureStats.pb"
SCHEMA_FILE = "schema.pbtxt"
ANOMALIES_FILE = "anomalies.pbtxt"
ANOMALIES_BINARY_FILE = "SchemaDiff.pb"
REPORT_FILE = "report.html"
# The folders of one run's output (``OutputPaths.under``; the component's artifacts too).
STATISTICS_DIR, SCHEMA_DIR, ANOMALIES_DIR = "statistics", "schema", "anomalies"

MIN_TIMESTAMP = 788_918_400  # 1995-01-01 UTC: before any MovieLens rating.
FUTURE_SLACK_SECONDS = 86_400  # Timestamps may run up to a day ahead of the clock.
LINF, JS = "linf", "js"
# Applied when baseline statistics are given and neither the schema nor the caller sets a
# comparator for the feature. Ids and ratings only: timestamps move forward by design.
DEFAULT_DRIFT_THRESHOLD = 0.1
DEFAULT_DRIFT_FEATURES = (USER, ITEM, RATING)


@dataclasses.dataclass(frozen=True)
class RatingScale:
    """The ratings a layout allows: ``low`` to ``high`` in steps of ``step``."""

    low: float
    high: float
    step: float

    def __str__(self) -> str:
        return f"{self.low:g}..{self.high:g} in steps of {self.step:g}"


# Ratings of the MovieLens layouts (training_core/data/io.py). ml-100k's u.data and ml-1m's
# ratings.dat hold whole stars 1..5; ml-10m's ratings.dat (the same layout) and the ratings.csv
# of ml-20m and later hold half stars 0.5..5. Generic CSV and Parquet tables have no known scale.
RATING_SCALES = {
    rio.MOVIELENS_100K: RatingScale(1, 5, 1),
    rio.MOVIELENS_DAT: RatingScale(0.5, 5, 0.5),
    rio.MOVIELENS_CSV: RatingScale(0.5, 5, 0.5),
}


class ValidationFailed(rio.DataError):
    """The data does not meet the schema; ``result`` holds everything that was written."""

    def __init__(self, result: ValidationResult):
        """Builds the message from the result's anomalies."""
        self.result = result
        super().__init__(failure_message(result))


@dataclasses.dataclass(frozen=True)
class DriftThreshold:
    """Flags drift of one feature against baseline statistics above ``threshold``.

    ``linf`` (L-infinity distance of the value frequencies) needs a categorical feature;
    ``js`` (approximate Jensen-Shannon divergence) works on numeric and categorical ones.
    """

    feature: str
    comparator: str
    threshold: float

    def __post_init__(self):
        """Rejects unknown comparators and thresholds outside (0, 1]."""
        if self.comparator not in (LINF, JS):
            raise ValueError(
                f"drift comparator {self.comparator!r} for {self.feature}: use linf or js"
            )
        if not 0 < self.threshold <= 1:
            raise ValueError(f"drift threshold for {self.feature} must be in (0, 1]")


def parse_drift(spec: str) -> DriftThreshold:
    """``item_id=js:0.1`` -> DriftThreshold('item_id', 'js', 0.1)."""
    try:
        feature, rest = spec.split("=", 1)
        comparator, threshold = rest.split(":", 1)
        return DriftThreshold(feature.strip(), comparator.strip().lower(), float(threshold))
    except ValueError as e:
        if "drift" in str(e):
            raise
        raise ValueError(
            f"bad drift setting {spec!r}: write FEATURE=linf:THRESHOLD or FEATURE=js:THRESHOLD, "
            "e.g. item_id=js:0.1"
        ) from None


def load_drift_file(path: str) -> tuple[DriftThreshold, ...]:
    """Drift settings from YAML or JSON: ``{item_id: "js:0.1", rating: {linf: 0.05}}``."""
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of feature to 'linf:T' or 'js:T'")
    out = []
    for feature, value in data.items():
        if isinstance(value, dict):
            out.extend(DriftThreshold(str(feature), k, float(v)) for k, v in value.items())
        else:
            out.append(parse_drift(f"{feature}={value}"))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class OutputPaths:
    """Where each artifact goes.

    Folders for statistics, schema and anomalies (as TFX lays them out), a file for the report.
    """

    statistics: str
    schema: str
    anomalies: str
    report: str

    @classmethod
    def under(cls, output_dir: str) -> OutputPaths:
        """The default layout inside one folder."""
        return cls(
            statistics=os.path.join(output_dir, STATISTICS_DIR),
            schema=os.path.join(output_dir, SCHEMA_DIR),
            anomalies=os.path.join(output_dir, ANOMALIES_DIR),
            report=os.path.join(output_dir, REPORT_FILE),
        )


@dataclasses.dataclass(frozen=True)
class ValidateConfig:
    """Options of one validation run."""

    input_path: str
    outputs: OutputPaths
    format: str = "auto"
    columns: rio.Columns = rio.Columns()
    # schema.pbtxt, its folder, or an earlier run's output folder (``baseline_file``); local
    # paths and gs:// URIs. None: infer the schema / no drift checks.
    baseline_schema: str | None = None
    baseline_statistics: str | None = None
    drift: tuple[DriftThreshold, ...] = ()  # Overrides the schema's and the defaults.
    domain_checks: bool = True
    min_timestamp: int = MIN_TIMESTAMP
    max_timestamp: int | None = None  # None: now + FUTURE_SLACK_SECONDS, at run time.
    fail_on_anomalies: bool = True
    beam_pipeline_args: tuple[str, ...] = ()
    range_bytes: int = beam_source.DEFAULT_RANGE_BYTES
    id_type: str = ID_AUTO  # As data prep reads the id columns (ids.ID_TYPES).
    # Data prep's positive rules: set, they need a numeric rating / an event column.
    min_rating: float | None = None
    positive_events: str = ""  # Comma-separated, as PrepareConfig's; "" = every event.

    def __post_init__(self):
        """Rejects an id type data prep does not know."""
        if self.id_type not in ID_TYPES:
            raise ValueError(f"unknown id type {self.id_type!r}; use one of {', '.join(ID_TYPES)}")


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
_PREP_CANNOT_READ = frozenset(
    {"SCHEMA_MISSING_COLUMN", "FEATURE_TYPE_NOT_PRESENT", "UNEXPECTED_DATA_TYPE", CUSTOM}
)

# Advice texts name options as ``{--flag}`` or ``{--flag VALUE}``; ``_options`` writes each as
# the user sets it where the message is read (hints.option), at the time it is built.
_OPTION = re.compile(r"\{(--[a-z-]+)(?: ([^{}]+))?\}")


def _options(text: str) -> str:
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
    (USER, "INT_TYPE_SMALL_INT"): f"{rio.NEGATIVE_ID_ADVICE}; prepare-data rejects them too.",
    (ITEM, "INT_TYPE_SMALL_INT"): f"{rio.NEGATIVE_ID_ADVICE}; prepare-data rejects them too.",
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
    return _options(_advice_template(kind, feature, check))


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


# Text ids: what data prep refuses and a schema cannot say. IdTextStats counts each kind of value
# (with an example) as custom statistics named ``id_text_COUNTER`` / ``id_text_COUNTER_example``.
# As io.py's reader tells them apart (its own functions): an integer id is one int64 holds (a
# negative one data prep refuses as negative); a control character is C0, DEL, C1 or Unicode's
# line or paragraph separator; whitespace is Unicode's.
def _id_masks(values: pa.Array) -> dict[str, pa.Array]:
    """Per counter of ``ID_TEXT_COUNTERS`` but "values", which values of ``values`` it counts.

    By the reader's own rules (``io.integer_ids``, ``io.CONTROL_PATTERN``), so the gate counts
    exactly what data prep would read as integers or refuse.
    """
    integer = pa.array(rio.integer_ids(values)[0])
    return {
        "integer": integer,
        "text": pc.invert(integer),
        "empty": pc.equal(values, ""),
        "padded": pc.not_equal(pc.utf8_trim_whitespace(values), values),
        "control": pc.match_substring_regex(values, rio.CONTROL_PATTERN),
    }


ID_TEXT_COUNTERS = ("values", "integer", "text", "empty", "padded", "control")
_CUSTOM_STAT = "id_text_"


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


class IdTextStats(stats_generator.CombinerStatsGenerator):
    """Custom statistics of text id columns: how many ids are integers, empty, padded, ...

    Integer columns get none, so an integer-id file's statistics are what TFDV alone computes.
    The accumulator is ``{feature: {counter: [count, example or None]}}``.
    """

    def __init__(self):
        """The generator for ``user_id`` and ``item_id``."""
        super().__init__("IdTextStats")

    def create_accumulator(self) -> dict:
        """Nothing counted."""
        return {}

    def add_input(self, accumulator: dict, examples: pa.RecordBatch) -> dict:
        """Counts one batch's text ids."""
        for name in IDS:
            index = examples.schema.get_field_index(name)
            if index < 0:
                continue
            values = examples.column(index).flatten()
            if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
                continue
            if pa.types.is_large_string(values.type):
                values = values.cast(pa.string())
            masks = _id_masks(values)
            counts = accumulator.setdefault(name, {})
            total = counts.setdefault("values", [0, None])
            total[0] += len(values)
            for counter, mask in masks.items():
                entry = counts.setdefault(counter, [0, None])
                n = pc.sum(mask).as_py() or 0
                entry[0] += n
                if n and entry[1] is None:
                    entry[1] = values.filter(mask)[0].as_py()
        return accumulator

    def merge_accumulators(self, accumulators) -> dict:
        """Sums the counts; keeps the first example found."""
        out: dict = {}
        for acc in accumulators:
            for name, counts in acc.items():
                merged = out.setdefault(name, {})
                for counter, (n, example) in counts.items():
                    entry = merged.setdefault(counter, [0, None])
                    entry[0] += n
                    if entry[1] is None:
                        entry[1] = example
        return out

    def extract_output(self, accumulator: dict) -> statistics_pb2.DatasetFeatureStatistics:
        """``id_text_COUNTER`` (num) and ``id_text_COUNTER_example`` (str) per text id feature."""
        out = statistics_pb2.DatasetFeatureStatistics()
        for name, counts in sorted(accumulator.items()):
            feature = out.features.add()
            feature.path.step.append(name)
            for counter in ID_TEXT_COUNTERS:
                n, example = counts.get(counter, (0, None))
                feature.custom_stats.add(name=_CUSTOM_STAT + counter, num=n)
                if example is not None:
                    feature.custom_stats.add(name=f"{_CUSTOM_STAT}{counter}_example", str=example)
        return out


def id_text_counts(stats, feature: str) -> dict[str, tuple[int, str | None]]:
    """``IdTextStats``'s counters of ``feature`` in ``stats`` ({} for an integer column)."""
    out: dict[str, tuple[int, str | None]] = {}
    for feat in stats.datasets[0].features if stats.datasets else ():
        if ".".join(feat.path.step) != feature:
            continue
        custom = {c.name: c for c in feat.custom_stats if c.name.startswith(_CUSTOM_STAT)}
        for counter in ID_TEXT_COUNTERS:
            num = custom.get(_CUSTOM_STAT + counter)
            example = custom.get(f"{_CUSTOM_STAT}{counter}_example")
            if num is not None:
                out[counter] = (int(num.num), example.str if example is not None else None)
    return out


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


def validate(config: ValidateConfig) -> ValidationResult:
    """Statistics, schema and anomalies of the raw interactions, written to ``config.outputs``.

    Raises:
        DataError: the input cannot be read, or has no rows (the message names the file).
        ValidationFailed: there are anomalies and ``fail_on_anomalies`` is set (after writing
            every artifact, so that the report can be opened).
        ValueError: an impossible option (a drift setting TFDV cannot apply).
    """
    import tensorflow_data_validation as tfdv

    start = time.perf_counter()
    source = beam_source.describe_source(
        config.input_path, config.format, config.columns, config.id_type
    )
    baseline_schema = _load_schema(config.baseline_schema) if config.baseline_schema else None
    stats_path = os.path.join(config.outputs.statistics, STATS_FILE)
    t0 = time.perf_counter()
    compute_statistics(
        source, stats_path, baseline_schema, config.beam_pipeline_args, config.range_bytes
    )
    stats_seconds = time.perf_counter() - t0
    stats = tfdv.load_stats_binary(stats_path)
    num_examples = int(stats.datasets[0].num_examples) if stats.datasets else 0
    if num_examples == 0:
        raise rio.DataError(
            f"{', '.join(source.files)}: no interactions (the table has a header but no rows)"
        )

    schema = baseline_schema if baseline_schema is not None else tfdv.infer_schema(stats)
    rating_scale = RATING_SCALES.get(source.format)
    text_ids = _text_ids(config.id_type, stats, baseline_schema)
    if config.domain_checks:
        apply_domain_checks(
            schema,
            config.min_timestamp,
            _max_timestamp(config),
            rating_scale,
            text_ids=text_ids,
            rating_required=config.min_rating is not None,
            event_required=bool(config.positive_events.strip()),
        )
    checked, not_checked = coverage(schema, source, rating_scale, config.domain_checks)
    # The text id checks: which features, and whether mixing integers and text is refused.
    id_checks = (
        {f: config.id_type == ID_AUTO and source.format != rio.PARQUET for f in text_ids}
        if config.domain_checks
        else {}
    )
    checked = tuple(
        c + (_ID_TEXT_CHECKED_MIXED if id_checks.get(c.split(":")[0]) else _ID_TEXT_CHECKED)
        if c.split(":")[0] in id_checks
        else c
        for c in checked
    )
    baseline_stats = None
    if config.baseline_statistics:
        baseline_stats = tfdv.load_stats_binary(
            baseline_file(config.baseline_statistics, STATS_FILE)
        )
        apply_drift(schema, config.drift, defaults=True)
    elif config.drift:
        raise ValueError(
            f"drift thresholds need baseline statistics ({hints.option('--baseline-stats')})"
        )
    anomalies_proto = tfdv.validate_statistics(stats, schema, previous_statistics=baseline_stats)
    add_id_text_anomalies(anomalies_proto, stats, id_checks)

    schema_path = os.path.join(config.outputs.schema, SCHEMA_FILE)
    anomalies_path = os.path.join(config.outputs.anomalies, ANOMALIES_FILE)
    for folder in (config.outputs.schema, config.outputs.anomalies):
        os.makedirs(folder, exist_ok=True)
    tfdv.write_schema_text(schema, schema_path)
    tfdv.write_anomalies_text(anomalies_proto, anomalies_path)
    with open(os.path.join(config.outputs.anomalies, ANOMALIES_BINARY_FILE), "wb") as f:
        f.write(anomalies_proto.SerializeToString())

    result = ValidationResult(
        input_path=config.input_path,
        format=source.format,
        statistics_path=stats_path,
        schema_path=schema_path,
        anomalies_path=anomalies_path,
        report_path=config.outputs.report,
        anomalies=anomaly_list(anomalies_proto),
        num_examples=num_examples,
        schema_source=config.baseline_schema or "inferred",
        drift_checked=baseline_stats is not None,
        seconds=0.0,
        statistics_seconds=stats_seconds,
        checked=checked,
        not_checked=not_checked,
    )
    write_report(result, stats, baseline_stats, config.outputs.report)
    result = dataclasses.replace(result, seconds=time.perf_counter() - start)
    if result.anomalies:
        if config.fail_on_anomalies:
            raise ValidationFailed(result)
        log.warning("%s", failure_message(result, blocked=False))
    return result


def compute_statistics(
    source: beam_source.Source,
    output_file: str,
    schema=None,
    beam_pipeline_args: tuple[str, ...] = (),
    range_bytes: int = beam_source.DEFAULT_RANGE_BYTES,
) -> None:
    """Runs TFDV's ``GenerateStatistics`` in a Beam pipeline and writes ``FeatureStats.pb``.

    ``schema`` (optional) tells TFDV which integer features are categorical, as TFX's
    StatisticsGen does with its schema input. ``IdTextStats`` adds its counts of text ids.
    Without ``--runner``, the pipeline runs on Beam's in-process FnApiRunner
    (``--direct_num_workers``/``--direct_running_mode`` apply).
    """
    import apache_beam as beam
    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(list(beam_pipeline_args))
    runner_name = options.view_as(StandardOptions).runner
    remote = "dataflow" in str(runner_name).lower()
    runner = None if runner_name else beam_source.in_process_runner(options)
    os.makedirs(os.path.dirname(output_file) or ".", exist_ok=True)
    stats_options = tfdv.StatsOptions(schema=schema, generators=[IdTextStats()])
    with beam.Pipeline(runner=runner, options=options) as p:
        _ = (
            p
            | "ReadInteractions"
            >> beam_source.ReadInteractionBatches(source, range_bytes, runner_is_remote=remote)
            | "GenerateStatistics" >> tfdv.GenerateStatistics(stats_options)
            | "WriteStatistics"
            >> tfdv.WriteStatisticsToBinaryFile(beam_source.beam_path(output_file, remote))
        )


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
    timestamps integers within [min_timestamp, max_timestamp]; ids integers >= ``io.MIN_ID``, as
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
        elif not feature.int_domain.HasField("min") or feature.int_domain.min < rio.MIN_ID:
            feature.int_domain.min = rio.MIN_ID
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


def apply_drift(schema, drift: tuple[DriftThreshold, ...], defaults: bool) -> None:
    """Sets drift comparators in ``schema``: explicit ones win over the schema's own.

    With ``defaults``, ids and rating without a comparator get ``js`` at DEFAULT_DRIFT_THRESHOLD.

    Raises:
        ValueError: a feature not in the schema, or ``linf`` on a feature that is not categorical.
    """
    from tensorflow_metadata.proto.v0 import schema_pb2

    by_name = {f.name: f for f in schema.feature}
    for d in drift:
        feature = by_name.get(d.feature)
        if feature is None:
            raise ValueError(
                f"drift setting for {d.feature!r}: no such feature in the schema "
                f"(features: {', '.join(sorted(by_name))})"
            )
        categorical = feature.type == schema_pb2.BYTES or (
            feature.type == schema_pb2.INT and feature.int_domain.is_categorical
        )
        if d.comparator == LINF and not categorical:
            raise ValueError(
                f"drift setting {d.feature}=linf: L-infinity compares the value frequencies of a "
                f"categorical feature, and {d.feature} is numeric. Use {d.feature}=js:T, or mark "
                "it categorical in the baseline schema (int_domain { is_categorical: true })."
            )
        feature.ClearField("drift_comparator")
        if d.comparator == LINF:
            feature.drift_comparator.infinity_norm.threshold = d.threshold
        else:
            feature.drift_comparator.jensen_shannon_divergence.threshold = d.threshold
    if defaults:
        explicit = {d.feature for d in drift}
        for name in DEFAULT_DRIFT_FEATURES:
            feature = by_name.get(name)
            if feature is None or name in explicit or feature.HasField("drift_comparator"):
                continue
            comp = feature.drift_comparator.jensen_shannon_divergence
            comp.threshold = DEFAULT_DRIFT_THRESHOLD


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


def failure_message(result: ValidationResult, blocked: bool = True) -> str:
    """The list of anomalies, one per line, with where the artifacts are."""
    head = (
        f"data validation {'failed' if blocked else 'found anomalies (warn-only)'}: "
        f"{len(result.anomalies)} anomal{'y' if len(result.anomalies) == 1 else 'ies'} in "
        f"{result.input_path} ({result.num_examples} rows, schema: {result.schema_source})"
    )
    lines = [head] + [f"  - {a.line()}" for a in result.anomalies]
    if result.not_checked:
        lines.append(f"Not checked: {'; '.join(result.not_checked)}")
    lines.append(f"Report: {result.report_path}; anomalies: {result.anomalies_path}")
    unreadable = sorted(
        {a.feature for a in result.anomalies if a.feature in (USER, ITEM, TIME)}
        & {a.feature for a in result.anomalies if a.kind in _PREP_CANNOT_READ}
    )
    if blocked and unreadable:
        lines.append(
            _options(
                f"Data prep cannot read {', '.join(unreadable)} as it is, so {{--warn-only}} would "
                "only move this failure into data prep: fix the input, or name its columns "
                "({--user-col}, {--item-col}, {--time-col}), its layout ({--format}) or the kind "
                "of its ids ({--id-type string})."
            )
        )
    elif blocked:
        lines.append(
            _options(
                "If the data is right and the schema too strict, edit the schema and pass it with "
                "{--baseline-schema}; to let the run go on anyway, use {--warn-only}."
            )
        )
    return "\n".join(lines)


def summary(result: ValidationResult) -> str:
    """A short human-readable summary of a run."""
    verdict = "passed" if result.passed else f"{len(result.anomalies)} anomalies (warn-only)"
    lines = [
        f"validated {result.num_examples} rows of {result.input_path} ({result.format}): "
        f"{verdict}; statistics {result.statistics_seconds:.1f}s, total {result.seconds:.1f}s",
        *(f"  checked: {c}" for c in result.checked),
        *(f"  not checked: {c}" for c in result.not_checked),
        f"  statistics: {result.statistics_path}",
        f"  schema: {result.schema_path}",
        f"  anomalies: {result.anomalies_path}",
        f"  report: {result.report_path}",
    ]
    return "\n".join(lines)


def artifact_metadata(result: ValidationResult) -> dict:
    """Metadata for the KFP artifacts (JSON-able)."""
    return {
        "num_examples": result.num_examples,
        "num_anomalies": len(result.anomalies),
        "anomaly_kinds": sorted({a.kind for a in result.anomalies}),
        "anomalous_features": sorted({a.feature for a in result.anomalies}),
        "passed": result.passed,
        "schema_source": result.schema_source,
        "drift_checked": result.drift_checked,
        "not_checked": list(result.not_checked),
    }


def write_report(result: ValidationResult, stats, baseline_stats, path: str) -> None:
    """An HTML page: verdict, anomalies with what to do, a feature table, and TFDV's Facets view."""
    from tensorflow_data_validation.utils import display_util

    facets = display_util.get_statistics_html(
        stats, baseline_stats, lhs_name="current", rhs_name="baseline"
    )
    verdict = "PASSED" if result.passed else f"{len(result.anomalies)} ANOMALIES"
    rows = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(x)}</td>" for x in (a.feature, a.kind, a.description))
        + f"<td>{html.escape(a.advice)}</td></tr>"
        for a in result.anomalies
    )
    anomalies_html = (
        "<table><tr><th>feature</th><th>kind</th><th>description</th><th>what to do</th></tr>"
        f"{rows}</table>"
        if rows
        else "<p>No anomalies: the data meets the schema.</p>"
    )
    facts = {
        "input": result.input_path,
        "format": result.format,
        "rows": str(result.num_examples),
        "schema": result.schema_source,
        "drift": "checked against baseline statistics" if result.drift_checked else "not checked",
    }
    facts_html = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in facts.items()
    )
    checks_html = "<h3>Checked</h3><ul>" + "".join(
        f"<li>{html.escape(c)}</li>" for c in result.checked
    )
    checks_html += "</ul><h3>Not checked</h3><ul>" + (
        "".join(f"<li>{html.escape(c)}</li>" for c in result.not_checked)
        or "<li>nothing: every column of the input has a check</li>"
    )
    checks_html += "</ul>"
    page = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Data validation: {verdict}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}}
.bad{{color:#b00020}}.ok{{color:#1b5e20}}</style></head><body>
<h1 class="{"ok" if result.passed else "bad"}">Data validation: {verdict}</h1>
<table>{facts_html}</table>
<h2>Anomalies</h2>{anomalies_html}
<h2>Checks</h2>{checks_html}
<h2>Features</h2>{_feature_table(stats)}
<h2>Statistics (TFDV / Facets)</h2>{facets}
</body></html>
"""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(page)


def _feature_table(stats) -> str:
    from tensorflow_metadata.proto.v0 import statistics_pb2

    if not stats.datasets:
        return "<p>No statistics.</p>"
    rows = []
    for feat in stats.datasets[0].features:
        name = ".".join(feat.path.step) or feat.name
        kind = statistics_pb2.FeatureNameStatistics.Type.Name(feat.type)
        if feat.HasField("num_stats"):
            n = feat.num_stats
            common = n.common_stats
            cells = (f"{n.min:g}", f"{n.max:g}", f"{n.mean:.4g}", "")
        else:
            s = feat.string_stats
            common = s.common_stats
            cells = ("", "", "", str(s.unique))
        vals = (name, kind, str(common.num_non_missing), str(common.num_missing), *cells)
        rows.append("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in vals) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("feature", "type", "present", "missing", "min", "max", "mean", "unique")
    )
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


# What the text id checks add to a text id feature's line of ``checked``.
_ID_TEXT_CHECKED = ", no empty ids, none with surrounding whitespace or control characters"
_ID_TEXT_CHECKED_MIXED = _ID_TEXT_CHECKED + ", not mixed with integer ids"


def _text_ids(id_type: str, stats, baseline_schema) -> tuple[str, ...]:
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


def _max_timestamp(config: ValidateConfig) -> int:
    if config.max_timestamp is not None:
        return config.max_timestamp
    return int(datetime.datetime.now(datetime.UTC).timestamp()) + FUTURE_SLACK_SECONDS


def _load_schema(path: str):
    import tensorflow_data_validation as tfdv

    return tfdv.load_schema_text(baseline_file(path, SCHEMA_FILE))


# Where a run puts each baseline file: its folder inside the run's output folder.
_BASELINE_DIRS = {SCHEMA_FILE: SCHEMA_DIR, STATS_FILE: STATISTICS_DIR}


def baseline_file(path: str, name: str) -> str:
    """The baseline file ``name`` (``SCHEMA_FILE`` or ``STATS_FILE``) that ``path`` names.

    ``path`` is the file, its folder (the artifact), or the output folder of an earlier run
    (``--output``, or a pipeline's ``validate-data`` folder), which holds it in its own folder;
    local paths and ``gs://`` URIs alike (tf.io.gfile).

    Raises:
        FileNotFoundError: none of those, naming what was looked for.
    """
    import tensorflow as tf

    folder = _BASELINE_DIRS[name]
    candidates = [path, os.path.join(path, name), os.path.join(path, folder, name)]
    for candidate in candidates:
        if tf.io.gfile.exists(candidate) and not tf.io.gfile.isdir(candidate):
            return candidate
    raise FileNotFoundError(
        f"{path}: no baseline {folder} there (expected the {name} file, its folder, or an "
        f"earlier validate run's output folder with {folder}/{name})"
    )
