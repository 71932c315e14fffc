"""A data validation gate on raw interactions, with TensorFlow Data Validation (TFDV).

As TFX's ExampleValidator, but the gate blocks: statistics come from TFDV's ``GenerateStatistics``
in an Apache Beam pipeline (in process unless Beam options name a runner), the schema is inferred
or a reviewed baseline, and the anomalies are TFDV's. When there are any, ``validate``
raises :class:`ValidationFailed` listing each one (feature, kind, description, what to do), unless
``fail_on_anomalies`` is off, in which case it logs them as a warning.

Domain checks that inference alone would miss for interaction data are written into the schema,
so TFDV enforces them and a person can read them in ``schema.pbtxt``: ``user_id``, ``item_id`` and
``timestamp`` present in every row, ids integers >= ``io.MIN_ID`` (the rule prepare-data applies),
timestamps integers in a plausible range, and for the MovieLens layouts ratings on their scale
(``RATING_SCALES``). The result and the report say what was checked and which columns were not.
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
import time

from training_core.data import beam_source
from training_core.data import io as rio
from training_core.data.beam_source import ITEM, RATING, TIME, USER
from training_core.data.io import parse_time  # noqa: F401 (validate.parse_time: --min-time)

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


# Anomalies of a column data prep reads (user, item, time) that it would refuse as well: a
# missing column, one with no values, values of another type.
_PREP_CANNOT_READ = frozenset(
    {"SCHEMA_MISSING_COLUMN", "FEATURE_TYPE_NOT_PRESENT", "UNEXPECTED_DATA_TYPE"}
)

# What to do, by TFDV anomaly kind; prefixes match families of kinds.
_ADVICE = {
    "SCHEMA_MISSING_COLUMN": (
        "the column is not in the data: check the export, --format, and --user-col/--item-col/"
        "--time-col for a CSV or Parquet table."
    ),
    "FEATURE_TYPE_LOW_FRACTION_PRESENT": (
        "some rows have no value here: fix or drop those rows before data prep."
    ),
    "FEATURE_TYPE_LOW_NUMBER_PRESENT": "too few rows have a value here: check the export.",
    "FEATURE_TYPE_NOT_PRESENT": "no row has a value here: check the export and the column names.",
    "UNEXPECTED_DATA_TYPE": (
        "values are not of the schema's type: ids and timestamps must be integers; map string "
        "ids to integers and write times as epoch seconds (or ISO-8601 in Parquet/CSV)."
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
        "or raise the threshold with --drift; if not, find what changed upstream."
    ),
    "COMPARATOR_L_INFTY_HIGH": (
        "the value frequencies moved away from the baseline statistics: if expected, make this "
        "run's statistics the new baseline or raise the threshold with --drift; if not, find what "
        "changed upstream."
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
    "--baseline-schema."
)
# Advice for (feature, kind) where the feature says more than the kind.
_FEATURE_ADVICE = {
    (USER, "INT_TYPE_SMALL_INT"): f"{rio.NEGATIVE_ID_ADVICE}; prepare-data rejects them too.",
    (ITEM, "INT_TYPE_SMALL_INT"): f"{rio.NEGATIVE_ID_ADVICE}; prepare-data rejects them too.",
    (TIME, "INT_TYPE_SMALL_INT"): (
        "timestamps before --min-time (default 1995-01-01): check the unit and the time zone; "
        "fix or drop those rows, or lower --min-time."
    ),
    (TIME, "INT_TYPE_BIG_INT"): (
        "timestamps after --max-time (default: now + 1 day): milliseconds instead of seconds? "
        "Fix or drop those rows, or raise --max-time."
    ),
    **{
        (RATING, kind): (
            "ratings off the layout's scale (the rating domain in schema.pbtxt): fix or drop "
            "those rows (a 99 or a -1 often marks a missing rating); if the data really uses "
            "another scale, edit the domain and pass the schema with --baseline-schema."
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


def advice_for(kind: str, feature: str | None = None) -> str:
    """What to do about an anomaly of TFDV kind ``kind`` (in ``feature``, when given)."""
    if (feature, kind) in _FEATURE_ADVICE:
        return _FEATURE_ADVICE[(feature, kind)]
    if kind in _ADVICE:
        return _ADVICE[kind]
    for prefix, text in _ADVICE_BY_PREFIX.items():
        if kind.startswith(prefix):
            return text
    return _DEFAULT_ADVICE


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
    source = beam_source.describe_source(config.input_path, config.format, config.columns)
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
    if config.domain_checks:
        apply_domain_checks(schema, config.min_timestamp, _max_timestamp(config), rating_scale)
    checked, not_checked = coverage(schema, source, rating_scale, config.domain_checks)
    baseline_stats = None
    if config.baseline_statistics:
        baseline_stats = tfdv.load_stats_binary(
            baseline_file(config.baseline_statistics, STATS_FILE)
        )
        apply_drift(schema, config.drift, defaults=True)
    elif config.drift:
        raise ValueError("drift thresholds need baseline statistics (--baseline-stats)")
    anomalies_proto = tfdv.validate_statistics(stats, schema, previous_statistics=baseline_stats)

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
    StatisticsGen does with its schema input. Without ``--runner``, the pipeline runs on Beam's
    in-process FnApiRunner (``--direct_num_workers``/``--direct_running_mode`` apply).
    """
    import apache_beam as beam
    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(list(beam_pipeline_args))
    runner_name = options.view_as(StandardOptions).runner
    remote = "dataflow" in str(runner_name).lower()
    runner = None if runner_name else beam_source.in_process_runner(options)
    os.makedirs(os.path.dirname(output_file) or ".", exist_ok=True)
    stats_options = tfdv.StatsOptions(schema=schema) if schema is not None else tfdv.StatsOptions()
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
    schema, min_timestamp: int, max_timestamp: int, rating_scale: RatingScale | None = None
) -> None:
    """Writes the interaction-data checks into ``schema`` (in place).

    ``user_id``, ``item_id`` and ``timestamp`` are required in every row, single-valued
    integers; ids >= ``io.MIN_ID``, as prepare-data requires (an id's upper bound stays free:
    catalogues grow); timestamps within [min_timestamp, max_timestamp]. A feature the data lacks
    is added, so TFDV reports it missing. With ``rating_scale`` (a MovieLens layout), a numeric
    ``rating`` without a domain of its own gets the scale's range; the steps cannot be written
    into a schema and stay unchecked.
    """
    from tensorflow_metadata.proto.v0 import schema_pb2

    by_name = {f.name: f for f in schema.feature}
    for name in (USER, ITEM, TIME):
        feature = by_name.get(name)
        if feature is None:
            feature = schema.feature.add(name=name)
        if feature.type != schema_pb2.INT:
            feature.type = schema_pb2.INT
            feature.ClearField("domain_info")  # A string domain inferred from text ids.
        feature.presence.min_fraction = 1.0
        feature.presence.min_count = max(feature.presence.min_count, 1)
        if not feature.HasField("value_count") and not feature.HasField("shape"):
            feature.shape.dim.add(size=1)
        if name == TIME:
            feature.int_domain.min = min_timestamp
            feature.int_domain.max = max_timestamp
        elif not feature.int_domain.HasField("min") or feature.int_domain.min < rio.MIN_ID:
            feature.int_domain.min = rio.MIN_ID
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

    Not checked: columns of the input that are not read (only the user, item, timestamp and
    rating columns are), a rating without a range (no known scale for the layout), and a
    fractional rating scale's steps (a schema cannot express them).
    """
    from tensorflow_metadata.proto.v0 import schema_pb2

    checked = tuple(_describe(f) for f in schema.feature)
    not_checked = []
    read = {column for column, _ in source.rename}
    unread = [c for c in source.column_names if c not in read]
    if unread:
        not_checked.append(
            f"{', '.join(unread)}: not read (only the user, item, timestamp and rating columns "
            "are validated)"
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
                "float_domain to schema.pbtxt and pass it with --baseline-schema"
            )
        elif rating.type == schema_pb2.FLOAT and rating_scale is not None:
            not_checked.append(
                f"rating: steps of {rating_scale.step:g} (only the range is checked; a schema "
                "cannot express steps)"
            )
    if not domain_checks:
        not_checked.append(
            "user_id, item_id, timestamp: domain checks off (--no-domain-checks); only the "
            "schema's own checks apply"
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
            advice = advice_for(kind, feature)
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
            f"Data prep cannot read {', '.join(unreadable)} as it is, so --warn-only would only "
            "move this failure into data prep: fix the input, or name its columns "
            "(--user-col/--item-col/--time-col) or its layout (--format)."
        )
    elif blocked:
        lines.append(
            "If the data is right and the schema too strict, edit the schema and pass it with "
            "--baseline-schema; to let the run go on anyway, use --warn-only."
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
