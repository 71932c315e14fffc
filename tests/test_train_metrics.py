import numpy as np
import pytest
import tensorflow as tf
from ncf_numpy import ranking_reference

from training_core.evaluation import metrics


def _tf(scores, dup, k):
    h, d, u = metrics.ranking_sums(tf.constant(scores), tf.constant(dup), k)
    return int(h), float(d), int(u)


def test_hand_made_table_ties_duplicates_and_padding():
    # 4 users x (3 negatives + positive last).
    scores = np.array(
        [
            [0.1, 0.2, 0.3, 0.9],  # positive on top: rank 0
            [0.5, 0.9, 0.1, 0.5],  # one tie + one higher: rank 2 (ties count against)
            [0.9, 0.8, 0.7, 0.1],  # all higher, but two are duplicates: rank 1
            [0.9, 0.9, 0.9, 0.9],  # positive masked: padding user, not evaluated
        ],
        dtype=np.float32,
    )
    dup = np.array([[0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1]], dtype=np.int64)
    h, d, u = _tf(scores.reshape(-1, 1), dup.reshape(-1, 1), 4)
    assert (h, u) == (3, 3)
    assert d == pytest.approx(1.0 + 1 / np.log2(4) + 1 / np.log2(3), rel=1e-6)
    # With k=2, the rank-2 user is no hit.
    h2, d2, _ = (
        int(x) if i != 1 else float(x)
        for i, x in enumerate(metrics.ranking_sums(scores, dup, 4, k=2))
    )
    assert h2 == 2 and d2 == pytest.approx(1.0 + 1 / np.log2(3), rel=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_numpy_on_random_tables_with_many_ties(seed):
    rng = np.random.default_rng(seed)
    k = 21
    users = 64
    scores = rng.integers(0, 6, size=users * k).astype(np.float32)  # Coarse: lots of ties.
    dup = (rng.random(users * k) < 0.15).astype(np.int64)
    got = _tf(scores, dup, k)
    want = ranking_reference(scores, dup, k)
    assert got[0] == want[0] and got[2] == want[2]
    assert got[1] == pytest.approx(want[1], rel=1e-5)
    assert 0 < got[0] < got[2]  # The table exercises both hits and misses.


def test_ranking_metrics_add_and_ratios():
    a = metrics.RankingMetrics(3, 1.5, 4) + metrics.RankingMetrics(1, 0.5, 4)
    assert (a.hr, a.ndcg) == (0.5, 0.25)
    assert metrics.RankingMetrics(0, 0.0, 0).hr == 0.0
