"""What training may know (docs/model-quality.md): no held-out item shapes the training rows.

Two checks that the leak of issue 52 fails and an honest pipeline passes, on both data prep
engines:

- statistical: each user's held-out items (test and validation) are drawn as training negatives
  at the rate of any other item the user does not train on. The leaky sampler never drew them
  (rate 0); here the ratio of observed to expected draws must be within ``RATE_BOUND`` of 1.
- a canary: each user's last two interactions are items drawn at random from those the user
  never touched, so no model can predict them from the training data: the positive is
  exchangeable with its sampled negatives and an honest pipeline's HR@10 is chance (10 in 100
  candidates). The leaky pipeline scored 0.23 on this set (measured at 3f8ddb6), an honest one
  about 0.08-0.10.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import read_split, tree_bytes

from training_core.data import io as rio
from training_core.data import prepare, prepare_beam, synthetic
from training_core.data.config import PrepareConfig
from training_core.data.metadata import read_metadata

IN_PROCESS = ("--direct_num_workers=1",)
# Observed / expected held-out draws; the expected count is about 900 (Poisson sd about 3%).
RATE_BOUND = 0.15
CANARY_USERS, CANARY_NEGATIVES = 400, 99
CHANCE = 10 / (1 + CANARY_NEGATIVES)
# Chance plus 4 binomial standard deviations over the canary's users.
CANARY_BOUND = CHANCE + 4 * (CHANCE * (1 - CHANCE) / CANARY_USERS) ** 0.5


def _engines(src: str, out, **options) -> str:
    """Prepares ``src`` with both engines, holds them byte-identical; the Beam one's folder."""
    config = lambda name: PrepareConfig(input_path=src, output_dir=str(out / name), **options)  # noqa: E731
    prepare.prepare(config("numpy"))
    prepare_beam.prepare_beam(config("beam"), prepare_beam.BeamConfig(IN_PROCESS, 1 << 16, None))
    assert tree_bytes(str(out / "numpy")) == tree_bytes(str(out / "beam"))
    return str(out / "beam")


def _write(data: rio.Interactions, path) -> str:
    with open(path, "w") as f:
        f.write("user_id,item_id,timestamp\n")
        for u, i, t in zip(data.users, data.items, data.timestamps, strict=True):
            f.write(f"{u},{i},{t}\n")
    return str(path)


