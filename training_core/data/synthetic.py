"""MovieLens-like synthetic interactions with a planted latent-factor structure.

Each user and item gets a random factor vector; items also get a popularity bias (Zipf-like). A user
picks items with probability proportional to ``exp(strength * <u, v> / sqrt(dim) + bias)``, so a
model that learns the factors beats a popularity ranking, which only sees the bias. Used by tests,
benchmarks and the embedded default data, and written in any MovieLens layout or as CSV/Parquet.
"""

from __future__ import annotations

import dataclasses
import gzip
import os

import numpy as np

from training_core.common import atomic_writes
from training_core.data import io as rio


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
    """Shape and structure of a synthetic interaction set."""

    num_users: int = 943
    num_items: int = 1682
    num_interactions: int = 100_000
    min_per_user: int = 20
    dim: int = 8
    strength: float = 3.0
    popularity_skew: float = 1.0
    seed: int = 0


# Shapes of the public MovieLens sets (users, items, ratings).
SHAPES: dict[str, SyntheticConfig] = {
    "ml-100k": SyntheticConfig(943, 1682, 100_000),
    "ml-1m": SyntheticConfig(6040, 3706, 1_000_209),
    "ml-20m": SyntheticConfig(138_493, 26_744, 20_000_263),
    "tiny": SyntheticConfig(200, 300, 8_000, min_per_user=10),
}


# How strong the planted structure is, by name (``synth --structure``; fields of SyntheticConfig).
# "planted" is the generator's default: a strong latent signal, what the tests and most benchmarks
# use. "movielens" (strength 2.0) is as hard as real MovieLens-100k: on the ml-100k shape the
# reference preset and the default of the time score on it what they score on the real set,
# within 0.01 HR@10, so it is the set to tune presets on (research/synthetic_calibration.py
# measures it; calibrated before issue 52 on leaky numbers, not re-measured: docs/tuning-log.md).
STRUCTURES: dict[str, dict[str, float]] = {
    "planted": {},
    "movielens": {"strength": 2.0},
}


def with_structure(config: SyntheticConfig, structure: str) -> SyntheticConfig:
    """``config`` with a named structure's settings (``STRUCTURES``)."""
    if structure not in STRUCTURES:
        raise ValueError(f"unknown structure {structure!r}; use one of {', '.join(STRUCTURES)}")
    return dataclasses.replace(config, **STRUCTURES[structure])


