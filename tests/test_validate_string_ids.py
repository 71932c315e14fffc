"""The validation gate on string ids, ratings and events, and the options its messages name.

Small files of tests/data/validation (generate.py) and a few written under tmp_path.
"""

import os

import pytest
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import schema_pb2

from pipelines import cli
from training_core.common import hints
from training_core.data import io as rio
from training_core.data import (
    read_errors,
    validation_anomalies,
    validation_schema,
    validation_stats,
)
from training_core.data import validate as v

DATA = os.path.join(os.path.dirname(__file__), "data", "validation")
ROWS = 382  # Data lines of every file there.


def _path(name: str) -> str:
    return os.path.join(DATA, name)


def _config(path: str, out, **kw) -> v.ValidateConfig:
    path = path if os.path.isabs(path) else _path(path)
    return v.ValidateConfig(input_path=path, outputs=v.OutputPaths.under(str(out)), **kw)


def _failure(path: str, out, **kw) -> v.ValidationFailed:
    with pytest.raises(v.ValidationFailed) as exc:
        v.validate(_config(path, out, **kw))
    return exc.value


@pytest.fixture
def in_pipeline(monkeypatch):
    """Messages name pipeline parameters, as in a pipeline step (hints.in_pipeline)."""
    monkeypatch.setenv(hints.STYLE_ENV, "")  # Restored after the test.
    hints.in_pipeline()


def test_string_ids_pass_as_text_features_with_their_checks(tmp_path):
    result = v.validate(_config("string_ids.csv", tmp_path))
    assert result.passed and result.num_examples == ROWS
    schema = tfdv.load_schema_text(result.schema_path)
    for name in ("user_id", "item_id"):
        feature = tfdv.get_feature(schema, name)
        assert feature.type == schema_pb2.BYTES and feature.presence.min_fraction == 1.0
        # No ">= 0" domain, and no list of allowed ids (a catalogue grows).
        assert not feature.HasField("int_domain") and not feature.HasField("domain")
    assert not schema.string_domain
    assert tfdv.get_feature(schema, "timestamp").type == schema_pb2.INT
    assert (
        "item_id: text, in every row, no empty ids, none with surrounding whitespace or control "
        "characters, not mixed with integer ids" in result.checked
    )
    # The counts behind those checks are in the statistics, as custom statistics.
    stats = tfdv.load_stats_binary(result.statistics_path)
    assert validation_stats.id_text_counts(stats, "item_id")["text"] == (ROWS, "000000050X")
    assert validation_stats.id_text_counts(stats, "item_id")["integer"] == (0, None)


def test_mixed_ids_get_data_preps_advice_in_pipeline_terms(tmp_path, in_pipeline):
    failure = _failure("mixed_ids.csv", tmp_path)
    [anomaly] = failure.result.anomalies
    assert (anomaly.feature, anomaly.kind) == ("item_id", validation_anomalies.CUSTOM)
    assert anomaly.description.startswith("Integer and text ids mixed: 374 of the ids are ")
    assert "(e.g. '16') and 8 not (e.g. '000000050X')" in anomaly.description
    assert "pass --param id_type=string" in anomaly.advice
    message = str(failure)
    assert "--param user_col=COLUMN" in message and "--param data_format=FORMAT" in message
    assert "--id-type" not in message and "--user-col" not in message
    # Data prep refuses the same column and gives the same advice.
    with pytest.raises(read_errors.DataError, match="'000000050X'.*Pass --param id_type=string"):
        rio.read_interactions(_path("mixed_ids.csv"))


@pytest.mark.slow
def test_mixed_ids_pass_as_text_with_id_type_string_and_advice_names_the_flag(tmp_path):
    out = tmp_path / "s"
    args = ["validate", "--input", _path("mixed_ids.csv"), "--output", str(out)]
    assert cli.main([*args, "--id-type", "string"]) == 0
    schema = tfdv.load_schema_text(str(out / v.SCHEMA_DIR / v.SCHEMA_FILE))
    assert tfdv.get_feature(schema, "user_id").type == schema_pb2.BYTES  # Integers as text.
    failure = _failure("mixed_ids.csv", tmp_path / "a")
    assert "pass --id-type string;" in failure.result.anomalies[0].advice


@pytest.mark.slow
def test_empty_padded_and_control_ids_are_what_data_prep_refuses(tmp_path):
    lines = open(_path("string_ids.csv")).read().splitlines()
    lines[3] = "," + lines[3].split(",", 1)[1]  # An empty user id.
    lines[5] = " " + lines[5]  # A user id with a leading space.
    lines[7] = lines[7].replace("X", "X\x01", 1)  # An item id with a control character.
    bad = tmp_path / "ids.csv"
    bad.write_text("\n".join(lines) + "\n")
    failure = _failure(str(bad), tmp_path / "o")
    found = {(a.feature, a.description.split(":")[0]) for a in failure.result.anomalies}
    assert found == {
        ("user_id", "Empty ids"),
        ("user_id", "Ids with surrounding whitespace"),
        ("item_id", "Ids with control characters"),
    }
    assert "' user-0028'" in str(failure) and "exactly as written" in str(failure)
    written = tfdv.load_anomalies_text(failure.result.anomalies_path)
    assert len(written.anomaly_info["user_id"].reason) == 2


