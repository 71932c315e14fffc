"""A data validation gate on raw interactions, with TensorFlow Data Validation (TFDV).

As TFX's ExampleValidator, but the gate blocks: statistics come from TFDV's ``GenerateStatistics``
in an Apache Beam pipeline (in process unless Beam options name a runner), the schema is inferred
or a reviewed baseline, and the anomalies are TFDV's. When there are any, ``validate``
raises :class:`ValidationFailed` listing each one (feature, kind, description, what to do), unless
``fail_on_anomalies`` is off, in which case it logs them as a warning.

This module is the gate: its options (``ValidateConfig``, ``OutputPaths``, drift settings as a
person writes them), the run (``validate``) and what it says (``failure_message``, ``summary``,
``artifact_metadata``). Its parts: ``validation_stats`` (the statistics, with the counts of text
ids data prep would refuse), ``validation_schema`` (the interaction-data checks written into the
schema, and what they cover), ``validation_drift`` (drift thresholds), ``validation_anomalies``
(each anomaly with what to do, the run's result) and ``validation_report`` (the HTML page).

Ids follow data prep's ``--id-type`` (``ValidateConfig.id_type``, id_columns' rule). What data prep
refuses in a text id column and a schema cannot say is reported as CUSTOM_VALIDATION anomalies,
each naming the option to pass: integer and non-integer ids mixed in one column of a text file
under ``auto`` (data prep asks for ``--id-type string``), empty ids, ids with leading or trailing
whitespace and ids holding a control character such as a line break. The gate names an example
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
import logging
import os
import time

from training_core.common import hints
from training_core.data import beam_source, formats, validation_schema
from training_core.data import io as rio
from training_core.data.beam_source import ITEM, TIME, USER
from training_core.data.ids import ID_AUTO, ID_TYPES
from training_core.data.read_errors import DataError
from training_core.data.validation_anomalies import (
    PREP_CANNOT_READ,
    ValidationResult,
    add_id_text_anomalies,
    anomaly_list,
    name_options,
)
from training_core.data.validation_drift import DriftThreshold, apply_drift
from training_core.data.validation_report import write_report
from training_core.data.validation_stats import compute_statistics

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


class ValidationFailed(DataError):
    """The data does not meet the schema; ``result`` holds everything that was written."""

    def __init__(self, result: ValidationResult):
        """Builds the message from the result's anomalies."""
        self.result = result
        super().__init__(failure_message(result))


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
        raise DataError(
            f"{', '.join(source.files)}: no interactions (the table has a header but no rows)"
        )

    schema = baseline_schema if baseline_schema is not None else tfdv.infer_schema(stats)
    rating_scale = validation_schema.RATING_SCALES.get(source.format)
    text_ids = validation_schema.text_ids(config.id_type, stats, baseline_schema)
    if config.domain_checks:
        validation_schema.apply_domain_checks(
            schema,
            config.min_timestamp,
            _max_timestamp(config),
            rating_scale,
            text_ids=text_ids,
            rating_required=config.min_rating is not None,
            event_required=bool(config.positive_events.strip()),
        )
    checked, not_checked = validation_schema.coverage(
        schema, source, rating_scale, config.domain_checks
    )
    # The text id checks: which features, and whether mixing integers and text is refused.
    id_checks = (
        {f: config.id_type == ID_AUTO and source.format != formats.PARQUET for f in text_ids}
        if config.domain_checks
        else {}
    )
    checked = validation_schema.with_id_text_checks(checked, id_checks)
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
        & {a.feature for a in result.anomalies if a.kind in PREP_CANNOT_READ}
    )
    if blocked and unreadable:
        lines.append(
            name_options(
                f"Data prep cannot read {', '.join(unreadable)} as it is, so {{--warn-only}} would "
                "only move this failure into data prep: fix the input, or name its columns "
                "({--user-col}, {--item-col}, {--time-col}), its layout ({--format}) or the kind "
                "of its ids ({--id-type string})."
            )
        )
    elif blocked:
        lines.append(
            name_options(
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
