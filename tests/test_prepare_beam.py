"""The Beam data prep path writes what the single-machine path writes, byte for byte."""

import os

import numpy as np
import pytest
from conftest import tree_bytes
from kfp.dsl import Dataset

from components.prepare_data import prepare_data
from pipelines import cli
from training_core.common import atomic_writes
from training_core.data import (
    dataset_folder,
    formats,
    metadata,
    prepare,
    prepare_beam,
    prepare_beam_clean,
    synthetic,
)
from training_core.data import io as rio
from training_core.data.config import PrepareConfig

IN_PROCESS = ("--direct_num_workers=1",)
THREADS = ("--direct_num_workers=2", "--direct_running_mode=multi_threading")


def _config(src, out, **kw):
    kw.setdefault("min_ratings", 0)
    kw.setdefault("eval_negatives", 50)
    kw.setdefault("train_batch_size", 256)
    kw.setdefault("num_epochs", 1)  # Not the default (as many as training runs): quick.
    return PrepareConfig(input_path=str(src), output_dir=str(out), **kw)


def _beam(config, args=IN_PROCESS, range_bytes=4096, num_buckets=None):
    return prepare_beam.prepare_beam(
        config, prepare_beam.BeamConfig(tuple(args), range_bytes, num_buckets)
    )


@pytest.mark.parametrize(
    "args, num_shards, num_buckets",
    [(IN_PROCESS, None, None), (THREADS, 3, 5)],
    ids=["1-worker-auto-shards", "2-threads-3-shards"],
)
def test_beam_tree_is_byte_identical_to_the_single_path(
    tmp_path, tiny_csv, args, num_shards, num_buckets
):
    kw = dict(num_epochs=2, num_shards=num_shards)
    local = prepare.prepare(_config(tiny_csv, tmp_path / "local", workers=1, **kw))
    beam = _beam(_config(tiny_csv, tmp_path / "beam", **kw), args, num_buckets=num_buckets)
    # metadata.json included: the training code cannot tell which path wrote the folder.
    assert tree_bytes(local.output_dir) == tree_bytes(beam.output_dir)
    assert beam.metadata == local.metadata and not beam.reused
    assert beam.metadata.has_validation  # The validation split's files are among them.
    assert not (tmp_path / "beam" / dataset_folder.BEAM_STAGING).exists()
    assert not [p for p in (tmp_path / "beam").rglob("*") if atomic_writes.is_partial(p.name)]


def test_beam_prepares_the_epochs_training_runs_as_the_single_path_does(tmp_path, tiny_csv):
    """num_epochs not set: the epochs are decided in the job, once the data is counted."""
    from training_core.training.train_config import with_training_epochs

    kw = dict(num_epochs=None, train_preset="tiny")
    local = prepare.prepare(
        with_training_epochs(_config(tiny_csv, tmp_path / "local", workers=1, **kw))
    )
    beam = _beam(with_training_epochs(_config(tiny_csv, tmp_path / "beam", **kw)), THREADS)
    assert tree_bytes(local.output_dir) == tree_bytes(beam.output_dir)
    assert beam.metadata.num_epochs == 3 and len(beam.metadata.train_files) == 3


def _epochs_by_positives(preset, epochs, num_train_positives):
    """Epochs that tell training positive counts apart (as ``auto`` does, at its thresholds)."""
    return 1 + num_train_positives % 2


