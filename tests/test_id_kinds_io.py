"""The readers' id kinds (--id-type), refused ids, positives (PositiveRule) and the chunk API."""

import gzip

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from training_core.common import hints
from training_core.data import delimited, id_columns, positive_rules, read_errors
from training_core.data import io as rio

HEADER = "user_id,item_id,timestamp\n"


def _csv(tmp_path, text: str, name: str = "events.csv") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _texts(values: np.ndarray) -> list:
    assert values.dtype == object
    assert all(type(v) is str for v in values)  # Python str, as metadata.read_vocab gives.
    return values.tolist()


@pytest.fixture
def cli_style(monkeypatch):
    """Messages name command-line flags, whatever the environment running the tests says."""
    monkeypatch.setenv(hints.STYLE_ENV, "")


# --- kinds ------------------------------------------------------------------------------------


def test_string_ids_are_read_as_written(tmp_path):
    uuid = "3f2b8c1e-9d4a-4e7b-a1c2-0f9e8d7c6b5a"
    path = _csv(
        tmp_path,
        HEADER + f"{uuid},080652121X,100\nZoë,0-306-40615-2,101\n用户,B00ZV9PXP2,102\n",
    )
    got = rio.read_interactions(path)
    assert (got.user_id_type, got.item_id_type) == ("string", "string")
    assert _texts(got.users) == [uuid, "Zoë", "用户"]
    assert _texts(got.items) == ["080652121X", "0-306-40615-2", "B00ZV9PXP2"]
    assert got.timestamps.tolist() == [100, 101, 102]


def test_each_column_gets_its_own_kind(tmp_path):
    path = _csv(tmp_path, HEADER + "u1,7,100\nu2,8,101\n")
    got = rio.read_interactions(path)
    assert (got.user_id_type, got.item_id_type) == ("string", "int64")
    assert _texts(got.users) == ["u1", "u2"]
    assert got.items.dtype == np.int64 and got.items.tolist() == [7, 8]


def test_integer_ids_unchanged_in_every_engine_path(tmp_path):
    """Int64 as before, whether the fast parse took the file or the text pass classified it."""
    plain = rio.read_interactions(_csv(tmp_path, HEADER + "007,2,100\n3,40,101\n"))
    assert plain.users.dtype == plain.items.dtype == np.int64
    assert plain.users.tolist() == [7, 3] and plain.items.tolist() == [2, 40]
    # The user column is read as text (the item column is not integers) and turns out int64.
    mixed = rio.read_interactions(_csv(tmp_path, HEADER + "007,a,100\n3,b,101\n", "m.csv"))
    assert mixed.user_id_type == "int64" and mixed.users.dtype == np.int64
    assert mixed.users.tolist() == [7, 3]


def test_ids_too_long_for_int64_are_text(tmp_path):
    path = _csv(tmp_path, HEADER + "18446744073709551615,9223372036854775807,100\n")
    got = rio.read_interactions(path)
    assert (got.user_id_type, got.item_id_type) == ("string", "int64")
    assert _texts(got.users) == ["18446744073709551615"]
    assert got.items.tolist() == [9223372036854775807]


def test_mixed_column_names_first_of_each_kind_and_the_option(tmp_path, cli_style):
    path = _csv(tmp_path, HEADER + "1,2,100\n2,3,101\n3,080652121X,102\n4,5,103\n")
    with pytest.raises(read_errors.DataError) as e:
        rio.read_interactions(path)
    message = str(e.value)
    assert message.startswith(f"{path}:4: item id '080652121X' in column 'item_id' is not an ")
    assert f"but {path}:2 holds the integer '2'" in message
    assert "Pass --id-type string " in message
    # As the message says: every id as its text.
    got = rio.read_interactions(path, id_type="string")
    assert _texts(got.items) == ["2", "3", "080652121X", "5"]


def test_id_type_string_keeps_integer_text_as_written(tmp_path):
    got = rio.read_interactions(_csv(tmp_path, HEADER + "007,2,100\n7,2,101\n"), id_type="string")
    assert (got.user_id_type, got.item_id_type) == ("string", "string")
    assert _texts(got.users) == ["007", "7"]  # Two users: nothing is parsed as a number.


