"""Full-catalog HR@10/NDCG@10: against NumPy from the raw ratings, the cap, the exclusion of
training items (and of the validation item when ranking the test split), a pair of models the
sampled and the full-catalog metrics order differently, and users split over two replicas."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, WORKER, communicate, read_split
from ncf_numpy import (
    full_catalog_reference,
    interactions_in_time_order,
    leave_one_out_from_raw,
    neumf_scores,
)

from training_core.common import console
from training_core.data import positives
from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION, read_metadata
from training_core.evaluation import baselines, eval_config, full_catalog, metrics
from training_core.evaluation.evaluate import evaluate, load_model, run_eval


class TableScorer(tf.Module):
    """A scorer with NeuMF's interface that looks each (user, item) score up in a table."""

    def __init__(self, table: np.ndarray):
        super().__init__(name="table")
        self.num_users, self.num_items = table.shape
        self.table = tf.constant(table, tf.float32)

    def score(self, user_ids, item_ids, compute_dtype=tf.float32):
        del compute_dtype
        pairs = tf.stack([tf.reshape(user_ids, [-1]), tf.reshape(item_ids, [-1])], axis=1)
        found = tf.gather_nd(self.table, tf.cast(pairs, tf.int64))
        return tf.reshape(found, tf.shape(user_ids))

    def item_side(self, compute_dtype=tf.float32):
        del compute_dtype
        return {}

    def score_grid(self, user_ids, items, compute_dtype=tf.float32):
        return self.score_candidates(user_ids, items, None, compute_dtype)

    def score_candidates(self, user_ids, items, item_ids=None, compute_dtype=tf.float32):
        del items, compute_dtype
        rows = tf.gather(self.table, tf.reshape(tf.cast(user_ids, tf.int64), [-1]))
        return rows if item_ids is None else tf.gather(rows, item_ids, batch_dims=1)


@pytest.fixture
def model_dir(tiny_model):
    """The session's tiny model (read-only)."""
    return tiny_model.model_dir


@pytest.fixture(scope="module")
def raw(tiny_data, tiny_csv):
    """Earlier items and held-out item per user, from the raw CSV (not from the records)."""
    meta = read_metadata(tiny_data)
    assert meta.source["path"] == tiny_csv and meta.options["min_ratings"] == 0
    return leave_one_out_from_raw(tiny_csv)


def second_to_last_from_raw(csv_path: str) -> np.ndarray:
    """Each user's second-to-last item index by time (-1: fewer than 3 items), from the CSV.

    The validation item as prepare-data documents it (a repeated pair keeps its latest row;
    ties in time: the later row), read with pandas apart from the records.
    """
    raw, users, items = interactions_in_time_order(csv_path)
    out = np.full(len(users), -1, np.int64)
    for user, group in raw.groupby("user_id"):
        if len(group) >= 3:
            out[np.searchsorted(users, user)] = np.searchsorted(items, group["item_id"].iloc[-2])
    return out


@pytest.fixture(scope="module")
def trained_items(tiny_data, tiny_csv, raw):
    """Each user's training items from the raw CSV: the earlier ones, less the validation item
    where the dataset holds a validation split."""
    seen, _ = raw
    if not read_metadata(tiny_data).has_validation:
        return seen
    validation = second_to_last_from_raw(tiny_csv)
    return [items - {int(v)} for items, v in zip(seen, validation, strict=True)]


def _full(scorer, tiny_data, max_users=0):
    meta = read_metadata(tiny_data)
    return full_catalog.FullCatalogEval(
        scorer, tf.distribute.get_strategy(), meta, tiny_data, max_users
    )()


def _sampled(scorer, tiny_data):
    meta = read_metadata(tiny_data)
    return run_eval(scorer, tf.distribute.get_strategy(), meta, tiny_data)


# --- the per-batch sums ---------------------------------------------------------------------


