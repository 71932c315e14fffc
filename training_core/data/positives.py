"""Each user's positives, read back from a prepared dataset's records.

``training_positives``: the items a user trained on (what full-catalog evaluation does not rank).
``held_out_items``: the one item per user that a split holds out (the last row of each user's
group in its records; ``held_out_items(meta.split(name), ...)`` for either split).
``seen_items``: all of them and the user's seen-only items (rows that are no positive:
``--min-rating``, ``--positive-events``), every item the data holds for a user (what
``recommend`` excludes: a user's latest interactions are seen too). They read the records with
``tf.data``, so they work on any filesystem TensorFlow reads (``gs://`` included); TensorFlow is
imported when they are called, as ``records.feature_spec`` does, so importing this module stays
free of it.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from training_core.data import records
from training_core.data.metadata import SPLIT_VALIDATION, SPLITS, DatasetMetadata

log = logging.getLogger(__name__)


def training_positives(meta: DatasetMetadata, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """``(row_splits, items)``: each user's distinct training items (indices), sorted, as CSR.

    Read from epoch 0's training records (``labels == 1`` and ``valid_point_mask == 1``): every
    epoch holds each training positive once. The held-out items (test and validation) are not
    among them, except in a refit (``meta.refit``), which trained on every interaction.
    """
    users, items = [], []
    for batch in records.read_columns(
        meta.train_file_paths(data_dir, 0), meta.train_prebatch_size, True
    ):
        keep = (batch[records.LABELS] == 1) & (batch[records.VALID_POINT_MASK] == 1)
        users.append(batch[records.USER_ID][keep])
        items.append(batch[records.ITEM_ID][keep])
    u = np.concatenate(users) if users else np.zeros(0, np.int64)
    i = np.concatenate(items) if items else np.zeros(0, np.int64)
    pairs = np.unique(u * meta.num_items + i)  # Sorted by user, then item; duplicates dropped.
    u, i = pairs // meta.num_items, pairs % meta.num_items
    if len(pairs) != meta.num_train_positives:
        log.warning(
            "epoch 0 holds %d distinct training positives, metadata.json says %d",
            len(pairs),
            meta.num_train_positives,
        )
    row_splits = np.zeros(meta.num_users + 1, np.int64)
    np.cumsum(np.bincount(u, minlength=meta.num_users), out=row_splits[1:])
    return row_splits, i.astype(np.int64)


def held_out_items(meta: DatasetMetadata, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """``(users, items)``: every evaluated user (sorted) and the item held out for them.

    The records of ``meta``'s eval files (the test split; ``meta.split(name)`` for another)
    hold ``1 + eval_negatives`` rows per user, the held-out positive last; a user whose positive
    row is masked is padding and is left out.
    """
    k = 1 + meta.eval_negatives
    users, items = [], []
    for batch in records.read_columns(
        meta.eval_file_paths(data_dir), meta.eval_prebatch_size, False
    ):
        last = {name: batch[name].reshape(-1, k)[:, -1] for name in records.EVAL_FEATURES}
        keep = last[records.DUPLICATE_MASK] == 0
        users.append(last[records.USER_ID][keep])
        items.append(last[records.ITEM_ID][keep])
    u = np.concatenate(users) if users else np.zeros(0, np.int64)
    i = np.concatenate(items) if items else np.zeros(0, np.int64)
    order = np.argsort(u, kind="stable")
    u, i = u[order], i[order]
    if len(u) != meta.num_eval_users or (len(u) and (np.diff(u) == 0).any()):
        raise ValueError(
            f"{data_dir}: the eval records hold {len(u)} held-out items for "
            f"{len(np.unique(u))} users, metadata.json says {meta.num_eval_users} users with one "
            f"each; {records.PREPARE_AGAIN}"
        )
    return u.astype(np.int64), i.astype(np.int64)


def seen_items(meta: DatasetMetadata, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """``(row_splits, items)``: every item the data holds for each user, sorted, as CSR.

    The training positives, the held-out items of every split the dataset has and the seen-only
    items: what a user has interacted with, so what recommendations leave out. The splits hold
    out each user's latest interactions, the ones a user is least likely to want back. A
    refit's training positives are already every positive.
    """
    splits, trained = training_positives(meta, data_dir)
    if meta.refit and not meta.seen_only_files:
        return splits, trained
    trained_users = np.repeat(np.arange(meta.num_users, dtype=np.int64), np.diff(splits))
    n = meta.num_items
    keys = [trained_users * n + trained]
    for name in SPLITS if not meta.refit else ():
        if name != SPLIT_VALIDATION or meta.has_validation:
            users, held_out = held_out_items(meta.split(name), data_dir)
            keys.append(users * n + held_out)
    users, seen_only = seen_only_items(meta, data_dir)
    keys.append(users * n + seen_only)
    pairs = np.unique(np.concatenate(keys))
    row_splits = np.zeros(meta.num_users + 1, np.int64)
    np.cumsum(np.bincount(pairs // n, minlength=meta.num_users), out=row_splits[1:])
    return row_splits, (pairs % n).astype(np.int64)


def seen_only_items(meta: DatasetMetadata, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """``(users, items)``: every seen-only pair of the dataset, by user then item.

    Read from the ``seen_only`` records (rows whose ``duplicate_mask`` is 0); empty for a dataset
    without any (``meta.seen_only_files``).
    """
    files = [os.path.join(data_dir, f.path) for f in meta.seen_only_files]
    users, items = [], []
    for batch in records.read_columns(files, meta.train_prebatch_size, False) if files else ():
        keep = batch[records.DUPLICATE_MASK] == 0
        users.append(batch[records.USER_ID][keep])
        items.append(batch[records.ITEM_ID][keep])
    u = np.concatenate(users) if users else np.zeros(0, np.int64)
    i = np.concatenate(items) if items else np.zeros(0, np.int64)
    if len(u) != meta.num_seen_only:
        raise ValueError(
            f"{data_dir}: the seen-only records hold {len(u)} pairs, metadata.json says "
            f"{meta.num_seen_only}; {records.PREPARE_AGAIN}"
        )
    order = np.lexsort((i, u))
    return u[order].astype(np.int64), i[order].astype(np.int64)
