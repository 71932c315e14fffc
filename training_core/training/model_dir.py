"""The layout of a training output folder (``--model-dir``, the ``model`` artifact): its one home.

``train`` writes the folder; ``evaluate`` and ``export`` read it. Every name in it comes from
here, so no other module spells a path inside it, and ``model_config.json`` is written, checked
and read only here (``write_model_config``, ``check_model_folder``, ``read_model_config``)::

    MODEL_DIR/
    ├── model_config.json          MODEL_CONFIG_FILE, config_path(): the model's shape, the
    │                              dataset's user/item counts and fingerprint (written by train,
    │                              read back to rebuild the model)
    ├── checkpoints/               CHECKPOINT_SUBDIR, checkpoint_dir(): tf.train.CheckpointManager's
    │   ├── checkpoint             the manager's list of kept checkpoints
    │   ├── ckpt-<step>.index      one checkpoint per saved global step, with its
    │   ├── ckpt-<step>.data-*     .data shards (list_checkpoints, resolve_checkpoint)
    │   └── history-<step>.json    history_path(): the per-epoch history and the running epoch's
    │                              sums at that step (kept and removed with its checkpoint)
    ├── best/                      BEST_SUBDIR, best_dir(): the model weights of the best epoch so
    │   └── ckpt-<epoch>.*         far (HR@10), kept only with patience; at the end of the run
    │                              read back into the final checkpoint if not the last epoch
    ├── summaries/                 SUMMARIES_SUBDIR, summaries_dir(): TensorBoard events, unless
    │                              the run names another folder ($AIP_TENSORBOARD_LOG_DIR)
    ├── .lock                      folder_lock.LOCK_FILE (common/): held by the train run
    └── .worker_tmp_<task>/        worker_scratch_dir(): where a non-chief worker of a multi-worker
                                   run saves its share of a checkpoint (removed after each save)

TensorFlow is imported only by the functions that read checkpoints (``tf.io.gfile`` reads
``gs://`` too), so importing this module stays cheap.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
from typing import Any

from training_core.common import atomic_writes
from training_core.data.metadata import DatasetMetadata
from training_core.training.presets import NeuMFConfig

MODEL_CONFIG_FILE = "model_config.json"
CHECKPOINT_SUBDIR = "checkpoints"
SUMMARIES_SUBDIR = "summaries"
BEST_SUBDIR = "best"
WORKER_SCRATCH_PREFIX = ".worker_tmp_"
_HISTORY_PREFIX = "history-"
_HISTORY_SUFFIX = ".json"


def config_path(model_dir: str) -> str:
    """``MODEL_DIR/model_config.json``."""
    return os.path.join(model_dir, MODEL_CONFIG_FILE)


# model_config.json's record of the vocabularies the model's rows stand for.
VOCAB_DIGEST = "vocab_sha256"
DATA_DIR = "data_dir"  # ... and the prepared data's folder.
WARM_START = "warm_start"  # ... and the champion it started from (train --warm-start-from).
# ... and the split its epochs were measured on, which chose its kept epoch ("" a refit's: none).
SELECTION_SPLIT = "selection_split"


def vocab_digest(data_dir: str, meta: DatasetMetadata) -> str:
    """The SHA-256 of a prepared dataset's user and item vocabularies (any filesystem TF reads).

    Equal for the datasets of one raw file prepared with the same reading and filtering options,
    a refit's included: what a model's embedding rows mean.
    """
    import tensorflow as tf

    digest = hashlib.sha256()
    for rel in (meta.user_vocab, meta.item_vocab):
        with tf.io.gfile.GFile(os.path.join(data_dir, rel), "rb") as f:
            digest.update(f.read())
        digest.update(b"\0")
    return digest.hexdigest()


def write_model_config(
    model_dir: str,
    config: NeuMFConfig,
    meta: DatasetMetadata,
    data_dir: str | None = None,
    warm_start: dict[str, Any] | None = None,
    selection_split: str | None = None,
) -> None:
    """Records what ``evaluate``/``export`` need to rebuild the model.

    With ``data_dir``, also its vocabularies' digest, which ``train --refit-of`` checks, and the
    folder itself (``DATA_DIR``: where ``train --warm-start-from`` finds the raw ids of this
    model's rows). ``warm_start``: what the run started from (``warm_start.WarmStart.record``).

    A partial copy a killed run left (``atomic_writes.atomic_output``'s private name) is removed
    first.
    """
    atomic_writes.remove_stale_partials(config_path(model_dir))
    payload = {
        "model": dataclasses.asdict(config),
        "num_users": meta.num_users,
        "num_items": meta.num_items,
        "dataset_fingerprint": meta.fingerprint,
    }
    if data_dir is not None:
        payload[VOCAB_DIGEST] = vocab_digest(data_dir, meta)
        payload[DATA_DIR] = data_dir
    if warm_start is not None:
        payload[WARM_START] = dict(warm_start)
    if selection_split is not None:
        payload[SELECTION_SPLIT] = selection_split
    atomic_writes.write_text_atomic(config_path(model_dir), json.dumps(payload, indent=2))


def check_model_folder(model_dir: str, config: NeuMFConfig, meta: DatasetMetadata) -> None:
    """Refuses to train into a folder that holds a model of another shape or other data.

    Checked before anything in the folder is touched, so a refused run leaves the earlier model
    (its checkpoints and ``model_config.json``) as it was, still fit to evaluate and export.

    Raises:
        ValueError: naming the folder, what differs, and what to do.
    """
    path = config_path(model_dir)
    if not os.path.exists(path):
        return
    with open(path) as f:
        raw = json.load(f)
    # A folder written before --model existed holds NeuMF.
    have = {"architecture": NeuMFConfig.architecture, **raw.get("model", {})}
    want = json.loads(json.dumps(dataclasses.asdict(config)))  # Tuples as JSON has them.
    differs = [
        f"{key} {have[key]} here, {want[key]} now"
        for key in ("architecture", "num_factors", "layers")
        if key in have and have[key] != want[key]
    ]
    if raw.get("dataset_fingerprint") != meta.fingerprint:
        differs.append("it was trained on other prepared data")
    if differs:
        raise ValueError(
            f"{model_dir} already holds another model ({'; '.join(differs)}); train into a new "
            "--model-dir, or delete this one first. Nothing in it was changed."
        )


def read_model_config(model_dir: str) -> tuple[NeuMFConfig, int, int]:
    """``(config, num_users, num_items)`` of a trained model folder."""
    path = config_path(model_dir)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found; is {model_dir} a training output folder?")
    with open(path) as f:
        raw = json.load(f)
    model = dict(raw["model"])
    model["layers"] = tuple(model["layers"])
    return NeuMFConfig(**model), raw["num_users"], raw["num_items"]


def recorded_vocab_digest(model_dir: str) -> str | None:
    """The vocabularies' digest a model folder records (None: written before it was)."""
    with open(config_path(model_dir)) as f:
        return json.load(f).get(VOCAB_DIGEST)


def recorded_selection_split(model_dir: str) -> str | None:
    """The split a model folder's epochs were measured on (None: written before it was)."""
    with open(config_path(model_dir)) as f:
        return json.load(f).get(SELECTION_SPLIT)


def checkpoint_dir(model_dir: str) -> str:
    """``MODEL_DIR/checkpoints``: the checkpoints and their histories."""
    return os.path.join(model_dir, CHECKPOINT_SUBDIR)


def history_path(model_dir: str, step: int) -> str:
    """``MODEL_DIR/checkpoints/history-<step>.json``: the history saved with step's checkpoint."""
    return os.path.join(checkpoint_dir(model_dir), f"{_HISTORY_PREFIX}{step}{_HISTORY_SUFFIX}")


def history_files(model_dir: str) -> dict[int, str]:
    """Step -> path of every history file in a (local) model folder."""
    pattern = os.path.join(glob.escape(checkpoint_dir(model_dir)), f"{_HISTORY_PREFIX}*")
    found = {}
    for path in glob.glob(pattern + _HISTORY_SUFFIX):
        number = os.path.basename(path)[len(_HISTORY_PREFIX) : -len(_HISTORY_SUFFIX)]
        if number.isdigit():
            found[int(number)] = path
    return found


def best_dir(model_dir: str) -> str:
    """``MODEL_DIR/best``: the best epoch's model weights, numbered by epoch (patience only)."""
    return os.path.join(model_dir, BEST_SUBDIR)


def summaries_dir(model_dir: str) -> str:
    """``MODEL_DIR/summaries``: TensorBoard's folder when the run names no other."""
    return os.path.join(model_dir, SUMMARIES_SUBDIR)


def worker_scratch_dir(model_dir: str, worker: str) -> str:
    """``MODEL_DIR/.worker_tmp_<worker>``: a non-chief worker's checkpoint scratch folder."""
    return os.path.join(model_dir, f"{WORKER_SCRATCH_PREFIX}{worker}")


def latest_checkpoint(model_dir: str) -> str:
    """Path prefix of the newest checkpoint in a training output folder."""
    import tensorflow as tf

    path = tf.train.latest_checkpoint(checkpoint_dir(model_dir))
    if path is None:
        raise FileNotFoundError(f"no checkpoint in {model_dir}/{CHECKPOINT_SUBDIR}; train first")
    return path


def list_checkpoints(model_dir: str) -> list[str]:
    """Path prefixes of the checkpoints in a training output folder, oldest step first."""
    import tensorflow as tf

    found = tf.io.gfile.glob(os.path.join(checkpoint_dir(model_dir), "*.index"))
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
    import tensorflow as tf

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
    ckpt_dir = checkpoint_dir(model_dir)
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
