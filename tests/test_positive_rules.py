"""Seen-only rows (--min-rating, --positive-events): never positives, never negatives, seen.

A row that is no positive is "seen only": after duplicates are resolved (the latest row of a
pair decides) such pairs are kept beside the positives, left out of every negative draw and
read back by ``positives.seen_items``. Interactions are built here directly (the reader's rules
have their own tests), and handed to ``prepare`` in place of the reader.
"""

import dataclasses
import os

import numpy as np
import pytest
from conftest import SMALL_PREPARE, read_records

from training_core.data import (
    indexing,
    positive_rules,
    positives,
    prep_plan,
    prep_result,
    prepare,
    read_errors,
    records,
    sampling,
)
from training_core.data import io as rio
from training_core.data.config import PrepareConfig

# A user of many items of their own, so that the users of a test do not have every item.
OTHER_USER = [(9, item, 1) for item in range(20, 30)]


def _interactions(rows, positive=None, other=OTHER_USER, **kw):
    """``rows``: (user, item, time) triples; ``positive``: one bool per row, or None.

    ``other``'s rows (positives) are added.
    """
    rows = [*rows, *other]
    if positive is not None:
        positive = [*positive, *[True] * len(other)]
    users, items, ts = (np.asarray(c, dtype=np.int64) for c in zip(*rows, strict=True))
    mask = None if positive is None else np.asarray(positive, dtype=bool)
    return rio.Interactions(users, items, ts, ("x.csv",), "csv", positive=mask, **kw)


def _seen_only(data: indexing.IndexedData) -> set[tuple[int, int]]:
    """The seen-only pairs of ``data``, as raw (user, item) ids."""
    counts = np.diff(data.seen_offsets)
    users = data.user_vocab[np.repeat(np.arange(data.num_users), counts)]
    return set(zip(users.tolist(), data.item_vocab[data.seen_items].tolist(), strict=True))


def _positives(data: indexing.IndexedData) -> dict[int, list[int]]:
    """Each raw user's positive raw items, in time order."""
    return {
        int(data.user_vocab[u]): data.item_vocab[
            data.items[data.offsets[u] : data.offsets[u + 1]]
        ].tolist()
        for u in range(data.num_users)
    }


def test_the_latest_row_of_a_pair_decides_whether_it_is_a_positive():
    rows = [
        (1, 10, 1), (1, 11, 2), (1, 12, 3), (1, 10, 4),  # (1, 10): positive, then seen only.
        (2, 13, 1), (2, 11, 2), (2, 13, 5), (2, 12, 3),  # (2, 13): seen only, then positive.
        (2, 10, 6),  # Item 10 is a positive of someone: in the vocabulary.
    ]  # fmt: skip
    positive = [True, True, True, False, False, True, True, True, True]
    data = indexing.index_interactions(_interactions(rows, positive), min_ratings=0)
    assert _positives(data) == {1: [11, 12], 2: [11, 12, 13, 10], 9: list(range(20, 30))}
    assert _seen_only(data) == {(1, 10)}
    assert data.stats["duplicate_pairs_dropped"] == 2
    assert data.stats["seen_only_pairs"] == 1


def test_min_ratings_counts_positives_and_the_vocabularies_hold_positives_only():
    rows = [
        (1, 10, 1), (1, 11, 2), (1, 12, 3),  # Two positives: kept with --min-ratings 2.
        (2, 10, 1), (2, 11, 2), (2, 12, 3),  # One positive: dropped with --min-ratings 2.
        (3, 99, 1), (3, 11, 2), (3, 12, 3),  # Item 99 is seen only: in no vocabulary.
        (4, 13, 1), (4, 14, 2),  # Item 13: a positive of user 4 only; item 14 seen only.
    ]  # fmt: skip
    positive = [True, True, False, True, False, False, False, True, True, True, False]
    data = indexing.index_interactions(_interactions(rows, positive), min_ratings=2)
    assert data.user_vocab.tolist() == [1, 3, 9]
    assert data.item_vocab.tolist()[:3] == [10, 11, 12]  # 99 and 14 are nobody's positive.
    assert data.item_vocab.tolist()[3:] == list(range(20, 30))
    assert _seen_only(data) == {(1, 12)}  # (3, 99): its item is not in the vocabulary.
    assert data.stats["users_below_min_ratings"] == 2  # Users 2 and 4 (one positive each).


