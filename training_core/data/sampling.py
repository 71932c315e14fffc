"""Vectorized NCF sampling over one shard of users.

A shard is the set of users with ``user % num_shards == shard`` and all their interactions, in
compressed-row form. Every function here is a pure NumPy function of a shard, its options and a
random generator seeded from (seed, shard, purpose, epoch), so the single-machine path and a
distributed (Beam) path that groups the same users produce the same bytes.

Complement sampling: for a user with sorted interacted items ``p_0 < p_1 < ...`` the r-th item the
user never touched is ``r + #{j : p_j - j <= r}``; one ``searchsorted`` over all users of the shard
maps uniform draws in ``[0, num_items - n_u)`` to never-seen items, with no rejection loop.

Seen-only items (``Shard.seen_items``): pairs the data holds that are no positive (a rating below
``--min-rating``, an event not in ``--positive-events``). They are never positives, and never
negatives or candidates while they are known (see below); ``Shard.seen_before`` places each in
time among the user's positives.

Held-out items: each user's last interaction is the test item (``eval_rows``); with a validation
split, the second-to-last of a user with at least ``VALIDATION_MIN_INTERACTIONS`` is the
validation item (``validation_rows``). Neither is a training positive, except in a refit, where
every interaction is (``train_rows``). Each split draws from its own random stream, so the test
split's bytes do not depend on whether there is a validation split, or a refit.

What each draw may know (docs/model-quality.md, "What training may know"): only what the user
did before it. Training negatives come from every item that is not a training positive, nor a
seen-only item from before the user's first held-out item: the held-out items themselves are
drawn at the rate of any other item (excluding them would tell the model which items the user
will pick: the largest leak a leave-one-out pipeline can have). The validation split's
candidates leave out what came before the validation item (the test item may be drawn); the
test split's leave out everything before the test item, the validation item included. A refit
knows every interaction. Each of these is a :class:`Complement` of its own
(:func:`train_complement`, :func:`split_complement`), and each draw checks it was given the
right one.

Over 500 lines, for one reason: the three samplers (training negatives, eval candidates,
leave-one-out) share the shard's compressed-row form and the complement-sampling helpers, and
the pinned record digests hold them together.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION

EVAL_DISTINCT = "distinct"
EVAL_REFERENCE = "reference"
EVAL_SAMPLINGS = (EVAL_DISTINCT, EVAL_REFERENCE)

_PURPOSE_TRAIN = 1
_PURPOSE_EVAL = 2  # The test split.
_PURPOSE_VALIDATION = 3

# Interactions a user needs for a validation item: one to train on, the validation item, the test
# item. A user with two keeps training on the first and has only a test item.
VALIDATION_MIN_INTERACTIONS = 3


def has_validation_item(counts: np.ndarray) -> np.ndarray:
    """Per user of ``counts`` interactions, whether a validation split holds an item of theirs."""
    return counts >= VALIDATION_MIN_INTERACTIONS


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard's users and their interactions, grouped by user.

    ``items[offsets[k]:offsets[k+1]]`` are user ``users[k]``'s items in time order (oldest first,
    ties in file order); the last one is the test item, the one before it the validation item
    (``has_validation_item``) when there is a validation split. ``seen_items[seen_offsets[k]:
    seen_offsets[k+1]]`` are the user's seen-only items (ascending, none of them a positive of
    the user); ``None`` when the dataset has none, as every dataset before seen-only rows.
    ``seen_before[j]`` is how many of the user's positives came before seen-only item ``j``
    (time, ties in input order): the item is known to a draw that knows that many positives;
    ``None`` places every seen-only item first (known to every draw).
    """

    index: int
    users: np.ndarray  # int64 contiguous user indices, ascending.
    offsets: np.ndarray  # int64, len(users) + 1.
    items: np.ndarray  # int64 contiguous item indices.
    num_items: int
    seen_offsets: np.ndarray | None = None  # int64, len(users) + 1.
    seen_items: np.ndarray | None = None  # int64 item indices, ascending per user.
    seen_before: np.ndarray | None = None  # int64, parallel to seen_items.

    @property
    def counts(self) -> np.ndarray:
        """Interactions per user."""
        return np.diff(self.offsets)

    def held_out(self, validation: bool) -> np.ndarray:
        """A mask over ``items``: the test item of each user, and the validation item if asked."""
        out = np.zeros(len(self.items), dtype=bool)
        out[self.offsets[1:] - 1] = True
        if validation:
            out[self.offsets[self.validation_users() + 1] - 2] = True
        return out

    def validation_users(self) -> np.ndarray:
        """Shard-local indices of the users with a validation item (``has_validation_item``)."""
        return np.flatnonzero(has_validation_item(self.counts))


