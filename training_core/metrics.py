"""HR@10 and NDCG@10 over the evaluation layout of the prepared data.

Each user takes ``1 + eval_negatives`` consecutive rows: negatives first, the held-out positive
last. Rows with ``duplicate_mask == 1`` never count; a user whose positive row is masked is padding.
Ties count against the positive: ``rank`` is the number of unmasked negatives scoring at least as
high as the positive; a hit is ``rank < k`` and NDCG is ``1 / log2(rank + 2)`` for a hit.

The per-batch function returns sums (hits, NDCG, users) so replicas and steps add up exactly;
hits and users are integers.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

TOP_K = 10


@dataclasses.dataclass(frozen=True)
class RankingMetrics:
    """Summed evaluation results."""

    hits: int
    ndcg_sum: float
    users: int

    @property
    def hr(self) -> float:
        """HR@10 (0 when no user was evaluated)."""
        return self.hits / self.users if self.users else 0.0

    @property
    def ndcg(self) -> float:
        """NDCG@10."""
        return self.ndcg_sum / self.users if self.users else 0.0

    def __add__(self, other: RankingMetrics) -> RankingMetrics:
        return RankingMetrics(
            self.hits + other.hits, self.ndcg_sum + other.ndcg_sum, self.users + other.users
        )


def ranking_sums(
    scores: tf.Tensor, duplicate_mask: tf.Tensor, items_per_user: int, k: int = TOP_K
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Sums of hits, NDCG and evaluated users for one batch of whole users.

    Args:
        scores: ``[users * items_per_user]`` or ``[..., 1]`` scores (any float dtype).
        duplicate_mask: same number of elements, 1 for rows that must not count.
        items_per_user: ``1 + eval_negatives``.
        k: the cut-off.

    Returns:
        ``(hits int32, ndcg_sum float32, users int32)`` scalars.
    """
    scores = tf.reshape(tf.cast(scores, tf.float32), [-1, items_per_user])
    masked = tf.reshape(tf.cast(duplicate_mask, tf.bool), [-1, items_per_user])
    positive = scores[:, -1:]
    counted = tf.logical_and(
        tf.logical_not(masked[:, :-1]), scores[:, :-1] >= positive
    )  # Ties count against the positive.
    rank = tf.reduce_sum(tf.cast(counted, tf.int32), axis=1)
    evaluated = tf.logical_not(masked[:, -1])
    hit = tf.logical_and(evaluated, rank < k)
    ndcg = tf.where(hit, tf.math.log(2.0) / tf.math.log(tf.cast(rank, tf.float32) + 2.0), 0.0)
    return (
        tf.reduce_sum(tf.cast(hit, tf.int32)),
        tf.reduce_sum(ndcg),
        tf.reduce_sum(tf.cast(evaluated, tf.int32)),
    )
