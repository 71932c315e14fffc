"""Full-catalog HR@10, NDCG@10 and recall@10: the held-out item against every item not trained on.

The sampled metrics (``evaluate.run_eval``) rank each user's held-out item against the items the
user never saw that data prep sampled for the eval records (999 by default). Krichene & Rendle
("On Sampled Metrics for Item Recommendation", KDD 2020) show that sampled metrics can order
models differently from the ranking a user is shown, so evaluation also reports this one: for
batches of users, the model scores user x every item on the device (``score_grid``: each item's
share once, NeuMF's first layer split per side; any scorer with that interface works), the
items the user interacted with before the held-out one are masked out, and the held-out item's
rank among the rest gives the metrics (``metrics.full_catalog_sums``; ties count against it, as
in the sampled ones).

Which items are masked depends on the split ranked (``excluded_items``): for the ``test`` split
(each user's last interaction) the training positives and, where the dataset has one, the user's
validation item (the second-to-last interaction, made before the test one); for the
``validation`` split only the training positives. The test item is a later interaction, not
yet made when the validation one was, so it stays a candidate there: masking it would tell the
ranking which item the future holds. Seen-only items (rows that are not positives:
``--min-rating``, ``--positive-events``) are masked in both.

The cost is users x items scores (ml-20m: 138k x 27k = 3.7G), so ``max_users`` caps the users: a
fixed-seed sample, the same users for every model and every epoch of one dataset. The result
says how many users were ranked and whether that was all of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time

import numpy as np
import tensorflow as tf

from training_core.common import console
from training_core.data import positives
from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION, DatasetMetadata
from training_core.evaluation import metrics
from training_core.training import input_pipeline

PAIRS_PER_STEP = 1 << 19  # (user, item) scores per replica per step: bounds device memory.
STEPS_PER_REPORT = 8  # Steps per compiled loop call; progress is reported between calls.
SAMPLE_SEED = 0  # Which users a cap keeps: the same for every model and epoch of a dataset.


@dataclasses.dataclass(frozen=True)
class FullCatalogMetrics:
    """Full-catalog sums over the ranked users, and how many users had a held-out item."""

    metrics: metrics.RankingMetrics
    users_with_held_out: int
    seconds: float  # Wall time of the scoring (the users' positives were read before).
    scores: int  # Scores computed: ranked users x items.

    @property
    def capped(self) -> bool:
        """Whether only a sample of the users was ranked."""
        return self.metrics.users < self.users_with_held_out

    @property
    def users_text(self) -> str:
        """Which users were ranked, for logs: ``all 6040 users``, ``a fixed-seed sample of ...``."""
        if self.capped:
            return (
                f"a fixed-seed sample of {self.metrics.users} of {self.users_with_held_out} users"
            )
        return f"all {self.metrics.users} users"


def select_users(users: np.ndarray, max_users: int, seed: int = SAMPLE_SEED) -> np.ndarray:
    """Positions into ``users`` to rank, ascending: all of them, or ``max_users`` (0: no cap).

    The sample is the first ``max_users`` of one fixed-seed permutation, so a smaller cap's users
    are among a larger one's (the training curve's among ``evaluate``'s).
    """
    n = len(users)
    if max_users <= 0 or max_users >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:max_users])


@dataclasses.dataclass(frozen=True)
class _RankedUsers:
    """The users a ``FullCatalogEval`` ranks, read from the records once."""

    users: np.ndarray  # [m] user indices, ascending.
    held_out: np.ndarray  # [m] their held-out items.
    # Their training positives as CSR: [m + 2] row splits (row m, empty, is the padding user's)
    # and the items.
    splits: np.ndarray
    items: np.ndarray
    users_with_held_out: int  # Before the cap.
    item_counts: np.ndarray  # [num_items] training positives per item, over every user.


class FullCatalogEval:
    """Ranks ``model``'s held-out items over the full catalog; build once, call per evaluation.

    The users and their positives are read from the records on the first call and kept, so a
    training run pays for that once.

    Args:
        model: a scorer with NeuMF's interface (``item_side``, ``score_grid``, ``num_items``).
        strategy: the strategy ``model`` lives under; users are split over its replicas.
        meta: the prepared dataset, as ``read_metadata`` gives it (not a ``split`` view).
        data_dir: its folder.
        max_users: users to rank at most (a fixed-seed sample); 0: every user.
        dtype: the compute dtype of ``score``. float32 unless you know better: among thousands
            of items, float16 or bfloat16 logits tie often, and ties count against the positive.
        pairs_per_step: scores per replica per step (users per step: this over the items).
        split: the held-out split ranked (``SPLITS``): ``test``, or ``validation`` where the
            dataset has one.
    """

    def __init__(
        self,
        model,
        strategy: tf.distribute.Strategy,
        meta: DatasetMetadata,
        data_dir: str,
        max_users: int,
        dtype: tf.DType = tf.float32,
        pairs_per_step: int = PAIRS_PER_STEP,
        split: str = SPLIT_TEST,
    ):
        self.model = model
        self.strategy = strategy
        self.meta = meta
        self.split = split
        self.split_meta = meta.split(split)  # Refuses an unknown split, or a missing one.
        self.data_dir = data_dir
        self.max_users = max_users
        self.dtype = dtype
        self.pairs_per_step = pairs_per_step
        replicas = strategy.num_replicas_in_sync
        self.num_items = meta.num_items
        per_replica = math.ceil(self.split_meta.num_eval_users / replicas)
        self.users_per_step = max(1, min(pairs_per_step // meta.num_items, per_replica))
        self._ranked: _RankedUsers | None = None
        self._trained: tuple[np.ndarray, np.ndarray] | None = None  # Shared with for_split's.
        self._loop = metrics.summing_loop(strategy, self._step)

    def __call__(self, show_progress: bool = False) -> FullCatalogMetrics:
        """The metrics of the model's current weights.

        Args:
            show_progress: report the ranking's progress (``console.progress``); not where the
                caller already shows one (the training loop's evaluation).
        """
        ranked = self._users()
        replicas = self.strategy.num_replicas_in_sync
        steps = math.ceil(len(ranked.users) / (replicas * self.users_per_step))
        dist = input_pipeline.distribute(self.strategy, self._dataset_fn(ranked, steps))
        t0 = time.perf_counter()
        hits, ndcg, users = 0, 0.0, 0
        iterator = iter(dist)
        per_step = replicas * self.users_per_step
        shown = (
            console.progress("full-catalog ranking", len(ranked.users), "users")
            if show_progress
            else contextlib.nullcontext()
        )
        with shown as bar:
            # In chunks of steps, so that a long ranking (ml-20m: minutes) shows its progress.
            for first in range(0, steps, STEPS_PER_REPORT):
                n = min(STEPS_PER_REPORT, steps - first)
                h, d, u = self._loop(iterator, tf.constant(n))
                hits, ndcg, users = hits + int(h), ndcg + float(d), users + int(u)
                if bar is not None:
                    bar.update(min((first + n) * per_step, len(ranked.users)))
        seconds = time.perf_counter() - t0
        result = metrics.RankingMetrics(hits, ndcg, users)
        return FullCatalogMetrics(
            result, ranked.users_with_held_out, seconds, result.users * self.num_items
        )

    def training_item_counts(self) -> np.ndarray:
        """``[num_items]`` training positives per item over every user: popularity's scores."""
        return self._users().item_counts

    def training_positives(self) -> tuple[np.ndarray, np.ndarray]:
        """Every user's training positives as CSR ``(row_splits, items)`` (read once)."""
        return self._training_positives()

    def for_model(self, model) -> FullCatalogEval:
        """The same ranking (users, held-out items, masks) for another scorer of the dataset.

        The records are read once, by whichever of the two ranks first.
        """
        other = FullCatalogEval(model, self.strategy, self.meta, self.data_dir, self.max_users,
                                self.dtype, self.pairs_per_step, self.split)  # fmt: skip
        other._ranked = self._users()
        return other

    def for_split(self, split: str) -> FullCatalogEval:
        """The same model ranked on another held-out split.

        Its users are read on its first call; the training positives are this one's.
        """
        other = FullCatalogEval(self.model, self.strategy, self.meta, self.data_dir, self.max_users,
                                self.dtype, self.pairs_per_step, split)  # fmt: skip
        other._trained = self._training_positives()
        return other

    def _users(self) -> _RankedUsers:
        if self._ranked is None:
            self._ranked = self._read_users()
        return self._ranked

    def _training_positives(self) -> tuple[np.ndarray, np.ndarray]:
        if self._trained is None:
            train_files = self.meta.train_file_paths(self.data_dir, 0)
            with input_pipeline.naming_damaged_files(train_files):
                self._trained = positives.training_positives(self.meta, self.data_dir)
        return self._trained

    def _read_users(self) -> _RankedUsers:
        """The ranked users, their held-out items, and the items masked for them as CSR."""
        trained = self._training_positives()
        users, held_out = _held_out(self.split_meta, self.data_dir)
        all_splits, all_items = excluded_items(self.meta, self.data_dir, self.split, trained)
        keep = select_users(users, self.max_users)
        starts = all_splits[users[keep]]
        lengths = all_splits[users[keep] + 1] - starts
        splits = np.zeros(len(keep) + 2, np.int64)
        np.cumsum(lengths, out=splits[1:-1])
        splits[-1] = splits[-2]
        items = all_items[_ranges(starts, lengths)]
        counts = np.bincount(trained[1], minlength=self.num_items)  # Training positives only.
        return _RankedUsers(users[keep], held_out[keep], splits, items, len(users), counts)

    def _dataset_fn(self, ranked: _RankedUsers, steps: int):
        """Per replica and step: users, held-out items, padding flags, the excluded-items mask."""
        r, b, n = self.strategy.num_replicas_in_sync, self.users_per_step, self.num_items
        m = len(ranked.users)
        rows = np.concatenate([np.arange(m), np.full(steps * r * b - m, m)])  # m: padding.
        rows = rows.reshape(steps, r, b)
        users = np.append(ranked.users, 0)
        held_out = np.append(ranked.held_out, 0)
        splits, items = ranked.splits, ranked.items

        @tf.autograph.experimental.do_not_convert  # Plain graph code: traced as written.
        def features(row):
            seen = tf.gather(tf.RaggedTensor.from_row_splits(items, splits), row)
            where = tf.stack([seen.value_rowids(), seen.flat_values], axis=1)
            mask = tf.scatter_nd(where, tf.ones_like(seen.flat_values, tf.int32), [b, n]) > 0
            return {
                "user": tf.gather(users, row),
                "positive": tf.gather(held_out, row),
                "evaluated": row < m,
                "excluded": mask,
            }

        def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
            local = r // ctx.num_input_pipelines
            i = ctx.input_pipeline_id
            mine = rows[:, i * local : (i + 1) * local].reshape(-1, b)  # Step-major, replica-minor.
            ds = tf.data.Dataset.from_tensor_slices(mine)
            return ds.map(features, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)

        return dataset_fn

    def _step(self, batch):
        items = self.model.item_side(self.dtype)
        scores = self.model.score_grid(batch["user"], items, self.dtype)
        return metrics.full_catalog_sums(
            scores, batch["excluded"], batch["positive"], batch["evaluated"]
        )


def excluded_items(
    meta: DatasetMetadata,
    data_dir: str,
    split: str,
    trained: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(row_splits, items)``: per user, the items not ranked when ranking ``split``, as CSR.

    The training positives (``trained``, read if not given), and for the ``test`` split of a
    dataset with a validation split also each user's validation item (the module's docstring
    says why the test item stays a candidate of the validation split). Seen-only items
    (``--min-rating``, ``--positive-events``) are masked in both splits: the sampled metrics
    never draw them as negatives either, and as they are never a held-out positive, masking them
    says nothing about which item is.
    """
    if trained is None:
        trained = positives.training_positives(meta, data_dir)
    splits, items = trained
    n = meta.num_items
    extra = []
    if split == SPLIT_TEST and meta.has_validation:
        users, earlier = _held_out(meta.split(SPLIT_VALIDATION), data_dir)
        extra.append(users * n + earlier)
    if meta.num_seen_only:
        users, seen = positives.seen_only_items(meta, data_dir)
        extra.append(users * n + seen)
    if not extra:
        return splits, items
    owners = np.repeat(np.arange(meta.num_users, dtype=np.int64), np.diff(splits))
    pairs = np.unique(np.concatenate([owners * n + items, *extra]))
    row_splits = np.zeros(meta.num_users + 1, np.int64)
    np.cumsum(np.bincount(pairs // n, minlength=meta.num_users), out=row_splits[1:])
    return row_splits, (pairs % n).astype(np.int64)


def _held_out(split_meta: DatasetMetadata, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """``positives.held_out_items`` of one split's view, naming a damaged file."""
    with input_pipeline.naming_damaged_files(split_meta.eval_file_paths(data_dir)):
        return positives.held_out_items(split_meta, data_dir)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concat(arange(s, s + l) for s, l)``, vectorized."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.repeat(starts, lengths) + offsets
