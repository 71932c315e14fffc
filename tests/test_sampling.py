import numpy as np
import pytest
from conftest import random_shard

from training_core.data import sampling


def _sets(shard):
    return [
        set(shard.items[shard.offsets[k] : shard.offsets[k + 1]].tolist())
        for k in range(len(shard.users))
    ]


def test_complement_maps_every_rank_to_the_right_never_seen_item():
    rng = np.random.default_rng(0)
    shard = random_shard(rng)
    comp = sampling.split_complement(shard, "test")  # Excludes every interaction.
    for k, seen in enumerate(_sets(shard)):
        expected = [i for i in range(shard.num_items) if i not in seen]
        assert comp.sizes[k] == len(expected)
        got = comp.items(np.full(len(expected), k), np.arange(len(expected)))
        assert got.tolist() == expected


def test_complement_gives_the_same_items_for_sorted_and_unsorted_queries():
    """Sorted queries (eval candidates) are merged, others binary-searched: same items."""
    rng = np.random.default_rng(5)
    shard = random_shard(rng, num_users=30)
    comp = sampling.split_complement(shard, "test")
    rows = np.repeat(np.arange(30), 40)
    ranks = np.floor(rng.random(len(rows)) * comp.sizes[rows]).astype(np.int64)
    order = np.lexsort((ranks, rows))
    merged = comp.items(rows[order], ranks[order])
    searched = comp.items(rows, ranks)
    np.testing.assert_array_equal(merged, searched[order])
    sets = _sets(shard)
    assert all(int(i) not in sets[r] for r, i in zip(rows, searched, strict=True))


def test_complement_counts_past_crowded_buckets():
    """A run of consecutive items crowds one bucket: the walk hands over to a binary search
    and still maps every rank to the right never-seen item, in any query order."""
    seen = [
        np.concatenate([np.arange(0, 3000), [5000, 7000, 9000]]),  # 3,000 consecutive items.
        np.arange(100, 200),
        np.array([3, 9_998]),
    ]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in seen])]).astype(np.int64)
    shard = sampling.Shard(0, np.arange(3, dtype=np.int64), offsets, np.concatenate(seen), 10_000)
    comp = sampling.split_complement(shard, "test")
    rows = np.repeat(np.arange(3), comp.sizes)
    ranks = np.concatenate([np.arange(size) for size in comp.sizes])
    expected = np.concatenate([np.setdiff1d(np.arange(10_000), s) for s in seen])
    shuffled = np.random.default_rng(0).permutation(len(rows))
    np.testing.assert_array_equal(comp.items(rows, ranks), expected)
    np.testing.assert_array_equal(comp.items(rows[shuffled], ranks[shuffled]), expected[shuffled])


def test_train_rows_counts_labels_and_no_positive_among_negatives():
    rng = np.random.default_rng(1)
    shard = random_shard(rng)
    comp = sampling.train_complement(shard)
    rows = sampling.train_rows(shard, comp, num_neg=4, seed=7, epoch=0)
    positives = int(shard.counts.sum() - len(shard.users))
    assert len(rows.users) == positives * 5
    assert int(rows.labels.sum()) == positives
    sets = {int(u): s for u, s in zip(shard.users, _sets(shard), strict=True)}
    heldout = {
        int(u): int(shard.items[shard.offsets[k + 1] - 1]) for k, u in enumerate(shard.users)
    }
    heldout_drawn = 0
    for u, i, y in zip(rows.users.tolist(), rows.items.tolist(), rows.labels.tolist(), strict=True):
        if y:
            assert i in sets[u] and i != heldout[u]
        else:  # Not a training positive; the held-out item may be drawn (it is not known).
            assert i not in sets[u] - {heldout[u]}
            heldout_drawn += i == heldout[u]
    assert heldout_drawn > 0
    # Per user: exactly num_neg negatives per training positive.
    for k, u in enumerate(shard.users.tolist()):
        mine = rows.users == u
        assert int((rows.labels[mine] == 0).sum()) == 4 * (int(shard.counts[k]) - 1)


def test_each_epoch_draws_afresh_and_seed_reproduces():
    rng = np.random.default_rng(2)
    shard = random_shard(rng)
    comp = sampling.train_complement(shard)
    a = sampling.train_rows(shard, comp, 4, seed=1, epoch=0)
    b = sampling.train_rows(shard, comp, 4, seed=1, epoch=0)
    c = sampling.train_rows(shard, comp, 4, seed=1, epoch=1)
    np.testing.assert_array_equal(a.items, b.items)
    assert not np.array_equal(a.items, c.items)


