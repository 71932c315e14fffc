"""The clean stage of Beam data prep: per bucket of raw users, then the global decisions.

Rows go to buckets by a hash of the raw user id that every process computes alike (one
shuffle); per bucket the latest of repeated (user, item) rows decides whether the pair is a
positive or seen only, and users with too few positives go (``--min-ratings``). A global
combine of the buckets' per-user and per-item counts drops users who interacted with every item
(the few users who could, found by :func:`covering_bound`, send their item sets) and yields the
sorted vocabularies (contiguous ids in ascending raw-id order: numeric, or str order) and the
plan (``prep_plan.make_plan``): the :class:`Summary`, a side input of the shards
(:func:`to_shards`).
"""

from __future__ import annotations

import dataclasses
import functools

import apache_beam as beam
import numpy as np

from training_core.data import prep_plan, read_errors, sampling
from training_core.data.config import PrepareConfig
from training_core.data.prepare_beam_read import ReadDecision, Reading

_HASH = np.uint64(0x9E3779B97F4A7C15)


def _split_by(key: np.ndarray, rows: tuple[np.ndarray, ...]):
    """(key value, rows with that key) for each key value present; rows keep their order."""
    if not len(key):
        return []
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    bounds = np.flatnonzero(np.diff(sorted_key)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(key)]])
    return [
        (int(sorted_key[s]), tuple(a[order[s:e]] for a in rows))
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


def _id_hash(ids: np.ndarray) -> np.ndarray:
    """A uint64 hash of each raw id, the same in every process and on every machine.

    Integer ids are mixed by a multiplication; string ids hash their UTF-8 bytes (pandas'
    SipHash under its fixed key), never Python's ``hash``, which each process salts.
    """
    if ids.dtype == object:
        from pandas.util import hash_array

        return hash_array(ids, encoding="utf8", categorize=False)
    return ids.astype(np.uint64) * _HASH


def to_buckets(rows, num_buckets: int):
    """Splits a chunk's rows by a hash of the raw user id."""
    mixed = _id_hash(rows[0])
    return _split_by(((mixed >> np.uint64(32)) % np.uint64(num_buckets)).astype(np.int64), rows)


def concat(parts) -> tuple[np.ndarray, ...]:
    """Row tuples (as ``prepare_beam_read.read_chunk`` yields them) joined column by column."""
    parts = list(parts)
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0])))


