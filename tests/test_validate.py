"""The TFDV validation gate on checked-in small files (tests/data/validation, see generate.py)."""

import logging
import os
import re
import tempfile

import pytest
import tensorflow_data_validation as tfdv
from kfp import dsl, local
from kfp.dsl import HTML, Artifact, Dataset
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2

from components.validate_data import validate_data
from pipelines import cli
from training_core.data import (
    formats,
    read_errors,
    synthetic,
    validation_anomalies,
    validation_drift,
)
from training_core.data import io as rio
from training_core.data import validate as v

DATA = os.path.join(os.path.dirname(__file__), "data", "validation")
CLEAN = os.path.join(DATA, "clean.csv")
CLEAN_ROWS = 382  # Data lines of clean.csv.


def _path(name: str) -> str:
    return os.path.join(DATA, name)


def _config(name_or_path: str, out, **kw) -> v.ValidateConfig:
    path = name_or_path if os.path.isabs(name_or_path) else _path(name_or_path)
    return v.ValidateConfig(input_path=path, outputs=v.OutputPaths.under(str(out)), **kw)


def _kinds(result_or_anomalies) -> set[tuple[str, str]]:
    anomalies = getattr(result_or_anomalies, "anomalies", result_or_anomalies)
    return {(a.feature, a.kind) for a in anomalies}


@pytest.fixture(scope="session")
def clean_run(tmp_path_factory) -> validation_anomalies.ValidationResult:
    """The first run of the baseline workflow: infer a schema from clean data."""
    return v.validate(_config("clean.csv", tmp_path_factory.mktemp("clean")))


# Core: the clean file passes and every artifact is in TFDV's own format.


def test_clean_file_passes_with_tfdv_artifacts(clean_run):
    r = clean_run
    assert r.passed and r.anomalies == () and r.num_examples == CLEAN_ROWS
    assert r.format == formats.CSV and r.schema_source == "inferred"
    stats = tfdv.load_stats_binary(r.statistics_path)
    names = {f.path.step[0] for f in stats.datasets[0].features}
    assert names == {"user_id", "item_id", "timestamp", "rating"}
    assert os.path.basename(r.statistics_path) == "FeatureStats.pb"
    assert len(tfdv.load_anomalies_text(r.anomalies_path).anomaly_info) == 0
    schema = tfdv.load_schema_text(r.schema_path)
    for name in ("user_id", "item_id", "timestamp"):
        f = tfdv.get_feature(schema, name)
        assert f.type == schema_pb2.INT and f.presence.min_fraction == 1.0
    assert tfdv.get_feature(schema, "item_id").int_domain.min == 0
    ts = tfdv.get_feature(schema, "timestamp").int_domain
    assert ts.min == v.MIN_TIMESTAMP and ts.max > 1_700_000_000
    page = open(r.report_path).read()
    assert "Data validation: PASSED" in page and "facets-overview" in page


# Core: each anomaly kind is found, named, and blocks.

ANOMALY_FILES = {
    "missing_column.csv": {("timestamp", "SCHEMA_MISSING_COLUMN")},
    "wrong_type.csv": {("user_id", "UNEXPECTED_DATA_TYPE")},
    "mixed_ids.csv": {("item_id", validation_anomalies.CUSTOM)},
    "out_of_range.csv": {
        ("item_id", "INT_TYPE_SMALL_INT"),
        ("timestamp", "INT_TYPE_SMALL_INT"),
        ("timestamp", "INT_TYPE_BIG_INT"),
    },
}
# Text user ids are a type anomaly only where ids are read as integers.
ANOMALY_OPTIONS = {"wrong_type.csv": {"id_type": "int64"}}