def test_parquet_column_type_decides_and_id_type_string_gives_decimal_text(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(
        pa.table({"user_id": ["10", "11"], "item_id": [5, 6], "timestamp": [1, 2]}), path
    )
    got = rio.read_interactions(path)
    assert (got.user_id_type, got.item_id_type) == ("string", "int64")
    assert _texts(got.users) == ["10", "11"]  # A string column stays text, digits or not.
    assert got.items.dtype == np.int64
    as_text = rio.read_interactions(path, id_type="string")
    assert _texts(as_text.items) == ["5", "6"]
    # As text, -6 is the id "-6" (the ">= 0" rule is for integer ids).
    pq.write_table(pa.table({"user_id": [1], "item_id": [-6], "timestamp": [1]}), path)
    assert _texts(rio.read_interactions(path, id_type="string").items) == ["-6"]


def test_id_type_int64_refuses_text(tmp_path, cli_style):
    path = _csv(tmp_path, HEADER + "1,2,100\nu2,3,101\n")
    with pytest.raises(
        read_errors.DataError, match=r"events\.csv:3: user id 'u2' .*--id-type string"
    ):
        rio.read_interactions(path, id_type="int64")


def test_gzip_text_reads_string_ids(tmp_path):
    path = tmp_path / "events.csv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(HEADER + "a,x,100\nb,y,101\n")
    got = rio.read_interactions(str(path))
    assert _texts(got.users) == ["a", "b"] and _texts(got.items) == ["x", "y"]


# --- refused ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("id_type", ["auto", "string"])
@pytest.mark.parametrize(
    "row,problem",
    [
        ("u2, y,101", "has spaces at its start or end"),
        ("u2,y ,101", "has spaces at its start or end"),
        ('u2,"y\nz",101', "holds a line break"),
        ('u2,"y\tz",101', "holds a line break or another control character"),
        ("u2,,101", "is empty"),
        ('u2,"",101', "is empty"),
    ],
)
def test_refused_ids_name_file_line_column_and_value(tmp_path, id_type, row, problem):
    path = _csv(tmp_path, HEADER + "u1,x,100\n" + row + "\n")
    with pytest.raises(read_errors.DataError, match=rf"events\.csv:3: .*item id.*{problem}") as e:
        rio.read_interactions(path, id_type=id_type)
    assert "column 'item_id'" in str(e.value)


def test_refused_id_in_parquet_names_data_row(tmp_path):
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({"user_id": ["a", "b "], "item_id": [1, 2], "timestamp": [1, 2]}), path)
    with pytest.raises(
        read_errors.DataError,
        match=r"t\.parquet: data row 2: user id 'b ' in column 'user_id' has spaces",
    ):
        rio.read_interactions(path)


def test_negative_integer_ids_keep_their_rule(tmp_path):
    with pytest.raises(read_errors.DataError, match=r"events\.csv:3: user id -1 .* is negative"):
        rio.read_interactions(_csv(tmp_path, HEADER + "a,1,100\n-1,2,101\n"))
    # As its text, "-1" is an id like any other.
    got = rio.read_interactions(_csv(tmp_path, HEADER + "a,1,100\n-1,2,101\n"), id_type="string")
    assert _texts(got.users) == ["a", "-1"]


# --- positives ------------------------------------------------------------------------------------


def test_positive_rule_from_options():
    rule = positive_rules.PositiveRule.from_options(None, " purchase, add_to_cart,, ")
    assert rule.positive_events == ("purchase", "add_to_cart") and rule.active
    assert not positive_rules.PositiveRule.from_options(None, "").active
    assert positive_rules.PositiveRule(min_rating=0.0).active


def test_min_rating_on_movielens_u_data(tmp_path):
    path = tmp_path / "u.data"
    path.write_text("1\t10\t5\t100\n1\t11\t2\t101\n2\t10\t3\t102\n")
    got = rio.read_interactions(str(path), rule=positive_rules.PositiveRule(min_rating=3))
    assert got.positive.tolist() == [True, False, True]
    assert got.rule_counts == {"below_min_rating": 1}
    assert got.users.tolist() == [1, 1, 2] and got.timestamps.tolist() == [100, 101, 102]


def test_rating_and_event_rules_on_a_csv_count_each_row_once(tmp_path):
    path = _csv(
        tmp_path,
        "user_id,item_id,timestamp,score,event_type\n"
        "a,x,100,4.5,purchase\n"  # Positive.
        "a,y,101,1.0,view\n"  # Fails both: counted under the rating rule only.
        "b,x,102,5,view\n"  # Fails the event rule.
        "b,z,103,3.5,add_to_cart\n"  # Positive.
        "c,y,104,2.5,purchase\n",  # Fails the rating rule.
    )
    rule = positive_rules.PositiveRule.from_options(3.5, "purchase,add_to_cart")
    got = rio.read_interactions(path, rule=rule)
    assert got.positive.tolist() == [True, False, False, True, False]
    assert got.rule_counts == {"below_min_rating": 2, "not_positive_event": 1}
    # Named columns work too, and the rule's columns are read only when the rule needs them.
    named = rio.read_interactions(
        path, columns=rio.Columns(rating="score", event="event_type"), rule=rule
    )
    assert named.positive.tolist() == got.positive.tolist()
    assert rio.read_interactions(path).positive is None