@pytest.mark.parametrize(
    "validation, refit",
    [(True, False), (False, False), (True, True), (False, True)],
    ids=["validation", "no-validation", "validation-refit", "no-validation-refit"],
)
def test_split_files_match_and_the_published_dataset_is_reused(tmp_path, validation, refit):
    """Users with two interactions (no validation item) among others, shards without a user
    with a validation item, epochs decided from the training positives (a refit's: every
    interaction): same bytes; and Beam reuses what either path published, the epochs predicted
    from its counts."""
    import dataclasses

    src = tmp_path / "ratings.csv"
    shape = synthetic.SyntheticConfig(40, 60, 130, min_per_user=2, seed=4)
    synthetic.write(synthetic.generate(shape), str(src), "csv")

    def config(name, **kw):
        kw.update(
            num_epochs=None, validation=validation, refit=refit, eval_negatives=10, num_shards=8
        )
        return dataclasses.replace(
            _config(src, tmp_path / name, **kw), epochs_for=_epochs_by_positives
        )

    local = prepare.prepare(config("local", workers=1))
    m = local.metadata
    assert m.num_epochs == 1 + m.num_train_positives % 2 and m.refit == refit
    if validation:
        assert 0 < m.num_validation_users < m.num_users
        empty = [f for f in m.validation_files if f.elements == 0]
        assert len(empty) == 1 and empty[0].batches == 1  # One record of padding.
    else:
        assert not m.has_validation
    held_out = 0 if refit else m.num_users + m.num_validation_users
    assert m.num_train_positives == m.source["rows_kept"] - held_out
    beam = _beam(config("beam"), THREADS)
    assert tree_bytes(local.output_dir) == tree_bytes(beam.output_dir)
    again = _beam(config("local"))
    assert again.reused and again.metadata == m
    # What a folder of another code version is reused by: the fingerprint predicted from the
    # published counts, before the job (the epochs of these options depend on them).
    predicted = prepare_beam._predicted_fingerprint(
        config("x"), local.output_dir, m.options["format"], m.source["sha256"]
    )
    assert predicted == m.fingerprint
    with pytest.raises(FileExistsError, match="different prepared dataset"):
        _beam(dataclasses.replace(config("local"), validation=not validation))
    with pytest.raises(FileExistsError, match="different prepared dataset"):
        _beam(dataclasses.replace(config("local"), refit=not refit))


def test_duplicates_ties_and_filters_across_chunks_match(tmp_path):
    rows = ["user_id,item_id,timestamp"]
    for u in range(1, 9):  # Equal timestamps: ties are broken by file order, across chunks.
        rows += [f"{u},{i},{100 + i // 3}" for i in range(1, 10) if i != u % 9 + 1]
    rows += ["6,1,100", "7,2,101", "6,3,109"]  # Repeats, one newer than the first.
    rows += ["9,1,100", "9,2,101"]  # Too few for min_ratings=3.
    rows += ["10,3,100"]  # One interaction.
    rows += [f"11,{i},{100}" for i in range(1, 11)]  # Every item: dropped.
    rows += [f"{u},{i},{50}" for u in (1, 2) for i in (1, 2)]  # Older repeats.
    src = tmp_path / "events.csv"
    src.write_text("\n".join(rows) + "\n")
    for min_ratings in (0, 3):
        cfg = dict(min_ratings=min_ratings, eval_negatives=2, num_shards=2)
        local = prepare.prepare(_config(src, tmp_path / f"l{min_ratings}", **cfg))
        beam = _beam(_config(src, tmp_path / f"b{min_ratings}", **cfg), THREADS, range_bytes=64)
        assert tree_bytes(local.output_dir) == tree_bytes(beam.output_dir)
        assert beam.metadata == local.metadata
    assert beam.metadata.source["users_with_every_item"] == 2  # User 11, then one more.
    assert beam.metadata.source["duplicate_pairs_dropped"] > 0
    assert beam.metadata.source["users_below_min_ratings"] == 2


@pytest.mark.slow
def test_parquet_folder_and_movielens_dat_match(tmp_path, tiny_interactions):
    folder = tmp_path / "pq"
    folder.mkdir()
    half = len(tiny_interactions) // 2
    for k, part in enumerate((slice(0, half), slice(half, None))):
        data = rio.Interactions(
            tiny_interactions.users[part],
            tiny_interactions.items[part],
            tiny_interactions.timestamps[part],
            (),
            formats.PARQUET,
        )
        path = synthetic.write(data, str(folder / f"part-{k}.parquet"), "parquet")
        assert os.path.exists(path)
    dat = synthetic.write(tiny_interactions, str(tmp_path / "ratings.dat"), "ml-1m")
    for src in (folder, dat):
        name = os.path.basename(str(src))
        local = prepare.prepare(_config(src, tmp_path / f"l-{name}", num_shards=2))
        beam = _beam(_config(src, tmp_path / f"b-{name}", num_shards=2), range_bytes=2048)
        assert tree_bytes(local.output_dir) == tree_bytes(beam.output_dir)