def test_with_validation_the_second_to_last_of_users_with_three_is_not_trained_on():
    rng = np.random.default_rng(6)
    shard = random_shard(rng, max_count=6)  # 2 to 5 interactions: some users have no validation.
    comp = sampling.train_complement(shard, validation=True)
    counts = shard.counts
    assert (counts == 2).any() and (counts >= 3).any()
    with_validation = counts >= sampling.VALIDATION_MIN_INTERACTIONS
    for epoch in (0, 1):
        rows = sampling.train_rows(shard, comp, 4, seed=7, epoch=epoch, validation=True)
        for k, u in enumerate(shard.users.tolist()):
            mine = rows.users == u
            trained = sorted(rows.items[mine & (rows.labels == 1)].tolist())
            user_items = shard.items[shard.offsets[k] : shard.offsets[k + 1]].tolist()
            # All but the last, and the one before it where the user has three or more.
            assert trained == sorted(user_items[: -2 if with_validation[k] else -1]), (epoch, k)
            negatives = rows.items[mine & (rows.labels == 0)].tolist()
            assert len(negatives) == 4 * len(trained) and not set(negatives) & set(trained)
    # Without: every interaction but the last, as before validation splits.
    off = sampling.train_rows(shard, sampling.train_complement(shard), 4, seed=7, epoch=0)
    assert int(off.labels.sum()) == int((counts - 1).sum())


@pytest.mark.parametrize("validation", [True, False], ids=["validation", "no-validation"])
def test_a_refit_trains_on_every_interaction_in_every_epoch(validation):
    """The last and second-to-last interactions too; negatives stay never-seen, num_neg each."""
    rng = np.random.default_rng(8)
    shard = random_shard(rng, max_count=6)
    comp = sampling.train_complement(shard, validation, refit=True)
    for epoch in (0, 1):
        rows = sampling.train_rows(shard, comp, 4, 7, epoch, validation, refit=True)
        assert int(rows.labels.sum()) == len(shard.items), epoch
        for k, u in enumerate(shard.users.tolist()):
            mine = rows.users == u
            user_items = shard.items[shard.offsets[k] : shard.offsets[k + 1]].tolist()
            assert sorted(rows.items[mine & (rows.labels == 1)].tolist()) == sorted(user_items)
            negatives = rows.items[mine & (rows.labels == 0)].tolist()
            assert len(negatives) == 4 * len(user_items) and not set(negatives) & set(user_items)
    # The refit's draws are the same whichever split it writes beside them.
    first = sampling.train_rows(shard, comp, 4, 7, 0, validation, refit=True)
    other_comp = sampling.train_complement(shard, not validation, refit=True)
    other = sampling.train_rows(shard, other_comp, 4, 7, 0, not validation, refit=True)
    np.testing.assert_array_equal(first.items, other.items)
    np.testing.assert_array_equal(first.users, other.users)


@pytest.mark.parametrize("how", sampling.EVAL_SAMPLINGS)
def test_validation_rows_hold_the_second_to_last_of_users_with_three(how):
    rng = np.random.default_rng(7)
    shard = random_shard(rng, num_items=30, max_count=6)
    comp = sampling.split_complement(shard, "validation")
    ev = sampling.validation_rows(shard, comp, 20, seed=5, sampling=how)
    local = np.flatnonzero(shard.counts >= 3)
    assert 0 < len(local) < len(shard.users)  # Users with two interactions are left out.
    np.testing.assert_array_equal(ev.users, shard.users[local])
    assert ev.items.shape == (len(local), 21)
    own_item_drawn = test_item_drawn = 0
    for row, mask, k in zip(ev.items, ev.duplicate_mask, local.tolist(), strict=True):
        user_items = shard.items[shard.offsets[k] : shard.offsets[k + 1]].tolist()
        assert row[-1] == user_items[-2] and mask[-1] == 0  # The validation item, last.
        negatives = set(row[:-1][mask[:-1] == 0].tolist())
        # Nothing from before the validation item; the test item, a later one, may be drawn.
        if how == sampling.EVAL_DISTINCT:
            assert not negatives & set(user_items[:-1])
        else:  # As the reference: the split's own held-out item may be drawn too.
            assert not negatives & set(user_items[:-2])
            own_item_drawn += user_items[-2] in negatives
        test_item_drawn += user_items[-1] in negatives
    assert own_item_drawn > 0 or how == sampling.EVAL_DISTINCT
    assert test_item_drawn > 0
    # Its own random stream, not the test split's draws over again.
    test = sampling.eval_rows(shard, sampling.split_complement(shard, "test"), 20, 5, how)
    assert not np.array_equal(test.items[local, :-1], ev.items[:, :-1])