def _factorized(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """int64 keys that sort as the raw ids do, and the raw id of each key.

    Integer ids are their own keys (None); string ids get their rank among the distinct ids
    (str order), so that every sort and comparison after this one is on integers.
    """
    if ids.dtype != object:
        return ids, None
    import pandas as pd

    codes, uniques = pd.factorize(ids, sort=True)
    return codes.astype(np.int64, copy=False), np.asarray(uniques, dtype=object)


def _raw(keys: np.ndarray, uniques: np.ndarray | None) -> np.ndarray:
    """The raw ids of :func:`_factorized`'s keys."""
    return keys if uniques is None else uniques[keys]


@dataclasses.dataclass(frozen=True)
class BucketSummary:
    """What the global decisions need from one bucket of raw users.

    Users are those with enough positives (``--min-ratings``); every item array counts their
    pairs only. A user's total (their positive and seen-only items) bounds what they cover.
    """

    users: np.ndarray  # Raw ids, ascending.
    counts: np.ndarray  # Their distinct positive items.
    items: np.ndarray  # Raw ids of their positive items, ascending.
    item_users: np.ndarray  # Users holding each as a positive.
    item_min_total: np.ndarray  # The fewest items (positive or seen only) of those users.
    seen_items: np.ndarray  # Raw ids of their seen-only items, ascending.
    seen_item_users: np.ndarray  # Users holding each as a seen-only pair.
    rows_read: int
    duplicate_pairs_dropped: int
    users_below_min_ratings: int
    single_interaction_users: int


def _group_counts(keys: np.ndarray, values: np.ndarray | None = None):
    """Distinct int64 ``keys`` ascending, the count of each, and the least ``values`` of each."""
    ids, counts = np.unique(keys, return_counts=True)
    if values is None:
        return ids, counts, None
    order = np.lexsort((values, keys))
    return ids, counts, values[order][np.cumsum(counts) - counts]


def clean_bucket(element, min_ratings: int, decision: ReadDecision):
    """Keeps the latest of repeated (user, item) rows and the users with enough positives.

    As ``indexing.index_interactions``: the latest row of a pair decides whether the pair is a
    positive or seen only; only positives count towards ``min_ratings``. Yields the kept pairs
    (positive and seen-only, of the users kept) and a :class:`BucketSummary` on ``summary``.
    ``decision`` is not read: waiting for it, no bucket is cleaned before the ids' kinds are
    known not to mix (a failed decision fails the job first).
    """
    del decision
    _, parts = element
    rows = concat(parts)
    n = len(rows[0])
    (user_key, user_raw), (item_key, item_raw) = _factorized(rows[0]), _factorized(rows[1])
    # Sort by (user, item, time, input order); each pair's last row decides it.
    idx = np.lexsort((rows[3], rows[2], item_key, user_key))
    users, items = user_key[idx], item_key[idx]
    last = np.ones(n, dtype=bool)
    last[:-1] = (users[1:] != users[:-1]) | (items[1:] != items[:-1])
    idx = idx[last]
    users, positive = user_key[idx], rows[4][idx]
    ids, counts, _ = _group_counts(users[positive])
    few = int((counts < min_ratings).sum())
    single = int(((counts < 2) & (counts >= min_ratings)).sum())
    _, good = _Vocab(ids[counts >= max(min_ratings, 2)]).lookup(users)
    idx, positive = idx[good], positive[good]
    users, items = user_key[idx], item_key[idx]
    ids, totals, _ = _group_counts(users)  # The pairs are grouped by user, ascending.
    counts = np.zeros(len(ids), np.int64)
    if len(ids):
        counts = np.add.reduceat(positive.astype(np.int64), np.cumsum(totals) - totals)
    user_total = np.repeat(totals, totals)
    pos_items, item_users, item_min_total = _group_counts(items[positive], user_total[positive])
    seen_items, seen_item_users, _ = _group_counts(items[~positive])
    yield beam.pvalue.TaggedOutput(
        "summary",
        BucketSummary(
            users=_raw(ids, user_raw),
            counts=counts,
            items=_raw(pos_items, item_raw),
            item_users=item_users,
            item_min_total=item_min_total,
            seen_items=_raw(seen_items, item_raw),
            seen_item_users=seen_item_users,
            rows_read=n,
            duplicate_pairs_dropped=n - int(last.sum()),
            users_below_min_ratings=few,
            single_interaction_users=single,
        ),
    )
    if len(idx):
        yield tuple(a[idx] for a in rows)


def covering_bound(buckets: list[BucketSummary]) -> int:
    """Users with fewer distinct items than this never cover every item (one worker).

    A user is dropped for interacting with every item left. An item held as a positive by a
    user of fewer than ``L`` items stays as long as at most ``L`` items are left; the largest
    ``L`` that many such items guarantee (``L`` items with a holder under ``L``) bounds the
    items left from below, so only users with at least ``L`` items need their item sets
    (:func:`covering_sets`).
    """
    if not buckets:
        return 0
    items = np.concatenate([b.items for b in buckets])
    least = np.concatenate([b.item_min_total for b in buckets])
    if not len(items):
        return 0
    order = np.lexsort((least, _factorized(items)[0]))
    items, least = items[order], least[order]
    first = np.ones(len(items), dtype=bool)
    first[1:] = items[1:] != items[:-1]
    least = np.sort(least[first])  # Per item present, its holder with the fewest items.
    bound = len(least)
    while True:
        below = int(np.searchsorted(least, bound, side="left"))
        if below == bound:
            return bound
        bound = below


def covering_sets(rows, bound: int):
    """(user, positive items, seen-only items) of a bucket's users with ``bound`` items or more."""
    users, items, _, _, positive = rows
    starts = np.flatnonzero(np.concatenate([[True], users[1:] != users[:-1]]))  # By user.
    ends = np.append(starts[1:], len(users))
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        if end - start >= bound:
            mine = slice(start, end)
            yield users[start], items[mine][positive[mine]], items[mine][~positive[mine]]


@dataclasses.dataclass(frozen=True)
class Summary:
    """The global decisions: vocabularies, counts and the plan (a side input of the shards)."""

    user_vocab: np.ndarray
    item_vocab: np.ndarray
    stats: dict[str, int]
    plan: prep_plan.Plan
    num_seen_only: int  # Seen-only pairs kept (of users kept, on items kept).
    id_types: tuple[str, str]  # The users' and the items' (ids.ID_KINDS).

    @functools.cached_property
    def users(self) -> _Vocab:
        """The user vocabulary's lookup, built once per worker that reads this side input."""
        return _Vocab(self.user_vocab)

    @functools.cached_property
    def items(self) -> _Vocab:
        """The item vocabulary's lookup, likewise."""
        return _Vocab(self.item_vocab)


def _merge_counts(ids: list[np.ndarray], counts: list[np.ndarray]):
    """Distinct ids ascending and the sum of their counts over the parts."""
    merged, inverse = np.unique(np.concatenate(ids), return_inverse=True)
    total = np.bincount(inverse.reshape(-1), weights=np.concatenate(counts), minlength=len(merged))
    return merged, total.astype(np.int64)


class _Vocab:
    """An ascending vocabulary that tells each id's index in it.

    String ids go through a hash table (built once): a binary search would compare Python strs.
    """

    def __init__(self, vocab: np.ndarray):
        self.vocab = vocab
        self._table = None
        if vocab.dtype == object and len(vocab):
            import pandas as pd

            self._table = pd.Index(vocab)

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each id's index, and whether it is there (index 0 where it is not)."""
        vocab = self.vocab
        if not len(vocab):
            return np.zeros(len(ids), np.int64), np.zeros(len(ids), dtype=bool)
        if self._table is not None:
            index = self._table.get_indexer(ids).astype(np.int64)
            return np.maximum(index, 0), index >= 0
        index = np.searchsorted(vocab, ids)
        known = vocab[np.minimum(index, len(vocab) - 1)] == ids
        return index, np.asarray(known, dtype=bool)


def _drop_users_with_every_item(
    users: np.ndarray, item_ids: np.ndarray, item_users: np.ndarray, covering: list
) -> tuple[np.ndarray, np.ndarray, list[list[np.ndarray]]]:
    """Drops, in rounds, the users whose positive and seen-only items cover every item left.

    As ``index_interactions``: an item is left while a user kept holds it as a positive.
    ``users``, ``item_ids``: ascending raw ids; ``item_users``: each item's positive holders;
    ``covering``: :func:`covering_sets`' (user, positive items, seen-only items), the only users
    who can be dropped. Returns the users kept (a mask), the items left (a mask) and, per round,
    the seen-only items of each user dropped.
    """
    item_users = item_users.copy()
    alive = np.ones(len(users), dtype=bool)
    user_index, item_index = _Vocab(users), _Vocab(item_ids)
    # Per covering user: their index, their positives' and seen-only items' indices (those that
    # are some user's positive), and their seen-only items.
    sets = []
    for user, pos, seen in covering:
        index, _ = user_index.lookup(np.asarray([user], dtype=users.dtype))
        seen_index, known = item_index.lookup(seen)
        sets.append((int(index[0]), item_index.lookup(pos)[0], seen_index[known], seen))
    rounds = []
    while True:
        present = item_users > 0
        num_items = int(present.sum())
        full = [
            s for s in sets if alive[s[0]] and len(s[1]) + int(present[s[2]].sum()) >= num_items
        ]
        if not full:
            return alive, present, rounds
        for u, pos, _, _ in full:
            alive[u] = False
            np.subtract.at(item_users, pos, 1)
        rounds.append([seen for _, _, _, seen in full])


def summarize(
    buckets: list[BucketSummary],
    covering: list,
    decision: ReadDecision,
    config: PrepareConfig,
    fmt: str,
    source_sha: str,
    input_path: str,
) -> Summary:
    """Merges the buckets' counts into the single path's decisions and plan (one worker).

    Users who interacted with every item left are dropped, in rounds, as ``index_interactions``
    drops them; only the users :func:`covering_sets` gave can be (see :func:`covering_bound`).
    """
    rows_read = sum(b.rows_read for b in buckets)
    if rows_read == 0:
        raise read_errors.DataError(
            f"{input_path}: no interactions (the table has a header but no rows)"
        )
    stats = {
        "rows_read": rows_read,
        "duplicate_pairs_dropped": sum(b.duplicate_pairs_dropped for b in buckets),
        "users_below_min_ratings": sum(b.users_below_min_ratings for b in buckets),
        "single_interaction_users": sum(b.single_interaction_users for b in buckets),
    }
    users = np.concatenate([b.users for b in buckets])
    counts = np.concatenate([b.counts for b in buckets])
    order = np.argsort(users, kind="stable")
    users, counts = users[order], counts[order]
    item_ids, item_users = _merge_counts(
        [b.items for b in buckets], [b.item_users for b in buckets]
    )
    seen_ids, seen_users = _merge_counts(
        [b.seen_items for b in buckets], [b.seen_item_users for b in buckets]
    )
    alive, present, dropped = _drop_users_with_every_item(users, item_ids, item_users, covering)
    if dropped:
        stats["users_with_every_item"] = sum(len(d) for d in dropped)
    if Reading.of(config).rule.active:  # As the single path counts them.
        stats.update(decision.rule_counts)
    if not alive.any():
        raise prep_plan.nothing_left(stats, config.min_ratings)
    stats["rows_kept"] = int(counts[alive].sum())
    user_vocab, item_vocab = users[alive], item_ids[present]
    # Seen-only pairs kept: on items kept, less those of the users dropped.
    kept_items = _Vocab(item_vocab)
    num_seen_only = int(seen_users[kept_items.lookup(seen_ids)[1]].sum())
    for seen in (seen for d in dropped for seen in d):
        num_seen_only -= int(kept_items.lookup(seen)[1].sum())
    if Reading.of(config).rule.active:
        stats["seen_only_pairs"] = num_seen_only
    decided = prep_plan.make_plan(
        config,
        fmt,
        source_sha,
        stats["rows_kept"],
        len(user_vocab),
        len(item_vocab),
        int(sampling.has_validation_item(counts[alive]).sum()),
    )
    return Summary(user_vocab, item_vocab, stats, decided, num_seen_only, decision.id_types)


def to_shards(rows, summary: Summary):
    """Contiguous ids for a bucket's kept pairs, split by ``user_index % num_shards``.

    Pairs of users dropped, and seen-only pairs on items dropped, go.
    """
    users, items, ts, order, positive = rows
    uidx, known = summary.users.lookup(users)
    iidx, item_known = summary.items.lookup(items)
    known &= item_known
    parts = (uidx[known], iidx[known], ts[known], order[known], positive[known])
    return _split_by(parts[0] % summary.plan.num_shards, parts)