@pytest.mark.slow
def test_reuse_overwrite_and_seed(tmp_path, tiny_csv):
    out = tmp_path / "d"
    first = prepare.prepare(_config(tiny_csv, out))
    again = _beam(_config(tiny_csv, out))  # A folder the single path wrote is the same dataset.
    assert again.reused and again.metadata == first.metadata
    with pytest.raises(FileExistsError, match="different prepared dataset.*--overwrite"):
        _beam(_config(tiny_csv, out, num_neg=2))
    res = _beam(_config(tiny_csv, out, num_neg=2, overwrite=True))
    assert res.metadata.num_neg == 2 and not res.reused
    other = _beam(_config(tiny_csv, tmp_path / "s1", seed=1))
    first = [r.metadata.eval_file_paths(str(r.output_dir))[0] for r in (other, res)]
    with open(first[0], "rb") as x, open(first[1], "rb") as y:
        assert x.read() != y.read()


def _bad_inputs(tmp_path):
    cases = {}
    (tmp_path / "a").mkdir()
    bad = tmp_path / "a" / "ratings.dat"
    bad.write_text("".join(f"{u}::{i}::5::{100 + i}\n" for u in (1, 2) for i in range(40)))
    with open(bad, "a") as f:
        f.write("3::x::4::101\n")
    cases["non-integer id"] = (bad, {})
    short = tmp_path / "u.data"
    short.write_text("1\t2\t5\t100\n" * 50 + "1\t2\n")
    cases["malformed line"] = (short, {})
    cols = tmp_path / "events.csv"
    cols.write_text("uid,sku,ts\n1,2,3\n")
    cases["missing column"] = (cols, {})
    cases["unknown column"] = (cols, {"columns": rio.Columns("uid", "nope", "ts")})
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    cases["empty file"] = (empty, {"format": "csv"})
    header = tmp_path / "header.csv"
    header.write_text("user_id,item_id,timestamp\n")
    cases["header only"] = (header, {})
    cases["too few ratings"] = (bad.with_name("ok.csv"), {"min_ratings": 1000})
    bad.with_name("ok.csv").write_text("user_id,item_id,timestamp\n1,2,3\n1,3,4\n2,2,3\n2,4,4\n")
    cases["too many negatives"] = (bad.with_name("ok.csv"), {"eval_negatives": 50})
    return cases


@pytest.mark.slow
def test_bad_input_fails_the_job_with_the_single_path_message(tmp_path):
    for what, (src, kw) in _bad_inputs(tmp_path).items():
        with pytest.raises(ValueError) as local:
            prepare.prepare(_config(src, tmp_path / "o-local", **kw))
        with pytest.raises(ValueError) as beam:
            _beam(_config(src, tmp_path / "o-beam", **kw), range_bytes=64)
        assert type(beam.value) is type(local.value), what
        assert str(beam.value) == str(local.value), what
        assert not (tmp_path / "o-beam").exists(), what  # Nothing half-written.


def _spy_on_beam(monkeypatch) -> list:
    """The BeamConfig of every Beam data prep started: the Beam path writes what the local path
    writes, byte for byte, so equal output alone would not show that Beam ran."""
    calls, real = [], prepare_beam.prepare_beam

    def spy(config, beam_config):
        calls.append(beam_config)
        return real(config, beam_config)

    monkeypatch.setattr(prepare_beam, "prepare_beam", spy)
    return calls


def test_a_semicolon_table_prepares_as_its_comma_csv_on_both_paths(tmp_path, tiny_csv):
    """The header picks the separator (formats.CSV_DELIMITERS) for the Beam readers too."""
    semi = tmp_path / "events.csv"
    semi.write_text(open(tiny_csv).read().replace(",", ";"))
    local = prepare.prepare(_config(tiny_csv, tmp_path / "comma"))
    beam = _beam(_config(semi, tmp_path / "semi-beam"))
    # Same records and vocabularies; the build folders' names differ (the source hash does).
    (comma_build,) = [d for d in os.listdir(local.output_dir) if d.startswith("data-")]
    (semi_build,) = [d for d in os.listdir(beam.output_dir) if d.startswith("data-")]
    assert comma_build != semi_build
    assert tree_bytes(os.path.join(beam.output_dir, semi_build)) == tree_bytes(
        os.path.join(local.output_dir, comma_build)
    )
    assert beam.metadata.num_train_elements == local.metadata.num_train_elements


