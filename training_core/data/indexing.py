"""Raw interactions cleaned and indexed in memory, the single-machine engine's (``IndexedData``).

Duplicates (the latest row of a pair decides it), minimum ratings, users with every item;
contiguous ids in ascending raw-id order; each user's positives in time order, the rows that
are no positive kept aside as seen-only pairs (which no negative draw picks). Every step is a
NumPy pass or sort over whole columns, never a Python loop over rows. :func:`make_shard` cuts
the result into the shards ``prepare`` writes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging

import numpy as np

from training_core.data import io as rio
from training_core.data import sampling
from training_core.data.ids import ID_INT64
from training_core.data.prep_plan import nothing_left

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class IndexedData:
    """Clean interactions with contiguous ids, grouped by user in time order."""

    user_vocab: np.ndarray  # Raw id of each user index (int64, or an object array of str).
    item_vocab: np.ndarray  # Raw id of each item index, likewise.
    offsets: np.ndarray  # Per user index, into items.
    items: np.ndarray  # Item indices, each user's oldest first, the test item last.
    stats: dict[str, int]
    # Each user's seen-only items (rows that are no positive: ``sampling.Shard.seen_items``),
    # ascending, as CSR over the users; None when the data has none.
    seen_offsets: np.ndarray | None = None
    seen_items: np.ndarray | None = None
    user_id_type: str = ID_INT64  # ids.ID_KINDS, as the reader found them.
    item_id_type: str = ID_INT64
    # Per seen-only item, how many of the user's positives came before it (``Shard.seen_before``).
    seen_before: np.ndarray | None = None

    @property
    def num_users(self) -> int:
        """Users kept."""
        return len(self.user_vocab)

    @property
    def num_items(self) -> int:
        """Items kept."""
        return len(self.item_vocab)

    @property
    def num_seen_only(self) -> int:
        """Seen-only (user, item) pairs kept."""
        return 0 if self.seen_items is None else len(self.seen_items)


def index_interactions(data: rio.Interactions, min_ratings: int) -> IndexedData:
    """Cleans and indexes raw interactions; each decision is logged and counted.

    - A user who rated an item several times keeps the latest interaction (ties: the later row);
      whether that row is a positive decides whether the pair is one (``data.positive``).
    - Only positives count from here on: users with fewer than ``min_ratings`` distinct positive
      items are dropped, as the reference does.
    - Users left with a single positive are dropped: leave-one-out leaves them nothing to train.
    - Ids are remapped to ``0..n-1`` in ascending raw-id order (vocab files keep the raw ids),
      over the positives of the users kept.
    - Users who interacted with every item (positives and seen-only pairs together) are dropped:
      no negative exists for them.
    - The seen-only pairs of the users kept, on items kept, are kept beside the positives.
    """
    n = len(data)
    stats = {"rows_read": n}
    ts = data.timestamps
    # Work in pairs on two threads: NumPy's passes and sorts (and pandas' hashing) release the
    # GIL. The grouping order, by (user, time) with ties in file order, is taken over every row
    # while the check for repeated pairs runs; every later step only drops rows, which keeps
    # the order of the rest, so the grouping order of the rows kept is this order restricted
    # to them.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        item_codes = pool.submit(_factorize, data.items)
        user_vocab, users = _factorize(data.users)
        item_vocab, items = item_codes.result()
        grouping = pool.submit(_stable_order, users, ts)
        kept = _latest_of_each_pair(users, items, ts, len(item_vocab))
        order = grouping.result()
    stats["duplicate_pairs_dropped"] = 0 if kept is None else int(n - kept.sum())
    if stats["duplicate_pairs_dropped"]:
        log.warning(
            "%d repeated (user, item) rows dropped; the latest of each pair is kept",
            stats["duplicate_pairs_dropped"],
        )
    seen_rows = None  # The rows kept that are seen-only pairs; None: there is no rule.
    if data.positive is not None:
        seen_rows = ~data.positive if kept is None else kept & ~data.positive
        kept = data.positive if kept is None else kept & data.positive
        stats.update(data.rule_counts)
        stats["seen_only_pairs"] = 0  # Those kept: set below.
        if seen_rows.any():
            log.info(
                "%d (user, item) pairs are seen only (%s): never positives nor negatives",
                int(seen_rows.sum()),
                ", ".join(f"{k} {v} rows" for k, v in sorted(data.rule_counts.items())),
            )

    # ``kept`` stays None while every row is kept (most tables): no pass filters the rows then.
    def rows_kept(values: np.ndarray) -> np.ndarray:
        return values if kept is None else values[kept]

    counts = np.bincount(rows_kept(users), minlength=len(user_vocab))
    threshold = max(min_ratings, 2)
    good_user = counts >= threshold
    few = int(((counts > 0) & (counts < min_ratings)).sum())
    single = int(((counts > 0) & (counts < 2) & (counts >= min_ratings)).sum())
    stats["users_below_min_ratings"] = few
    stats["single_interaction_users"] = single
    if few:
        log.info("%d users with fewer than %d ratings dropped (--min-ratings)", few, min_ratings)
    if single:
        log.warning(
            "%d users with a single interaction dropped: leave-one-out leaves them no "
            "training data",
            single,
        )

    # Items are indexed over the users kept; users with every item are then dropped too.
    seen_users = seen_items = seen_at = None
    if seen_rows is not None and seen_rows.any():
        seen_at = np.flatnonzero(seen_rows)
        seen_users, seen_items = users[seen_at], items[seen_at]
    while True:
        if not good_user.all():
            kept = good_user[users] if kept is None else kept & good_user[users]
            counts = np.bincount(rows_kept(users), minlength=len(user_vocab))
        present = np.zeros(len(item_vocab), dtype=bool)
        present[rows_kept(items)] = True
        num_items = int(present.sum())
        seen = counts
        if seen_users is not None:
            on_kept = good_user[seen_users] & present[seen_items]
            seen_users, seen_items = seen_users[on_kept], seen_items[on_kept]
            seen_at = seen_at[on_kept]
            seen = counts + np.bincount(seen_users, minlength=len(user_vocab))
        full = (seen >= num_items) & (counts > 0)
        if not full.any():
            break
        stats["users_with_every_item"] = stats.get("users_with_every_item", 0) + int(full.sum())
        log.warning(
            "%d users interacted with every item and were dropped: no negatives exist",
            int(full.sum()),
        )
        good_user &= ~full
    seen_before = None
    if kept is not None:
        if not kept.any():
            raise nothing_left(stats, min_ratings)
        if seen_at is not None:
            seen_before = _positives_before(order, kept, seen_at, users, counts)
        order = order[kept[order]]
    user_present = counts > 0
    stats["rows_kept"] = int(len(order))
    counts = counts[user_present]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    grouped_items = items[order]
    item_index = None
    if num_items < len(item_vocab):
        item_index = np.cumsum(present) - 1
        grouped_items = item_index[grouped_items]
    seen_offsets = None
    if seen_users is not None:
        user_index = np.cumsum(user_present) - 1
        seen_offsets, seen_items, seen_before = _seen_only_sets(
            user_index[seen_users],
            seen_items if item_index is None else item_index[seen_items],
            seen_before,
            int(user_present.sum()),
            num_items,
        )
        stats["seen_only_pairs"] = int(len(seen_items))
    return IndexedData(
        user_vocab[user_present],
        item_vocab[present],
        offsets,
        grouped_items,
        stats,
        seen_offsets,
        seen_items,
        data.user_id_type,
        data.item_id_type,
        seen_before,
    )


def _positives_before(
    order: np.ndarray, positive: np.ndarray, rows: np.ndarray, users: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """For each of ``rows``, how many positive rows of its user come before it in ``order``.

    ``order`` groups the rows by user in time order (ties in file order); ``positive`` marks
    the positive rows kept; ``counts`` is each user's number of them.
    """
    along = positive[order].astype(np.int64)
    before = np.cumsum(along)
    before -= along  # Positives strictly before each place in the order.
    place = np.empty(len(order), np.int64)
    place[order] = np.arange(len(order), dtype=np.int64)
    earlier_users = np.cumsum(counts) - counts
    return before[place[rows]] - earlier_users[users[rows]]


def _seen_only_sets(
    users: np.ndarray, items: np.ndarray, before: np.ndarray, num_users: int, num_items: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seen-only pairs as CSR over ``num_users`` users, each user's items ascending.

    ``before`` (``IndexedData.seen_before``) is carried along in the same order.
    """
    pairs = users * num_items + items
    by_pair = np.argsort(pairs, kind="stable")
    offsets = np.zeros(num_users + 1, np.int64)
    np.cumsum(np.bincount(users, minlength=num_users), out=offsets[1:])
    return offsets, pairs[by_pair] % num_items, before[by_pair]