def test_held_out_items_are_drawn_as_training_negatives_at_the_rate_of_any_other(tmp_path):
    data = synthetic.generate(
        synthetic.SyntheticConfig(num_users=200, num_items=150, num_interactions=4000, seed=2)
    )
    root = _engines(
        _write(data, tmp_path / "r.csv"), tmp_path, min_ratings=0, num_epochs=4,
        eval_negatives=20, train_batch_size=256, num_shards=3, workers=1,
    )  # fmt: skip
    m = read_metadata(root)
    n = m.num_items
    positives = set()
    for epoch in range(m.num_epochs):
        tr = read_split(root, m, training=True, epoch=epoch)
        real = (tr["valid_point_mask"] == 1) & (tr["labels"] == 1)
        positives |= set((tr["user_id"][real] * n + tr["item_id"][real]).tolist())
    held_out = set()
    for split in ("test", "validation"):
        ev = read_split(root, m.split(split), training=False)
        width = 1 + m.eval_negatives
        last = ev["duplicate_mask"].reshape(-1, width)[:, -1] == 0
        users = ev["user_id"].reshape(-1, width)[last, -1]
        items = ev["item_id"].reshape(-1, width)[last, -1]
        held_out |= set((users * n + items).tolist())
    assert len(held_out) > 300 and not held_out & positives
    trained = np.bincount(np.fromiter(positives, np.int64) // n, minlength=m.num_users)
    # Per user and epoch, each item not trained on is drawn (the user's negatives that epoch) /
    # (n - trained) times on average: negatives are uniform over those items.
    negatives = np.zeros(m.num_users)
    for epoch in range(m.num_epochs):
        tr = read_split(root, m, training=True, epoch=epoch)
        neg = (tr["valid_point_mask"] == 1) & (tr["labels"] == 0)
        negatives += np.bincount(tr["user_id"][neg], minlength=m.num_users)
    per_item = negatives / m.num_epochs / (n - trained)
    held_users = np.fromiter(held_out, np.int64) // n
    held_per_user = np.bincount(held_users, minlength=m.num_users)
    expected = {
        "held-out": m.num_epochs * float(per_item[held_users].sum()),
        "other": m.num_epochs * float((per_item * (n - trained - held_per_user)).sum()),
    }
    drawn = {"held-out": 0, "other": 0}
    held = np.fromiter(held_out, np.int64)
    for epoch in range(m.num_epochs):
        tr = read_split(root, m, training=True, epoch=epoch)
        neg = (tr["valid_point_mask"] == 1) & (tr["labels"] == 0)
        pairs = tr["user_id"][neg] * n + tr["item_id"][neg]
        assert not np.isin(pairs, np.fromiter(positives, np.int64)).any()
        is_held = np.isin(pairs, held)
        drawn["held-out"] += int(is_held.sum())
        drawn["other"] += int((~is_held).sum())
    ratio = {k: drawn[k] / expected[k] for k in drawn}
    assert expected["held-out"] > 500
    assert abs(ratio["held-out"] - 1) < RATE_BOUND, ratio  # The leak: 0.
    assert abs(ratio["other"] - 1) < RATE_BOUND, ratio


def _canary(num_users: int, seed: int = 0) -> rio.Interactions:
    """Synthetic ratings, then two more per user, the latest: items that user never touched,
    drawn uniformly (the validation item, then the test item)."""
    data = synthetic.generate(
        synthetic.SyntheticConfig(
            num_users=num_users, num_items=500, num_interactions=60 * num_users,
            min_per_user=10, seed=1,
        )
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    catalogue = np.unique(data.items)
    end = int(data.timestamps.max()) + 1
    users, items, times = [data.users], [data.items], [data.timestamps]
    for u in np.unique(data.users):
        free = np.setdiff1d(catalogue, data.items[data.users == u])
        users.append(np.array([u, u]))
        items.append(rng.choice(free, 2, replace=False))
        times.append(np.array([end, end + 1]))
    return rio.Interactions(
        np.concatenate(users), np.concatenate(items), np.concatenate(times), ("c",), "csv"
    )


@pytest.mark.slow
def test_a_canary_whose_held_out_items_are_random_scores_at_chance(tmp_path):
    """prepare (both engines) -> train (the ml-100k preset, 12 epochs) -> evaluate, then the
    test refit: prepare --no-validation -> train --refit-of -> evaluate."""
    import tensorflow as tf

    from training_core.evaluation import evaluate
    from training_core.training import loop, train_config

    root = _engines(
        _write(_canary(CANARY_USERS), tmp_path / "canary.csv"), tmp_path, min_ratings=0,
        num_epochs=12, eval_negatives=CANARY_NEGATIVES, train_batch_size=256, workers=1,
    )  # fmt: skip
    model_dir = str(tmp_path / "model")
    config = train_config.config_for(root, model_dir, "ml-100k", epochs=12, steps_per_loop=50)
    trained = loop.train(config, tf.distribute.get_strategy())
    assert trained.test.eval_users == CANARY_USERS
    assert trained.test.hr_at_10 < CANARY_BOUND, trained.test  # The leak: 0.23.
    result = evaluate.evaluate(root, model_dir, tf.distribute.get_strategy())
    for split in (result, result.validation):
        assert split.hr_at_10 < CANARY_BOUND
        assert split.popularity_hr_at_10 < CANARY_BOUND
        assert split.ease_hr_at_10 is not None and split.ease_hr_at_10 < CANARY_BOUND
    assert os.path.isdir(model_dir)

    # The test refit (docs/training.md): trained on the validation items too, still at chance on
    # the test items, and so are the baselines fitted on the same positives.
    from training_core.evaluation.eval_config import eval_options

    loo = str(tmp_path / "loo")
    prepare.prepare(
        PrepareConfig(
            input_path=str(tmp_path / "canary.csv"), output_dir=loo, min_ratings=0,
            num_epochs=12, eval_negatives=CANARY_NEGATIVES, train_batch_size=256, workers=1,
            validation=False,
        )
    )  # fmt: skip
    refit_dir = str(tmp_path / "test-refit")
    refit = loop.train(
        train_config.config_for(loo, refit_dir, refit_of=model_dir, steps_per_loop=50),
        tf.distribute.get_strategy(),
    )
    assert refit.test.eval_users == CANARY_USERS
    assert refit.test.hr_at_10 < CANARY_BOUND, refit.test
    options = eval_options(ease_lambda=result.validation.ease_lambda)
    refit_result = evaluate.evaluate(loo, refit_dir, tf.distribute.get_strategy(), options=options)
    assert refit_result.hr_at_10 == refit.test.hr_at_10
    assert refit_result.popularity_hr_at_10 < CANARY_BOUND
    assert refit_result.ease_hr_at_10 < CANARY_BOUND
