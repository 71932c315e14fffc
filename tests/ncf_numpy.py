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