def test_seen_only_items_count_in_the_every_item_check():
    rows = [(1, 10, 1), (1, 11, 2), (1, 12, 3), (2, 10, 1), (2, 11, 2), (2, 12, 3), (3, 10, 1)]
    rows += [(3, 11, 2), (3, 13, 3), (4, 13, 1), (4, 10, 2)]
    rows += [(1, 20 + i, 10 + i) for i in range(10)]  # User 1 has OTHER_USER's items too.
    positive = [True, True, False, True, True, True, True, True, True, True, True]
    positive += [False] * 10
    # Items 10..13 and 20..29. User 1: two positives and 11 items seen only, 13 of 14 items:
    # kept. With (1, 13) seen only too, user 1 has every item.
    data = indexing.index_interactions(_interactions(rows, positive), min_ratings=0)
    assert data.user_vocab.tolist() == [1, 2, 3, 4, 9]
    assert "users_with_every_item" not in data.stats
    rows.append((1, 13, 4))
    data = indexing.index_interactions(_interactions(rows, [*positive, False]), min_ratings=0)
    assert data.user_vocab.tolist() == [2, 3, 4, 9]
    assert data.stats["users_with_every_item"] == 1


def test_data_without_a_rule_indexes_as_before():
    rows = [(1, 10, 1), (1, 11, 2), (2, 10, 1), (2, 12, 2), (2, 11, 3)]
    plain = indexing.index_interactions(_interactions(rows), min_ratings=0)
    every = indexing.index_interactions(_interactions(rows, [True] * 5), min_ratings=0)
    assert plain.seen_items is None and "seen_only_pairs" not in plain.stats
    for field in ("user_vocab", "item_vocab", "offsets", "items"):
        np.testing.assert_array_equal(getattr(plain, field), getattr(every, field))
    assert every.num_seen_only == 0 and every.stats["seen_only_pairs"] == 0


def _shard_with_seen_only(num_items=12, num_users=40, seed=0, timed=False):
    """A shard whose users each have a few positives and a few seen-only items.

    ``timed``: each seen-only item is placed at random among the user's positives in time
    (``Shard.seen_before``); else every one comes first (known to every draw).
    """
    rng = np.random.default_rng(seed)
    offsets, items, seen_offsets, seen_items, before = [0], [], [0], [], []
    for _ in range(num_users):
        chosen = rng.permutation(num_items)[: rng.integers(5, num_items - 2)]
        cut = rng.integers(3, len(chosen))
        items.extend(chosen[:cut])
        seen_items.extend(np.sort(chosen[cut:]))
        before.extend(rng.integers(0, cut + 1, len(chosen) - cut))
        offsets.append(len(items))
        seen_offsets.append(len(seen_items))
    return sampling.Shard(
        0,
        np.arange(num_users, dtype=np.int64),
        np.asarray(offsets, np.int64),
        np.asarray(items, np.int64),
        num_items,
        np.asarray(seen_offsets, np.int64),
        np.asarray(seen_items, np.int64),
        np.asarray(before, np.int64) if timed else None,
    )


def _seen_pairs(shard, known):
    """(user * n + item) of the seen-only items known to a draw that knows ``known[u]``
    positives of user ``u``, and of the others."""
    n, before = shard.num_items, shard.seen_before
    seen_known, seen_later = set(), set()
    for u in range(len(shard.users)):
        for j in range(shard.seen_offsets[u], shard.seen_offsets[u + 1]):
            at = 0 if before is None else int(before[j])
            (seen_known if at <= known[u] else seen_later).add(u * n + int(shard.seen_items[j]))
    return seen_known, seen_later