@pytest.mark.parametrize("name", sorted(ANOMALY_FILES))
def test_each_anomaly_is_found_named_and_blocks(name, tmp_path):
    with pytest.raises(v.ValidationFailed) as exc:
        v.validate(_config(name, tmp_path, **ANOMALY_OPTIONS.get(name, {})))
    result = exc.value.result
    assert ANOMALY_FILES[name] <= _kinds(result)
    message = str(exc.value)
    for feature, kind in ANOMALY_FILES[name]:
        assert f"{feature}: {kind}: " in message
    assert message.count("What to do:") == len(result.anomalies)
    # --warn-only is offered only where data prep could read the data: a column it needs that is
    # missing or of another type would only fail again in data prep.
    unreadable = name in ("missing_column.csv", "wrong_type.csv", "mixed_ids.csv")
    assert ("would only move this failure into data prep" in message) == unreadable
    assert ("use --warn-only" in message) != unreadable
    # Artifacts are written before the gate closes, so the report can be opened.
    written = tfdv.load_anomalies_text(result.anomalies_path)
    assert {f for f, _ in ANOMALY_FILES[name]} <= set(written.anomaly_info)
    page = open(result.report_path).read()
    assert "ANOMALIES" in page and next(iter(ANOMALY_FILES[name]))[1] in page


@pytest.mark.slow
def test_drift_against_baseline_blocks_and_same_data_passes(clean_run, tmp_path):
    baseline = dict(
        baseline_schema=os.path.dirname(clean_run.schema_path),
        baseline_statistics=os.path.dirname(clean_run.statistics_path),
    )
    with pytest.raises(v.ValidationFailed) as exc:
        v.validate(_config("drifted.csv", tmp_path / "d", **baseline))
    assert _kinds(exc.value.result) == {("item_id", "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH")}
    assert "above the threshold 0.1" in str(exc.value)
    same = v.validate(_config("clean.csv", tmp_path / "c", **baseline))
    assert same.passed and same.drift_checked and same.schema_source.endswith("schema")
    # A per-feature threshold from the caller replaces the default.
    loose = v.validate(
        _config(
            "drifted.csv",
            tmp_path / "loose",
            drift=(validation_drift.DriftThreshold("item_id", "js", 1.0),),
            **baseline,
        )
    )
    assert loose.passed
    written = tfdv.load_schema_text(loose.schema_path)
    comp = tfdv.get_feature(written, "item_id").drift_comparator
    assert comp.jensen_shannon_divergence.threshold == 1.0


def test_warn_only_passes_with_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="training_core.data.validate"):
        result = v.validate(_config("out_of_range.csv", tmp_path, fail_on_anomalies=False))
    assert not result.passed and ("item_id", "INT_TYPE_SMALL_INT") in _kinds(result)
    assert "warn-only" in caplog.text and "item_id: INT_TYPE_SMALL_INT" in caplog.text