def test_missing_rating_column_names_file_columns_and_option(tmp_path, cli_style):
    path = _csv(tmp_path, HEADER + "a,x,100\n")
    with pytest.raises(
        read_errors.DataError,
        match=r"events\.csv: no rating column .*user_id, item_id, timestamp.*--rating-col",
    ):
        rio.read_interactions(path, rule=positive_rules.PositiveRule(min_rating=4))
    with pytest.raises(read_errors.DataError, match=r"no event column .*--event-col"):
        rio.read_interactions(path, rule=positive_rules.PositiveRule(positive_events=("buy",)))
    with pytest.raises(read_errors.DataError, match=r"no column named 'stars' .*--rating-col"):
        rio.read_interactions(
            path,
            columns=rio.Columns(rating="stars"),
            rule=positive_rules.PositiveRule(min_rating=4),
        )


def test_rating_that_is_not_a_number_names_the_row(tmp_path):
    path = _csv(tmp_path, "user_id,item_id,timestamp,rating\na,x,100,4\nb,y,101,good\n")
    with pytest.raises(
        read_errors.DataError, match=r"events\.csv:3: rating 'good' .* not a number"
    ):
        rio.read_interactions(path, rule=positive_rules.PositiveRule(min_rating=3))
    pq_path = str(tmp_path / "t.parquet")
    pq.write_table(
        pa.table({"user_id": [1, 2], "item_id": [1, 2], "timestamp": [1, 2], "rating": ["4", "?"]}),
        pq_path,
    )
    with pytest.raises(read_errors.DataError, match=r"t\.parquet: data row 2: rating '\?'"):
        rio.read_interactions(pq_path, rule=positive_rules.PositiveRule(min_rating=3))


# --- options named where the user is -------------------------------------------------------------


def test_messages_name_pipeline_parameters_in_a_pipeline_step(tmp_path, monkeypatch):
    monkeypatch.setenv(hints.STYLE_ENV, "")  # Recorded: in_pipeline's value is undone after.
    hints.in_pipeline()
    path = _csv(tmp_path, "person,item_id,timestamp\n1,x2,100\n1,3,101\n")
    with pytest.raises(read_errors.DataError, match=r"Name it with --param user_col=COLUMN\."):
        rio.read_interactions(path)
    with pytest.raises(read_errors.DataError, match=r"Pass --param id_type=string "):
        rio.read_interactions(path, columns=rio.Columns(user="person"))


# --- the chunk API both engines use ---------------------------------------------------------------


def _chunk(text: bytes, cols: delimited.ReadColumns, id_type: str, first_row: int) -> rio.ChunkRows:
    names = ["user_id", "item_id", "timestamp"]
    table = delimited.parse_ids(
        lambda types: delimited.parse_delimited(text, ",", names, 0, cols.names, types),
        cols,
        id_type,
    )
    return rio.table_columns(table, cols, "f.csv", id_type, first_row=first_row)


def test_chunks_decide_kinds_together():
    cols = delimited.ReadColumns("user_id", "item_id", "timestamp")
    fast = _chunk(b"1,2,100\n3,4,101\n", cols, "auto", 1)
    as_text = _chunk(b"5,b,102\n", cols, "auto", 3)  # Users read as text: all integers.
    assert fast.users.values.dtype == np.int64 and as_text.users.values.dtype == object
    with pytest.raises(
        read_errors.DataError,
        match=r"f\.csv: data row 3: item id 'b' .* f\.csv: data row 1 holds the integer '2'",
    ):
        id_columns.resolve_kinds([fast.scans, as_text.scans], "auto")
    only_users = [fast.scans[0], as_text.scans[0]]
    users_kind, _ = id_columns.resolve_kinds([(u, u) for u in only_users], "auto")
    assert users_kind == "int64"
    joined = np.concatenate([id_columns.convert(c.users, users_kind) for c in (fast, as_text)])
    assert joined.dtype == np.int64 and joined.tolist() == [1, 3, 5]
    assert id_columns.resolve_kinds([fast.scans], "string") == ("string", "string")
    assert id_columns.convert(fast.items, "string").tolist() == ["2", "4"]


def test_parse_ids_retries_as_text_only_for_values_that_do_not_convert():
    cols = delimited.ReadColumns("user_id", "item_id", "timestamp")
    names = ["user_id", "item_id", "timestamp"]
    tried = []

    def parse(text: bytes):
        def run(types):
            tried.append(types["user_id"])
            return delimited.parse_delimited(text, ",", names, 0, cols.names, types)

        return run

    assert delimited.parse_ids(parse(b"a,1,100\n"), cols, "auto").num_rows == 1
    assert tried == [pa.int64(), pa.string()]
    tried.clear()
    with pytest.raises(pa.ArrowInvalid):  # A line of the wrong shape: one parse says so.
        delimited.parse_ids(parse(b"a,1,100\nb,2\n"), cols, "auto")
    assert tried == [pa.int64()]
    tried.clear()
    with pytest.raises(pa.ArrowInvalid):
        delimited.parse_ids(parse(b"a,1,100\n"), cols, "int64")
    assert tried == [pa.int64()]