@pytest.mark.parametrize("timed", [False, True], ids=["untimed", "timed"])
@pytest.mark.parametrize("eval_sampling", sampling.EVAL_SAMPLINGS)
def test_seen_only_items_are_never_negatives_while_known(eval_sampling, timed):
    """A seen-only item from before a draw's point in time is never drawn; one from after
    it is drawn as any other item (knowing it would tell the draw what comes later)."""
    shard = _shard_with_seen_only(timed=timed)
    n, counts = shard.num_items, shard.counts
    train_known = counts - 2  # validation=True: every user here has 3 or more positives.
    known, later = _seen_pairs(shard, train_known)
    comp = sampling.train_complement(shard, validation=True)
    assert (
        comp.sizes
        == n
        - train_known
        - np.array([sum(1 for p in known if p // n == u) for u in range(len(shard.users))])
    ).all()
    drawn = set()
    for epoch in range(3):
        rows = sampling.train_rows(shard, comp, 4, 0, epoch, validation=True)
        pairs = rows.users.astype(np.int64) * n + rows.items
        assert not set(pairs.tolist()) & known
        assert (rows.labels[np.isin(pairs, list(known | later))] == 0).all()
        drawn |= set(pairs.tolist())
    assert bool(drawn & later) == timed  # Later ones are drawn: there are some only if timed.
    for split, rows_of, place in (
        ("test", sampling.eval_rows, 1),
        ("validation", sampling.validation_rows, 2),
    ):
        known, later = _seen_pairs(shard, counts - place)
        ev = rows_of(shard, sampling.split_complement(shard, split), 5, 0, eval_sampling)
        drawn = ev.users[:, None] * n + ev.items
        assert not set(drawn[ev.duplicate_mask == 0].tolist()) & known, split


@pytest.fixture
def from_interactions(monkeypatch, tmp_path):
    """Prepares given ``Interactions`` as if the reader had read them from a file."""

    def run(data, out, **options):
        source = tmp_path / "source.csv"
        source.write_text("user_id,item_id,timestamp\n1,2,3\n")  # Stands for ``data``.
        monkeypatch.setattr(rio, "read_interactions", lambda *args, **kwargs: data)
        options = {**SMALL_PREPARE, **options}
        return prepare.prepare(PrepareConfig(str(source), str(tmp_path / out), **options))

    return run


def _ratings(num_users=30, num_items=25, seed=3):
    """Each user rates 8 to 20 items, one per second; positives are the ratings of 3 and up."""
    rng = np.random.default_rng(seed)
    rows, ratings = [], []
    for u in range(num_users):
        for t, i in enumerate(rng.permutation(num_items)[: rng.integers(8, 20)]):
            rows.append((100 + u, 500 + int(i), 1000 * u + t))
            ratings.append(int(rng.integers(1, 6)))
    positive = np.asarray(ratings) >= 3
    counts = {positive_rules.BELOW_MIN_RATING: int((~positive).sum())}
    return _interactions(rows, positive, rule_counts=counts)


def _records(root, files, training):
    return read_records([os.path.join(root, f.path) for f in files], training)


def test_a_prepared_dataset_keeps_seen_only_pairs_out_of_every_split(from_interactions):
    data = _ratings()
    result = from_interactions(data, "data", min_rating=3.0)
    m, root = result.metadata, result.output_dir
    indexed = indexing.index_interactions(data, 0)
    n = m.num_items
    counts = np.diff(indexed.seen_offsets)
    seen_only = set((np.repeat(np.arange(m.num_users), counts) * n + indexed.seen_items).tolist())
    assert len(seen_only) == m.num_seen_only > 100
    assert (
        m.source[positive_rules.BELOW_MIN_RATING]
        == data.rule_counts[positive_rules.BELOW_MIN_RATING]
    )
    assert m.source["seen_only_pairs"] == m.num_seen_only
    assert m.options["min_rating"] == 3.0
    assert len(m.seen_only_files) == m.num_shards
    # Each seen-only pair's place in time among its user's positives, from the raw rows: what a
    # draw knows of it (the training rows, the validation split, the test split).
    raw_users = {int(r): k for k, r in enumerate(indexed.user_vocab)}
    raw_items = {int(r): k for k, r in enumerate(indexed.item_vocab)}
    by_user: dict[int, list[tuple[int, bool, int]]] = {}
    for u, i, t, pos in zip(data.users, data.items, data.timestamps, data.positive, strict=True):
        if int(u) in raw_users and int(i) in raw_items:
            by_user.setdefault(raw_users[int(u)], []).append((int(t), bool(pos), raw_items[int(i)]))
    known = {"train": set(), "validation": set(), "test": set()}
    for u, rows in by_user.items():
        rows.sort()
        num_pos = sum(pos for _, pos, _ in rows)
        cut = {"train": num_pos - 2, "validation": num_pos - 2, "test": num_pos - 1}
        before = 0
        for _, pos, item in rows:
            if pos:
                before += 1
                continue
            for split, place in cut.items():
                if before <= place:
                    known[split].add(u * n + item)
    assert known["test"] <= seen_only
    later = seen_only - known["train"]
    assert later and known["train"]  # Both kinds are here.
    drawn_later = set()
    for epoch in m.train_files:
        rows = _records(root, m.train_files[epoch], training=True)
        real = rows[records.VALID_POINT_MASK] == 1
        pairs = set((rows["user_id"] * n + rows["item_id"])[real].tolist())
        assert not pairs & known["train"]
        drawn_later |= pairs & later
    assert drawn_later  # Seen only after the held-out items: not known to training.
    for split, files in (("test", m.eval_files), ("validation", m.validation_files)):
        rows = _records(root, files, training=False)
        real = rows[records.DUPLICATE_MASK] == 0
        assert not set((rows["user_id"] * n + rows["item_id"])[real].tolist()) & known[split]
    users, items = positives.seen_only_items(m, root)
    assert set((users * n + items).tolist()) == seen_only
    splits, seen = positives.seen_items(m, root)
    seen_pairs = set((np.repeat(np.arange(m.num_users), np.diff(splits)) * n + seen).tolist())
    assert seen_only <= seen_pairs
    assert len(seen_pairs) == m.num_seen_only + indexed.stats["rows_kept"]
    summary = prep_result.summary(result)
    assert f"seen only: {m.num_seen_only:,} pairs" in summary and "below min rating" in summary


def test_seen_only_options_are_recorded_only_when_set():
    default = PrepareConfig("in", "out", num_epochs=1, eval_negatives=10)
    options = prep_plan.make_plan(default, "csv", "sha", 100, 10, 20).options
    assert not {"id_type", "min_rating", "positive_events"} & set(options)
    assert set(options["columns"]) == {"user", "item", "timestamp"}
    assert not {"id_type", "min_rating", "positive_events"} & set(prep_plan.build_options(default))
    assert prep_plan.read_options(default) == {}
    events = dataclasses.replace(
        default,
        id_type="string",
        positive_events="buy, cart",
        columns=rio.Columns(event="action"),
    )
    options = prep_plan.make_plan(events, "csv", "sha", 100, 10, 20).options
    assert options["positive_events"] == "buy,cart" and options["id_type"] == "string"
    assert options["columns"]["event"] == "action" and "rating" not in options["columns"]
    assert prep_plan.read_options(events) == {
        "id_type": "string",
        "rule": positive_rules.PositiveRule(None, ("buy", "cart")),
    }
    fingerprints = {
        prep_plan.make_plan(c, "csv", "sha", 100, 10, 20).fingerprint
        for c in (default, events, dataclasses.replace(default, min_rating=4.0))
    }
    assert len(fingerprints) == 3


def test_positive_events_that_name_no_event_are_refused():
    with pytest.raises(ValueError, match="--positive-events must name events"):
        PrepareConfig("in", "out", positive_events=" , ").check()
    with pytest.raises(ValueError, match="--id-type must be one of auto, int64, string"):
        PrepareConfig("in", "out", id_type="uuid").check()


def test_data_left_empty_by_the_rules_says_which_rule_emptied_it():
    rows = [(1, 10, 1), (1, 11, 2), (1, 12, 3)]
    counts = {positive_rules.BELOW_MIN_RATING: 3}
    data = _interactions(rows, [False] * 3, other=[], rule_counts=counts)
    with pytest.raises(
        read_errors.DataError, match="3 rows below min rating are seen only; lower --min-r"
    ):
        indexing.index_interactions(data, min_ratings=0)
