"""A .gz input may decompress to at most a share of the memory available (``input_files.gz_limit``).

A few kB of gzip can expand to gigabytes (a decompression bomb); a .gz input is read whole into
memory, so the reader stops once the decompressed bytes pass the limit, naming the file, the limit
and what to do. The limit is lowered here by lowering the memory ``faults.available_memory``
reports, as the early memory checks read it.
"""

import gzip
import os
import tracemalloc

import pytest

from pipelines import cli
from training_core.common import faults
from training_core.data import input_files
from training_core.data import io as rio

MB = 10**6
BOMB_BYTES = 40 * MB  # Decompressed; the limit below is 1 MB.


@pytest.fixture
def small_memory(monkeypatch):
    """2 MB of memory available: a .gz input may decompress to 1 MB."""
    monkeypatch.setattr(faults, "available_memory", lambda: 2 * MB)
    assert input_files.gz_limit() == (MB, "50% of the 2.0 MB of memory available")


def _bomb(path, first: bytes, repeat: bytes) -> str:
    """A .gz of ``first`` then ``repeat`` up to BOMB_BYTES, written in pieces (small in memory)."""
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(first)
        piece = repeat * (MB // len(repeat))
        for _ in range(BOMB_BYTES // len(piece)):
            f.write(piece)
    assert os.path.getsize(path) < BOMB_BYTES // 500  # A small file: well under 100 kB.
    return str(path)


BOMBS = {
    "rows": (b"user_id,item_id,timestamp\n", b"1,2,3\n"),  # Parsed whole by pyarrow.
    "one-line": (b"", b"a"),  # No line break: the header read would never end.
}


@pytest.mark.parametrize("kind", BOMBS)
def test_a_gzip_bomb_stops_at_the_limit_with_the_file_and_what_to_do(tmp_path, small_memory, kind):
    path = _bomb(tmp_path / "events.csv.gz", *BOMBS[kind])
    tracemalloc.start()
    try:
        with pytest.raises(faults.MachineFault) as caught:
            rio.read_interactions(path, "csv" if kind == "rows" else "auto")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MB < BOMB_BYTES  # Stopped early: nowhere near the 40 MB it holds.
    message = str(caught.value)
    assert message.startswith(
        f"not enough memory to read {path}: it decompresses to more than 1.0 MB (50% of the "
        "2.0 MB of memory available)"
    )
    assert f"decompress it yourself (gunzip -k {path}) and pass the plain file with --input" in (
        message
    )
    assert "decompression bomb" in message
    assert faults.describe(caught.value) == message


def test_prepare_data_refuses_a_gzip_bomb_and_writes_nothing(tmp_path, small_memory, capsys):
    path = _bomb(tmp_path / "ratings.csv.gz", *BOMBS["rows"])
    out = tmp_path / "out"
    code = cli.main(["prepare-data", "--input", path, "--output", str(out)])
    assert code == cli.MACHINE_FAULT_EXIT
    assert f"not enough memory to read {path}: it decompresses to more than 1.0 MB" in (
        capsys.readouterr().err
    )
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["ratings.csv.gz"]


def test_a_normal_gz_reads_as_the_plain_file_under_the_limit(tmp_path, small_memory):
    text = "user_id,item_id,timestamp\n" + "".join(
        f"u{i % 50},i{i % 37},{1_600_000_000 + i}\n" for i in range(5000)
    )
    plain = tmp_path / "events.csv"
    plain.write_text(text)
    with gzip.open(tmp_path / "events.csv.gz", "wt") as f:
        f.write(text)
    got = rio.read_interactions(str(tmp_path / "events.csv.gz"))
    want = rio.read_interactions(str(plain))
    assert len(got) == len(want) == 5000
    for field in ("users", "items", "timestamps"):
        assert (getattr(got, field) == getattr(want, field)).all()


def test_where_memory_cannot_be_read_a_fixed_limit_holds(tmp_path, monkeypatch):
    monkeypatch.setattr(faults, "available_memory", lambda: None)
    assert input_files.gz_limit()[0] == input_files.GZ_LIMIT_UNKNOWN
    monkeypatch.setattr(input_files, "GZ_LIMIT_UNKNOWN", MB)
    path = _bomb(tmp_path / "events.csv.gz", *BOMBS["rows"])
    with pytest.raises(faults.MachineFault, match="the limit where the memory available cannot"):
        rio.read_interactions(path)
