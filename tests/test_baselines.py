"""EASE (``baselines.Ease``) against a NumPy EASE written from Steck's paper, and its lambda
chosen on the validation split, never on the test split."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from conftest import read_split

from training_core.data import positives
from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION, read_metadata
from training_core.evaluation import baselines
from training_core.evaluation import evaluate as ev


def _numpy_ease(x: np.ndarray, lam: float) -> np.ndarray:
    """B = I - P diagMat(1 / diag(P)), P = (X^T X + lam I)^-1 (Steck 2019, eq. 8)."""
    p = np.linalg.inv(x.T @ x + lam * np.eye(x.shape[1]))
    return np.eye(x.shape[1]) - p / np.diag(p)[None, :]


def _numpy_hr(scores: np.ndarray, mask: np.ndarray) -> float:
    """HR@10 of the last candidate per row against the unmasked others (ties against it)."""
    better = ((scores[:, :-1] >= scores[:, -1:]) & (mask[:, :-1] == 0)).sum(axis=1)
    counted = mask[:, -1] == 0
    return float((better[counted] < 10).mean())


@pytest.fixture(scope="module")
def trained(tiny_data):
    meta = read_metadata(tiny_data)
    splits, items = positives.training_positives(meta, tiny_data)
    x = np.zeros((meta.num_users, meta.num_items))
    x[np.repeat(np.arange(meta.num_users), np.diff(splits)), items] = 1.0
    return meta, splits, items, x


def test_ease_scores_as_the_paper_writes_it(trained):
    meta, splits, items, x = trained
    lam = 50.0
    ease = baselines.Ease(
        splits,
        items,
        baselines.ease_weights(baselines.gram(splits, items, meta.num_items), lam),
        lam,
    )
    want = x @ _numpy_ease(x, lam)
    users = np.arange(0, meta.num_users, 7)
    grid = ease.score_grid(tf.constant(users), ease.item_side()).numpy()
    np.testing.assert_allclose(grid, want[users], rtol=2e-4, atol=2e-5)
    rng = np.random.default_rng(0)
    u, i = rng.integers(0, meta.num_users, 50), rng.integers(0, meta.num_items, 50)
    pairs = ease.score(tf.constant(u), tf.constant(i)).numpy()
    np.testing.assert_allclose(pairs, want[u, i], rtol=2e-4, atol=2e-5)


def test_evaluate_chooses_eases_lambda_on_validation_and_ranks_it_on_test(
    tiny_data, tiny_model, trained
):
    meta, _, _, x = trained
    width = 1 + meta.eval_negatives
    hr = {}
    for split in (SPLIT_VALIDATION, SPLIT_TEST):
        ev_rows = read_split(tiny_data, meta.split(split), training=False)
        users = ev_rows["user_id"].reshape(-1, width)[:, 0]
        cand = ev_rows["item_id"].reshape(-1, width)
        mask = ev_rows["duplicate_mask"].reshape(-1, width)
        for lam in baselines.EASE_LAMBDAS:
            scores = (x @ _numpy_ease(x, lam))[users[:, None], cand]
            hr[split, lam] = _numpy_hr(scores, mask)
    best = max(
        baselines.EASE_LAMBDAS,
        key=lambda lam: (hr[SPLIT_VALIDATION, lam], -baselines.EASE_LAMBDAS.index(lam)),
    )
    result = ev.evaluate(tiny_data, tiny_model.model_dir)
    assert result.ease_lambda == result.validation.ease_lambda == best
    assert result.validation.ease_hr_at_10 == pytest.approx(hr[SPLIT_VALIDATION, best], abs=1e-9)
    assert result.ease_hr_at_10 == pytest.approx(hr[SPLIT_TEST, best], abs=1e-9)
    assert result.beats_ease == (result.hr_at_10 > result.ease_hr_at_10)


def test_ease_is_skipped_with_a_line_above_its_item_limit():
    assert baselines.ease_skipped(baselines.EASE_MAX_ITEMS) is None
    why = baselines.ease_skipped(26_744)
    assert "EASE skipped" in why and "26,744" in why and "EASE_MAX_ITEMS" in why