def _latest_of_each_pair(
    users: np.ndarray, items: np.ndarray, ts: np.ndarray, num_items: int
) -> np.ndarray | None:
    """The rows to keep when a user rated an item more than once, or None when none did.

    Of each repeated (user, item) pair the latest row is kept (ties: the later row in the
    file). One sort tells that no pair repeats, which is the case for most tables.
    """
    pair = users * num_items + items
    # Timsort finds the runs of a file grouped by user (as MovieLens writes them) and takes a
    # fraction of quicksort's time there; on a shuffled file quicksort is the faster.
    sorted_pair = np.sort(pair, kind="stable" if _mostly_ascending(pair) else "quicksort")
    if len(pair) < 2 or not (sorted_pair[1:] == sorted_pair[:-1]).any():
        return None
    del sorted_pair
    order = np.lexsort((ts, items, users))  # Stable: equal keys stay in file order.
    pair = pair[order]
    last_of_pair = np.ones(len(pair), dtype=bool)
    last_of_pair[:-1] = pair[1:] != pair[:-1]
    kept = np.zeros(len(pair), dtype=bool)
    kept[order[last_of_pair]] = True
    return kept


def _mostly_ascending(values: np.ndarray) -> bool:
    """Whether most neighbours are in order: a stable sort (timsort) finds long runs then."""
    return len(values) > 1 and np.count_nonzero(values[1:] >= values[:-1]) >= 0.75 * len(values)