def test_cli_runner_beam_and_bad_input_exit_2(tmp_path, tiny_csv, capsys, monkeypatch):
    beam_runs = _spy_on_beam(monkeypatch)
    out = tmp_path / "o"
    args = ["prepare-data", "--input", tiny_csv, "--output", str(out), "--min-ratings", "0"]
    args += ["--eval-negatives", "20", "--runner", "beam"]
    assert cli.main([*args, "--beam-pipeline-args=--direct_num_workers=1"]) == 0
    assert [c.pipeline_args for c in beam_runs] == [("--direct_num_workers=1",)]
    assert "users 200" in capsys.readouterr().out
    assert metadata.read_metadata(out).eval_negatives == 20
    bad = tmp_path / "ratings.dat"
    bad.write_text("1::2::5::100\n1::x::4::101\n")
    code = cli.main(["prepare-data", "--input", str(bad), "--output", str(tmp_path / "b")])
    code_beam = cli.main(
        ["prepare-data", "--input", str(bad), "--output", str(tmp_path / "b"), "--runner", "beam"]
    )
    err = capsys.readouterr().err
    assert code == code_beam == 2
    assert err.count("ratings.dat:2: item id 'x'") == 2 and "Traceback" not in err
    assert cli.main([*args[:-2], "--beam-pipeline-args=--direct_num_workers=2"]) == 2
    assert "needs --runner beam" in capsys.readouterr().err


def test_component_with_runner_beam(tmp_path, tiny_csv, monkeypatch):
    beam_runs = _spy_on_beam(monkeypatch)
    common = dict(min_ratings=0, eval_negatives=30, train_batch_size=128)
    local = Dataset(uri=str(tmp_path / "local"))
    beam = Dataset(uri=str(tmp_path / "beam"))
    prepare_data.python_func(raw_data=Dataset(uri=tiny_csv), examples=local, **common)
    assert beam_runs == []  # The default runner is the local one.
    prepare_data.python_func(
        raw_data=Dataset(uri=tiny_csv),
        examples=beam,
        runner="beam",
        beam_pipeline_args=["--direct_num_workers=1"],
        **common,
    )
    assert [c.pipeline_args for c in beam_runs] == [("--direct_num_workers=1",)]
    assert tree_bytes(local.path) == tree_bytes(beam.path)
    assert beam.metadata == local.metadata
    with pytest.raises(ValueError, match="unknown data prep runner"):
        prepare_data.python_func(
            raw_data=Dataset(uri=tiny_csv), examples=Dataset(uri=str(tmp_path / "x")), runner="x"
        )


@pytest.mark.slow
def test_multi_processing_workers_and_many_chunks_match(tmp_path):
    cfg = synthetic.SyntheticConfig(num_users=3000, num_items=800, num_interactions=120_000, seed=5)
    src = synthetic.write(synthetic.generate(cfg), str(tmp_path / "ratings.csv"), "csv")
    kw = dict(num_shards=4, num_epochs=2, eval_negatives=100)
    local = prepare.prepare(_config(src, tmp_path / "l", **kw))
    beam = _beam(
        _config(src, tmp_path / "b", **kw),
        ("--direct_num_workers=2", "--direct_running_mode=multi_processing"),
        range_bytes=100_000,
    )
    assert tree_bytes(local.output_dir) == tree_bytes(beam.output_dir)
    assert np.isclose(beam.metadata.num_train_elements, local.metadata.num_train_elements)


# ---------------------------------------------------------------------------------------------
# String ids and seen-only rows (issue 40): the Beam path decides as the single path does.
# ---------------------------------------------------------------------------------------------


def _write_rows(path, header, rows) -> str:
    path.write_text("\n".join([header, *(",".join(map(str, r)) for r in rows)]) + "\n")
    return str(path)


