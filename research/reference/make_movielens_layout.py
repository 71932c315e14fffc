"""Write a synthetic MovieLens dataset in the on-disk layout TF Model Garden's NCF expects.

The reference (official/recommendation/movielens.py) skips its download when
``<output>/<layout>/`` already holds ``<layout>.zip``, ``ratings.csv`` and ``movies.csv``,
where the two CSVs are in its *regularized* form (header ``user_id,item_id,rating,timestamp``
and ``item_id,titles,genres``). This script writes exactly those three files; the zip is a
real GroupLens-style archive holding the raw files (``ml-1m/ratings.dat`` with
``UserID::MovieID::Rating::Timestamp`` and ``ml-1m/movies.dat``; for ml-20m
``ml-20m/ratings.csv``/``movies.csv`` with GroupLens headers).

Shapes match the reference's hard checks: ml-1m has 6040 users, 3706 items, 1,000,209
ratings; ml-20m has 138493 users, 26744 items, 20,000,263 ratings. Every user has >= 20
distinct items, every item is rated at least once, per-user timestamps strictly increase.

Data come from a planted model (numpy only): users and items get random latent factors,
each user draws its items without replacement with probability ~ softmax(alpha * u.v + b_i)
(b_i a Zipf-like popularity skew) via the Gumbel-top-k trick, in chunks of users.

Run (any venv with numpy):
    uv run python -m research.reference.make_movielens_layout --layout ml-1m --output /tmp/ml \
        --seed 0
"""

import argparse
import json
import os
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

SHAPES = {  # users, items, ratings, movieId upper bound, timestamp range
    "ml-1m": (6040, 3706, 1_000_209, 3952, (956_703_932, 1_046_454_590)),
    "ml-20m": (138_493, 26_744, 20_000_263, 131_262, (789_652_009, 1_427_784_002)),
}
GENRES = [
    "Action",
    "Adventure",
    "Animation",
    "Children",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "IMAX",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
]


def user_counts(rng, n_users, n_items, total, min_count=20):
    """Heavy-tailed ratings-per-user counts, each in [min_count, n_items // 2], summing to total."""
    cap = n_items // 2
    w = rng.lognormal(0.0, 1.2, n_users)
    counts = np.full(n_users, min_count, np.int64)
    for _ in range(50):  # largest-remainder split of what is left, proportional to w, capped
        left = total - counts.sum()
        if left == 0:
            return counts
        room = cap - counts
        share = np.where(room > 0, w, 0.0) / np.where(room > 0, w, 0.0).sum() * left
        add = np.floor(share).astype(np.int64)
        rest = np.argsort(add - share)[: left - add.sum()]  # largest fractional parts
        add[rest] += 1
        counts += np.minimum(add, room)
    raise RuntimeError("could not distribute rating counts")


