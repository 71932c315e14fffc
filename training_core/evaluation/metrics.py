"""HR@10, NDCG@10 and recall@10 of a held-out item, over sampled candidates or the full catalog.

Sampled (``ranking_sums``), the evaluation layout of the prepared data: each user takes
``1 + eval_negatives`` consecutive rows, negatives first, the held-out positive last. Rows with
``duplicate_mask == 1`` never count; a user whose positive row is masked is padding.

Full catalog (``full_catalog_sums``): a ``[users, num_items]`` grid of scores; every item but the
user's training positives (``excluded``) and the held-out item itself is a candidate.

Either way ties count against the positive: ``rank`` is the number of candidates scoring at least
as high as the positive; a hit is ``rank < k`` and NDCG is ``1 / log2(rank + 2)`` for a hit. The
per-batch functions return sums (hits, NDCG, users) so replicas and steps add up exactly; hits and
users are integers.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from training_core.training.compiled_step import repeat

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

    @property
    def recall(self) -> float:
        """Recall@10: held-out items in the top 10 over held-out items.

        Each user holds out one item, so this is HR@10 by construction; reported because it is
        the name people look for.
        """
        return self.hr

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
    return _sums(rank, tf.logical_not(masked[:, -1]), k)


def full_catalog_sums(
    scores: tf.Tensor,
    excluded: tf.Tensor,
    positives: tf.Tensor,
    evaluated: tf.Tensor,
    k: int = TOP_K,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Sums of hits, NDCG and evaluated users for one batch of users ranked over every item.

    Args:
        scores: ``[users, num_items]`` scores of each user against each item (any float dtype).
        excluded: ``[users, num_items]`` bool, True for the user's training positives: they are
            not candidates, however high they score.
        positives: ``[users]`` the held-out item of each user.
        evaluated: ``[users]`` bool, False for padding users.
        k: the cut-off.

    Returns:
        ``(hits int32, ndcg_sum float32, users int32)`` scalars.
    """
    scores = tf.cast(scores, tf.float32)
    positives = tf.cast(positives, tf.int32)
    positive = tf.gather(scores, positives, axis=1, batch_dims=1)[:, None]
    items = tf.range(tf.shape(scores)[1], dtype=tf.int32)
    candidate = tf.logical_and(tf.logical_not(excluded), items[None, :] != positives[:, None])
    counted = tf.logical_and(candidate, scores >= positive)  # Ties count against the positive.
    rank = tf.reduce_sum(tf.cast(counted, tf.int32), axis=1)
    return _sums(rank, tf.cast(evaluated, tf.bool), k)


def summing_loop(strategy: tf.distribute.Strategy, step_fn):
    """A ``tf.function`` running ``step_fn`` for ``n`` steps on every replica; returns the sums.

    ``step_fn(batch)`` returns ``(hits, ndcg_sum, users)`` of one replica's batch (what
    ``ranking_sums`` and ``full_catalog_sums`` return); the loop adds them over replicas and
    steps, exactly for the integer ones. Call it as ``loop(iter(distributed_dataset), n)``.
    """
    # Plain graph code: AutoGraph's conversion of the model's code took seconds per trace.
    plain_step = tf.autograph.experimental.do_not_convert(step_fn)

    @tf.function(autograph=False)
    def loop(iterator, n):
        def body(hits, ndcg, users):
            h, d, u = strategy.run(plain_step, args=(next(iterator),))
            return (
                hits + strategy.reduce("SUM", h, axis=None),
                ndcg + strategy.reduce("SUM", d, axis=None),
                users + strategy.reduce("SUM", u, axis=None),
            )

        zero = (tf.constant(0, tf.int32), tf.constant(0.0, tf.float32), tf.constant(0, tf.int32))
        return repeat(n, body, zero)

    return loop


def _sums(rank: tf.Tensor, evaluated: tf.Tensor, k: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """``(hits, ndcg_sum, users)`` of a batch from each user's rank (0 = top)."""
    hit = tf.logical_and(evaluated, rank < k)
    ndcg = tf.where(hit, tf.math.log(2.0) / tf.math.log(tf.cast(rank, tf.float32) + 2.0), 0.0)
    return (
        tf.reduce_sum(tf.cast(hit, tf.int32)),
        tf.reduce_sum(ndcg),
        tf.reduce_sum(tf.cast(evaluated, tf.int32)),
    )
