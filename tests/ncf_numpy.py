"""Plain NumPy references for the ranking metrics and a popularity baseline."""

import numpy as np


def ranking_reference(scores, dup_mask, items_per_user, k=10):
    """Per-user loops: (hits, ndcg_sum, users) with ties against the positive."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1, items_per_user)
    dup = np.asarray(dup_mask).reshape(-1, items_per_user)
    hits, ndcg, users = 0, 0.0, 0
    for s, d in zip(scores, dup, strict=True):
        if d[-1]:
            continue
        users += 1
        rank = sum(1 for j in range(items_per_user - 1) if not d[j] and s[j] >= s[-1])
        if rank < k:
            hits += 1
            ndcg += 1.0 / np.log2(rank + 2)
    return hits, ndcg, users


def full_catalog_reference(scores, seen, held_out, k=10):
    """Per-user loops over ``scores [users, items]``: (hits, ndcg_sum, users).

    Candidates are every item but the user's training items (``seen``, one set per user) and the
    held-out item itself; ties count against the held-out item.
    """
    hits, ndcg = 0, 0.0
    for s, excluded, positive in zip(np.asarray(scores, np.float64), seen, held_out, strict=True):
        rank = sum(
            1
            for item, value in enumerate(s)
            if item != positive and item not in excluded and value >= s[positive]
        )
        if rank < k:
            hits += 1
            ndcg += 1.0 / np.log2(rank + 2)
    return hits, ndcg, len(held_out)


def interactions_in_time_order(csv_path):
    """The raw CSV as prepare-data cleans it, with pandas apart from its code.

    A repeated (user, item) keeps its latest row (ties in time: the later row); rows sorted by
    user, then time, then file order. Returns ``(rows, ascending user ids, ascending item ids)``.
    """
    import pandas as pd

    raw = pd.read_csv(csv_path, usecols=["user_id", "item_id", "timestamp"])
    raw["row"] = np.arange(len(raw))
    raw = raw.sort_values(["timestamp", "row"], kind="stable")
    raw = raw.drop_duplicates(["user_id", "item_id"], keep="last")
    raw = raw.sort_values(["user_id", "timestamp", "row"], kind="stable")
    return raw, np.sort(raw["user_id"].unique()), np.sort(raw["item_id"].unique())


def leave_one_out_from_raw(csv_path):
    """Each user's training items and held-out item, from the raw CSV alone (pandas).

    Leave-one-out as prepare-data documents it (no count filter): a repeated (user, item) keeps
    its latest row, each user's last interaction by time (ties: the later row) is held out, the
    rest are training items; indices are positions in the ascending raw ids. Returns
    ``([set of item indices per user index], [held-out item index per user index])``.
    """
    raw, users, items = interactions_in_time_order(csv_path)
    u_idx = np.searchsorted(users, raw["user_id"].to_numpy())
    i_idx = np.searchsorted(items, raw["item_id"].to_numpy())
    seen = [set() for _ in users]
    held_out = np.zeros(len(users), np.int64)
    for u, i in zip(u_idx.tolist(), i_idx.tolist(), strict=True):
        seen[u].add(i)
        held_out[u] = i  # The last row of each user, in time order, wins.
    for u, i in enumerate(held_out):
        seen[u].discard(int(i))
    return seen, held_out


def neumf_scores(model):
    """Every user x every item logit of a NeuMF ``tf.Module``, from its weights, in float64."""
    config = model.config
    assert config.architecture == "neumf", config.architecture
    k = config.num_factors
    users = model.user_embedding.numpy().astype(np.float64)
    items = model.item_embedding.numpy().astype(np.float64)
    out = np.zeros((len(users), len(items)))
    for u, row in enumerate(users):
        gmf = row[:k] * items[:, :k]
        h = np.concatenate([np.broadcast_to(row[k:], (len(items), len(row) - k)), items[:, k:]], 1)
        for kernel, bias in zip(model.mlp_kernels, model.mlp_biases, strict=True):
            h = np.maximum(h @ kernel.numpy().astype(np.float64) + bias.numpy(), 0.0)
        features = np.concatenate([gmf, h], axis=1)
        out[u] = (features @ model.logit_kernel.numpy().astype(np.float64))[:, 0]
        out[u] += float(model.logit_bias.numpy()[0])
    return out