def sample_ratings(rng, n_users, n_items, counts, dim=16, alpha=2.0, chunk_elems=30_000_000):
    """Per user, pick counts[u] distinct items ~ softmax(alpha*u.v + pop) (Gumbel-top-k).

    Keys are log(Exp(1)) - logit; a user's items are its counts[u] smallest keys. To avoid a
    full per-row selection, a threshold taken from every 8th column keeps ~2x too many
    candidates, which are then sorted exactly (rows left short fall back to argpartition).
    Chunks of users run on 2 threads (numpy releases the GIL), each with its own seeded RNG.
    """
    uf = rng.standard_normal((n_users, dim), dtype=np.float32) / np.sqrt(dim, dtype=np.float32)
    vf = alpha * rng.standard_normal((n_items, dim), dtype=np.float32)
    pop = -1.0 * np.log1p(rng.permutation(n_items)).astype(np.float32)  # Zipf-like skew
    order = np.argsort(counts, kind="stable")  # similar counts per chunk
    chunk = max(1, min(1024, chunk_elems // n_items))
    starts = list(range(0, n_users, chunk))
    seeds = np.random.SeedSequence(int(rng.integers(2**63))).spawn(len(starts))
    local = threading.local()

    def one_chunk(i):
        if not hasattr(local, "buf"):
            local.buf = np.empty((2, chunk, n_items), np.float32)
        u = order[starts[i] : starts[i] + chunk]
        k = counts[u]
        logits, keys = local.buf[0, : len(u)], local.buf[1, : len(u)]
        np.matmul(uf[u], vf.T, out=logits)
        logits += pop
        np.random.default_rng(seeds[i]).standard_exponential(out=keys, dtype=np.float32)
        np.maximum(keys, np.float32(1e-30), out=keys)
        np.log(keys, out=keys)
        keys -= logits
        j = k // 4 + 8  # ~2x the needed count, in every-8th-column units
        if j.max() < keys[:, ::8].shape[1]:
            sub = np.partition(keys[:, ::8], j.max(), axis=1)[:, : j.max() + 1]
            q = np.take_along_axis(np.sort(sub, axis=1), j[:, None], 1)  # per-row threshold
            r, c = np.nonzero(keys <= q)
        else:
            r, c = np.nonzero(np.ones(keys.shape, bool))
        short = np.flatnonzero(np.bincount(r, minlength=len(u)) < k)
        if short.size:  # exact fallback for the few rows with too few candidates
            keep = ~np.isin(r, short)
            top = np.argpartition(keys[short], k[short].max() - 1, axis=1)[:, : k[short].max()]
            r = np.concatenate([r[keep], np.repeat(short, top.shape[1])])
            c = np.concatenate([c[keep], top.ravel()])
        o = np.lexsort((keys[r, c], r))
        r, c = r[o], c[o]
        sel = np.arange(r.size) - np.searchsorted(r, r) < k[r]  # rank within user < k
        return u[r[sel]], c[sel], logits[r[sel], c[sel]]

    with ThreadPoolExecutor(2) as ex:
        parts = list(ex.map(one_chunk, range(len(starts))))
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def cover_all_items(rng, items, n_items):
    """Reassign a few ratings so every item is rated at least once (keeps pairs distinct)."""
    while True:
        cnt = np.bincount(items, minlength=n_items)
        missing = np.flatnonzero(cnt == 0)
        if missing.size == 0:
            return items
        perm = rng.permutation(items.size)
        perm = perm[cnt[items[perm]] >= 2]
        _, first = np.unique(items[perm], return_index=True)  # one row per donor item
        rows = perm[first][rng.permutation(first.size)[: missing.size]]
        items[rows] = missing[: rows.size]


def format_rows(cols, seps, chunk=2_000_000):
    """Vectorized ASCII formatting of non-negative int columns: c0 s0 c1 s1 ... c_last '\\n'."""
    n = cols[0].size
    if n > chunk:
        return b"".join(
            format_rows([c[i : i + chunk] for c in cols], seps, chunk) for i in range(0, n, chunk)
        )
    mats, masks = [], []
    for j, c in enumerate(cols):
        c = np.asarray(c, np.int64)
        width = max(1, len(str(int(c.max()))))
        p = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
        d = (c[:, None] // p[None, :]) % 10
        mats.append((d + 48).astype(np.uint8))
        ndig = np.maximum(1, np.floor(np.log10(np.maximum(c, 1))).astype(np.int64) + 1)
        masks.append(np.arange(width)[None, :] >= (width - ndig)[:, None])
        sep = (seps[j] if j < len(seps) else "\n").encode()
        for b in sep:
            mats.append(np.full((n, 1), b, np.uint8))
            masks.append(np.ones((n, 1), bool))
    return np.hstack(mats)[np.hstack(masks)].tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layout", choices=sorted(SHAPES), default="ml-1m")
    ap.add_argument("--output", required=True, help="data_dir; files go to <output>/<layout>/")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    n_users, n_items, total, id_max, (ts_lo, ts_hi) = SHAPES[args.layout]
    rng = np.random.default_rng(args.seed)

    counts = user_counts(rng, n_users, n_items, total)
    users, items, aff = sample_ratings(rng, n_users, n_items, counts)
    items = cover_all_items(rng, items, n_items)
    movie_ids = np.sort(rng.choice(np.arange(1, id_max + 1), n_items, replace=False))

    # Random time order within each user; strictly increasing timestamps.
    o = np.lexsort((rng.random(users.size), users))
    users, items, aff = users[o], items[o], aff[o]
    gaps = rng.geometric(1.0 / 3600.0, users.size).astype(np.int64)  # >= 1 s, mean ~1 h
    csum = np.cumsum(gaps)
    starts = np.searchsorted(users, np.arange(n_users))
    within = csum - (csum[starts] - gaps[starts])[users]
    span = within[np.r_[starts[1:], users.size] - 1]
    t_start = ts_lo + (rng.random(n_users) * np.maximum(ts_hi - ts_lo - span, 1)).astype(np.int64)
    ts = t_start[users] + within

    # Ratings from the affinity percentile (+ noise): ml-1m whole stars, ml-20m half stars.
    z = (aff - aff.mean()) / aff.std() + rng.normal(0, 0.7, aff.size)
    half = args.layout == "ml-20m"
    stars2 = np.clip(np.round((3.6 + 1.0 * z) * (2 if half else 1)), 1, 10 if half else 5)
    stars2 = stars2.astype(np.int64) * (1 if half else 2)  # rating * 2

    mid = movie_ids[items]
    uid = users + 1
    if half:  # ml-20m: ordered by userId then movieId, ratings like 3.5 / 4.0
        o = np.lexsort((mid, uid))
        body = format_rows(
            [uid[o], mid[o], stars2[o] // 2, (stars2[o] % 2) * 5, ts[o]], [",", ",", ".", ","]
        )
    else:
        body = format_rows([uid, mid, stars2 // 2, ts], [",", ",", ","])
    raw_ratings = (
        body.replace(b",", b"::") if not half else b"userId,movieId,rating,timestamp\n" + body
    )

    g = rng.random((n_items, len(GENRES))) < 0.12
    g[np.arange(n_items), rng.integers(0, len(GENRES), n_items)] = True
    genres = ["|".join(np.array(GENRES)[row]) for row in g]
    titles = [f"Synthetic Movie {m} ({1919 + m % 90})" for m in movie_ids]
    movies = list(zip(movie_ids, titles, genres, strict=True))
    movies_csv = "item_id,titles,genres\n" + "".join(f'{m},"{t}",{g}\n' for m, t, g in movies)
    if half:
        raw_movies = "movieId,title,genres\n" + movies_csv.split("\n", 1)[1]
    else:
        raw_movies = "".join(f"{m}::{t}::{g}\n" for m, t, g in movies)

    out = os.path.join(args.output, args.layout)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "ratings.csv"), "wb") as f:
        f.write(b"user_id,item_id,rating,timestamp\n")
        f.write(body)
    with open(os.path.join(out, "movies.csv"), "w") as f:
        f.write(movies_csv)
    ext = "csv" if half else "dat"
    with zipfile.ZipFile(
        os.path.join(out, f"{args.layout}.zip"), "w", zipfile.ZIP_DEFLATED, compresslevel=1
    ) as z:
        z.writestr(f"{args.layout}/ratings.{ext}", raw_ratings)
        z.writestr(f"{args.layout}/movies.{ext}", raw_movies)
    print(
        json.dumps(
            {
                "layout": args.layout,
                "dir": out,
                "users": int(n_users),
                "items": int(np.unique(items).size),
                "ratings": int(users.size),
                "min_per_user": int(counts.min()),
                "max_per_user": int(counts.max()),
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
