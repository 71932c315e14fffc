import gzip

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from training_core import io as rio
from training_core import synthetic


@pytest.fixture(scope="module")
def small(tiny_interactions):
    n = 500
    return rio.Interactions(
        tiny_interactions.users[:n],
        tiny_interactions.items[:n],
        tiny_interactions.timestamps[:n],
        (),
        "synthetic",
    )


def _same(a: rio.Interactions, b: rio.Interactions):
    np.testing.assert_array_equal(a.users, b.users)
    np.testing.assert_array_equal(a.items, b.items)
    np.testing.assert_array_equal(a.timestamps, b.timestamps)


@pytest.mark.parametrize(
    "layout,fmt,name",
    [
        ("ml-100k", rio.MOVIELENS_100K, "u.data"),
        ("ml-1m", rio.MOVIELENS_DAT, "ratings.dat"),
        ("ml-20m", rio.MOVIELENS_CSV, "ratings.csv"),
    ],
)
def test_every_movielens_layout_detected_from_folder_and_file(tmp_path, small, layout, fmt, name):
    path = synthetic.write(small, str(tmp_path / "ml"), layout)
    assert path.endswith(name)
    for given in (str(tmp_path / "ml"), path):
        got = rio.read_interactions(given)
        assert got.format == fmt
        _same(got, small)
    # Given explicitly by alias too.
    assert rio.read_interactions(path, layout).format == fmt


def test_movielens_csv_real_header_and_float_ratings(tmp_path):
    p = tmp_path / "ratings.csv"
    p.write_text("userId,movieId,rating,timestamp\n1,31,2.5,1260759144\n1,1029,3.0,1260759179\n")
    got = rio.read_interactions(str(p))
    assert got.users.tolist() == [1, 1] and got.items.tolist() == [31, 1029]
    assert got.timestamps.dtype == np.int64


def test_generic_csv_gz_and_parquet_with_named_columns(tmp_path, small):
    csv_path = synthetic.write(small, str(tmp_path / "events.csv.gz"), "csv")
    _same(rio.read_interactions(csv_path), small)
    pq_path = synthetic.write(small, str(tmp_path / "events.parquet"), "parquet")
    _same(rio.read_interactions(pq_path), small)
    # Custom names.
    table = pa.table({"uid": small.users, "sku": small.items, "when": small.timestamps})
    custom = tmp_path / "custom.parquet"
    pq.write_table(table, custom)
    got = rio.read_interactions(str(custom), "parquet", rio.Columns("uid", "sku", "when"))
    _same(got, small)
    # A folder of parquet files reads all of them.
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(table.slice(0, 200), folder / "a.parquet")
    pq.write_table(table.slice(200), folder / "b.parquet")
    got = rio.read_interactions(str(folder), columns=rio.Columns("uid", "sku", "when"))
    _same(got, small)


def test_parquet_timestamp_type_converted_to_seconds(tmp_path):
    table = pa.table(
        {
            "user_id": [1, 2],
            "item_id": [3, 4],
            "timestamp": pa.array([1_000_000_000, 1_000_000_060], pa.int64()).cast(
                pa.timestamp("s")
            ),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    got = rio.read_interactions(str(tmp_path / "t.parquet"))
    assert got.timestamps.tolist() == [1_000_000_000, 1_000_000_060]


def test_malformed_line_names_file_and_line(tmp_path):
    p = tmp_path / "ratings.dat"
    p.write_text("1::2::5::100\n1::3::4::101\n2::7::4\n")
    with pytest.raises(rio.DataError, match=r"ratings\.dat:3: expected 4 fields separated by '::'"):
        rio.read_interactions(str(p))


def test_non_integer_id_names_line_and_column(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text("user_id,item_id,timestamp\n1,2,100\n1,3,101\nalice,4,102\n")
    with pytest.raises(rio.DataError, match=r"events\.csv:4: user id 'alice' in column 'user_id'"):
        rio.read_interactions(str(p))


def test_non_integer_id_column_in_parquet(tmp_path):
    pq.write_table(
        pa.table({"user_id": ["a"], "item_id": [1], "timestamp": [1]}), tmp_path / "x.parquet"
    )
    with pytest.raises(rio.DataError, match="column 'user_id' .* not integer"):
        rio.read_interactions(str(tmp_path / "x.parquet"))


def test_missing_column_lists_columns_and_flag(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text("person,item_id,timestamp\n1,2,3\n")
    with pytest.raises(
        rio.DataError, match=r"no user id column .*person, item_id, timestamp.*--user-col"
    ):
        rio.read_interactions(str(p))
    with pytest.raises(rio.DataError, match=r"no column named 'user' .*--user-col"):
        rio.read_interactions(str(p), columns=rio.Columns(user="user"))
    # Naming it works.
    assert rio.read_interactions(str(p), columns=rio.Columns(user="person")).users.tolist() == [1]


def test_empty_inputs(tmp_path):
    empty = tmp_path / "u.data"
    empty.write_text("")
    with pytest.raises(rio.DataError, match="empty"):
        rio.read_interactions(str(empty))
    header_only = tmp_path / "ratings.csv"
    header_only.write_text("userId,movieId,rating,timestamp\n")
    with pytest.raises(rio.DataError, match="no interactions"):
        rio.read_interactions(str(header_only))
    with gzip.open(tmp_path / "e.csv.gz", "wt") as f:
        f.write("user_id,item_id,timestamp\n")
    with pytest.raises(rio.DataError, match="no interactions"):
        rio.read_interactions(str(tmp_path / "e.csv.gz"))


def test_missing_path_unknown_format_and_unknown_folder(tmp_path):
    with pytest.raises(rio.DataError, match="no such file"):
        rio.read_interactions(str(tmp_path / "nope.csv"))
    with pytest.raises(rio.DataError, match="unknown format"):
        rio.read_interactions(str(tmp_path), "ml-999")
    (tmp_path / "readme.txt").write_text("hello")
    with pytest.raises(rio.DataError, match="found none of"):
        rio.read_interactions(str(tmp_path))


def test_sniffs_layout_of_unnamed_files(tmp_path):
    dat = tmp_path / "a.txt"
    dat.write_text("1::2::5::100\n2::2::5::100\n")
    assert rio.read_interactions(str(dat)).format == rio.MOVIELENS_DAT
    tsv = tmp_path / "b.txt"
    tsv.write_text("1\t2\t5\t100\n")
    assert rio.read_interactions(str(tsv)).format == rio.MOVIELENS_100K
