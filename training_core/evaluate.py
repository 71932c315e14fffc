"""Evaluation: HR@10/NDCG@10 over a prepared dataset's eval split.

``run_eval`` (with the ``tf.function`` ``make_eval_fn`` builds) scores a model in memory: the
training loop calls it after every epoch. ``evaluate`` does the same for a trained model folder
(its latest checkpoint, or one named). Only the model's weights are restored, so a checkpoint
written under any strategy (mirrored, multi-worker, TPU) evaluates under any other, one device
included.
"""

from __future__ import annotations

import dataclasses
import logging

import tensorflow as tf

from training_core import input_pipeline, metrics
from training_core.data.metadata import DatasetMetadata, read_metadata
from training_core.model import NeuMF
from training_core.model_dir import read_model_config, resolve_checkpoint

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """HR@10/NDCG@10 of one checkpoint."""

    checkpoint: str
    step: int
    hr_at_10: float
    ndcg_at_10: float
    eval_users: int

    def to_dict(self) -> dict:
        """JSON-ready."""
        return dataclasses.asdict(self)


def make_eval_fn(
    model: NeuMF, strategy: tf.distribute.Strategy, items_per_user: int, dtype: tf.DType
):
    """A ``tf.function`` running ``n`` eval steps; returns summed (hits, ndcg, users)."""

    def step_fn(features):
        scores = model.score(features["user_id"], features["item_id"], dtype)
        return metrics.ranking_sums(scores, features["duplicate_mask"], items_per_user)

    @tf.function
    def eval_loop(iterator, n):
        hits = tf.constant(0, tf.int32)
        ndcg = tf.constant(0.0, tf.float32)
        users = tf.constant(0, tf.int32)
        for _ in tf.range(n):
            h, d, u = strategy.run(step_fn, args=(next(iterator),))
            hits += strategy.reduce("SUM", h, axis=None)
            ndcg += strategy.reduce("SUM", d, axis=None)
            users += strategy.reduce("SUM", u, axis=None)
        return hits, ndcg, users

    return eval_loop


def run_eval(
    model: NeuMF,
    strategy: tf.distribute.Strategy,
    meta: DatasetMetadata,
    data_dir: str,
    dtype: tf.DType = tf.float32,
    eval_fn=None,
) -> metrics.RankingMetrics:
    """HR@10/NDCG@10 of ``model`` over the whole eval set, summed exactly across replicas."""
    k = input_pipeline.eval_items_per_user(meta)
    eval_fn = eval_fn or make_eval_fn(model, strategy, k, dtype)
    dist = input_pipeline.distribute(
        strategy, input_pipeline.eval_dataset_fn(meta, data_dir, strategy.num_replicas_in_sync)
    )
    with input_pipeline.naming_damaged_files(meta.eval_file_paths(data_dir)):
        hits, ndcg, users = eval_fn(iter(dist), tf.constant(meta.eval_steps))
    return metrics.RankingMetrics(int(hits), float(ndcg), int(users))


def load_model(model_dir: str, strategy: tf.distribute.Strategy, checkpoint: str | None = None):
    """Builds the model of ``model_dir`` under ``strategy`` and restores its weights.

    Returns:
        ``(model, checkpoint path, step)``.
    """
    config, num_users, num_items = read_model_config(model_dir)
    path = resolve_checkpoint(model_dir, checkpoint)
    with strategy.scope():
        model = NeuMF(config, num_users, num_items)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    tf.train.Checkpoint(model=model, step=step).restore(
        path
    ).expect_partial().assert_existing_objects_matched()
    return model, path, int(step.numpy())


def evaluate(
    data_dir: str,
    model_dir: str,
    strategy: tf.distribute.Strategy | None = None,
    checkpoint: str | None = None,
) -> EvalResult:
    """HR@10 and NDCG@10 of a trained model on ``data_dir``'s eval split."""
    strategy = strategy or tf.distribute.get_strategy()
    meta = read_metadata(data_dir)
    model, path, step = load_model(model_dir, strategy, checkpoint)
    if (model.num_users, model.num_items) != (meta.num_users, meta.num_items):
        raise ValueError(
            f"the model has {model.num_users} users and {model.num_items} items but {data_dir} "
            f"has {meta.num_users} and {meta.num_items}; evaluate on the data it was trained on"
        )
    with input_pipeline.naming_damaged_files(meta.eval_file_paths(data_dir)):
        result: metrics.RankingMetrics = run_eval(model, strategy, meta, data_dir)
    log.info(
        "%s (step %d): HR@10 %.4f NDCG@10 %.4f over %d users",
        path,
        step,
        result.hr,
        result.ndcg,
        result.users,
    )
    return EvalResult(path, step, result.hr, result.ndcg, result.users)