@pytest.mark.slow
def test_empty_and_header_only_files_name_the_file(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(read_errors.DataError, match=r"empty\.csv: the file is empty"):
        v.validate(_config(str(empty), tmp_path / "o1"))
    header = tmp_path / "header.csv"
    header.write_text("user_id,item_id,rating,timestamp\n")
    with pytest.raises(read_errors.DataError, match=r"header\.csv: no interactions"):
        v.validate(_config(str(header), tmp_path / "o2"))


@pytest.mark.slow
def test_a_malformed_line_is_a_data_error_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "ratings.dat"
    bad.write_text("1::2::5::978300760\n1::2\n")
    code = cli.main(["validate", "--input", str(bad), "--output", str(tmp_path / "o")])
    assert code == 2
    assert "ratings.dat (bytes 0-" in capsys.readouterr().err


@pytest.mark.parametrize("layout", ["ml-1m", "parquet"])
@pytest.mark.slow
def test_other_layouts_map_to_the_same_features(layout, tmp_path):
    data = rio.read_interactions(CLEAN)
    target = str(tmp_path / ("r.parquet" if layout == "parquet" else "raw"))
    synthetic.write(data, target, layout)
    result = v.validate(_config(target, tmp_path / "o"))
    assert result.passed and result.num_examples == CLEAN_ROWS
    stats = tfdv.load_stats_binary(result.statistics_path)
    assert {f.path.step[0] for f in stats.datasets[0].features} == {
        "user_id",
        "item_id",
        "timestamp",
        "rating",
    }


def test_byte_ranges_agree_and_one_bad_value_types_the_whole_column(tmp_path):
    lines = open(CLEAN).read().splitlines()
    lines[-1] = "x" + lines[-1]  # One text user id, in the last range only.
    bad = tmp_path / "ratings.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(v.ValidationFailed) as exc:
        v.validate(_config(str(bad), tmp_path / "o", range_bytes=700))
    result = exc.value.result
    assert result.num_examples == CLEAN_ROWS  # No line lost or doubled at range edges.
    # The whole column is text, and its integers and its one text id are counted over all ranges.
    assert _kinds(result) == {("user_id", validation_anomalies.CUSTOM)}
    assert "381 of the ids are integers" in str(exc.value) and "'x8'" in str(exc.value)


# Drift settings.


def test_parse_drift_and_drift_file(tmp_path):
    assert v.parse_drift("item_id=js:0.1") == validation_drift.DriftThreshold("item_id", "js", 0.1)
    assert v.parse_drift("rating=LINF:0.05").comparator == "linf"
    for bad in ("item_id", "item_id=kl:0.1", "item_id=js:2", "item_id=js:x"):
        with pytest.raises(ValueError, match="drift"):
            v.parse_drift(bad)
    f = tmp_path / "drift.yaml"
    f.write_text("item_id: js:0.2\nrating: {linf: 0.05}\n")
    assert v.load_drift_file(str(f)) == (
        validation_drift.DriftThreshold("item_id", "js", 0.2),
        validation_drift.DriftThreshold("rating", "linf", 0.05),
    )


def test_apply_drift_per_feature():
    schema = schema_pb2.Schema()
    for name in ("user_id", "item_id", "rating"):
        schema.feature.add(name=name, type=schema_pb2.INT)
    tfdv.get_feature(schema, "rating").int_domain.is_categorical = True
    tfdv.get_feature(schema, "user_id").drift_comparator.infinity_norm.threshold = 0.3
    validation_drift.apply_drift(
        schema, (validation_drift.DriftThreshold("rating", "linf", 0.05),), defaults=True
    )
    assert tfdv.get_feature(schema, "rating").drift_comparator.infinity_norm.threshold == 0.05
    # The schema's own comparator is kept; a feature without one gets the default.
    assert tfdv.get_feature(schema, "user_id").drift_comparator.infinity_norm.threshold == 0.3
    item = tfdv.get_feature(schema, "item_id").drift_comparator
    assert item.jensen_shannon_divergence.threshold == validation_drift.DEFAULT_DRIFT_THRESHOLD
    with pytest.raises(ValueError, match="categorical"):
        validation_drift.apply_drift(
            schema, (validation_drift.DriftThreshold("item_id", "linf", 0.1),), defaults=False
        )
    with pytest.raises(ValueError, match="no such feature"):
        validation_drift.apply_drift(
            schema, (validation_drift.DriftThreshold("genre", "js", 0.1),), defaults=False
        )


# CLI.


def test_cli_blocks_with_exit_2_and_lists_anomalies(tmp_path, capsys):
    code = cli.main(["validate", "--input", _path("out_of_range.csv"), "--output", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert "data validation failed: 3 anomalies" in err
    assert "item_id: INT_TYPE_SMALL_INT" in err and "timestamp: INT_TYPE_BIG_INT" in err
    assert (tmp_path / "report.html").exists()


@pytest.mark.slow
def test_cli_passes_clean_and_warn_only(clean_run, tmp_path, capsys):
    code = cli.main(
        [
            "validate",
            "--input",
            _path("drifted.csv"),
            "--output",
            str(tmp_path / "w"),
            "--baseline-schema",
            clean_run.schema_path,
            "--baseline-stats",
            clean_run.statistics_path,
            "--drift",
            "item_id=js:0.2",
            "--warn-only",
            "--beam-pipeline-args=--runner=DirectRunner --direct_num_workers=1",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "1 anomalies (warn-only)" in out and "report:" in out
    assert cli.main(["validate", "--input", CLEAN, "--output", str(tmp_path / "c")]) == 0


def test_baseline_file_is_the_file_its_folder_or_an_earlier_runs_output(clean_run, tmp_path):
    earlier = os.path.dirname(os.path.dirname(clean_run.schema_path))  # That run's --output.
    for name, path in (
        (v.SCHEMA_FILE, clean_run.schema_path),
        (v.STATS_FILE, clean_run.statistics_path),
    ):
        for given in (path, os.path.dirname(path), earlier):
            assert v.baseline_file(given, name) == os.path.join(os.path.dirname(path), name)
    with pytest.raises(FileNotFoundError, match="no baseline schema there .* schema/schema.pbtxt"):
        v.baseline_file(str(tmp_path), v.SCHEMA_FILE)


def test_cli_baseline_checks_against_an_earlier_runs_schema_and_statistics(
    clean_run, tmp_path, capsys
):
    earlier = os.path.dirname(os.path.dirname(clean_run.schema_path))  # That run's --output.
    args = ["validate", "--input", _path("drifted.csv"), "--output", str(tmp_path / "d")]
    assert cli.main([*args, "--baseline", earlier]) == 2
    err = capsys.readouterr().err
    assert "item_id: COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH" in err  # Drift: statistics used.
    assert f"schema: {earlier})" in err  # Checked against that run's schema, not an inferred one.
    # --baseline is both; it does not mix with the long forms.
    assert cli.main([*args, "--baseline", earlier, "--baseline-stats", earlier]) == 2
    assert "--baseline takes both the schema and the statistics" in capsys.readouterr().err


def test_long_baseline_options_take_an_earlier_runs_output_too(clean_run, tmp_path):
    earlier = os.path.dirname(os.path.dirname(clean_run.schema_path))
    same = v.validate(
        _config("clean.csv", tmp_path, baseline_schema=earlier, baseline_statistics=earlier)
    )
    assert same.passed and same.drift_checked and same.schema_source == earlier


def test_cli_rejects_a_bad_drift_setting(tmp_path, capsys):
    code = cli.main(["validate", "--input", CLEAN, "--output", str(tmp_path), "--drift", "x"])
    assert code == 2 and "FEATURE=linf:THRESHOLD" in capsys.readouterr().err


# Component.


def test_component_python_func_passes_clean_data(tmp_path):
    outs = {n: Artifact(uri=str(tmp_path / n)) for n in ("statistics", "schema", "anomalies")}
    report = HTML(uri=str(tmp_path / "report.html"))
    validate_data.python_func(raw_data=Dataset(uri=CLEAN), report=report, **outs)
    assert report.metadata["passed"] is True and report.metadata["num_examples"] == CLEAN_ROWS
    assert outs["statistics"].metadata["num_anomalies"] == 0
    # What the artifacts hold, read back with TFDV (a loaded proto is truthy even when empty).
    stats = tfdv.load_stats_binary(os.path.join(outs["statistics"].path, "FeatureStats.pb"))
    [dataset] = stats.datasets
    assert dataset.num_examples == CLEAN_ROWS
    features = {f.path.step[0]: f for f in dataset.features}
    assert set(features) == {"user_id", "item_id", "timestamp", "rating"}
    assert features["user_id"].num_stats.common_stats.num_non_missing == CLEAN_ROWS
    assert features["item_id"].num_stats.min >= 0
    schema = tfdv.load_schema_text(os.path.join(outs["schema"].path, "schema.pbtxt"))
    assert {f.name for f in schema.feature} == {"user_id", "item_id", "timestamp", "rating"}
    assert tfdv.get_feature(schema, "user_id").type == schema_pb2.INT
    written = tfdv.load_anomalies_text(os.path.join(outs["anomalies"].path, "anomalies.pbtxt"))
    assert dict(written.anomaly_info) == {}
    assert "Data validation: PASSED" in open(report.path).read()


def _assert_only_item_id_drift(anomalies_path: str) -> None:
    """The written anomalies hold exactly the item_id Jensen-Shannon drift."""
    written = tfdv.load_anomalies_text(anomalies_path)
    assert set(written.anomaly_info) == {"item_id"}
    info = written.anomaly_info["item_id"]
    assert [r.type for r in info.reason] == [
        anomalies_pb2.AnomalyInfo.COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH
    ]
    assert "above the threshold 0.1" in info.reason[0].description


def test_component_python_func_blocks_on_drift(clean_run, tmp_path):
    outs = {n: Artifact(uri=str(tmp_path / n)) for n in ("statistics", "schema", "anomalies")}
    with pytest.raises(v.ValidationFailed, match="item_id: COMPARATOR_JENSEN_SHANNON") as exc:
        validate_data.python_func(
            raw_data=Dataset(uri=_path("drifted.csv")),
            report=HTML(uri=str(tmp_path / "report.html")),
            baseline_schema_uri=os.path.dirname(clean_run.schema_path),
            baseline_statistics_uri=clean_run.statistics_path,
            drift=["item_id=js:0.1"],
            **outs,
        )
    assert _kinds(exc.value.result) == {("item_id", "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH")}
    _assert_only_item_id_drift(os.path.join(outs["anomalies"].path, "anomalies.pbtxt"))


@pytest.mark.slow
def test_component_through_kfp_local_baseline_workflow(clean_run, capsys):
    pipeline_root = tempfile.mkdtemp()
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=pipeline_root)

    @dsl.pipeline
    def gate(clean: str, drifted: str, schema: str, stats: str, fail: bool) -> HTML:
        first = validate_data(
            raw_data=dsl.importer(artifact_uri=clean, artifact_class=Dataset).output
        )
        return (
            validate_data(
                raw_data=dsl.importer(artifact_uri=drifted, artifact_class=Dataset).output,
                baseline_schema_uri=schema,
                baseline_statistics_uri=stats,
                fail_on_anomalies=fail,
            )
            .after(first)
            .outputs["report"]
        )

    args = dict(
        clean=CLEAN,
        drifted=_path("drifted.csv"),
        schema=os.path.dirname(clean_run.schema_path),
        stats=os.path.dirname(clean_run.statistics_path),
    )
    report = gate(fail=False, **args).output
    assert report.metadata["num_anomalies"] == 1 and report.metadata["passed"] is False
    assert report.metadata["anomaly_kinds"] == ["COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH"]
    assert report.metadata["drift_checked"] is True
    assert "COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH" in open(report.path).read()
    capsys.readouterr()  # Only the failing run's task logs from here on.
    runs_before = set(os.listdir(pipeline_root))
    with pytest.raises(RuntimeError) as exc:
        gate(fail=True, **args)
    # kfp's error names only the failed task (colour codes around it): the gated second one.
    assert re.search(
        r"finished with status .*FAILURE.*Inner task failed: .*'validate-data-2'", str(exc.value)
    ), str(exc.value)
    assert "'validate-data'" not in str(exc.value)  # The clean first step passed.
    # Why it failed: the task's own log (kfp local prints it) has our ValidationFailed message.
    log = capsys.readouterr().out
    assert "ValidationFailed" in log
    assert "item_id: COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH: " in log
    # And the blocked step wrote its anomalies before failing: exactly the item_id drift.
    [failed_run] = set(os.listdir(pipeline_root)) - runs_before
    task_root = os.path.join(pipeline_root, failed_run, "validate-data-2")
    _assert_only_item_id_drift(os.path.join(task_root, "anomalies", v.ANOMALIES_FILE))


# Ratings on the MovieLens scales, and what the gate does not check.


def _movielens(tmp_path, layout: str, bad_rating: str | None = None) -> str:
    """A small MovieLens file (ml-20m ratings.csv or ml-1m ratings.dat) from clean.csv's rows."""
    rows = [line.split(",") for line in open(CLEAN).read().splitlines()[1:]]
    ratings = [f"{int(r) - 0.5:g}" if i % 3 == 0 else r for i, (_, _, r, _) in enumerate(rows)]
    if layout == "ml-1m":
        ratings = [r for (_, _, r, _) in rows]  # Whole stars.
    if bad_rating is not None:
        ratings[100] = bad_rating
    folder = tmp_path / layout
    folder.mkdir(parents=True)
    if layout == "ml-1m":
        path = folder / "ratings.dat"
        path.write_text(
            "".join(f"{u}::{i}::{r}::{t}\n" for (u, i, _, t), r in zip(rows, ratings, strict=True))
        )
    else:
        path = folder / "ratings.csv"
        path.write_text(
            "userId,movieId,rating,timestamp\n"
            + "".join(f"{u},{i},{r},{t}\n" for (u, i, _, t), r in zip(rows, ratings, strict=True))
        )
    return str(path)


@pytest.mark.parametrize(
    "layout,kind", [("ml-20m", "FLOAT_TYPE_BIG_FLOAT"), ("ml-1m", "INT_TYPE_BIG_INT")]
)
@pytest.mark.slow
def test_movielens_rating_off_its_scale_blocks(tmp_path, layout, kind):
    clean = v.validate(_config(_movielens(tmp_path, layout), tmp_path / "clean"))
    assert clean.passed
    rating = tfdv.get_feature(tfdv.load_schema_text(clean.schema_path), "rating")
    domain = rating.float_domain if layout == "ml-20m" else rating.int_domain
    assert (domain.min, domain.max) == ((0.5, 5.0) if layout == "ml-20m" else (1, 5))
    with pytest.raises(v.ValidationFailed) as exc:
        v.validate(_config(_movielens(tmp_path / "bad", layout, "99"), tmp_path / "o"))
    assert _kinds(exc.value.result) == {("rating", kind)}
    message = str(exc.value)
    assert f"rating: {kind}: " in message and "99" in message
    assert "What to do: ratings off the layout's scale" in message


@pytest.mark.slow
def test_the_report_says_which_columns_were_not_checked(tmp_path, capsys):
    lines = open(CLEAN).read().splitlines()
    extra = tmp_path / "events.csv"
    extra.write_text(
        "\n".join([lines[0] + ",genre"] + [line + ",drama" for line in lines[1:]]) + "\n"
    )
    result = v.validate(_config(str(extra), tmp_path / "o"))
    assert result.passed
    assert any(c.startswith("genre: not read") for c in result.not_checked)
    assert any(
        c.startswith("rating: values not range-checked (no known rating scale for csv data)")
        for c in result.not_checked
    )
    assert "user_id: integer, in every row, >= 0" in result.checked
    assert "not checked: genre: not read" in v.summary(result)
    page = open(result.report_path).read()
    assert "Not checked" in page and "genre: not read" in page
    assert v.artifact_metadata(result)["not_checked"] == list(result.not_checked)
    # A MovieLens csv: every column has a range, and only the half-star steps are left.
    ml = v.validate(_config(_movielens(tmp_path, "ml-20m"), tmp_path / "ml"))
    assert ml.not_checked == (
        "rating: steps of 0.5 (only the range is checked; a schema cannot express steps)",
    )
    assert "rating: number, in every row, 0.5..5" in ml.checked


def test_an_integer_id_files_schema_is_the_one_inferred_before_string_ids(clean_run):
    # clean_schema.pbtxt: this file's schema from the gate before string ids (generate.py).
    pinned = tfdv.load_schema_text(_path("clean_schema.pbtxt"))
    schema = tfdv.load_schema_text(clean_run.schema_path)
    tfdv.get_feature(schema, "timestamp").int_domain.max = 1_800_000_000  # Pinned's "now".
    assert schema == pinned
    stats = tfdv.load_stats_binary(clean_run.statistics_path)
    assert not any(f.custom_stats for f in stats.datasets[0].features)  # TFDV's own only.


def test_negative_ids_follow_the_reader_rule(clean_run, tmp_path):
    schema = tfdv.load_schema_text(clean_run.schema_path)
    for name in ("user_id", "item_id"):
        assert tfdv.get_feature(schema, name).int_domain.min == read_errors.MIN_ID
    with pytest.raises(v.ValidationFailed) as exc:
        v.validate(_config("out_of_range.csv", tmp_path))
    [item] = [a for a in exc.value.result.anomalies if a.feature == "item_id"]
    assert item.advice.startswith(read_errors.NEGATIVE_ID_ADVICE)
    # prepare-data's reader gives the same rule for the same file.
    with pytest.raises(
        read_errors.DataError, match=r"out_of_range\.csv:2: item id -50 .*is negative"
    ) as e:
        rio.read_interactions(_path("out_of_range.csv"))
    assert read_errors.NEGATIVE_ID_ADVICE in str(e.value)