# Ids spread over at most this many values per row (and this many in all) are indexed through
# a table over their range: one pass, several times faster than hashing them.
_DENSE_RANGE_PER_ROW = 8
_DENSE_RANGE_MAX = 1 << 28


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and each value's index among them.

    Ids over a range not much wider than the rows (MovieLens' are) go through a table over the
    range; others through a hash (pandas), faster than ``np.unique(return_inverse=True)``.
    Same result either way. String ids (an object array) go to :func:`_factorize_strings`.
    """
    if values.dtype == object:
        return _factorize_strings(values)
    if len(values):
        lo, hi = int(values.min()), int(values.max())
        span = hi - lo + 1
        if span <= min(_DENSE_RANGE_PER_ROW * len(values) + 1024, _DENSE_RANGE_MAX):
            shifted = values - lo
            present = np.zeros(span, dtype=bool)
            present[shifted] = True
            index = np.cumsum(present, dtype=np.int64)
            index -= 1
            return np.flatnonzero(present) + lo, index[shifted]
    import pandas as pd

    codes, uniques = pd.factorize(values, sort=True)
    return np.asarray(uniques, dtype=np.int64), codes.astype(np.int64, copy=False)


def _factorize_strings(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_factorize` for an object array of ``str``: the vocabulary in Python's str order.

    Arrow's dictionary encoding (a hash in C) then a sort of the distinct values alone: about a
    second for 5M rows of 200k ids, where pandas takes half again as long and ``np.unique`` on
    objects compares Python strings throughout. Arrow sorts strings by their UTF-8 bytes, which
    is Unicode code point order, Python's str order.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pa.array(values, type=pa.string()).dictionary_encode()
    distinct = encoded.dictionary
    order = pc.sort_indices(distinct).to_numpy()
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    vocab = np.asarray(distinct.take(pa.array(order)).to_pylist(), dtype=object)
    return vocab, rank[encoded.indices.to_numpy(zero_copy_only=False)]


def _stable_order(users: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Indices that sort by (user, timestamp), ties in array order.

    One stable sort of a combined int64 key (a lexsort when it could overflow). Timsort takes
    rows grouped by user (as MovieLens writes them) in a few passes; other rows are grouped by
    user first with a radix sort (:func:`_group_by_user`), which costs less than the sort it
    saves.
    """
    if len(ts) == 0:
        return np.zeros(0, dtype=np.int64)
    t_min, t_max = int(ts.min()), int(ts.max())
    span = t_max - t_min + 1
    if (int(users.max()) + 1) * span >= 2**62:
        return np.lexsort((ts, users))
    key = ts - t_min  # In [0, span): the sum below stays under 2**62.
    key += users * span
    if _mostly_ascending(users):
        return np.argsort(key, kind="stable")
    grouped = _group_by_user(users)
    return grouped.take(np.argsort(key.take(grouped), kind="stable"))


def _group_by_user(users: np.ndarray) -> np.ndarray:
    """A stable order by user code (codes ``>= 0``): a radix sort over 16-bit digits.

    NumPy's stable sort of uint16 is a radix sort, so each digit costs one linear pass.
    """
    order = None
    for shift in range(0, max(int(users.max()).bit_length(), 1), 16):
        digit = users if order is None else users.take(order)
        step = np.argsort(((digit >> shift) & 0xFFFF).astype(np.uint16), kind="stable")
        order = step if order is None else order.take(step)
    return order


def make_shard(data: IndexedData, shard: int, num_shards: int) -> sampling.Shard:
    """The users ``u % num_shards == shard`` and their interactions."""
    users = np.arange(shard, data.num_users, num_shards, dtype=np.int64)
    starts, ends = data.offsets[users], data.offsets[users + 1]
    counts = ends - starts
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    idx = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1], dtype=np.int64)
    if data.seen_items is None:
        return sampling.Shard(shard, users, offsets, data.items[idx], data.num_items)
    seen_offsets, seen_items = _rows_of(data.seen_offsets, data.seen_items, users)
    _, seen_before = _rows_of(data.seen_offsets, data.seen_before, users)
    return sampling.Shard(
        shard,
        users,
        offsets,
        data.items[idx],
        data.num_items,
        seen_offsets,
        seen_items,
        seen_before,
    )


def _rows_of(
    offsets: np.ndarray, values: np.ndarray, users: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The CSR rows ``users`` of ``(offsets, values)``, as a CSR of their own."""
    starts, ends = offsets[users], offsets[users + 1]
    counts = ends - starts
    out = np.zeros(len(users) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    idx = np.repeat(starts - out[:-1], counts) + np.arange(out[-1], dtype=np.int64)
    return out, values[idx]