def _string_rows(digits_only_items: bool):
    """Users with text ids (non-ASCII among them), items ISBN-like; 40 users, 30 items.

    ``digits_only_items``: half the items are all digits (``--id-type string`` reads them).

    Ids whose str order differs from their numeric order ("u10" < "u2"); repeated pairs, the
    later row newer.
    """
    rows = []
    for u in range(40):
        user = f"u{u}" if u % 3 else f"ü-{u:x}"
        for k in range(3 + u % 5):
            i = (u * 7 + k * 11) % 30
            item = f"08065{i:04d}" + ("0" if digits_only_items and i % 2 else "X")
            rows.append((user, item, 1000 + (u * 13 + k * 5) % 17))
    rows += [("u1", "080650008X", 5), ("u1", "080650008X", 900)]  # Repeats of a pair.
    return rows


def _both(tmp_path, src, range_bytes=256, **kw):
    """The single path's and the Beam path's results for ``src``; their trees are equal."""
    kw = {"eval_negatives": 5, "num_shards": 3, **kw}
    name = os.path.basename(str(src))
    local = prepare.prepare(_config(src, tmp_path / f"l-{name}", workers=1, **kw))
    beam = _beam(_config(src, tmp_path / f"b-{name}", **kw), THREADS, range_bytes, num_buckets=3)
    assert tree_bytes(local.output_dir) == tree_bytes(beam.output_dir)
    assert beam.metadata == local.metadata
    return local, beam


@pytest.mark.parametrize("id_type", ["auto", "string"])
def test_string_ids_match_across_chunks(tmp_path, id_type):
    """Text ids cut into many chunks: the same vocabularies (str order), records and metadata.

    ``string``: items that are all digits ("0806500120") stay text, as written.
    """
    rows = _string_rows(digits_only_items=id_type == "string")
    src = _write_rows(tmp_path / "events.csv", "user_id,item_id,timestamp", rows)
    _, beam = _both(tmp_path, src, id_type=id_type)
    m = beam.metadata
    assert (m.user_id_type, m.item_id_type) == ("string", "string")
    users = list(metadata.read_vocab(os.path.join(beam.output_dir, m.user_vocab), "string"))
    assert users == sorted(users) and users.index("u10") < users.index("u2") and "ü-0" in users
    items = metadata.read_vocab(os.path.join(beam.output_dir, m.item_vocab), "string")
    assert all(isinstance(i, str) for i in items) and list(items) == sorted(items)


def test_integer_users_with_string_items_match(tmp_path):
    rows = [
        (100 + u, f"sku-{(u * 5 + k * 3) % 25}", 10 * k + u % 4)
        for u in range(30)
        for k in range(4)
    ]
    src = _write_rows(tmp_path / "skus.csv", "user_id,item_id,timestamp", rows)
    _, beam = _both(tmp_path, src, range_bytes=200)
    assert (beam.metadata.user_id_type, beam.metadata.item_id_type) == ("int64", "string")


def _rated_rows():
    """Ratings 1-5; users 0-29 rate 6 of 20 items, the latest row of a pair deciding.

    User 30 rated every item, half of them low (seen only): dropped once item 19, held as a
    positive by them alone, goes with them. User 31 has one positive.
    """
    rows = []
    for u in range(30):
        for k in range(6):
            i = (u * 3 + k * 7) % 19
            rows.append((u, i, 1 + (u + k) % 5, 100 + k))
    rows += [(3, (3 * 3) % 19, 1, 50), (4, (4 * 3) % 19, 5, 200)]  # Older low, newer high.
    rows += [(30, i, 5 if i % 2 else 1, 300 + i) for i in range(20)]
    rows += [(31, 1, 5, 10), (31, 2, 1, 11)]
    return rows


def test_min_rating_seen_only_pairs_match(tmp_path):
    src = _write_rows(tmp_path / "rated.csv", "user_id,item_id,rating,timestamp", _rated_rows())
    local, beam = _both(tmp_path, src, min_rating=3.0)
    m = beam.metadata
    assert m.source["below_min_rating"] > 0 and m.source["seen_only_pairs"] > 0
    assert m.num_seen_only == m.source["seen_only_pairs"] and len(m.seen_only_files) == 3
    assert m.source["users_with_every_item"] == 1  # User 30.


