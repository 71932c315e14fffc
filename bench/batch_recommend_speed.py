"""Batch recommendation benchmark: users per second writing every user's top 10 items.

    uv run python -m bench.batch_recommend_speed --shape ml-1m [--workdir DIR] [--repeats 2]

Builds (not timed, reused from --workdir) a synthetic ratings set of the shape, its prepared
data, a model trained for one epoch and its export (top 10). Then, on the same export and in the
same process, one after the other:

  beam      ``training_core.serving.batch_recommend.recommend``: Beam RunInference (in-process
            runner), Parquet written and published, model load included: what
            ``ncf-pipelines recommend`` and the pipeline's step do.
  direct    the reference: the export's ``recommend`` signature called in a plain loop over
            batches of 1024 users, results kept in memory (no Beam, no files), model load
            included.

Each is run ``--repeats`` times; the best is reported, with users/s and the ratio. The cost model
for a larger shape scales the measured time per (user x item) scored: the signature scores every
item for every user, so the work is users x items.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SHAPES = {  # users, items of the MovieLens sets (the synthetic shapes follow them).
    "ml-100k": (943, 1682),
    "ml-1m": (6040, 3706),
    "ml-20m": (138493, 26744),
}


def build(shape: str, workdir: str) -> tuple[str, str]:
    """(export, prepared data) for the shape, made once under workdir."""
    raw = os.path.join(workdir, f"raw-{shape}.csv")
    data = os.path.join(workdir, f"data-{shape}")
    model = os.path.join(workdir, f"model-{shape}")
    export = os.path.join(workdir, f"export-{shape}")
    cli = [sys.executable, "-m", "pipelines.cli"]
    if not os.path.exists(raw):
        subprocess.run(cli + ["synth", "--shape", shape, "--output", raw], check=True)
    if not os.path.exists(data):
        subprocess.run(
            cli + ["prepare-data", "--input", raw, "--output", data, "--num-epochs", "1"],
            check=True,
        )
    if not os.path.exists(export):
        subprocess.run(
            cli
            + ["train", "--data", data, "--model-dir", model, "--preset", shape]
            + ["--epochs", "1"],
            check=True,
        )
        subprocess.run(
            cli
            + ["export", "--model-dir", model, "--data", data, "--output", export]
            + ["--top-k", "10"],
            check=True,
        )
    return export, data


def run_direct(export: str, data: str) -> tuple[float, int]:
    import numpy as np
    import tensorflow as tf

    from training_core.data.metadata import read_metadata, read_vocab

    t0 = time.perf_counter()
    users = read_vocab(os.path.join(data, read_metadata(data).user_vocab))
    model = tf.saved_model.load(export)
    sig = model.signatures["recommend"]
    kept = []
    for start in range(0, len(users), 1024):
        batch = users[start : start + 1024]
        out = sig(user_id=tf.constant(batch), exclude_seen=tf.fill([len(batch)], True))
        kept.append((out["item_ids"].numpy(), out["scores"].numpy()))
    assert sum(len(k[0]) for k in kept) == len(users)
    del model, sig
    return time.perf_counter() - t0, int(np.asarray(users).size)


def run_beam(export: str, data: str, out: str) -> tuple[float, int]:
    from training_core.serving import batch_recommend

    t0 = time.perf_counter()
    result = batch_recommend.recommend(batch_recommend.RecommendConfig(export, data, out))
    return time.perf_counter() - t0, result.num_users


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="ml-1m", choices=sorted(SHAPES))
    parser.add_argument("--workdir", default="/tmp/ncf-bench-recommend")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    from training_core.common import console

    console.setup()
    export, data = build(args.shape, args.workdir)
    results: dict[str, float] = {}
    users = 0
    for _ in range(args.repeats):
        for name in ("direct", "beam"):
            if name == "direct":
                seconds, users = run_direct(export, data)
            else:
                seconds, users = run_beam(export, data, os.path.join(args.workdir, "recs"))
            results[name] = min(results.get(name, float("inf")), seconds)
            print(f"{name:7s} {users:,} users in {seconds:.2f}s ({users / seconds:,.0f} users/s)")
    n_users, n_items = SHAPES[args.shape]
    per_pair = results["beam"] / (n_users * n_items)
    big_users, big_items = SHAPES["ml-20m"]
    summary = {
        "shape": args.shape,
        "users": users,
        "beam_s": results["beam"],
        "direct_s": results["direct"],
        "beam_users_per_s": users / results["beam"],
        "direct_users_per_s": users / results["direct"],
        "beam_over_direct": results["beam"] / results["direct"],
        "ml20m_estimate_s_one_process": per_pair * big_users * big_items,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
