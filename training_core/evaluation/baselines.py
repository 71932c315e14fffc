"""The popularity baseline: every user's items ranked by how often they were trained on.

A model that does not beat it has learned nothing personal. ``Popularity`` has the scorer
interface of ``training_core.training.model.NCFModel`` (``score``, ``item_side``,
``score_candidates``, ``score_grid``, ``num_users``, ``num_items``), so evaluation ranks it by
exactly the code, protocol and tie rule that rank the trained model (ties count against the held-out
item), on the same eval set.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from training_core.data.metadata import DatasetMetadata


class Popularity(tf.Module):
    """Scores an item by its number of training positives, whoever the user.

    Args:
        item_counts: ``[num_items]`` training positives per item index.
        num_users: users of the dataset (the scorer ignores the user).
    """

    def __init__(self, item_counts: np.ndarray, num_users: int):
        super().__init__(name="popularity")
        self.num_users = num_users
        self.num_items = len(item_counts)
        self.item_counts = tf.constant(np.asarray(item_counts, np.float32))

    def score(
        self, user_ids: tf.Tensor, item_ids: tf.Tensor, compute_dtype: tf.DType = tf.float32
    ) -> tf.Tensor:
        """The items' training counts, float32, shape of the ids (the user is ignored)."""
        del user_ids, compute_dtype
        return tf.gather(self.item_counts, item_ids)

    def item_side(self, compute_dtype: tf.DType = tf.float32) -> dict[str, tf.Tensor]:
        """Every item's count (``score_grid``'s input, as NCFModel's)."""
        del compute_dtype
        return {"counts": self.item_counts}

    def score_grid(
        self,
        user_ids: tf.Tensor,
        items: dict[str, tf.Tensor],
        compute_dtype: tf.DType = tf.float32,
    ) -> tf.Tensor:
        """The counts for each user, ``[len(user_ids), num_items]``."""
        return self.score_candidates(user_ids, items, None, compute_dtype)

    def score_candidates(
        self,
        user_ids: tf.Tensor,
        items: dict[str, tf.Tensor],
        item_ids: tf.Tensor | None = None,
        compute_dtype: tf.DType = tf.float32,
    ) -> tf.Tensor:
        """The candidates' counts, ``[len(user_ids), C]`` (``item_ids`` None: every item)."""
        del compute_dtype
        if item_ids is None:
            return tf.tile(items["counts"][None, :], [tf.size(user_ids), 1])
        return tf.gather(items["counts"], item_ids)


def item_counts(meta: DatasetMetadata, items: np.ndarray) -> np.ndarray:
    """Training positives per item index, from the training positives' item indices."""
    return np.bincount(np.asarray(items, np.int64), minlength=meta.num_items).astype(np.float64)


def popularity(meta: DatasetMetadata, data_dir: str) -> Popularity:
    """The popularity scorer of a prepared dataset (its epoch-0 training positives)."""
    from training_core.data.positives import training_positives

    _, items = training_positives(meta, data_dir)
    return Popularity(item_counts(meta, items), meta.num_users)
