"""``research/gpu_tune_jax.py`` trains on what ``prepare-data`` writes, row for row.

The GPU tune of the ``ml-20m`` preset (docs/tuning-log.md 'ml-20m on a GPU') prepares its data in
memory with data prep's own functions, because the GPU machines have no TensorFlow to read
records with. Its claim, that each step sees the rows the trainer would read from the prepared
records in the same order, is held here against real records at the ml-100k shape.
"""

from __future__ import annotations

import numpy as np
import pytest

from research import gpu_tune_jax
from training_core.data import prepare, records, synthetic
from training_core.data.config import PrepareConfig
from training_core.data.metadata import read_metadata

EPOCHS, PREBATCH = 2, 1024


def _records_in_reading_order(paths: list[str]) -> list[dict]:
    """One record from each shard file in turn, as ``input_pipeline.ordered_records`` reads."""
    per_file = [records.read_tfrecord_file(p) for p in paths]
    order = sorted((r, f) for f, recs in enumerate(per_file) for r in range(len(recs)))
    return [records.decode_example(per_file[f][r]) for r, f in order]


@pytest.mark.slow
def test_the_tune_s_rows_are_the_prepared_records_in_reading_order(tmp_path):
    npz = str(tmp_path / "ml100k.npz")
    assert gpu_tune_jax.write_data(npz, "ml-100k", "movielens", seed=3) == 0
    raw = synthetic.write(gpu_tune_jax.load_interactions(npz), str(tmp_path / "raw.csv"), "csv")
    out = str(tmp_path / "prepared")
    # prepare-data's defaults, as the tune takes them, but for the epochs and the pre-batch.
    prepare.prepare(
        PrepareConfig(input_path=raw, output_dir=out, num_epochs=EPOCHS, train_batch_size=PREBATCH)
    )
    meta = read_metadata(out)
    tuned = gpu_tune_jax.prepare_all(npz, EPOCHS, PREBATCH, workers=2)
    assert (tuned["num_users"], tuned["num_items"]) == (meta.num_users, meta.num_items)
    assert tuned["num_shards"] == meta.num_shards > 1

    for epoch in range(EPOCHS):
        recs = _records_in_reading_order(meta.train_file_paths(out, epoch))
        users, items, labels, valid = tuned["train"][epoch]
        assert users.shape == (len(recs), PREBATCH)
        for k, rec in enumerate(recs):
            np.testing.assert_array_equal(users[k], rec["user_id"].reshape(-1))
            np.testing.assert_array_equal(items[k], rec["item_id"].reshape(-1))
            np.testing.assert_array_equal(labels[k], rec["labels"].reshape(-1))
            np.testing.assert_array_equal(valid[k], rec["valid_point_mask"].reshape(-1))
    assert not np.array_equal(tuned["train"][0][1], tuned["train"][1][1])  # Fresh negatives.

    # Eval: per user (by index), the 999 negatives and the held-out item last, duplicates masked,
    # of the split the tune chooses on (validation: prepare-data's default).
    n = 1 + meta.eval_negatives
    by_user = {}
    assert meta.selection_split == "validation"
    for path in meta.split(meta.selection_split).eval_file_paths(out):
        for data in records.read_tfrecord_file(path):
            rec = records.decode_example(data)
            u = rec["user_id"].reshape(-1, n)[:, 0]
            for i, user in enumerate(u):  # The first row of a user (padding rows say user 0).
                by_user.setdefault(
                    int(user),
                    (rec["item_id"].reshape(-1, n)[i], rec["duplicate_mask"].reshape(-1, n)[i]),
                )
    assert sorted(by_user) == list(range(meta.num_users))
    for user, (items, dup) in by_user.items():
        np.testing.assert_array_equal(tuned["eval_items"][user], items)
        np.testing.assert_array_equal(tuned["eval_dup"][user], dup > 0)