def test_positive_events_match(tmp_path):
    events = ("view", "purchase", "cart")
    rows = [
        (f"c{u}", f"p{(u * 5 + k * 3) % 23}", events[(u + k) % 3], 10 * k + u % 3)
        for u in range(30)
        for k in range(7)
    ]
    src = _write_rows(tmp_path / "events.csv", "user_id,item_id,event,timestamp", rows)
    _, beam = _both(tmp_path, src, positive_events="purchase,cart")
    assert beam.metadata.source["not_positive_event"] > 0


# SipHash of the UTF-8 bytes under pandas' fixed key: the same in every process.
PINNED_HASHES = [18107720543730588847, 6689755093696353227, 17743511936029191595]


def test_string_ids_are_bucketed_by_a_hash_of_their_bytes():
    """Never Python's ``hash`` (salted per process): every worker must agree on a user's bucket."""
    ids = np.asarray(["c-0001", "ü", "080652121X"], dtype=object)
    assert prepare_beam_clean._id_hash(ids).tolist() == [
        prepare_beam_clean._id_hash(np.asarray([s], dtype=object))[0] for s in ids
    ]
    assert prepare_beam_clean._id_hash(ids).tolist() == PINNED_HASHES


@pytest.mark.slow
def test_mixed_and_bad_ids_fail_as_on_the_single_path(tmp_path):
    """Errors that name data rows count them from the file's first row, not the chunk's."""
    good = [(f"u{u % 7}", f"i{u % 11}", u) for u in range(60)]
    cases = {
        "mixed": good + [("u1", "42", 99)],
        "padded": good + [("u1", " i2", 99)],
    }
    for what, rows in cases.items():
        src = _write_rows(tmp_path / f"{what}.csv", "user_id,item_id,timestamp", rows)
        with pytest.raises(ValueError) as local:
            prepare.prepare(_config(src, tmp_path / "o-local", eval_negatives=2))
        with pytest.raises(ValueError) as beam:
            _beam(_config(src, tmp_path / "o-beam", eval_negatives=2), range_bytes=64)
        assert str(beam.value) == str(local.value), what
        assert f"{what}.csv:62" in str(local.value), what  # The line of the bad row.


def test_parquet_row_groups_with_text_and_integer_ids_as_strings_match(tmp_path):
    """``--id-type string``: a Parquet integer column's ids are their decimal text ("10" < "9")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _string_rows(digits_only_items=False)
    table = pa.table(
        {
            "user_id": [u for u, _, _ in rows],
            "item_id": [int(i[5:9]) for _, i, _ in rows],
            "timestamp": [t for _, _, t in rows],
        }
    )
    src = tmp_path / "events.parquet"
    pq.write_table(table, src, row_group_size=40)
    _, beam = _both(tmp_path, src, id_type="string")
    items = metadata.read_vocab(os.path.join(beam.output_dir, beam.metadata.item_vocab), "string")
    assert beam.metadata.item_id_type == "string" and list(items) == sorted(map(str, items))


def test_users_covering_every_item_with_seen_only_pairs_drop_in_rounds(tmp_path):
    """Dropping user 1 (items 0-4, three seen only) removes item 4, which only they rated
    high; then user 2 (items 0-3, two seen only), with fewer items than there were, covers
    every item left: only the users :func:`covering_bound` singles out send their items."""
    rows = [(1, 4, 5, 1), (1, 0, 5, 2), (1, 1, 1, 3), (1, 2, 1, 4), (1, 3, 1, 5)]
    rows += [(2, 0, 5, 1), (2, 1, 5, 2), (2, 2, 1, 3), (2, 3, 1, 4)]
    rows += [(u, (u + k) % 4, 4, k) for u in range(3, 9) for k in range(2)]
    src = _write_rows(tmp_path / "rated.csv", "user_id,item_id,rating,timestamp", rows)
    _, beam = _both(tmp_path, src, min_rating=3.0, eval_negatives=1, num_shards=2)
    assert beam.metadata.source["users_with_every_item"] == 2
    assert beam.metadata.num_items == 4 and beam.metadata.num_users == 6
