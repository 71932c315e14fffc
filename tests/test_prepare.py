import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from conftest import read_split, training_rows, tree_bytes

from training_core.common import atomic_writes
from training_core.data import (
    indexing,
    input_files,
    metadata,
    prep_result,
    prepare,
    read_errors,
    records,
    synthetic,
)
from training_core.data.config import PrepareConfig


def _config(src, out, **kw):
    kw.setdefault("min_ratings", 0)
    kw.setdefault("eval_negatives", 50)
    kw.setdefault("train_batch_size", 256)
    kw.setdefault("num_epochs", 1)  # Not the default (as many as training runs): quick.
    return PrepareConfig(input_path=src, output_dir=str(out), **kw)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tiny_csv):
    out = tmp_path_factory.mktemp("prep") / "data"
    result = prepare.prepare(_config(tiny_csv, out, num_epochs=2, workers=2))
    return result


def test_metadata_counts_are_exact(prepared, tiny_interactions):
    m = prepared.metadata
    raw_users = np.unique(tiny_interactions.users)
    raw_items = np.unique(tiny_interactions.items)
    assert m.num_users == len(raw_users)
    assert m.num_items == len(raw_items)
    # Every tiny user has at least 3 interactions: a test item and a validation item each.
    assert m.has_validation and m.options["validation"] is True
    assert m.num_validation_users == m.num_eval_users == m.num_users
    assert m.num_train_positives == len(tiny_interactions) - 2 * m.num_users
    per_user = np.bincount(tiny_interactions.users) - 2
    assert m.num_train_elements == training_rows(per_user[per_user >= 0], m)
    assert m.num_train_elements > m.num_train_positives * (1 + m.num_neg)  # Recent ones repeat.
    assert m.train_steps_per_epoch == sum(-(-f.elements // 256) for f in m.train_files["epoch_000"])
    assert m.num_eval_elements == m.num_validation_elements == m.num_users * 51
    assert m.eval_prebatch_size == m.eval_users_per_batch * 51
    assert m.validation_steps == sum(f.batches for f in m.validation_files) == m.eval_steps
    assert [os.path.dirname(f.path).split("/")[-1] for f in m.validation_files] == [
        metadata.VALIDATION_DIR
    ] * m.num_shards
    assert set(m.train_files) == {"epoch_000", "epoch_001"}
    assert m.source["sha256"] == input_files.file_sha256([m.source["path"]])
    on_disk = json.loads(open(os.path.join(prepared.output_dir, "metadata.json")).read())
    assert on_disk["format_version"] == metadata.FORMAT_VERSION
    assert metadata.read_metadata(prepared.output_dir) == m


def test_tensorflow_reads_every_file_with_static_batch_shapes(prepared):
    m, root = prepared.metadata, prepared.output_dir
    for training, paths, batch in (
        (True, m.train_file_paths(root, 0), m.train_prebatch_size),
        (False, m.eval_file_paths(root), m.eval_prebatch_size),
        (False, m.split("validation").eval_file_paths(root), m.eval_prebatch_size),
    ):
        spec = records.feature_spec(batch, training)
        ds = tf.data.TFRecordDataset(paths).map(
            lambda s, spec=spec: tf.io.parse_single_example(s, spec)
        )
        n = 0
        for ex in ds:
            assert all(v.shape == (batch, 1) for v in ex.values())
            n += 1
        assert n == (m.train_steps_per_epoch if training else m.eval_steps)


def test_held_out_splits_and_training_content(prepared, tiny_interactions):
    m, root = prepared.metadata, prepared.output_dir
    user_vocab = np.loadtxt(os.path.join(root, m.user_vocab), dtype=np.int64)
    item_vocab = np.loadtxt(os.path.join(root, m.item_vocab), dtype=np.int64)
    # Raw truth: each user's latest interaction.
    raw = {}
    for u, i, t in zip(
        tiny_interactions.users.tolist(),
        tiny_interactions.items.tolist(),
        tiny_interactions.timestamps.tolist(),
        strict=True,
    ):
        raw.setdefault(u, []).append((t, i))
    latest = {u: sorted(v)[-1][1] for u, v in raw.items()}  # The test item.
    before_latest = {u: sorted(v)[-2][1] for u, v in raw.items()}  # The validation item.
    seen = {u: {i for _, i in v} for u, v in raw.items()}

    for split, held_out in (("test", latest), ("validation", before_latest)):
        ev = read_split(root, m.split(split), training=False)
        width = 1 + m.eval_negatives
        users = ev["user_id"].reshape(-1, width)
        items = ev["item_id"].reshape(-1, width)
        mask = ev["duplicate_mask"].reshape(-1, width)
        real = mask[:, -1] == 0
        assert real.sum() == m.num_users  # Every user once; padding users fully masked.
        assert (mask[~real] == 1).all()
        for urow, irow, mrow in zip(users[real], items[real], mask[real], strict=True):
            raw_u = int(user_vocab[urow[0]])
            assert (urow == urow[0]).all()
            assert int(item_vocab[irow[-1]]) == held_out[raw_u], split  # Positive last.
            negs = {int(item_vocab[i]) for i in irow[:-1][mrow[:-1] == 0]}
            # Nothing from before the split's item; the validation split may draw the test item.
            known = seen[raw_u] - ({latest[raw_u]} if split == "validation" else set())
            assert not negs & known

    expected = {(u, i) for u in raw for i in seen[u] if i not in (latest[u], before_latest[u])}
    held_out_drawn = 0
    for epoch in range(m.num_epochs):
        tr = read_split(root, m, training=True, epoch=epoch)
        valid = tr["valid_point_mask"] == 1
        assert valid.sum() == m.num_train_elements
        assert (tr["labels"][~valid] == 0).all()  # Padding is masked out and unlabeled.
        pos_pairs = {
            (int(user_vocab[u]), int(item_vocab[i]))
            for u, i in zip(
                tr["user_id"][valid & (tr["labels"] == 1)],
                tr["item_id"][valid & (tr["labels"] == 1)],
                strict=True,
            )
        }
        assert pos_pairs == expected  # Neither held-out item is a training positive.
        for u, i in zip(
            tr["user_id"][valid & (tr["labels"] == 0)],
            tr["item_id"][valid & (tr["labels"] == 0)],
            strict=True,
        ):
            raw_u, raw_i = int(user_vocab[u]), int(item_vocab[i])
            assert (raw_u, raw_i) not in expected  # Never a training positive ...
            held_out_drawn += raw_i in (latest[raw_u], before_latest[raw_u])
    assert held_out_drawn  # ... while a held-out item is drawn as any other item.


def test_epochs_differ_and_padding_sits_at_the_end(prepared):
    m, root = prepared.metadata, prepared.output_dir
    e0 = read_split(root, m, True, 0)
    e1 = read_split(root, m, True, 1)
    assert not np.array_equal(e0["item_id"], e1["item_id"])
    for f in m.train_files["epoch_000"]:
        recs = records.read_tfrecord_file(os.path.join(root, f.path))
        last = records.decode_example(recs[-1])["valid_point_mask"]
        pad = f.batches * m.train_prebatch_size - f.elements
        assert int((last == 0).sum()) == pad
        assert (last[len(last) - pad :] == 0).all()


def test_byte_identical_for_any_worker_count_and_rerun_is_reused(tmp_path, tiny_csv):
    a = prepare.prepare(_config(tiny_csv, tmp_path / "a", workers=1))
    b = prepare.prepare(_config(tiny_csv, tmp_path / "b", workers=2))
    ta, tb = tree_bytes(a.output_dir), tree_bytes(b.output_dir)
    ta.pop("metadata.json"), tb.pop("metadata.json")
    assert ta == tb
    assert a.metadata.fingerprint == b.metadata.fingerprint
    again = prepare.prepare(_config(tiny_csv, tmp_path / "a", workers=1))
    assert again.reused and again.metadata == a.metadata
    other_seed = prepare.prepare(_config(tiny_csv, tmp_path / "c", seed=1))
    first_eval = [r.metadata.eval_file_paths(str(r.output_dir))[0] for r in (other_seed, a)]
    assert [os.path.basename(p) for p in first_eval] == ["part-00000-of-00002.tfrecord"] * 2
    with open(first_eval[0], "rb") as x, open(first_eval[1], "rb") as y:
        assert x.read() != y.read()


def test_by_default_as_many_epochs_are_prepared_as_training_runs(tmp_path, tiny_csv):
    """num_epochs not set: one epoch of fresh negatives per epoch the training run will train,
    as training tells data prep (train_config.with_training_epochs, as the CLI and the
    component do)."""
    from training_core.training import presets
    from training_core.training.train_config import with_training_epochs

    def told(*args, **kw):
        return with_training_epochs(_config(*args, **kw))

    fixed = prepare.prepare(_config(tiny_csv, tmp_path / "a", num_epochs=3, workers=1))
    # The preset's epochs (tiny trains 3): the same dataset as 3 asked for, so it is reused.
    assert presets.PRESETS["tiny"].epochs == 3
    resolved = prepare.prepare(
        told(tiny_csv, tmp_path / "a", num_epochs=None, train_preset="tiny", workers=1)
    )
    assert resolved.reused and resolved.metadata == fixed.metadata
    assert set(resolved.metadata.train_files) == {"epoch_000", "epoch_001", "epoch_002"}
    # --train-epochs is what training runs whatever the preset's.
    two = prepare.prepare(
        told(tiny_csv, tmp_path / "b", num_epochs=None, train_preset="tiny", train_epochs=2)
    )
    assert two.metadata.num_epochs == two.metadata.options["num_epochs"] == 2
    # auto: the preset for the data's size, as training resolves it from the same count.
    auto = told(tiny_csv, tmp_path / "c", num_epochs=None)
    positives = fixed.metadata.num_train_positives
    assert auto.train_preset == presets.AUTO
    assert auto.resolved_epochs(positives) == presets.PRESETS["ml-100k"].epochs == 20
    assert auto.resolved_epochs(1_000_000) == presets.PRESETS["ml-1m"].epochs
    assert auto.resolved_epochs(19_000_000) == presets.PRESETS["ml-20m"].epochs
    # A dataset prepared for another training run is another dataset.
    with pytest.raises(FileExistsError, match="already holds a different prepared dataset"):
        prepare.prepare(
            told(tiny_csv, tmp_path / "a", num_epochs=None, train_preset="quick", workers=1)
        )


def test_folder_with_another_dataset_is_refused_unless_overwrite(tmp_path, tiny_csv):
    prepare.prepare(_config(tiny_csv, tmp_path / "d"))
    with pytest.raises(FileExistsError, match="different prepared dataset.*--overwrite"):
        prepare.prepare(_config(tiny_csv, tmp_path / "d", num_neg=2))
    res = prepare.prepare(_config(tiny_csv, tmp_path / "d", num_neg=2, overwrite=True))
    assert res.metadata.num_neg == 2 and not res.reused
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        prepare.prepare(_config(tiny_csv, foreign, overwrite=True))
    assert (foreign / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "values",
    [
        np.array([7, 3, 3, 9, 7, 100]),  # A narrow range: indexed through a table.
        np.array([5, -2, 5, 0]),  # Negative raw values are shifted into the table.
        np.array([10**12, 3, 10**12, 42, 3]),  # A wide range: hashed.
    ],
)
def test_factorize_matches_numpy_unique(values):
    vocab, codes = indexing._factorize(values)
    expected_vocab, expected_codes = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(vocab, expected_vocab)
    np.testing.assert_array_equal(codes, expected_codes)
    assert vocab.dtype == np.int64 and codes.dtype == np.int64


@pytest.mark.parametrize(
    "num_users,time_span,grouped",
    [
        (50, 20, False),  # Shuffled rows, many ties: a one-digit radix grouping, then timsort.
        (70_000, 1_000, False),  # User codes past 16 bits: a two-digit radix grouping.
        (50, 20, True),  # Rows grouped by user (MovieLens' files): timsort alone.
        (50, 2**60, False),  # A key that could overflow: lexsort.
    ],
)
def test_grouping_order_is_by_user_then_time_with_ties_in_file_order(num_users, time_span, grouped):
    rng = np.random.default_rng(0)
    users = rng.integers(0, num_users, 200_000)
    if grouped:
        users.sort()
    ts = rng.integers(0, time_span, len(users))
    expected = np.lexsort((np.arange(len(users)), ts, users))
    np.testing.assert_array_equal(indexing._stable_order(users, ts), expected)


def test_freed_memory_is_reused_within_prepare_and_glibc_defaults_come_back():
    """Within the block a large array comes from the heap (no fresh mapping to fault in);
    after it glibc maps large arrays again, as by default, for the rest of the process."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks "
            "keepcost".split()
        ]

    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("not glibc 2.33+: the block is a no-op there")
    libc.mallinfo2.restype = MallInfo2

    def new_mappings() -> int:
        before = libc.mallinfo2().hblks
        big = np.ones(1 << 23)  # 64 MB
        after = libc.mallinfo2().hblks
        del big
        return after - before

    assert new_mappings() == 1
    with prepare._reusing_freed_memory():
        assert new_mappings() == 0
    assert new_mappings() == 1


def test_min_ratings_duplicates_and_single_interaction_users(tmp_path, caplog):
    rows = ["user_id,item_id,timestamp"]
    for u in range(1, 6):  # Users 1..5 with 5 items each.
        rows += [f"{u},{i},{100 + i}" for i in range(1, 6)]
    rows += ["6,1,100", "6,2,101"]  # Two interactions: dropped by min_ratings=3.
    rows += ["7,3,100"]  # One interaction.
    rows += ["1,5,50"]  # Repeat of (1, 5), older: dropped, the later one is held out.
    rows += [f"8,{i},{200 + i}" for i in (1, 2, 3, 4, 6, 7)]  # Items 6 and 7 only from user 8.
    src = tmp_path / "events.csv"
    src.write_text("\n".join(rows) + "\n")
    caplog.set_level("INFO")
    res = prepare.prepare(_config(str(src), tmp_path / "o", min_ratings=3, eval_negatives=1))
    m = res.metadata
    assert m.num_users == 6 and m.num_items == 7
    assert m.source["users_below_min_ratings"] == 2
    assert m.source["duplicate_pairs_dropped"] == 1
    assert "repeated (user, item)" in caplog.text
    # With the filter off, the single-interaction user is dropped with a warning.
    res = prepare.prepare(_config(str(src), tmp_path / "p", min_ratings=0, eval_negatives=1))
    assert res.metadata.source["single_interaction_users"] == 1
    assert res.metadata.num_users == 7
    assert "single interaction" in caplog.text


def test_user_with_every_item_is_dropped(tmp_path, caplog):
    rows = ["user_id,item_id,timestamp"]
    rows += [f"1,{i},{i}" for i in (1, 2, 3, 4)] + ["2,1,1", "2,2,2", "3,3,1", "3,4,2"]
    src = tmp_path / "events.csv"
    src.write_text("\n".join(rows) + "\n")
    res = prepare.prepare(_config(str(src), tmp_path / "o", eval_negatives=1))
    assert res.metadata.num_users == 2 and res.metadata.num_items == 4
    assert res.metadata.source["users_with_every_item"] == 1
    assert "every item" in caplog.text


def test_data_where_every_user_has_every_item_says_so(tmp_path):
    rows = ["user_id,item_id,timestamp"] + [f"{u},{i},{i}" for u in (1, 2, 3) for i in (1, 2, 3)]
    src = tmp_path / "full.csv"
    src.write_text("\n".join(rows) + "\n")
    with pytest.raises(
        read_errors.DataError, match="every user left interacted with every item"
    ) as e:
        prepare.prepare(_config(str(src), tmp_path / "o", eval_negatives=1))
    assert "--min-ratings" not in str(e.value)
    assert not (tmp_path / "o").exists()


def test_more_training_negatives_than_unseen_items_warns_and_counts(tmp_path, caplog):
    rows = ["user_id,item_id,timestamp"]
    # User 1 trains on 6 of 10 items (the last two are held out): 4 items to draw from, the
    # held-out ones among them.
    rows += [f"1,{i},{i}" for i in range(1, 9)]
    rows += [f"{u},{i},{i}" for u in (2, 3) for i in range(u, u + 3)]
    rows += ["4,9,1", "4,10,2"]
    src = tmp_path / "events.csv"
    src.write_text("\n".join(rows) + "\n")
    caplog.set_level("WARNING")
    res = prepare.prepare(_config(str(src), tmp_path / "o", eval_negatives=1, num_neg=5))
    assert res.metadata.source["train_users_with_repeated_negatives"] == 1
    assert "1 users have fewer than 5 items they do not train on (--num-neg)" in caplog.text
    again = prepare.prepare(_config(str(src), tmp_path / "p", eval_negatives=1, num_neg=4))
    assert again.metadata.source["train_users_with_repeated_negatives"] == 0


def test_bad_options_and_too_many_negatives(tmp_path, tiny_csv):
    with pytest.raises(ValueError, match="--eval-negatives 5000 .* at most 299"):
        prepare.prepare(_config(tiny_csv, tmp_path / "x", eval_negatives=5000))
    with pytest.raises(ValueError, match="--num-neg"):
        prepare.prepare(_config(tiny_csv, tmp_path / "x", num_neg=-1))
    with pytest.raises(ValueError, match="--train-batch-size"):
        prepare.prepare(_config(tiny_csv, tmp_path / "x", train_batch_size=0))
    with pytest.raises(read_errors.DataError, match="lower --min-ratings"):
        prepare.prepare(_config(tiny_csv, tmp_path / "x", min_ratings=100_000))
    assert not (tmp_path / "x").exists()  # Nothing half-written for rejected runs.


def test_eval_batch_size_rounded_to_whole_users(tmp_path, tiny_csv, caplog):
    caplog.set_level("WARNING")
    res = prepare.prepare(_config(tiny_csv, tmp_path / "e", eval_batch_size=1000))
    assert res.metadata.eval_prebatch_size == 20 * 51
    assert "does not hold whole users" in caplog.text and "1020" in caplog.text


@pytest.mark.slow
def test_kill_mid_run_never_looks_complete_and_rerun_recovers(tmp_path, procs):
    cfg = synthetic.SyntheticConfig(
        num_users=20_000, num_items=3_000, num_interactions=1_500_000, seed=9
    )
    src = synthetic.write(synthetic.generate(cfg), str(tmp_path / "big.parquet"), "parquet")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "pipelines.cli",
        "prepare-data",
        "--input",
        src,
        "--output",
        str(out),
        "--num-epochs",
        "4",
        "--eval-negatives",
        "200",
        "--min-ratings",
        "0",
    ]
    proc = procs.popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # Own group.
    deadline = time.time() + 120
    while time.time() < deadline:
        written = list(out.glob("data-*/eval/*.tfrecord"))
        if written:
            break
        time.sleep(0.05)
    assert written, "the run wrote nothing in time"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "metadata.json").exists() and not (out / "_SUCCESS").exists()
    with pytest.raises(FileNotFoundError, match="no complete prepared dataset"):
        metadata.read_metadata(out)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "interrupted run" in done.stderr
    assert metadata.read_metadata(out).num_epochs == 4
    assert not list(out.glob("data-*/.beam-staging"))
    assert not [p for p in out.rglob("*") if atomic_writes.is_partial(p.name)]


# Digests of every record and vocab file prepared from one small synthetic set, per option set.
# A given seed must keep giving these bytes (a model trained on them must be reproducible from
# the raw data); a deliberate change of sampling or encoding changes them and must be versioned in
# metadata.json. Measured on 2026-12-03 when training negatives began to draw the held-out items
# (format version 2, docs/model-quality.md "What training may know") and recent positives began
# to repeat (--recency-boost 8, --recency-scale 20): the training records and the validation
# split's changed; the test split's did not (PINNED_TEST_BYTES, the same digests
# as the code before, at 3f8ddb6). Without a validation split (--no-validation):
PINNED_BYTES = {
    # 10 eval negatives of 40-74 never-seen items: draws with repeats redrawn (sparse regime).
    "sparse": "b80b985fcfd3ad52eff615859cc86d6bae0c1ae0658b4cb0ee5f5f09a3a7089e",
    # 45: a random permutation per user (dense), and users with too few items (filled, masked).
    "dense_and_short": "0a7f51e8ba2ac92ff1058805760c937041634dce5e64da9f36f82197aed0309d",
    # The reference's sampling with replacement.
    "reference": "056aa6246e132209becff5aa61e02bdc236ecae0d2f3cd315746cba085fd107d",
}
PINNED_FINGERPRINTS = {
    "sparse": "ea7acf1f7f21998f22fdb49fe8c0fa1321e53673baa37dab4f6d7a2ea882d7d6",
    "dense_and_short": "e7bc0bf39851723c8a70558f0c737ba3c113632803dd4a7baa22b6484604d28f",
    "reference": "1e372be1075f2c70f9d36ca56bd484f3a51ea31aefb2481d657b1dff88229376",
}
# With the validation split (the default).
PINNED_VALIDATION_BYTES = {
    "sparse": "76cfa508883c085487c553a6649d397397c48ed2d58f360988ceb36b954654ed",
    "dense_and_short": "fba66e4d57ffedf19e2c7e1a9deba1bc0ae62c391e1ea1a1d5557eab3c3093e6",
    "reference": "52e1febbfae5fb6ff3866baf577118abd45eb5d28743e7161251e68a19196cc1",
}
# The test split's records and the vocabularies alone (with the validation split): unchanged
# since before format version 2.
PINNED_TEST_BYTES = {
    "sparse": "c27ac9f790a7ceada9d2ae69ee798107235717547c772bd22180a41b8f42dd5d",
    "dense_and_short": "0d472fce3d75efd7856469141177fe3729a21aa38b8a8e76159acc713f0b0f65",
    "reference": "f3405e43e8e32a1a40721e0a99e52a36fb137974225921ca1b02e5bf26353038",
}
PINNED_OPTIONS = {
    "sparse": dict(eval_negatives=10),
    "dense_and_short": dict(eval_negatives=45),
    "reference": dict(eval_negatives=30, eval_sampling="reference"),
}


def _below_build(folder: str, keep) -> dict[str, bytes]:
    """Record and vocab files of a dataset folder whose path passes ``keep``, by path below the
    build folder (whose name differs between option sets)."""
    return {
        rel.split(os.sep, 1)[1]: data
        for rel, data in tree_bytes(folder).items()
        if (rel.endswith(records.RECORD_SUFFIX) or "vocab" in os.path.dirname(rel)) and keep(rel)
    }


def _digest(folder: str, keep=lambda rel: True) -> str:
    """sha256 over each record and vocab file's path (below the build folder) and bytes."""
    import hashlib

    h = hashlib.sha256()
    for rel, data in sorted(_below_build(folder, keep).items()):
        h.update(rel.encode())
        h.update(data)
    return h.hexdigest()


@pytest.mark.parametrize("case", sorted(PINNED_BYTES))
def test_record_bytes_stay_pinned_for_a_seed(tmp_path, case):
    cfg = synthetic.SyntheticConfig(
        num_users=60, num_items=80, num_interactions=2500, min_per_user=5, seed=1
    )
    src = str(tmp_path / "ratings.csv")
    synthetic.write(synthetic.generate(cfg), src, "csv")

    def run(name, **kw):
        return prepare.prepare(
            PrepareConfig(
                input_path=src,
                output_dir=str(tmp_path / name),
                min_ratings=0,
                num_epochs=2,
                train_batch_size=64,
                num_shards=2,
                workers=1,
                seed=3,
                **PINNED_OPTIONS[case],
                **kw,
            )
        )

    off, on = run("off", validation=False), run("on")
    if case == "dense_and_short":
        assert off.metadata.source["eval_users_with_duplicates"] > 0  # Fill and mask ran.
    assert _digest(off.output_dir) == PINNED_BYTES[case]
    assert off.metadata.fingerprint == PINNED_FINGERPRINTS[case]
    assert not off.metadata.has_validation and "validation" not in off.metadata.options
    assert not off.metadata.refit and "refit" not in on.metadata.options
    assert _digest(on.output_dir) == PINNED_VALIDATION_BYTES[case]
    assert on.metadata.fingerprint != off.metadata.fingerprint
    # The test split's records and the vocabularies do not depend on the validation split.
    not_trained = lambda rel: f"{os.sep}train{os.sep}" not in rel  # noqa: E731
    not_validation = lambda rel: f"{os.sep}{metadata.VALIDATION_DIR}{os.sep}" not in rel  # noqa: E731
    assert _below_build(on.output_dir, lambda r: not_trained(r) and not_validation(r)) == (
        _below_build(off.output_dir, not_trained)
    )
    test_split = lambda r: not_trained(r) and not_validation(r)  # noqa: E731
    assert _digest(on.output_dir, test_split) == PINNED_TEST_BYTES[case]
    assert any(f"{metadata.VALIDATION_DIR}/" in f.path for f in on.metadata.validation_files)


# Users by time: 1 has two interactions (no validation item), 2 has three (in file order unlike
# time order), 3 has four with a tie in time (ties: the later row is the later interaction).
SPLIT_ROWS = [
    "user_id,item_id,timestamp",
    "1,1,10",
    "1,2,5",
    "2,1,30",
    "2,2,10",
    "2,3,20",
    "3,4,1",
    "3,6,2",
    "3,5,2",
    "3,7,3",
]
# By raw user: the training positives, the validation item (None: none), the test item.
SPLIT_TRUTH = {1: ({2}, None, 1), 2: ({2}, 3, 1), 3: ({4, 6}, 5, 7)}


def _split_config(tmp_path, name, **kw):
    src = tmp_path / "events.csv"
    src.write_text("\n".join(SPLIT_ROWS) + "\n")
    kw.setdefault("num_epochs", 2)
    return _config(str(src), tmp_path / name, eval_negatives=2, num_neg=2, workers=1, **kw)


def _raw_positives(root, m, epoch):
    """Raw user id -> raw training items of one epoch's records."""
    users = np.loadtxt(os.path.join(root, m.user_vocab), dtype=np.int64)
    items = np.loadtxt(os.path.join(root, m.item_vocab), dtype=np.int64)
    tr = read_split(root, m, training=True, epoch=epoch)
    keep = (tr["labels"] == 1) & (tr["valid_point_mask"] == 1)
    out: dict[int, set[int]] = {}
    for u, i in zip(tr["user_id"][keep].tolist(), tr["item_id"][keep].tolist(), strict=True):
        out.setdefault(int(users[u]), set()).add(int(items[i]))
    return out


def _raw_held_out(root, m, split):
    """Raw user id -> raw held-out item of one split (positives.held_out_items on its view)."""
    from training_core.data import positives

    users = np.loadtxt(os.path.join(root, m.user_vocab), dtype=np.int64)
    items = np.loadtxt(os.path.join(root, m.item_vocab), dtype=np.int64)
    u, i = positives.held_out_items(m.split(split), root)
    return {int(users[a]): int(items[b]) for a, b in zip(u.tolist(), i.tolist(), strict=True)}


def test_validation_item_is_the_second_to_last_and_never_trained_on(tmp_path):
    """Users with 3+ interactions hold out their second-to-last as the validation item; users with
    2 have none and train on their first; the epochs are decided from the real positives."""
    import dataclasses

    from training_core.data import positives

    counted = []

    def epochs_for(preset, epochs, num_train_positives):
        counted.append(num_train_positives)
        return 2

    config = dataclasses.replace(
        _split_config(tmp_path, "on", num_epochs=None), epochs_for=epochs_for
    )
    res = prepare.prepare(config)
    m, root = res.metadata, res.output_dir
    assert counted == [m.num_train_positives] == [4] and m.num_epochs == 2
    for epoch in range(m.num_epochs):
        trained = _raw_positives(root, m, epoch)
        assert trained == {u: t[0] for u, t in SPLIT_TRUTH.items()}, epoch
    assert _raw_held_out(root, m, "validation") == {
        u: t[1] for u, t in SPLIT_TRUTH.items() if t[1] is not None
    }
    assert _raw_held_out(root, m, "test") == {u: t[2] for u, t in SPLIT_TRUTH.items()}
    assert (m.num_validation_users, m.num_eval_users) == (2, 3)
    assert m.num_validation_elements == 2 * 3 and m.num_eval_elements == 3 * 3
    # Every interaction is seen (what recommendations leave out), validation items included.
    splits, seen = positives.seen_items(m, root)
    items = np.loadtxt(os.path.join(root, m.item_vocab), dtype=np.int64)
    by_user = [set(items[seen[a:b]].tolist()) for a, b in zip(splits[:-1], splits[1:], strict=True)]
    assert by_user == [{1, 2}, {1, 2, 3}, {4, 5, 6, 7}]
    assert "validation: 2 users" in prep_result.summary(res)
    assert prep_result.artifact_metadata(res)["num_validation_users"] == 2


# By raw user: every interaction (SPLIT_ROWS), what a refit trains on.
EVERY_INTERACTION = {1: {1, 2}, 2: {1, 2, 3}, 3: {4, 5, 6, 7}}


@pytest.mark.parametrize("validation", [True, False], ids=["validation", "no-validation"])
def test_a_refit_trains_on_every_interaction_beside_the_same_vocabularies_and_splits(
    tmp_path, validation
):
    """--refit: every interaction, each user's last and second-to-last included, is a training
    positive in every epoch, and the epochs are decided from them; the vocabularies and the
    held-out splits' records are the same data's non-refit dataset's, byte for byte; metadata
    says it is a refit, and only a refit's options (fingerprint, build folder) say so."""
    import dataclasses

    from training_core.data import positives

    counted = []

    def epochs_for(preset, epochs, num_train_positives):
        counted.append(num_train_positives)
        return 2

    def run(name, **kw):
        config = _split_config(tmp_path, name, num_epochs=None, validation=validation, **kw)
        return prepare.prepare(dataclasses.replace(config, epochs_for=epochs_for))

    base = run("base")
    res = run("refit", refit=True)
    m, root, b = res.metadata, res.output_dir, base.metadata
    assert counted[-1] == m.num_train_positives == len(SPLIT_ROWS) - 1 and m.num_epochs == 2
    for epoch in range(m.num_epochs):
        assert _raw_positives(root, m, epoch) == EVERY_INTERACTION, epoch
    per_user = [len(items) for items in EVERY_INTERACTION.values()]
    assert m.num_train_elements == training_rows(per_user, m)  # Every interaction, by recency.
    # What says it is a refit: metadata (also as read back), options, fingerprint, build folder.
    assert m.refit and not m.held_out_unseen and metadata.read_metadata(root).refit
    assert not b.refit and b.held_out_unseen
    assert m.options == {**b.options, "refit": True} and "refit" not in b.options
    assert m.fingerprint != b.fingerprint
    assert m.user_vocab.split("/")[0] != b.user_vocab.split("/")[0]
    # The vocabularies and the held-out records (test, and validation if on): the same bytes.
    not_trained = lambda rel: f"{os.sep}train{os.sep}" not in rel  # noqa: E731
    held = _below_build(root, not_trained)
    assert held == _below_build(base.output_dir, not_trained)
    kinds = {rel.split(os.sep)[0] for rel in held}
    assert kinds == {metadata.EVAL_DIR, metadata.VOCAB_DIR} | (
        {metadata.VALIDATION_DIR} if validation else set()
    )
    assert (m.num_eval_users, m.num_validation_users, m.has_validation) == (
        b.num_eval_users,
        b.num_validation_users,
        b.has_validation,
    )
    assert _raw_held_out(root, m, "test") == {u: t[2] for u, t in SPLIT_TRUTH.items()}
    # Seen: every interaction, once.
    splits, seen = positives.seen_items(m, root)
    items = np.loadtxt(os.path.join(root, m.item_vocab), dtype=np.int64)
    by_user = [items[seen[a:z]].tolist() for a, z in zip(splits[:-1], splits[1:], strict=True)]
    assert [sorted(v) for v in EVERY_INTERACTION.values()] == [sorted(v) for v in by_user]
    assert "refit: every interaction" in prep_result.summary(res)
    assert "refit: every" not in prep_result.summary(base)
    assert prep_result.artifact_metadata(res)["refit"] is True
    assert run("refit", refit=True).reused


def test_no_validation_is_leave_one_out_and_old_metadata_reads(tmp_path):
    res = prepare.prepare(_split_config(tmp_path, "off", validation=False))
    m, root = res.metadata, res.output_dir
    trained = _raw_positives(root, m, 0)
    assert trained == {1: {2}, 2: {2, 3}, 3: {4, 5, 6}}  # Every interaction but the last.
    assert m.num_train_positives == 6 and not m.has_validation and m.selection_split == "test"
    build = os.path.join(root, m.user_vocab.split("/")[0])
    assert sorted(os.listdir(build)) == [metadata.EVAL_DIR, metadata.TRAIN_DIR, metadata.VOCAB_DIR]
    assert "validation: none" in prep_result.summary(res)
    # A metadata.json written before validation splits (without their fields) reads as this one.
    raw = json.loads(open(os.path.join(root, metadata.METADATA_FILE)).read())
    for field in (
        "validation_files",
        "num_validation_users",
        "num_validation_elements",
        "validation_steps",
        "refit",
    ):
        del raw[field]
    old = metadata.DatasetMetadata.from_dict(raw)
    assert old == m and not old.has_validation and not old.refit and old.held_out_unseen
    with pytest.raises(ValueError, match="no validation split"):
        old.split("validation")
