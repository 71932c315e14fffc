"""The sampled evaluation pass: each user's candidates scored pair by pair, or per side.

    uv run python -m bench.eval_speed --data DATA [--model-dir MODEL | --preset ml-1m] [--rounds 3]

On a prepared dataset (its eval records: each user's held-out item and sampled negatives), a
trained model (``--model-dir``, its latest checkpoint) or an untrained one of ``--preset`` is
evaluated in alternating rounds by two ``tf.function`` loops
over the same records with the same metric code (``metrics.ranking_sums``):

  pairwise   ``NCFModel.score`` on every (user, candidate) row: the whole network per pair, as
             the reference's evaluation and this project's before 2026-11-25 ran it
  per side   ``evaluate.make_eval_fn`` (``score_candidates``): NeuMF's first layer split into
             its user half (once per user) and item half (once per item), the rest per pair

Prints seconds per pass and scored rows per second (median over rounds) and checks that both
give the same hits and NDCG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--data", required=True, help="a prepared dataset folder")
    p.add_argument("--model-dir", help="a trained model folder (default: untrained --preset)")
    p.add_argument("--preset", default="ml-1m")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()

    import tensorflow as tf

    from training_core.data.metadata import read_metadata
    from training_core.evaluation import evaluate, metrics
    from training_core.training import presets, trainer
    from training_core.training.input_pipeline import eval_items_per_user

    meta = read_metadata(args.data)
    strategy = tf.distribute.get_strategy()
    k = eval_items_per_user(meta)
    if args.model_dir:
        net = evaluate.load_model(args.model_dir, strategy)[0]
    else:
        with strategy.scope():
            net = trainer.build_model(presets.get_preset(args.preset), meta, 0)

    def pairwise_step(features):
        scores = net.score(features["user_id"], features["item_id"], tf.float32)
        return metrics.ranking_sums(scores, features["duplicate_mask"], k)

    loops = {
        "pairwise": metrics.summing_loop(strategy, pairwise_step),
        "per side": evaluate.make_eval_fn(net, strategy, k, tf.float32),
    }
    seconds: dict[str, list[float]] = {name: [] for name in loops}
    results = {}
    for name, eval_loop in loops.items():  # Trace both first: not timed.
        results[name] = evaluate.run_eval(net, strategy, meta, args.data, tf.float32, eval_loop)
    for _ in range(args.rounds):
        for name, eval_loop in loops.items():
            t0 = time.perf_counter()
            evaluate.run_eval(net, strategy, meta, args.data, tf.float32, eval_loop)
            seconds[name].append(time.perf_counter() - t0)
    same = results["pairwise"].hits == results["per side"].hits and abs(
        results["pairwise"].ndcg_sum - results["per side"].ndcg_sum
    ) <= 1e-3 * max(1.0, results["pairwise"].ndcg_sum)
    rows = meta.num_eval_elements
    out = {
        "model": args.model_dir or f"untrained {args.preset}",
        "eval_users": meta.num_eval_users,
        "rows": rows,
        "same_metrics": same,
        **{
            name: {
                "seconds": round(statistics.median(s), 2),
                "rounds": [round(x, 2) for x in s],
                "rows_per_s": round(rows / statistics.median(s)),
            }
            for name, s in seconds.items()
        },
    }
    out["speedup"] = round(out["pairwise"]["seconds"] / out["per side"]["seconds"], 2)
    print(json.dumps(out))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