def shard_rng(seed: int, shard: int, purpose: int, epoch: int = 0) -> np.random.Generator:
    """The generator for one (shard, purpose, epoch): independent of how shards are scheduled."""
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence([seed, shard, purpose, epoch]))
    )


class Complement:
    """Maps ranks in each user's never-seen item set to item indices (see the module docstring).

    With ``d_j = p_j - j`` (non-decreasing within a user) the item of rank ``r`` is
    ``r + #{j : d_j <= r}``; ``_keys`` holds ``user * num_items + d_j`` for the whole shard,
    sorted, so one count over it answers every user at once.
    """

    def __init__(
        self, offsets: np.ndarray, sorted_items: np.ndarray, num_items: int, kind: tuple = ()
    ):
        """Builds the lookup from per-user sorted, distinct excluded items.

        ``kind`` names the draw it was built for (:func:`train_complement`,
        :func:`split_complement`); the draws refuse a complement built for another.
        """
        counts = np.diff(offsets)
        self.kind = kind
        self.num_items = num_items
        self.offsets = offsets
        self.sizes = num_items - counts
        local = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        rank_in_user = np.arange(len(sorted_items), dtype=np.int64) - offsets[local]
        self._d = sorted_items - rank_in_user
        self._keys = local * num_items + self._d
        self._buckets: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def items(self, rows: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """Item index of never-seen rank ``ranks[j]`` of shard-local user ``rows[j]``."""
        rows = rows.astype(np.int64, copy=False)
        q = rows * self.num_items
        q += ranks
        if len(q) > 1 and (q[1:] >= q[:-1]).all():
            below = _count_sorted(self._keys, q, equal_below=True)  # Eval candidates.
        else:
            below = self._count_unsorted(rows, ranks)  # Training negatives.
        below -= self.offsets[rows]
        below += ranks
        return below

    def _count_unsorted(self, rows: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        """``#{keys <= rows * num_items + ranks}`` for queries in any order.

        Each user's ranks are cut into buckets of ``2**shift`` ranks that hold about one key
        each; a table gives the keys below each bucket, and a few steps forward over the keys in
        the query's bucket finish the count: a lookup and a step or two for each query, where a
        binary search over the shard's keys takes about twenty cache-missing steps.
        """
        if self._buckets is None:
            self._buckets = self._build_buckets()
        shift, first_bucket, below_bucket = self._buckets
        count = below_bucket[(ranks >> shift[rows]) + first_bucket[rows]]
        end = self.offsets[rows + 1]
        active = np.flatnonzero(count < end)
        for _ in range(_BUCKET_STEPS):
            if not len(active):
                return count
            active = active[self._d[count[active]] <= ranks[active]]
            count[active] += 1
            active = active[count[active] < end[active]]
        if len(active):  # A crowded bucket (a run of consecutive items): search the rest.
            q = rows[active] * self.num_items + ranks[active]
            count[active] = np.searchsorted(self._keys, q, side="right")
        return count

    def _build_buckets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        counts = np.diff(self.offsets)
        ratio = np.maximum(self.sizes // np.maximum(counts, 1), 1)
        shift = np.log2(ratio).astype(np.int64)  # Floor: about one key per bucket.
        num_buckets = (self.sizes >> shift) + 1
        first_bucket = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(num_buckets, out=first_bucket[1:])
        user = np.repeat(np.arange(len(counts), dtype=np.int64), num_buckets)
        starts = np.arange(first_bucket[-1], dtype=np.int64)  # Each bucket's first rank, as key.
        starts -= first_bucket[user]
        starts <<= shift[user]
        starts += user * self.num_items
        return shift, first_bucket[:-1], _count_sorted(self._keys, starts, equal_below=False)


# Steps forward within a bucket before the rest of the queries are binary-searched.
_BUCKET_STEPS = 8


def _count_sorted(keys: np.ndarray, q: np.ndarray, equal_below: bool) -> np.ndarray:
    """``#{keys <= q_i}`` (``equal_below``) or ``#{keys < q_i}`` for sorted ``keys`` and ``q``.

    One merge of two sorted runs, which a stable sort (timsort) does in linear time: the
    position of ``q_i`` in the merged order, less ``i``, is the number of keys before it.
    """
    first, second = (keys, q) if equal_below else (q, keys)
    merged = np.argsort(np.concatenate([first, second]), kind="stable")
    below = np.flatnonzero(merged >= len(keys)) if equal_below else np.flatnonzero(merged < len(q))
    below -= np.arange(len(q))
    return below


def short_train_users(comp: Complement, num_neg: int) -> int:
    """Users with fewer never-seen items than ``num_neg``: their negatives must repeat."""
    return int((comp.sizes < num_neg).sum())


def _sorted_sets(shard: Shard, known: np.ndarray, own: np.ndarray | None) -> tuple:
    """Per-user sorted excluded items: known positives, the split's own one, known seen-only.

    ``known[k]``: how many of user ``k``'s first positives (time order) are known; ``own[k]``:
    the place of the split's positive among them, excluded as well (it is the candidate row's
    positive), or None. A seen-only item is known when at most ``known[k]`` positives came
    before it. Interactions are distinct per user after prep, and no seen-only item of a user
    is one of their positives, so the two sets are simply joined.
    """
    local = np.arange(len(shard.users), dtype=np.int64)
    counts = shard.counts
    owner = np.repeat(local, counts)
    place = np.arange(len(shard.items), dtype=np.int64) - shard.offsets[owner]
    keep = place < known[owner]
    if own is not None:
        keep |= place == own[owner]
    users, keys = owner[keep], shard.items[keep]
    if shard.seen_items is not None and len(shard.seen_items):
        seen_owner = np.repeat(local, np.diff(shard.seen_offsets))
        before = 0 if shard.seen_before is None else shard.seen_before
        seen_keep = before <= known[seen_owner]
        users = np.concatenate([users, seen_owner[seen_keep]])
        keys = np.concatenate([keys, shard.seen_items[seen_keep]])
    base = users * shard.num_items
    keys = keys + base
    base.sort()
    offsets = np.zeros(len(local) + 1, np.int64)
    np.cumsum(np.bincount(users, minlength=len(local)), out=offsets[1:])
    return offsets, np.sort(keys) - base


def training_positives(shard: Shard, validation: bool, refit: bool) -> np.ndarray:
    """Per user, how many of their first positives (time order) are training positives."""
    if refit:
        return shard.counts.copy()
    return shard.counts - 1 - (has_validation_item(shard.counts) if validation else 0)


def train_complement(shard: Shard, validation: bool = False, refit: bool = False) -> Complement:
    """The items a user's training negatives come from: all but what training knows of them.

    Excluded: the training positives and the seen-only items from before the user's first
    held-out item (a refit: every interaction). The held-out items are not excluded.
    """
    known = training_positives(shard, validation, refit)
    offsets, items = _sorted_sets(shard, known, None)
    return Complement(offsets, items, shard.num_items, _train_kind(validation, refit))


def split_complement(shard: Shard, split: str) -> Complement:
    """The items a held-out split's candidates come from: all but what came before its item.

    ``test``: every positive (the test item is the row's positive) and the seen-only items from
    before it. ``validation``: the positives before the validation item, the item itself, and the
    seen-only items from before it: the test item, a later interaction, may be drawn.
    """
    if split not in _SPLIT_PLACE:
        raise ValueError(f"unknown split {split!r}; use one of {tuple(_SPLIT_PLACE)}")
    own = np.maximum(shard.counts - _SPLIT_PLACE[split], 0)
    offsets, items = _sorted_sets(shard, own, own)
    return Complement(offsets, items, shard.num_items, (split,))


# Where a split's positive is among a user's positives, counted from the end.
_SPLIT_PLACE = {SPLIT_TEST: 1, SPLIT_VALIDATION: 2}


def _train_kind(validation: bool, refit: bool) -> tuple:
    return ("train", bool(validation) and not refit, bool(refit))


def _check_kind(comp: Complement, kind: tuple) -> None:
    """Refuses a complement built for another draw: the wrong one could leak a held-out item."""
    if comp.kind != kind:
        raise ValueError(f"this draw needs the complement {kind}, was given {comp.kind}")


@dataclasses.dataclass(frozen=True)
class TrainRows:
    """One epoch of a shard's training rows, shuffled (not yet padded).

    Narrow integer types (the values are the same as int64 ones) keep the shuffle's random
    gathers and the encoder's passes short.
    """

    users: np.ndarray  # int64 user indices (gathered from the shard's few users).
    items: np.ndarray  # int32 item indices.
    labels: np.ndarray  # uint8, 1 for a positive.


def recency_copies(back: np.ndarray, boost: float, scale: float) -> np.ndarray:
    """How many times a training positive appears in an epoch: ``1 + round(boost * e^(-k/scale))``.

    ``back`` is ``k``, the positive's place counted from the user's latest training positive
    (0). A user's latest interactions say most about the next one (on real MovieLens-100k the
    held-out items follow the user's recent taste: docs/tuning-log.md), so they weigh more in the
    user's loss; ``boost`` 0 gives every positive once. No draw: the same copies every epoch.
    """
    if boost <= 0:
        return np.ones(len(back), np.int64)
    return 1 + np.floor(boost * np.exp(-back / scale) + 0.5).astype(np.int64)


def recency_extra(boost: float, scale: float) -> int:
    """The most extra rows :func:`recency_copies` adds for one user (a user with many positives)."""
    if boost <= 0:
        return 0
    k = np.arange(int(scale * (np.log(2 * boost) + 1)) + 2)  # Past it every term rounds to 0.
    return int((recency_copies(k, boost, scale) - 1).sum())


def recency_extra_rows(train_counts: np.ndarray, boost: float, scale: float) -> int:
    """The extra positive rows :func:`recency_copies` adds in an epoch (before negatives).

    ``train_counts``: each user's number of training positives.
    """
    if boost <= 0 or not len(train_counts):
        return 0
    longest = int(max(train_counts.max(), 0))
    extra = np.concatenate([[0], np.cumsum(recency_copies(np.arange(longest), boost, scale) - 1)])
    return int(extra[np.maximum(train_counts, 0)].sum())


def train_rows(
    shard: Shard,
    comp: Complement,
    num_neg: int,
    seed: int,
    epoch: int,
    validation: bool = False,
    refit: bool = False,
    recency_boost: float = 0.0,
    recency_scale: float = 10.0,
) -> TrainRows:
    """Every training positive plus ``num_neg`` negatives each, shuffled.

    The held-out interactions of each user (the test item, and the validation item when
    ``validation``: ``Shard.held_out``) are not training positives; negatives come from
    ``comp`` (:func:`train_complement` of the same options), so a held-out item is drawn as a
    negative at the rate of any item the user has not trained on. ``refit``: every interaction is
    a training positive, the held-out ones too (``validation`` then changes nothing here). Each
    epoch draws afresh. ``recency_boost``, ``recency_scale``: each training positive appears
    :func:`recency_copies` times (its place counted back from the user's latest training
    positive), each copy with ``num_neg`` negatives of its own.

    Row ``j`` before the shuffle is positive ``j`` for ``j < P`` and else negative ``j - P`` of
    positive ``(j - P) // num_neg``; the shuffle is one permutation of those rows.
    """
    _check_kind(comp, _train_kind(validation, refit))
    rng = shard_rng(seed, shard.index, _PURPOSE_TRAIN, epoch)
    counts = shard.counts
    local = np.arange(len(shard.users), dtype=np.int32)
    keep = np.ones(len(shard.items), dtype=bool) if refit else ~shard.held_out(validation)
    pos_rows = np.repeat(local, counts)[keep]
    pos_items = shard.items[keep]
    if recency_boost > 0:
        owner = np.repeat(np.arange(len(shard.users), dtype=np.int64), counts)
        place = np.arange(len(shard.items), dtype=np.int64) - shard.offsets[owner]
        back = (training_positives(shard, validation, refit)[owner] - 1 - place)[keep]
        copies = recency_copies(back, recency_boost, recency_scale)
        pos_rows, pos_items = np.repeat(pos_rows, copies), np.repeat(pos_items, copies)
    num_pos = len(pos_rows)

    neg_rows = np.repeat(pos_rows, num_neg)
    ranks = rng.random(len(neg_rows))
    ranks *= comp.sizes[neg_rows]
    np.floor(ranks, out=ranks)
    neg_items = comp.items(neg_rows, ranks.astype(np.int64))
    del ranks

    rows = np.concatenate([pos_rows, neg_rows])
    items = np.concatenate([pos_items, neg_items], dtype=np.int32, casting="unsafe")
    del neg_rows, neg_items
    # The permutation ``rng.permutation`` draws, shuffled in int32 (half the memory it moves).
    perm = np.arange(len(rows), dtype=np.int32 if len(rows) < 2**31 else np.int64)
    rng.shuffle(perm)
    # ``take``, not ``[]``: indexing converts an int32 index to int64 first.
    return TrainRows(
        shard.users.take(rows.take(perm)), items.take(perm), (perm < num_pos).view(np.uint8)
    )


@dataclasses.dataclass(frozen=True)
class EvalRows:
    """A shard's eval candidates: one row of ``1 + eval_negatives`` items per user.

    ``items[:, -1]`` is the held-out positive; ``duplicate_mask`` marks fill-ins that never count.
    """

    users: np.ndarray  # [num_users]
    items: np.ndarray  # [num_users, 1 + eval_negatives]
    duplicate_mask: np.ndarray  # same shape, 0/1
    short_users: int  # Users with fewer never-seen items than asked (filled with duplicates).


def eval_rows(
    shard: Shard, comp: Complement, eval_negatives: int, seed: int, sampling: str = EVAL_DISTINCT
) -> EvalRows:
    """The test split's candidates per user: ``eval_negatives`` negatives, then the test item.

    ``comp``: ``split_complement(shard, "test")``. ``distinct``: negatives are distinct items the
    user had not interacted with before the test item; a user with fewer such items gets them
    all, then repeats of the first, which are masked. ``reference``: TF Model Garden's sampling,
    with replacement from those items plus the split's own held-out item (so it can appear as a
    negative and tie with the positive, as in the reference); repeats after the first occurrence
    are masked.
    """
    _check_kind(comp, (SPLIT_TEST,))
    rows = np.arange(len(shard.users), dtype=np.int64)
    positives = shard.items[shard.offsets[1:] - 1]
    rng = shard_rng(seed, shard.index, _PURPOSE_EVAL)
    return _candidates(shard, comp, rows, positives, eval_negatives, rng, sampling)


def validation_rows(
    shard: Shard, comp: Complement, eval_negatives: int, seed: int, sampling: str = EVAL_DISTINCT
) -> EvalRows:
    """The validation split's candidates, as :func:`eval_rows` draws the test split's.

    Only users with a validation item (``has_validation_item``) are in it, each with their
    second-to-last interaction as the positive. ``comp``: ``split_complement(shard,
    "validation")``: its negatives exclude what the user did before the validation item, not
    the test item (a later interaction, drawn as any other item); with ``reference`` sampling
    the validation item itself may appear among them, as the test item may among the test
    split's. Drawn from its own random stream.
    """
    _check_kind(comp, (SPLIT_VALIDATION,))
    rows = shard.validation_users()
    positives = shard.items[shard.offsets[rows + 1] - 2]
    rng = shard_rng(seed, shard.index, _PURPOSE_VALIDATION)
    return _candidates(shard, comp, rows, positives, eval_negatives, rng, sampling)


def _candidates(
    shard: Shard,
    comp: Complement,
    rows: np.ndarray,
    positives: np.ndarray,
    eval_negatives: int,
    rng: np.random.Generator,
    sampling: str,
) -> EvalRows:
    """Negatives of the shard-local users ``rows`` (ascending), then ``positives``, one row each."""
    if sampling == EVAL_DISTINCT:
        negs, dup, short = _distinct_negatives(comp, rows, eval_negatives, rng)
    elif sampling == EVAL_REFERENCE:
        negs, dup, short = _reference_negatives(comp, rows, positives, eval_negatives, rng)
    else:
        raise ValueError(f"unknown eval sampling {sampling!r}; use one of {EVAL_SAMPLINGS}")
    items = np.concatenate([negs, positives[:, None]], axis=1)
    mask = np.concatenate([dup, np.zeros((len(rows), 1), np.int64)], axis=1)
    return EvalRows(shard.users[rows], items, mask, short)


def _distinct_negatives(comp: Complement, users: np.ndarray, n: int, rng: np.random.Generator):
    sizes = comp.sizes[users]
    n_users = len(sizes)
    ranks = np.zeros((n_users, n), dtype=np.int64)
    dup = np.zeros((n_users, n), dtype=np.int64)
    if n == 0:
        return ranks, dup, 0
    short = sizes <= n  # Take every never-seen item, fill with repeats.
    dense = ~short & (sizes <= 4 * n)  # A random permutation is cheap enough.
    sparse = sizes > 4 * n  # Draw, then redraw collisions.

    idx = np.flatnonzero(short)
    if len(idx):
        cols = np.arange(n)[None, :]
        s = sizes[idx][:, None]
        ranks[idx] = np.where(cols < s, cols, 0)
        dup[idx] = (cols >= s).astype(np.int64)

    idx = np.flatnonzero(dense)
    for start in range(0, len(idx), 2048):
        part = idx[start : start + 2048]
        width = int(sizes[part].max())
        keys = rng.random((len(part), width))
        keys[np.arange(width)[None, :] >= sizes[part][:, None]] = 2.0  # Never chosen.
        chosen = np.argpartition(keys, n - 1, axis=1)[:, :n]
        ranks[part] = np.sort(chosen, axis=1)

    idx = np.flatnonzero(sparse)
    if len(idx):
        s = sizes[idx]
        draw = rng.random((len(idx), n))
        draw *= s[:, None]
        np.floor(draw, out=draw)
        # Ranks below 2**16 sort as uint16, which NumPy sorts by radix (several times faster).
        draw = draw.astype(np.uint16 if s.max() <= 1 << 16 else np.int64)
        # Sort each row, redraw the later copy of each repeat, and again for the rows that had
        # one (the others stay sorted and distinct), until no row repeats.
        todo = np.arange(len(idx))
        while len(todo):
            part = draw[todo]
            part.sort(axis=1, kind="stable")
            clash = np.zeros(part.shape, dtype=bool)
            clash[:, 1:] = part[:, 1:] == part[:, :-1]
            r, c = np.nonzero(clash)
            part[r, c] = np.floor(rng.random(len(r)) * s[todo][r])
            draw[todo] = part
            todo = todo[np.unique(r)]
        ranks[idx] = draw

    rows = np.repeat(users, n)
    items = comp.items(rows, ranks.reshape(-1)).reshape(n_users, n)
    return items, dup, int(short.sum() - (sizes == n).sum())


def _reference_negatives(
    comp: Complement, users: np.ndarray, positives: np.ndarray, n: int, rng: np.random.Generator
):
    """With replacement from the user's never-seen items and the split's held-out item."""
    n_users = len(users)
    # Never-seen ranks are drawn over the complement plus the held-out item: rank m_u (one past the
    # never-seen set) stands for the held-out item itself.
    which = np.repeat(np.arange(n_users, dtype=np.int64), n)
    rows = users[which]
    ranks = np.floor(rng.random(len(rows)) * (comp.sizes[rows] + 1)).astype(np.int64)
    is_heldout = ranks == comp.sizes[rows]
    items = comp.items(rows, np.minimum(ranks, comp.sizes[rows] - 1))
    items = np.where(is_heldout, positives[which], items).reshape(n_users, n)
    # Mask repeats after the first occurrence in each row.
    order = np.argsort(items, axis=1, kind="stable")
    sorted_items = np.take_along_axis(items, order, axis=1)
    repeat = np.zeros(items.shape, dtype=np.int64)
    repeat[:, 1:] = sorted_items[:, 1:] == sorted_items[:, :-1]
    dup = np.empty_like(repeat)
    np.put_along_axis(dup, order, repeat, axis=1)
    return items, dup, 0