@pytest.mark.parametrize("num_items,n", [(60, 10), (60, 20), (2000, 100), (70_000, 300)])
def test_distinct_eval_negatives(num_items, n):
    # Covers the three regimes: sparse (rejection), dense (permutation), short (fill + mask),
    # and the sparse regime's ranks as uint16 (up to 65,536 never-seen items) and as int64.
    rng = np.random.default_rng(3)
    shard = random_shard(rng, num_items=num_items, max_count=min(55, num_items - 1))
    comp = sampling.split_complement(shard, "test")
    ev = sampling.eval_rows(shard, comp, n, seed=5)
    assert ev.items.shape == (len(shard.users), n + 1)
    short = 0
    for k, seen in enumerate(_sets(shard)):
        row, mask = ev.items[k], ev.duplicate_mask[k]
        assert row[-1] == shard.items[shard.offsets[k + 1] - 1]  # Positive last.
        assert mask[-1] == 0
        negs = row[:-1][mask[:-1] == 0]
        assert len(set(negs.tolist())) == len(negs)  # Distinct.
        assert not (set(negs.tolist()) & seen)  # Never seen (held-out included).
        never_seen = num_items - len(seen)
        assert len(negs) == min(n, never_seen)  # All of them when short.
        short += never_seen < n
    assert ev.short_users == short
    if num_items == 60 and n == 20:
        assert short > 0  # The fill path was exercised.


def test_reference_sampling_allows_heldout_and_masks_repeats_only():
    rng = np.random.default_rng(4)
    shard = random_shard(rng, num_items=30, max_count=20)
    comp = sampling.split_complement(shard, "test")
    ev = sampling.eval_rows(shard, comp, 50, seed=0, sampling=sampling.EVAL_REFERENCE)
    heldout_drawn = 0
    for k, seen in enumerate(_sets(shard)):
        row, mask = ev.items[k], ev.duplicate_mask[k]
        pos = int(row[-1])
        train_items = seen - {pos}
        negs = row[:-1]
        assert not (set(negs.tolist()) & train_items)
        heldout_drawn += int((negs == pos).any())
        # First occurrence kept, later ones masked.
        first = {}
        for j, it in enumerate(negs.tolist()):
            assert mask[j] == (1 if it in first else 0)
            first.setdefault(it, j)
        assert mask[-1] == 0
    assert heldout_drawn > 0  # The reference's flaw that distinct sampling fixes.


def test_unknown_sampling_rejected():
    shard = random_shard(np.random.default_rng(5))
    with pytest.raises(ValueError, match="unknown eval sampling"):
        sampling.eval_rows(shard, sampling.split_complement(shard, "test"), 5, 0, sampling="other")


def test_a_draw_refuses_the_complement_of_another():
    """The test split's complement hides every held-out item: training on it is the leak."""
    shard = random_shard(np.random.default_rng(5))
    with pytest.raises(ValueError, match="needs the complement"):
        sampling.train_rows(shard, sampling.split_complement(shard, "test"), 4, 0, 0)
    with pytest.raises(ValueError, match="needs the complement"):
        sampling.train_rows(shard, sampling.train_complement(shard), 4, 0, 0, validation=True)
    with pytest.raises(ValueError, match="needs the complement"):
        sampling.validation_rows(shard, sampling.split_complement(shard, "test"), 5, 0)
    with pytest.raises(ValueError, match="needs the complement"):
        sampling.eval_rows(shard, sampling.train_complement(shard), 5, 0)


def test_recency_copies_weigh_a_users_latest_positives():
    """1 + round(B e^(-k/S)): B 4, S 10 gives the latest 5 copies, the 10th latest 2."""
    k = np.arange(40)
    copies = sampling.recency_copies(k, 4.0, 10.0)
    assert copies[[0, 1, 10, 20, 30, 39]].tolist() == [5, 5, 2, 2, 1, 1]
    assert (np.diff(copies) <= 0).all()
    assert (sampling.recency_copies(k, 0.0, 10.0) == 1).all()
    assert sampling.recency_extra(4.0, 10.0) == int((copies - 1).sum())
    assert sampling.recency_extra(0.0, 10.0) == 0


@pytest.mark.parametrize("refit", [False, True], ids=["evaluated", "refit"])
def test_train_rows_repeat_recent_training_positives(refit):
    """Each training positive appears as often as its place from the user's latest training
    positive says, each copy with num_neg negatives; held-out items stay out (not a refit)."""
    rng = np.random.default_rng(9)
    shard = random_shard(rng, max_count=30)
    comp = sampling.train_complement(shard, validation=True, refit=refit)
    rows = sampling.train_rows(shard, comp, 3, 7, 0, True, refit, 4.0, 10.0)
    for k, u in enumerate(shard.users.tolist()):
        user_items = shard.items[shard.offsets[k] : shard.offsets[k + 1]].tolist()
        held = 0 if refit else (2 if len(user_items) >= 3 else 1)
        trained = user_items[: len(user_items) - held]
        mine = rows.users == u
        got = rows.items[mine & (rows.labels == 1)].tolist()
        want = {
            item: 1 + int(np.floor(4.0 * np.exp(-(len(trained) - 1 - place) / 10.0) + 0.5))
            for place, item in enumerate(trained)
        }
        assert {i: got.count(i) for i in set(got)} == want, k
        assert int((mine & (rows.labels == 0)).sum()) == 3 * len(got)
