"""The baselines every model is ranked beside: popularity, and EASE.

``Popularity``: every user's items ranked by how often they were trained on; a model that does
not beat it has learned nothing personal. ``Ease``: Steck's closed-form item-item model
("Embarrassingly Shallow Autoencoders for Sparse Data", WWW 2019) over the training positives, a
strong simple baseline that sampled-negative models often fail to beat; its one hyperparameter
(the L2 ``lambda``) is chosen on the validation split (:func:`choose_ease`). Both have the
scorer interface of ``training_core.training.model.NCFModel`` (``score``, ``item_side``,
``score_candidates``, ``score_grid``, ``num_users``, ``num_items``), so evaluation ranks them by
exactly the code,
protocol and tie rule that rank the trained model (ties count against the held-out item), on the
same eval set.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from training_core.data.metadata import DatasetMetadata

# EASE's item x item matrix is inverted in float64: items^2 x 8 bytes, three of them at once
# (ml-1m's 3,706 items: 0.3 GB; this limit: 2.4 GB). Above it EASE is skipped, with a line
# saying so (ml-20m's 26,744 items would take 17 GB).
EASE_MAX_ITEMS = 10_000
# The lambdas tried on the validation split (Steck's best on ml-20m was 500; smaller data wants
# less); the first is used where a dataset has no validation split to choose on.
EASE_LAMBDAS = (200.0, 20.0, 50.0, 100.0, 500.0, 1000.0, 2000.0)


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


def ease_skipped(num_items: int) -> str | None:
    """Why EASE is not ranked on a catalogue of ``num_items``, or None when it is."""
    if num_items <= EASE_MAX_ITEMS:
        return None
    gb = 3 * num_items**2 * 8 / 1e9
    return (
        f"EASE skipped: its {num_items:,} x {num_items:,} item matrix would take about "
        f"{gb:.0f} GB to invert (the limit is {EASE_MAX_ITEMS:,} items, baselines.EASE_MAX_ITEMS)"
    )


def gram(splits: np.ndarray, items: np.ndarray, num_items: int, chunk: int = 4096) -> np.ndarray:
    """``X^T X`` (float64, ``[num_items, num_items]``) of the binary user x item matrix ``X``.

    ``X``'s rows are the CSR ``(splits, items)``; built a block of users at a time.
    """
    g = np.zeros((num_items, num_items), np.float64)
    num_users = len(splits) - 1
    for first in range(0, num_users, chunk):
        last = min(first + chunk, num_users)
        block = np.zeros((last - first, num_items), np.float32)
        rows = np.repeat(np.arange(last - first), np.diff(splits[first : last + 1]))
        block[rows, items[splits[first] : splits[last]]] = 1.0
        g += (block.T @ block).astype(np.float64)
    return g


def ease_weights(g: np.ndarray, lam: float) -> np.ndarray:
    """EASE's item-item weights for the Gram matrix ``g`` and L2 ``lam`` (zero diagonal)."""
    p = np.linalg.inv(g + lam * np.eye(len(g)))
    b = p / (-np.diag(p))
    np.fill_diagonal(b, 0.0)
    return b.astype(np.float32)


class Ease(tf.Module):
    """Scores item ``i`` for user ``u`` as ``sum_j X[u, j] B[j, i]``: EASE's closed form.

    Args:
        splits, items: every user's training positives as CSR (``positives.training_positives``).
        weights: ``[num_items, num_items]`` ``B`` (:func:`ease_weights`).
        lam: the L2 it was fitted with (reported).
    """

    def __init__(self, splits: np.ndarray, items: np.ndarray, weights: np.ndarray, lam: float):
        super().__init__(name="ease")
        self.num_users = len(splits) - 1
        self.num_items = len(weights)
        self.lam = float(lam)
        self._splits = tf.constant(np.asarray(splits, np.int64))
        self._items = tf.constant(np.asarray(items, np.int64))
        # A variable, so that another lambda's weights reuse the traced evaluation (refit()).
        self.weights = tf.Variable(weights, trainable=False, name="weights")

    def refit(self, weights: np.ndarray, lam: float) -> None:
        """Takes another lambda's weights (the same users, items and shape)."""
        self.weights.assign(weights)
        self.lam = float(lam)

    def _rows(self, user_ids: tf.Tensor) -> tf.Tensor:
        """``X[user_ids]``, dense float32 ``[len(user_ids), num_items]``."""
        users = tf.reshape(tf.cast(user_ids, tf.int64), [-1])
        seen = tf.gather(tf.RaggedTensor.from_row_splits(self._items, self._splits), users)
        where = tf.stack([seen.value_rowids(), seen.flat_values], axis=1)
        ones = tf.ones_like(seen.flat_values, tf.float32)
        return tf.scatter_nd(where, ones, tf.stack([tf.size(users, tf.int64), self.num_items]))

    def score(
        self, user_ids: tf.Tensor, item_ids: tf.Tensor, compute_dtype: tf.DType = tf.float32
    ) -> tf.Tensor:
        """Scores of (user, item) pairs, float32, shape of the ids."""
        del compute_dtype
        rows = self._rows(user_ids)
        columns = tf.gather(tf.transpose(self.weights), tf.reshape(item_ids, [-1]))
        return tf.reshape(tf.reduce_sum(rows * columns, axis=1), tf.shape(item_ids))

    def item_side(self, compute_dtype: tf.DType = tf.float32) -> dict[str, tf.Tensor]:
        """The weights (``score_grid``'s input, as NCFModel's)."""
        del compute_dtype
        return {"weights": self.weights}

    def score_grid(
        self,
        user_ids: tf.Tensor,
        items: dict[str, tf.Tensor],
        compute_dtype: tf.DType = tf.float32,
    ) -> tf.Tensor:
        """Every item's score for each user, ``[len(user_ids), num_items]``."""
        del compute_dtype
        return tf.matmul(self._rows(user_ids), items["weights"])

    def score_candidates(
        self,
        user_ids: tf.Tensor,
        items: dict[str, tf.Tensor],
        item_ids: tf.Tensor | None = None,
        compute_dtype: tf.DType = tf.float32,
    ) -> tf.Tensor:
        """The candidates' scores, ``[len(user_ids), C]`` (``item_ids`` None: every item)."""
        grid = self.score_grid(user_ids, items, compute_dtype)
        if item_ids is None:
            return grid
        return tf.gather(grid, item_ids, batch_dims=1)


def choose_ease(
    splits: np.ndarray,
    items: np.ndarray,
    num_items: int,
    validation_hr,
    lambdas: tuple[float, ...] = EASE_LAMBDAS,
) -> tuple[Ease, dict[float, float]]:
    """The EASE of the lambda with the best validation HR@10, and each lambda's HR@10.

    ``validation_hr(ease)`` ranks one fitted EASE on the validation split (it is called with the
    same object, refitted to each lambda in turn); None: no validation split to choose on, and
    the first lambda is taken. Ties keep the earlier lambda.
    """
    g = gram(splits, items, num_items)
    ease = Ease(splits, items, ease_weights(g, lambdas[0]), lambdas[0])
    if validation_hr is None:
        return ease, {}
    tried: dict[float, float] = {}
    for lam in lambdas:
        if lam != ease.lam:
            ease.refit(ease_weights(g, lam), lam)
        tried[lam] = float(validation_hr(ease))
    best = max(tried, key=lambda lam: (tried[lam], -lambdas.index(lam)))
    ease.refit(ease_weights(g, best), best)
    return ease, tried
