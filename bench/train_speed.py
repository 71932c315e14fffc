"""Training throughput (examples/s) of our loop on this host, at batch 1024 and larger.

Prepares planted synthetic data shaped like a MovieLens set once (cached under --work), then trains
one epoch per configuration with the reference's default model (preset ``reference``) and
reports the epoch's examples/s (training steps only; evaluation excluded) as JSON lines and a table.

    uv run python -m bench.train_speed --shape ml-1m --batch-sizes 1024 4096 16384
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", default="ml-1m", help="synthetic shape: tiny, ml-100k, ml-1m")
    p.add_argument(
        "--preset",
        default="reference",
        help="model preset (default: the reference's defaults, as its benchmark)",
    )
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument(
        "--embedding-updates", nargs="+", default=["sparse", "dense"], choices=["sparse", "dense"]
    )
    p.add_argument("--jit", nargs="+", type=int, default=[0, 1], help="jit_compile off/on")
    p.add_argument("--steps-per-loop", type=int, default=500)
    p.add_argument("--work", default="/tmp/ncf-bench")
    p.add_argument("--out", help="append JSON lines here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)

    from training_core.data import prepare, synthetic
    from training_core.data.config import PrepareConfig
    from training_core.training import presets, train_config

    data = os.path.join(args.work, f"data-{args.shape}")
    if not os.path.exists(os.path.join(data, "metadata.json")):
        os.makedirs(args.work, exist_ok=True)
        raw = os.path.join(args.work, f"{args.shape}.csv")
        synthetic.write(synthetic.generate(synthetic.SHAPES[args.shape]), raw, "csv")
        prepare.prepare(
            PrepareConfig(
                input_path=raw,
                output_dir=data,
                num_epochs=1,
                train_batch_size=1024,
                eval_negatives=99,
            )
        )

    import tensorflow as tf

    from training_core.training import loop

    rows = []
    for updates in args.embedding_updates:
        for jit in args.jit:
            for batch in args.batch_sizes:
                model_dir = os.path.join(args.work, "model")
                shutil.rmtree(model_dir, ignore_errors=True)
                config = train_config.TrainConfig(
                    data_dir=data,
                    model_dir=model_dir,
                    model=dataclasses.replace(
                        presets.get_preset(args.preset, epochs=1, batch_size=batch),
                        hr_threshold=None,
                    ),
                    steps_per_loop=args.steps_per_loop,
                    dense_gradients=updates == "dense",
                    jit_compile=bool(jit),
                )
                t0 = time.perf_counter()
                result = loop.train(config, tf.distribute.get_strategy())
                row = {
                    "shape": args.shape,
                    "preset": args.preset,
                    "batch_size": batch,
                    "embedding_updates": updates,
                    "jit": jit,
                    "steps": result.global_step,
                    "examples_per_sec": round(result.last.examples_per_sec),
                    "hr_at_10": round(result.last.hr_at_10, 4),
                    "wall_s": round(time.perf_counter() - t0, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(row) + "\n")
    print(f"\n{'updates':8} {'batch':>7} {'examples/s':>12} {'HR@10':>7}")
    for r in rows:
        print(
            f"{r['embedding_updates']:8} {r['batch_size']:>7} {r['examples_per_sec']:>12,} "
            f"{r['hr_at_10']:>7}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
