"""Evaluates a trained model folder (the latest checkpoint) on a prepared dataset's eval split.

Only the model's weights are restored, so a checkpoint written under any strategy (mirrored,
multi-worker, TPU) evaluates under any other, one device included.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re

import tensorflow as tf

from training_core import input_pipeline, metrics
from training_core.data.metadata import read_metadata
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


def list_checkpoints(model_dir: str) -> list[str]:
    """Path prefixes of the checkpoints in a training output folder, oldest step first."""
    found = tf.io.gfile.glob(os.path.join(model_dir, CHECKPOINT_SUBDIR, "*.index"))
    prefixes = [p[: -len(".index")] for p in found]

    def step(prefix: str) -> tuple[int, str]:
        number = re.search(r"-(\d+)$", prefix)
        return (int(number.group(1)) if number else -1, prefix)

    return sorted(prefixes, key=step)


def resolve_checkpoint(
    model_dir: str, checkpoint: str | None = None, option: str = "checkpoint"
) -> str:
    """The checkpoint to restore: ``checkpoint`` if it exists, else the latest in ``model_dir``.

    ``checkpoint`` is a path prefix (``.../ckpt-151``) or a folder of checkpoints (its latest).

    Raises:
        FileNotFoundError: ``checkpoint`` is not a checkpoint (the message names ``option`` and
            lists the checkpoints ``model_dir`` has), or ``model_dir`` has none.
    """
    if checkpoint is None:
        return latest_checkpoint(model_dir)
    if tf.io.gfile.isdir(checkpoint):
        path = tf.train.latest_checkpoint(checkpoint)
        if path is not None:
            return path
        why = "a folder without checkpoints"
    elif tf.io.gfile.exists(checkpoint + ".index"):
        return checkpoint
    else:
        why = f"{checkpoint}.index not found"
    ckpt_dir = os.path.join(model_dir, CHECKPOINT_SUBDIR)
    names = [os.path.basename(p) for p in list_checkpoints(model_dir)]
    if names:
        older = len(names) - 5
        listing = ", ".join(names[-5:]) + (f" and {older} older" if older > 0 else "")
        what = (
            f"Checkpoints in {ckpt_dir}: {listing}. Pass one, e.g. {option} "
            f"{os.path.join(ckpt_dir, names[-1])}, or leave out {option} to use the latest."
        )
    elif not tf.io.gfile.isdir(model_dir):
        what = f"The model folder {model_dir} does not exist either."
    else:
        what = f"{ckpt_dir} holds no checkpoint: train first (ncf-pipelines train)."
    raise FileNotFoundError(f"{option} {checkpoint}: no such checkpoint ({why}). {what}")


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
