"""Evaluates a trained model folder (the latest checkpoint) on a prepared dataset's eval split.

Only the model's weights are restored, so a checkpoint written under any strategy (mirrored,
multi-worker, TPU) evaluates under any other, one device included.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import tensorflow as tf

from training_core import metrics
from training_core.metadata import read_metadata
from training_core.model import NeuMF
from training_core.train import CHECKPOINT_SUBDIR, read_model_config, run_eval

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


def latest_checkpoint(model_dir: str) -> str:
    """Path prefix of the newest checkpoint in a training output folder."""
    path = tf.train.latest_checkpoint(os.path.join(model_dir, CHECKPOINT_SUBDIR))
    if path is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir}/{CHECKPOINT_SUBDIR}; train first")
    return path


def load_model(model_dir: str, strategy: tf.distribute.Strategy, checkpoint: str | None = None):
    """Builds the model of ``model_dir`` under ``strategy`` and restores its weights.

    Returns:
        ``(model, checkpoint path, step)``.
    """
    config, num_users, num_items = read_model_config(model_dir)
    path = checkpoint or latest_checkpoint(model_dir)
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