def generate(config: SyntheticConfig) -> rio.Interactions:
    """Draws interactions; every user gets at least ``min_per_user`` distinct items.

    Raw ids are 1-based as in MovieLens. Timestamps increase in each user's draw order.
    """
    c = config
    if c.min_per_user > c.num_items:
        raise ValueError("min_per_user cannot exceed num_items")
    rng = np.random.default_rng(c.seed)
    user_f = rng.standard_normal((c.num_users, c.dim)).astype(np.float32)
    item_f = rng.standard_normal((c.num_items, c.dim)).astype(np.float32)
    ranks = rng.permutation(c.num_items) + 1
    bias = (-c.popularity_skew * np.log(ranks)).astype(np.float32)

    # Per-user counts: a heavy tail above the minimum, scaled to the requested total.
    extra_total = max(c.num_interactions - c.min_per_user * c.num_users, 0)
    weights = rng.lognormal(0.0, 1.0, c.num_users)
    extra = np.floor(weights / weights.sum() * extra_total).astype(np.int64)
    # Cap at half the catalogue, so that every user keeps never-seen items to sample from.
    counts = np.minimum(c.min_per_user + extra, max(c.min_per_user, c.num_items // 2))

    users_out, items_out = [], []
    chunk = max(1, min(c.num_users, (1 << 24) // c.num_items))
    scale = np.float32(c.strength / np.sqrt(c.dim))
    for start in range(0, c.num_users, chunk):
        stop = min(start + chunk, c.num_users)
        logits = (user_f[start:stop] @ item_f.T) * scale + bias
        logits -= logits.max(axis=1, keepdims=True)
        # Gumbel top-k: the first n_u items by logit + Gumbel noise are a draw without replacement.
        gumbel = -np.log(-np.log(rng.random(logits.shape, dtype=np.float32) + 1e-20) + 1e-20)
        keys = logits + gumbel
        n = counts[start:stop]
        kmax = int(n.max())
        top = (
            np.argpartition(-keys, kmax - 1, axis=1)[:, :kmax]
            if kmax < c.num_items
            else (np.tile(np.arange(c.num_items), (stop - start, 1)))
        )
        order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        keep = np.arange(kmax)[None, :] < n[:, None]
        rows = np.broadcast_to(np.arange(start, stop)[:, None], top.shape)
        users_out.append(rows[keep])
        items_out.append(top[keep])
    users = np.concatenate(users_out).astype(np.int64)
    items = np.concatenate(items_out).astype(np.int64)

    # Timestamps: each user starts somewhere in 2000-2015 and acts every few hours after.
    starts = rng.integers(946_684_800, 1_420_070_400, c.num_users)
    gaps = rng.exponential(3600 * 6, len(users)).astype(np.int64) + 1
    user_start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    csum = np.cumsum(gaps)
    within = csum - np.repeat(csum[user_start] - gaps[user_start], counts)
    timestamps = starts[users] + within

    # Shuffle rows (a plain table has no order; `write` gives a MovieLens layout its dump's
    # order), then shift to 1-based raw ids.
    perm = rng.permutation(len(users))
    return rio.Interactions(
        users=users[perm] + 1,
        items=items[perm] + 1,
        timestamps=timestamps[perm],
        source_files=(),
        format="synthetic",
    )


LAYOUTS = ("ml-100k", "ml-1m", "ml-20m", "csv", "parquet")


def write(interactions: rio.Interactions, output: str, layout: str, seed: int = 0) -> str:
    """Writes interactions in a MovieLens layout (into folder ``output``) or as one table file.

    Layouts: ``ml-100k`` writes ``output/u.data``; ``ml-1m`` writes ``output/ratings.dat``;
    ``ml-20m`` writes ``output/ratings.csv``; ``csv`` and ``parquet`` write the file ``output``
    itself (``.gz`` on a csv name compresses it) with columns user_id, item_id, rating, timestamp.

    Returns:
        The path of the file written.
    """
    rng = np.random.default_rng(seed + 1)
    ratings = rng.integers(1, 6, len(interactions))
    u, i, t = interactions.users, interactions.items, interactions.timestamps
    order = _dump_order(layout, u, i)
    if order is not None:
        u, i, t, ratings = u[order], i[order], t[order], ratings[order]
    if layout in ("ml-100k", "ml-1m", "ml-20m"):
        os.makedirs(output, exist_ok=True)
    if layout == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({"user_id": u, "item_id": i, "rating": ratings, "timestamp": t})
        pq.write_table(table, output)
        return output
    sep, rating_float = ",", False
    if layout == "ml-100k":
        path, header, sep = os.path.join(output, "u.data"), "", "\t"
    elif layout == "ml-1m":
        path, header, sep = os.path.join(output, "ratings.dat"), "", "::"
    elif layout == "ml-20m":
        path, header = os.path.join(output, "ratings.csv"), "userId,movieId,rating,timestamp\n"
        ratings, rating_float = ratings.astype(np.float64), True
    elif layout == "csv":
        path, header = output, "user_id,item_id,rating,timestamp\n"
    else:
        raise ValueError(f"unknown layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    files = (
        atomic_writes.LocalFiles(gzip.open) if path.endswith(".gz") else atomic_writes.LOCAL_FILES
    )
    with atomic_writes.atomic_output(path, files=files) as f:
        f.write(header.encode())
        # In slices: NumPy's string arrays for 20M rows at once took more than 24 GiB.
        for start in range(0, len(u), _ROWS_PER_SLICE):
            part = slice(start, start + _ROWS_PER_SLICE)
            f.write(_format_rows(u[part], i[part], ratings[part], t[part], sep, rating_float))
    return path


_ROWS_PER_SLICE = 1 << 20


def _dump_order(layout: str, users: np.ndarray, items: np.ndarray) -> np.ndarray | None:
    """The row order of the real dump a layout copies, or None to keep the rows as they are.

    MovieLens-20M's ratings.csv is sorted by userId, then movieId; MovieLens-1M's ratings.dat is
    grouped by UserID (in no order within a user); u.data (100K) and plain tables are not sorted.
    Data prep's sorts take much less time on grouped rows, so a benchmark on a layout needs the
    real file's order to measure what a user of that file sees.
    """
    if layout == "ml-20m":
        return np.lexsort((items, users))
    if layout == "ml-1m":
        return np.argsort(users, kind="stable")
    return None


def _format_rows(u, i, r, t, sep: str, rating_float: bool = False) -> bytes:
    """Formats rows fast: numpy string arrays joined column-wise."""
    cols = [u.astype(str), i.astype(str)]
    cols.append(np.char.mod("%.1f", r) if rating_float else r.astype(str))
    cols.append(t.astype(str))
    out = cols[0]
    for c in cols[1:]:
        out = np.char.add(np.char.add(out, sep), c)
    return ("\n".join(out.tolist()) + "\n").encode()
