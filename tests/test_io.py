import gzip

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from training_core.data import delimited, formats, read_errors, synthetic
from training_core.data import io as rio


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
    """The same interactions, in any row order (a MovieLens layout is written in its dump's)."""

    def rows(x: rio.Interactions) -> np.ndarray:
        table = np.stack([x.users, x.items, x.timestamps], axis=1)
        return table[np.lexsort(table.T[::-1])]

    np.testing.assert_array_equal(rows(a), rows(b))


@pytest.mark.parametrize(
    "layout,fmt,name",
    [
        ("ml-100k", formats.MOVIELENS_100K, "u.data"),
        ("ml-1m", formats.MOVIELENS_DAT, "ratings.dat"),
        ("ml-20m", formats.MOVIELENS_CSV, "ratings.csv"),
    ],
)
def test_every_movielens_layout_detected_from_folder_and_file(tmp_path, small, layout, fmt, name):
    path = synthetic.write(small, str(tmp_path / "ml"), layout)
    assert path.endswith(name)
    for given in (str(tmp_path / "ml"), path):
        got = rio.read_interactions(given)
        assert got.format == fmt
        _same(got, small)
        # Integer ids read as before: int64 arrays, every row a positive.
        assert got.users.dtype == got.items.dtype == np.int64
        assert (got.user_id_type, got.item_id_type) == ("int64", "int64")
        assert got.positive is None and got.rule_counts == {}
    # Given explicitly by alias too.
    assert rio.read_interactions(path, layout).format == fmt


def test_synthetic_movielens_layouts_keep_their_dumps_row_order(tmp_path, small):
    """ml-20m's ratings.csv is sorted by user then item, ml-1m's ratings.dat grouped by user,
    u.data not sorted: data prep's speed on a layout depends on it."""
    got = {
        layout: rio.read_interactions(synthetic.write(small, str(tmp_path / layout), layout))
        for layout in ("ml-100k", "ml-1m", "ml-20m")
    }
    ml20 = got["ml-20m"]
    assert (np.diff(ml20.users) >= 0).all()
    same_user = np.diff(ml20.users) == 0
    assert (np.diff(ml20.items)[same_user] > 0).all()
    assert (np.diff(got["ml-1m"].users) >= 0).all()
    assert not (np.diff(got["ml-1m"].items)[np.diff(got["ml-1m"].users) == 0] > 0).all()
    assert not (np.diff(got["ml-100k"].users) >= 0).all()


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
    with pytest.raises(
        read_errors.DataError, match=r"ratings\.dat:3: expected 4 fields separated by '::'"
    ):
        rio.read_interactions(str(p))