@pytest.mark.slow
def test_rating_and_event_columns_for_the_positive_rules(tmp_path):
    # clean.csv has a numeric rating and no event column.
    failure = _failure("clean.csv", tmp_path / "c", min_rating=4.0, positive_events="buy")
    [anomaly] = failure.result.anomalies
    assert (anomaly.feature, anomaly.kind) == ("event", "SCHEMA_MISSING_COLUMN")
    assert "name it with --event-col" in anomaly.advice
    # A named event column is read (and checked), whatever it is called.
    lines = open(_path("clean.csv")).read().splitlines()
    events = tmp_path / "events.csv"
    rows = [f"{line},{('view', 'buy')[i % 2]}" for i, line in enumerate(lines[1:])]
    events.write_text("\n".join([lines[0] + ",kind", *rows]) + "\n")
    columns = rio.Columns(event="kind")
    result = v.validate(
        _config(str(events), tmp_path / "e", columns=columns, positive_events="buy")
    )
    assert result.passed and not any("not read" in c for c in result.not_checked)
    stats = tfdv.load_stats_binary(result.statistics_path)
    assert "event" in {f.path.step[0] for f in stats.datasets[0].features}


def test_advice_and_domain_checks_without_a_pipeline_run(monkeypatch):
    monkeypatch.delenv(hints.STYLE_ENV, raising=False)
    assert "{--user-col}" not in validation_anomalies.advice_for("SCHEMA_MISSING_COLUMN")
    assert "--user-col, --item-col or --time-col" in validation_anomalies.advice_for(
        "SCHEMA_MISSING_COLUMN"
    )
    assert "--warn-only" not in validation_anomalies.advice_for("SCHEMA_MISSING_COLUMN")
    monkeypatch.setenv(hints.STYLE_ENV, hints.STYLE_PIPELINE)
    advice = validation_anomalies.advice_for("SCHEMA_MISSING_COLUMN", "rating")
    assert "--param min_rating=RATING" in advice and "--param rating_col=COLUMN" in advice
    assert "--param user_col=COLUMN" in validation_anomalies.advice_for("SCHEMA_MISSING_COLUMN")
    # Text ids: BYTES without domains; integer ids keep the ">= 0" rule.
    schema = schema_pb2.Schema()
    for name in ("user_id", "item_id"):
        feature = schema.feature.add(name=name, type=schema_pb2.INT)
        feature.int_domain.min = 0
    validation_schema.apply_domain_checks(
        schema, 0, 10, text_ids=("item_id",), rating_required=True
    )
    item, user = tfdv.get_feature(schema, "item_id"), tfdv.get_feature(schema, "user_id")
    assert item.type == schema_pb2.BYTES and not item.HasField("int_domain")
    assert user.type == schema_pb2.INT and user.int_domain.min == read_errors.MIN_ID
    rating = tfdv.get_feature(schema, "rating")
    assert rating.type == schema_pb2.FLOAT and rating.presence.min_fraction == 1.0
    with pytest.raises(ValueError, match="unknown id type"):
        v.ValidateConfig(input_path="x", outputs=v.OutputPaths.under("o"), id_type="uuid")


def test_iso_times_with_a_zone_are_read_as_data_prep_reads_them(tmp_path):
    """ "...Z" times (an event table's export): the gate reads them as times, as data prep does,
    instead of failing to parse them as times without a zone."""
    path = tmp_path / "events.csv"
    rows = [
        f"c-{u},08{i:07d}X,4,2004-07-{10 + u:02d}T01:15:{i:02d}Z"
        for u in range(5)
        for i in range(9)
    ]
    path.write_text("customer_id,product_id,stars,event_time\n" + "\n".join(rows) + "\n")
    columns = rio.Columns("customer_id", "product_id", "event_time")
    result = v.validate(_config(str(path), tmp_path / "out", columns=columns))
    assert result.passed and result.num_examples == len(rows)
    stats = tfdv.load_stats_binary(result.statistics_path)
    time = tfdv.get_feature_stats(stats.datasets[0], tfdv.FeaturePath(["timestamp"]))
    first = 1089422100  # 2004-07-10T01:15:00Z
    assert (time.num_stats.min, time.num_stats.max) == (first, first + 4 * 86400 + 8)
