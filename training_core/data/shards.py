"""One shard's files: its training rows per epoch and its held-out splits' candidates, pre-batched.

A dataset whose data has seen-only pairs (``sampling.Shard.seen_items``) also has one
``seen_only/`` file per shard (:func:`write_seen_only_shard`), so that what a user has seen can be
read back (``positives.seen_items``).

Both engines write every shard through these functions (``prepare`` in worker processes,
``prepare_beam`` in Beam workers), so a shard's bytes depend only on its users and
:class:`ShardOptions`, never on the engine or the number of workers.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable

import numpy as np

from training_core.common import faults
from training_core.data import records, sampling
from training_core.data.metadata import (
    SPLIT_TEST,
    SPLIT_VALIDATION,
    ShardFile,
    eval_file,
    train_file,
    validation_file,
)


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """What one shard's files depend on besides its users; both engines pass the same values."""

    num_shards: int
    num_neg: int
    seed: int
    train_batch_size: int
    eval_negatives: int
    eval_sampling: str
    eval_users_per_batch: int
    validation: bool = False  # Whether each user's second-to-last interaction is held out too.
    refit: bool = False  # Whether every interaction is a training positive (sampling.train_rows).
    recency_boost: float = 0.0  # Copies of recent positives (sampling.recency_copies).
    recency_scale: float = 10.0


# Writes framed records to a path (through a temporary name) and returns the bytes written.
RecordWriter = Callable[[str, Iterable[bytes]], int]


def _pad(arr: np.ndarray, total: int, value: int = 0) -> np.ndarray:
    """``arr`` followed by ``value`` up to ``total`` entries, in ``arr``'s dtype."""
    out = np.empty(total, dtype=arr.dtype)
    out[: len(arr)] = arr
    out[len(arr) :] = value
    return out


def write_train_shard(
    shard: sampling.Shard,
    comp: sampling.Complement,
    epoch: int,
    opts: ShardOptions,
    output_dir: str,
    write: RecordWriter = records.write_tfrecord_file,
) -> ShardFile:
    """One epoch of one shard's training rows, pre-batched and padded, as one TFRecord file."""
    rows = sampling.train_rows(
        shard, comp, opts.num_neg, opts.seed, epoch, opts.validation, opts.refit,
        opts.recency_boost, opts.recency_scale,
    )  # fmt: skip
    n = len(rows.users)
    batch = opts.train_batch_size
    total = max(1, -(-n // batch)) * batch
    columns = records.as_columns(
        [
            _pad(rows.users, total),
            _pad(rows.items, total),
            _pad(np.ones(n, np.uint8), total),
            _pad(rows.labels, total),
        ],
        training=True,
    )
    rel = train_file(epoch, records.shard_name(shard.index, opts.num_shards))
    path = os.path.join(output_dir, rel)
    with faults.naming(path):  # A failed write() names no file; the parent's message will.
        size = write(path, records.encode_examples(columns, batch))
    return ShardFile(rel, total // batch, n, size)


def write_eval_shard(
    shard: sampling.Shard,
    comp: sampling.Complement,
    opts: ShardOptions,
    output_dir: str,
    write: RecordWriter = records.write_tfrecord_file,
    split: str = SPLIT_TEST,
) -> tuple[ShardFile, int]:
    """One shard's candidates of a held-out split as one TFRecord file; also its short users.

    ``split``: ``test`` (``eval/``, every user) or ``validation`` (``validation/``, the users
    with a validation item; a shard with none holds one record of padding, as any shard's last
    record is padded to whole records).
    """
    rows, place = _SPLITS[split]
    ev = rows(shard, comp, opts.eval_negatives, opts.seed, opts.eval_sampling)
    upb = opts.eval_users_per_batch
    n_users, width = ev.items.shape
    padded_users = max(1, -(-n_users // upb)) * upb
    # Narrow types where the ids fit (the encoder takes any integer type): half the bytes.
    ids = np.int32 if max(int(ev.users.max(initial=0)), shard.num_items) < 2**31 else np.int64
    users = np.zeros((padded_users, width), ids)
    items = np.zeros((padded_users, width), ids)
    mask = np.ones((padded_users, width), np.uint8)  # Padding users are masked entirely.
    users[:n_users] = ev.users[:, None]
    items[:n_users] = ev.items
    mask[:n_users] = ev.duplicate_mask
    columns = records.as_columns(
        [users.reshape(-1), items.reshape(-1), mask.reshape(-1)], training=False
    )
    rel = place(records.shard_name(shard.index, opts.num_shards))
    path = os.path.join(output_dir, rel)
    with faults.naming(path):
        size = write(path, records.encode_examples(columns, upb * width))
    return ShardFile(rel, padded_users // upb, n_users * width, size), ev.short_users


# The folder of the seen-only records, in the build beside train/, eval/ and validation/.
SEEN_ONLY_DIR = "seen_only"


def seen_only_file(name: str) -> str:
    """Where a shard's seen-only records go, relative to the build."""
    return os.path.join(SEEN_ONLY_DIR, name)


def write_seen_only_shard(
    shard: sampling.Shard,
    opts: ShardOptions,
    output_dir: str,
    write: RecordWriter = records.write_tfrecord_file,
) -> ShardFile:
    """One shard's seen-only (user, item) pairs as one TFRecord file, by user then item.

    Records have the eval features (``user_id, item_id, duplicate_mask``) and
    ``train_batch_size`` rows each; ``duplicate_mask`` 1 marks the padding of the last record
    (a shard without seen-only pairs holds one record of padding).
    """
    counts = np.diff(shard.seen_offsets)
    users = np.repeat(shard.users, counts)
    n = len(users)
    batch = opts.train_batch_size
    total = max(1, -(-n // batch)) * batch
    columns = records.as_columns(
        [
            _pad(users, total),
            _pad(shard.seen_items, total),
            _pad(np.zeros(n, np.uint8), total, 1),
        ],
        training=False,
    )
    rel = seen_only_file(records.shard_name(shard.index, opts.num_shards))
    path = os.path.join(output_dir, rel)  # The engine makes the folder (SEEN_ONLY_DIR).
    with faults.naming(path):
        size = write(path, records.encode_examples(columns, batch))
    return ShardFile(rel, total // batch, n, size)


# Each held-out split's candidates and where its files go.
_SPLITS = {
    SPLIT_TEST: (sampling.eval_rows, eval_file),
    SPLIT_VALIDATION: (sampling.validation_rows, validation_file),
}