def test_sums_on_a_hand_made_table():
    scores = np.array(
        [
            [0.9, 0.1, 0.5, 0.2, 0.3, 0.0],  # positive item 2; item 0 above it is a training item
            [0.4, 0.4, 0.1, 0.9, 0.2, 0.8],  # positive item 0: one tie (1) and two above (3, 5)
            [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],  # padding user: never counts
        ],
        np.float32,
    )
    excluded = np.zeros_like(scores, bool)
    excluded[0, 0] = True
    excluded[1, 2] = True  # Below the positive: no effect.
    h, d, u = metrics.full_catalog_sums(
        scores, excluded, np.array([2, 0, 5]), np.array([True, True, False])
    )
    assert (int(h), int(u)) == (2, 2)
    assert float(d) == pytest.approx(1.0 + 1 / np.log2(3 + 2), rel=1e-6)
    # With k = 3 the rank-3 user misses; without the exclusion user 0 would rank 1.
    h3, d3, _ = metrics.full_catalog_sums(scores, excluded, [2, 0, 5], [True, True, False], k=3)
    assert int(h3) == 1 and float(d3) == pytest.approx(1.0)
    _, d_all, _ = metrics.full_catalog_sums(scores, excluded & False, [2, 0, 5], [1, 1, 0])
    assert float(d_all) == pytest.approx(1 / np.log2(3) + 1 / np.log2(5), rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_sums_match_numpy_on_random_tables_with_many_ties(seed):
    rng = np.random.default_rng(seed)
    users, items = 48, 40
    scores = rng.integers(0, 8, size=(users, items)).astype(np.float32)  # Coarse: many ties.
    excluded = rng.random((users, items)) < 0.3
    held_out = rng.integers(0, items, users)
    excluded[np.arange(users), held_out] = False
    seen = [set(np.flatnonzero(row).tolist()) for row in excluded]
    h, d, u = metrics.full_catalog_sums(scores, excluded, held_out, np.ones(users, bool))
    want = full_catalog_reference(scores, seen, held_out)
    assert (int(h), int(u)) == (want[0], want[2]) and 0 < want[0] < users
    assert float(d) == pytest.approx(want[1], rel=1e-5)


# --- against the raw data -------------------------------------------------------------------


def test_the_users_positives_read_back_are_the_raw_data_s(tiny_data, raw, trained_items):
    seen, held_out = raw
    meta = read_metadata(tiny_data)
    users, items = positives.held_out_items(meta, tiny_data)
    np.testing.assert_array_equal(users, np.arange(meta.num_users))
    np.testing.assert_array_equal(items, held_out)
    splits, trained = positives.training_positives(meta, tiny_data)
    assert [set(trained[splits[u] : splits[u + 1]].tolist()) for u in users] == trained_items
    # What the test split's ranking leaves out: every earlier interaction, validation included.
    splits, excluded = full_catalog.excluded_items(meta, tiny_data, SPLIT_TEST)
    assert [set(excluded[splits[u] : splits[u + 1]].tolist()) for u in users] == seen


@pytest.mark.slow
def test_evaluate_matches_numpy_over_every_user(model_dir, tiny_data, raw):
    """evaluate's full-catalog metrics equal NumPy's: scores from the weights, sets from the CSV."""
    seen, held_out = raw
    result = evaluate(tiny_data, model_dir, options=eval_config.EvalOptions(full_catalog_users=0))
    model, _, _ = load_model(model_dir, tf.distribute.get_strategy())
    scores = neumf_scores(model)
    # The comparison below is exact where no candidate's score is within the float32 noise of
    # TensorFlow's scores (measured here on the whole grid) of its positive's.
    grid = np.meshgrid(np.arange(len(held_out)), np.arange(scores.shape[1]), indexing="ij")
    noise = np.abs(model.score(*(tf.constant(g) for g in grid)).numpy() - scores).max()
    gaps = [
        np.abs(np.delete(s, [h, *e]) - s[h]).min()
        for s, e, h in zip(scores, seen, held_out, strict=True)
    ]
    assert noise < 1e-5 and min(gaps) > 2 * noise
    hits, ndcg, users = full_catalog_reference(scores, seen, held_out)
    assert (result.full_catalog_users, result.full_catalog_capped) == (users, False)
    assert round(result.full_catalog_hr_at_10 * users) == hits
    assert result.full_catalog_hr_at_10 == pytest.approx(hits / users, abs=1e-12)
    assert result.full_catalog_ndcg_at_10 == pytest.approx(ndcg / users, rel=1e-5)
    assert result.full_catalog_recall_at_10 == result.full_catalog_hr_at_10
    # Ranked against ~200 candidates instead of 99, the same model scores lower.
    assert 0 < result.full_catalog_hr_at_10 < result.hr_at_10


def test_evaluate_ranks_the_popularity_baseline_beside_the_model(
    model_dir, tiny_data, raw, trained_items
):
    """The baseline's full-catalog metrics equal NumPy's from the raw CSV's training counts; its
    sampled ones equal ``baselines.popularity`` through ``run_eval``; ``beats_popularity``
    compares."""
    seen, held_out = raw
    result = evaluate(tiny_data, model_dir, options=eval_config.EvalOptions(full_catalog_users=0))
    counts = np.zeros(max(max(s, default=0) for s in seen) + 1, np.float64)
    for items in trained_items:
        counts[list(items)] += 1
    num_items = read_metadata(tiny_data).num_items
    counts = np.pad(counts, (0, num_items - len(counts)))
    hits, ndcg, users = full_catalog_reference(np.tile(counts, (len(held_out), 1)), seen, held_out)
    assert result.popularity_full_catalog_hr_at_10 == pytest.approx(hits / users, abs=1e-12)
    assert result.popularity_full_catalog_ndcg_at_10 == pytest.approx(ndcg / users, rel=1e-5)
    sampled = _sampled(baselines.popularity(read_metadata(tiny_data), tiny_data), tiny_data)
    assert (result.popularity_hr_at_10, result.popularity_ndcg_at_10) == pytest.approx(
        (sampled.hr, sampled.ndcg)
    )
    assert 0 < result.popularity_hr_at_10 < 1
    assert result.beats_popularity == (result.hr_at_10 > result.popularity_hr_at_10)
    assert json.loads(json.dumps(result.to_dict()))["beats_popularity"] is result.beats_popularity


@pytest.mark.slow
def test_the_cap_is_honoured_and_stated(model_dir, tiny_data, raw):
    seen, held_out = raw
    result = evaluate(tiny_data, model_dir, options=eval_config.EvalOptions(full_catalog_users=50))
    assert (result.full_catalog_users, result.full_catalog_capped) == (50, True)
    assert json.loads(json.dumps(result.to_dict()))["full_catalog_capped"] is True

    model, _, _ = load_model(model_dir, tf.distribute.get_strategy())
    keep = full_catalog.select_users(np.arange(len(held_out)), 50)
    hits, ndcg, _ = full_catalog_reference(
        neumf_scores(model)[keep], [seen[u] for u in keep], held_out[keep]
    )
    assert result.full_catalog_hr_at_10 == pytest.approx(hits / 50, abs=1e-12)
    assert result.full_catalog_ndcg_at_10 == pytest.approx(ndcg / 50, rel=1e-5)

    got = _full(model, tiny_data, max_users=50)
    assert (got.metrics.users, got.users_with_held_out, got.capped) == (50, 200, True)
    assert got.users_text == "a fixed-seed sample of 50 of 200 users"
    everyone = _full(model, tiny_data, max_users=10_000)
    assert (everyone.metrics.users, everyone.capped) == (200, False)
    # A smaller cap keeps users of a larger one: the training curve's are among evaluate's.
    small, large = (set(full_catalog.select_users(np.arange(10_000), n)) for n in (100, 1000))
    assert small < large and len(small) == 100


def test_a_negative_cap_is_refused_naming_the_option():
    with pytest.raises(ValueError, match=r"--full-catalog-users must be >= 0 \(0: every user\)"):
        eval_config.eval_options(full_catalog_users=-1)
    assert eval_config.eval_options(full_catalog_users=None) == eval_config.EvalOptions()


# --- what the metric measures ---------------------------------------------------------------


def test_training_items_scoring_highest_do_not_count_against_the_held_out_item(tiny_data, raw):
    seen, held_out = raw
    rng = np.random.default_rng(0)
    table = rng.random((len(held_out), read_metadata(tiny_data).num_items))
    for u, items in enumerate(seen):
        table[u, list(items)] = 10.0 + rng.random(len(items))  # Above everything else.
        table[u, held_out[u]] = 5.0
    got = _full(TableScorer(table), tiny_data)
    assert (got.metrics.hits, got.metrics.users) == (200, 200)
    assert got.metrics.ndcg == pytest.approx(1.0)


def test_sampled_and_full_catalog_metrics_order_two_models_differently(tiny_data, raw):
    """Krichene & Rendle's point, built on purpose: each protocol prefers another model.

    ``gamer`` ranks the held-out item above the user's sampled negatives but below every other
    unseen item: perfect on the sampled metrics, a miss for every user on the full catalog.
    ``honest`` ranks it 4th among all candidates, 3 of them sampled negatives: 4th either way.
    """
    seen, held_out = raw
    meta = read_metadata(tiny_data)
    ev = read_split(tiny_data, meta, training=False)
    k = 1 + meta.eval_negatives
    users = ev["user_id"].reshape(-1, k)[:, -1]
    negatives = ev["item_id"].reshape(-1, k)[:, :-1]
    counted = ev["duplicate_mask"].reshape(-1, k)[:, :-1] == 0
    real = ev["duplicate_mask"].reshape(-1, k)[:, -1] == 0

    rng = np.random.default_rng(1)
    gamer = np.full((meta.num_users, meta.num_items), 2.0) + rng.random((1, meta.num_items))
    honest = rng.random((meta.num_users, meta.num_items))
    for u, negs, ok in zip(users[real], negatives[real], counted[real], strict=True):
        gamer[u, negs] = 0.0
        gamer[u, held_out[u]] = 1.0
        honest[u, held_out[u]] = 2.0
        honest[u, negs[ok][:3]] = 3.0
    sampled = {
        name: _sampled(TableScorer(t), tiny_data)
        for name, t in [("gamer", gamer), ("honest", honest)]
    }
    full = {
        name: _full(TableScorer(t), tiny_data).metrics
        for name, t in [("gamer", gamer), ("honest", honest)]
    }
    rank3 = 1 / np.log2(3 + 2)
    assert (sampled["gamer"].hr, sampled["gamer"].ndcg) == (1.0, pytest.approx(1.0))
    assert (sampled["honest"].hr, sampled["honest"].ndcg) == (1.0, pytest.approx(rank3))
    assert (full["gamer"].hr, full["gamer"].ndcg) == (0.0, 0.0)
    assert (full["honest"].hr, full["honest"].ndcg) == (1.0, pytest.approx(rank3))
    assert sampled["gamer"].ndcg > sampled["honest"].ndcg
    assert full["gamer"].ndcg < full["honest"].ndcg


# --- strategies and entry points ------------------------------------------------------------


@pytest.mark.slow
def test_mirrored_replicas_split_the_users_and_agree_with_one_device(
    model_dir, tiny_data, tmp_path, procs
):
    """``ncf-pipelines evaluate --strategy mirrored`` over 2 CPU devices, in a fresh process."""
    out = tmp_path / "eval.json"
    env = dict(os.environ, NCF_TEST_CPU_DEVICES="2")
    env.pop("TF_CONFIG", None)
    args = ["evaluate", "--data", tiny_data, "--model-dir", model_dir, "--strategy", "mirrored"]
    proc = procs.popen(
        [sys.executable, WORKER, *args, "--full-catalog-users", "101", "--metrics-out", str(out)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = communicate(proc, 300)
    assert proc.returncode == 0, log[-4000:]
    mirrored = json.loads(out.read_text())
    one = evaluate(tiny_data, model_dir, options=eval_config.EvalOptions(full_catalog_users=101))
    assert (mirrored["full_catalog_users"], mirrored["full_catalog_capped"]) == (101, True)
    assert mirrored["full_catalog_hr_at_10"] == pytest.approx(one.full_catalog_hr_at_10)
    assert mirrored["full_catalog_ndcg_at_10"] == pytest.approx(one.full_catalog_ndcg_at_10)
    assert mirrored["hr_at_10"] == pytest.approx(one.hr_at_10)
    assert mirrored["popularity_hr_at_10"] == pytest.approx(one.popularity_hr_at_10)
    assert mirrored["popularity_full_catalog_hr_at_10"] == pytest.approx(
        one.popularity_full_catalog_hr_at_10
    )


def test_the_training_curve_records_full_catalog_metrics(model_dir):
    from training_core.training.model_dir import history_files

    path = max(history_files(model_dir).items())[1]
    with open(path) as f:
        epochs = json.load(f)["epochs"]
    assert [e["full_catalog_users"] for e in epochs] == [200, 200]  # Under the curve's cap.
    assert all(0 < e["full_catalog_hr_at_10"] < e["hr_at_10"] for e in epochs)


def test_a_long_ranking_reports_progress_and_the_chunks_sum_to_the_whole(
    tiny_data, raw, monkeypatch, capsys
):
    """Progress comes between compiled chunks of steps; chunking does not change the metrics."""
    seen, held_out = raw
    table = np.random.default_rng(3).random((len(held_out), read_metadata(tiny_data).num_items))
    meta = read_metadata(tiny_data)
    strategy = tf.distribute.get_strategy()
    whole = full_catalog.FullCatalogEval(TableScorer(table), strategy, meta, tiny_data, 0)()
    # 3 users per step: ceil(200 / 3) = 67 steps, 9 chunks of at most STEPS_PER_REPORT steps.
    pairs = 3 * meta.num_items
    monkeypatch.setenv(console.PROGRESS_ENV, console.PROGRESS_EVENTS)
    monkeypatch.setattr(console, "EVENT_INTERVAL_S", 0.0)
    capsys.readouterr()
    chunked = full_catalog.FullCatalogEval(
        TableScorer(table), strategy, meta, tiny_data, 0, pairs_per_step=pairs
    )(show_progress=True)
    events = [console.parse_event(line) for line in capsys.readouterr().out.splitlines()]
    done = [e.done for e in events if e is not None and e.what == "full-catalog ranking"]
    per_chunk = 3 * full_catalog.STEPS_PER_REPORT
    assert done[0] == 0 and done[-1] == 200
    assert sorted(set(done)) == [0, *range(per_chunk, 200, per_chunk), 200]
    assert (chunked.metrics.hits, chunked.metrics.users) == (whole.metrics.hits, 200)
    assert chunked.metrics.ndcg == pytest.approx(whole.metrics.ndcg, rel=1e-6)
    # Without show_progress (the training loop's curve) nothing is reported.
    full_catalog.FullCatalogEval(TableScorer(table), strategy, meta, tiny_data, 0)()
    assert console.EVENT_PREFIX not in capsys.readouterr().out


# --- which items each split leaves out ------------------------------------------------------


def test_the_test_split_leaves_the_validation_item_out_the_validation_split_keeps_the_test_item(
    tiny_data,
):
    """Ranking the test item, the validation item (an earlier interaction) is no candidate;
    ranking the validation item, the test item (a later one) is. Each split against NumPy."""
    meta = read_metadata(tiny_data)
    strategy = tf.distribute.get_strategy()
    users, test_items = positives.held_out_items(meta, tiny_data)
    val_users, val_items = positives.held_out_items(meta.split(SPLIT_VALIDATION), tiny_data)
    np.testing.assert_array_equal(users, np.arange(meta.num_users))
    assert len(val_users) > 100 and (val_items != test_items[val_users]).all()

    def ranked(table, split):
        scorer = TableScorer(table)
        return full_catalog.FullCatalogEval(scorer, strategy, meta, tiny_data, 0, split=split)()

    table = np.random.default_rng(5).random((meta.num_users, meta.num_items))
    # The validation item above the test item for every user: it must not count against it.
    above = table.copy()
    above[val_users, val_items], above[users, test_items] = 3.0, 2.0
    got = ranked(above, SPLIT_TEST).metrics
    assert (got.hits, got.users) == (meta.num_users, meta.num_users)
    assert got.ndcg == pytest.approx(1.0)
    # The test item above the validation item: a candidate, it ranks first, the validation second.
    later = table.copy()
    later[users, test_items], later[val_users, val_items] = 3.0, 2.0
    got = ranked(later, SPLIT_VALIDATION).metrics
    assert (got.hits, got.users) == (len(val_users), len(val_users))
    assert got.ndcg == pytest.approx(1 / np.log2(3))
    # And on random scores, each equals NumPy with its own excluded sets.
    splits, trained = positives.training_positives(meta, tiny_data)
    train_sets = [set(trained[splits[u] : splits[u + 1]].tolist()) for u in users]
    earlier = [set(s) for s in train_sets]
    for u, item in zip(val_users, val_items, strict=True):
        earlier[u].add(int(item))
    for split, seen, who, held_out in (
        (SPLIT_TEST, earlier, users, test_items),
        (SPLIT_VALIDATION, train_sets, val_users, val_items),
    ):
        got = ranked(table, split).metrics
        hits, ndcg, n = full_catalog_reference(table[who], [seen[u] for u in who], held_out)
        assert (got.hits, got.users) == (hits, n), split
        assert got.ndcg == pytest.approx(ndcg / n, rel=1e-5), split


def test_without_a_validation_split_the_test_split_leaves_out_the_training_items_only(
    tiny_data_without_validation,
):
    meta = read_metadata(tiny_data_without_validation)
    assert not meta.has_validation
    trained = positives.training_positives(meta, tiny_data_without_validation)
    excluded = full_catalog.excluded_items(meta, tiny_data_without_validation, SPLIT_TEST)
    for a, b in zip(trained, excluded, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="has no validation split"):
        full_catalog.FullCatalogEval(
            None,
            tf.distribute.get_strategy(),
            meta,
            tiny_data_without_validation,
            0,
            split=SPLIT_VALIDATION,
        )