def test_non_integer_id_names_line_and_column(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text("user_id,item_id,timestamp\n1,2,100\n1,3,101\nalice,4,102\n")
    with pytest.raises(
        read_errors.DataError,
        match=r"events\.csv:4: user id 'alice' in column 'user_id' is not an integer.*"
        r"--id-type string",
    ) as e:
        rio.read_interactions(str(p), id_type="int64")
    assert "map string ids" not in str(e.value)  # No longer the advice: strings are read.


def test_non_integer_id_column_in_parquet(tmp_path):
    pq.write_table(
        pa.table({"user_id": ["a"], "item_id": [1], "timestamp": [1]}), tmp_path / "x.parquet"
    )
    with pytest.raises(
        read_errors.DataError, match="column 'user_id' .* not integer.*--id-type string"
    ):
        rio.read_interactions(str(tmp_path / "x.parquet"), id_type="int64")
    got = rio.read_interactions(str(tmp_path / "x.parquet"))  # auto: the column's type decides.
    assert (got.user_id_type, got.item_id_type) == ("string", "int64")


def test_missing_column_lists_columns_and_flag(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text("person,item_id,timestamp\n1,2,3\n")
    with pytest.raises(
        read_errors.DataError, match=r"no user id column .*person, item_id, timestamp.*--user-col"
    ):
        rio.read_interactions(str(p))
    with pytest.raises(read_errors.DataError, match=r"no column named 'user' .*--user-col"):
        rio.read_interactions(str(p), columns=rio.Columns(user="user"))
    # Naming it works.
    assert rio.read_interactions(str(p), columns=rio.Columns(user="person")).users.tolist() == [1]


def test_empty_inputs(tmp_path):
    empty = tmp_path / "u.data"
    empty.write_text("")
    with pytest.raises(read_errors.DataError, match="empty"):
        rio.read_interactions(str(empty))
    header_only = tmp_path / "ratings.csv"
    header_only.write_text("userId,movieId,rating,timestamp\n")
    with pytest.raises(read_errors.DataError, match="no interactions"):
        rio.read_interactions(str(header_only))
    with gzip.open(tmp_path / "e.csv.gz", "wt") as f:
        f.write("user_id,item_id,timestamp\n")
    with pytest.raises(read_errors.DataError, match="no interactions"):
        rio.read_interactions(str(tmp_path / "e.csv.gz"))


def test_missing_path_unknown_format_and_unknown_folder(tmp_path):
    with pytest.raises(read_errors.DataError, match="no such file"):
        rio.read_interactions(str(tmp_path / "nope.csv"))
    with pytest.raises(read_errors.DataError, match="unknown format"):
        rio.read_interactions(str(tmp_path), "ml-999")
    (tmp_path / "readme.txt").write_text("hello")
    with pytest.raises(read_errors.DataError, match="found none of"):
        rio.read_interactions(str(tmp_path))


def test_sniffs_layout_of_unnamed_files(tmp_path):
    dat = tmp_path / "a.txt"
    dat.write_text("1::2::5::100\n2::2::5::100\n")
    assert rio.read_interactions(str(dat)).format == formats.MOVIELENS_DAT
    tsv = tmp_path / "b.txt"
    tsv.write_text("1\t2\t5\t100\n")
    assert rio.read_interactions(str(tsv)).format == formats.MOVIELENS_100K


# Timestamps written as text: every ISO-8601 form Python reads, and bad values named by line.


def test_bad_iso_timestamp_names_line_value_and_what_to_do(tmp_path):
    # Arrow's own error quotes the last value its cast rejects (here a valid time with a
    # fraction, from another row) and no row; the message must quote the bad value instead.
    p = tmp_path / "events.csv"
    p.write_text(
        "user_id,item_id,timestamp\n"
        "1,2,2020-01-01T10:00:00\n"
        "1,3,2020-13-45\n"
        "2,4,2020-01-02T10:00:00.5\n"
    )
    with pytest.raises(read_errors.DataError) as exc:
        rio.read_interactions(str(p))
    message = str(exc.value)
    assert message.startswith(
        f"{p}:3: timestamp '2020-13-45' in column 'timestamp' is not a valid time; "
    )
    assert "2020-01-02T10:00:00.5" not in message
    assert "epoch seconds or ISO-8601" in message and "fix or drop this row" in message


def test_bad_timestamp_in_parquet_names_the_data_row(tmp_path):
    table = pa.table(
        {
            "user_id": [1, 1, 2],
            "item_id": [2, 3, 4],
            "timestamp": ["2020-01-01T10:00:00Z", "2020-01-02T10:00:00.25", "2020-13-45"],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(
        read_errors.DataError,
        match=r"t\.parquet: data row 3: timestamp '2020-13-45' in column 'timestamp' is not a "
        "valid time",
    ):
        rio.read_interactions(str(tmp_path / "t.parquet"))


def test_iso_timestamps_with_fractions_and_zones_are_read_as_floored_seconds(tmp_path):
    base = 1_577_872_800  # 2020-01-01T10:00:00Z
    frac = tmp_path / "frac.csv"
    frac.write_text("user_id,item_id,timestamp\n1,2,2020-01-01T10:00:00.75\n1,3,2020-01-01\n")
    assert rio.read_interactions(str(frac)).timestamps.tolist() == [base, base - 36_000]
    mixed = tmp_path / "mixed.csv"  # With and without a zone, and epoch seconds, in one column.
    mixed.write_text(
        "user_id,item_id,timestamp\n"
        "1,2,2020-01-01T12:00:00+02:00\n1,3,2020-01-01T10:00:00Z\n1,4,2020-01-01 10:00:00\n"
        f"1,5,{base}\n"
    )
    assert rio.read_interactions(str(mixed)).timestamps.tolist() == [base] * 4


def test_bad_timestamp_after_the_first_block_names_its_line(tmp_path, monkeypatch):
    monkeypatch.setattr(delimited, "_BLOCK_BYTES", 64)  # Types come from the first (integer) block.
    p = tmp_path / "events.csv"
    rows = [f"{u},{u + 1},{1_000_000_000 + u}" for u in range(1, 20)]
    rows[15] = "16,17,2020-13-45"
    p.write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    with pytest.raises(read_errors.DataError, match=r"events\.csv:17: timestamp '2020-13-45'"):
        rio.read_interactions(str(p))


# Negative ids: one rule (read_errors.MIN_ID) for prepare-data and validate.


def test_negative_ids_are_rejected_with_file_line_column_and_value(tmp_path):
    assert read_errors.MIN_ID == 0
    csv_path = tmp_path / "events.csv"
    csv_path.write_text("user_id,item_id,timestamp\n1,2,100\n1,3,101\n-1,4,102\n")
    with pytest.raises(read_errors.DataError) as exc:
        rio.read_interactions(str(csv_path))
    assert str(exc.value) == (
        f"{csv_path}:4: user id -1 in column 'user_id' is negative; ids must be integers >= 0 "
        "(a -1 usually marks a missing value): drop those rows or fill in the ids."
    )
    dat = tmp_path / "ratings.dat"
    dat.write_text("1::2::5::100\n2::-7::4::101\n")
    with pytest.raises(
        read_errors.DataError, match=r"ratings\.dat:2: item id -7 in field 2 is negative"
    ):
        rio.read_interactions(str(dat))
    pq.write_table(
        pa.table({"user_id": [1, 2, 3], "item_id": [4, -1, 6], "timestamp": [1, 2, 3]}),
        tmp_path / "x.parquet",
    )
    with pytest.raises(
        read_errors.DataError,
        match=r"x\.parquet: data row 2: item id -1 in column 'item_id' is negative",
    ):
        rio.read_interactions(str(tmp_path / "x.parquet"))


def test_quoted_commas_do_not_hide_the_bad_line(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text('user_id,item_id,title,timestamp\n1,2,"Heat, 1995",100\n-3,4,"Up",101\n')
    with pytest.raises(
        read_errors.DataError, match=r"events\.csv:3: user id -3 in column 'user_id'"
    ):
        rio.read_interactions(str(p))


def test_header_with_spaces_after_the_commas_reads_as_the_beam_readers_read_it(tmp_path):
    """A hand-written CSV header (``user_id, item_id, timestamp``) names the same columns."""
    path = tmp_path / "spaced.csv"
    path.write_text("user_id, item_id, rating, timestamp\n1, 10, 5, 100\n2, 12, 3, 103\n")
    data = rio.read_interactions(str(path))
    assert data.users.tolist() == [1, 2] and data.items.tolist() == [10, 12]
    assert data.timestamps.tolist() == [100, 103]
    layout = formats.describe_file(str(path), formats.CSV)
    assert rio.interaction_columns(layout, rio.Columns()) == ("user_id", "item_id", "timestamp")


@pytest.mark.parametrize("name", ["ratings.csv", "events.csv.gz", "u.data", "ratings.dat"])
def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path, small, name):
    """Excel's "CSV UTF-8" starts the file with a byte-order mark: the header (or, without one,
    the first id) must read as without it, in every text layout, plain or gzipped."""
    layout = {"u.data": "ml-100k", "ratings.dat": "ml-1m"}.get(name, "csv")
    (tmp_path / "plain").mkdir()
    plain = synthetic.write(small, str(tmp_path / "plain" / name), layout)
    with (gzip.open if name.endswith(".gz") else open)(plain, "rb") as f:
        data = f.read()
    marked = tmp_path / "marked" / name
    marked.parent.mkdir()
    with (gzip.open if name.endswith(".gz") else open)(marked, "wb") as f:
        f.write(b"\xef\xbb\xbf" + data)
    got = rio.read_interactions(str(marked))
    assert got.format == rio.read_interactions(plain).format
    _same(got, small)
    if layout == "csv":
        fmt = rio.read_interactions(str(marked)).format
        names = formats.describe_file(str(marked), fmt).names
        assert names[0] == formats.describe_file(plain, fmt).names[0] and "\ufeff" not in names[0]


@pytest.mark.parametrize("delimiter", ["\t", ";", "|"])
def test_a_headed_table_separated_by_tabs_semicolons_or_pipes_reads_as_a_csv(
    tmp_path, small, delimiter
):
    """A .tsv, a spreadsheet's semicolon export or a pipe dump: the header says the separator;
    a bad line is named with it."""
    plain = synthetic.write(small, str(tmp_path / "plain.csv"), "csv")
    lines = open(plain).read().splitlines()
    other = tmp_path / "events.txt"
    other.write_text("\n".join(line.replace(",", delimiter) for line in lines) + "\n")
    got = rio.read_interactions(str(other))
    assert got.format == formats.CSV
    _same(got, small)
    layout = formats.describe_file(str(other), formats.CSV)
    assert (
        layout.delimiter == delimiter and layout.names == formats.describe_file(plain, "csv").names
    )
    lines[3] += delimiter + "extra"
    other.write_text("\n".join(line.replace(",", delimiter) for line in lines) + "\n")
    with pytest.raises(
        read_errors.DataError, match=rf"events\.txt:4: expected {len(layout.names)} fields"
    ):
        rio.read_interactions(str(other))


# A harmless stand-in for CVE-2023-47248's payload: reading the file would create MARKER.
_CRAFTED_PARQUET = """
import pathlib, sys
import pyarrow as pa, pyarrow.parquet as pq

class Crafted(pa.PyExtensionType):
    def __init__(self):
        super().__init__(pa.int64())

    def __reduce__(self):  # What pickle stores, and runs when the file is read.
        return (pathlib.Path.touch, (pathlib.Path(sys.argv[2]),))

column = pa.ExtensionArray.from_storage(Crafted(), pa.array([1, 2], pa.int64()))
table = pa.table({"user_id": [1, 2], "item_id": [3, 4], "timestamp": column})
pq.write_table(table, sys.argv[1])
"""


def test_a_crafted_parquet_file_runs_no_code_when_read(tmp_path):
    """The single-machine reader, in a fresh process (no Beam import to install the hotfix for
    it), refuses a pickled extension column with the file's name and runs nothing."""
    import subprocess
    import sys

    path, marker = tmp_path / "ratings.parquet", tmp_path / "code-ran"
    subprocess.run([sys.executable, "-c", _CRAFTED_PARQUET, path, marker], check=True)
    read = (
        "import sys\n"
        "from training_core.data import io, read_errors\n"
        "try:\n"
        "    io.read_interactions(sys.argv[1])\n"
        "except read_errors.DataError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", read, path], capture_output=True, text=True, timeout=120
    )
    assert not marker.exists(), "reading the file ran the code it carries"
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{path}: refused" in out.stdout and formats.PICKLED_ARROW_TYPE in out.stdout
