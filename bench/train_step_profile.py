"""Where one CPU training step spends its time: the step taken apart, each part timed alone.

    uv run python -m bench.train_step_profile [--shape ml-1m] [--batch 1024] [--rounds 3]

Builds the trainer exactly as ``train`` does (the reference preset: 8 factors, MLP 64/32/16/8,
Adam), then times, in alternating rounds, compiled loops of ``--steps`` steps that each run one
part of the step on the prepared data (bench/train_speed.py prepares it once under --work):

  data              read and parse the batches only
  forward           the logits
  forward+backward  loss and gradients (dense, and with touched-row embedding gradients)
  full step         the trainer's own loop (dense, sparse)
  adam: tables      the optimizer on the two embedding tables alone (dense; 1,024 touched rows)
  adam: 8 small     the optimizer on the MLP and output variables alone

Prints microseconds per step (median over rounds) as JSON lines and a table. ``--parts`` times
only the parts named (by the start of their names, e.g. ``--parts "full step"``).

Two versions of the code, side by side: ``--code DIR [DIR ...]`` takes ``training_core`` from
each checkout in turn (e.g. ``git worktree add /tmp/before <commit>`` and ``.``), one process per
round and checkout, alternating, and prints each part's median per checkout:

    uv run python -m bench.train_step_profile --code /tmp/before . --parts "full step (dense)"
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", default="ml-1m")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--work", default="/tmp/ncf-bench")
    p.add_argument("--parts", nargs="+", help="only the parts whose names start with these")
    p.add_argument("--code", nargs="+", help="checkouts to compare, alternating (see above)")
    args = p.parse_args()
    if args.code:
        return compare_checkouts(args)
    data = os.path.join(args.work, f"data-{args.shape}")
    if not os.path.exists(os.path.join(data, "metadata.json")):
        sys.exit(f"{data} is missing: run bench/train_speed.py --shape {args.shape} once first")

    import tensorflow as tf

    from training_core.training import (
        compiled_step,
        input_pipeline,
        loop,
        presets,
        train_config,
    )
    from training_core.training import trainer as trainer_lib
    from training_core.training.optim import Adam

    strategy = tf.distribute.get_strategy()

    def trainer(dense: bool) -> trainer_lib._Trainer:
        model_dir = os.path.join(args.work, f"profile-model-{int(dense)}")
        shutil.rmtree(model_dir, ignore_errors=True)
        preset = presets.get_preset("reference", epochs=1, batch_size=args.batch)
        cfg = train_config.TrainConfig(
            data_dir=data,
            model_dir=model_dir,
            model=dataclasses.replace(preset, hr_threshold=None),
            steps_per_loop=500,
            dense_gradients=dense,
            jit_compile=False,
        )
        return trainer_lib._Trainer(cfg, strategy, loop.Evaluation)

    dense_t, sparse_t = trainer(True), trainer(False)
    t = dense_t
    variables = t.variables
    batch = float(t.layout.global_batch)
    grads_dense = compiled_step._loss_and_grads_fn(
        t.model, variables, None, batch, tf.float32, True
    )
    grads_sparse = compiled_step._loss_and_grads_fn(
        t.model, variables, None, batch, tf.float32, False
    )

    def consume(grads):
        return tf.add_n(
            [tf.reduce_sum(g.values if isinstance(g, tf.IndexedSlices) else g) for g in grads]
        )

    @tf.function
    def data_only(iterator, n):
        total = tf.constant(0, tf.int32)
        for _ in tf.range(n):
            total += tf.reduce_sum(next(iterator)["labels"])
        return total

    @tf.function
    def forward(iterator, n):
        total = tf.constant(0.0)
        for _ in tf.range(n):
            x = next(iterator)
            total += tf.reduce_sum(t.model.score(x["user_id"], x["item_id"]))
        return total

    def fwd_bwd(fn):
        @tf.function
        def loop(iterator, n):
            total = tf.constant(0.0)
            for _ in tf.range(n):
                loss, grads = fn(next(iterator))
                total += loss + consume(grads)
            return total

        return loop

    # Optimizer parts on fixed gradients (no input): separate Adam states, same shapes.
    tables, small = variables[:2], variables[2:]
    with strategy.scope():
        adam_tables = Adam(tables, 1e-3, 0.9, 0.999, 1e-8)
        adam_small = Adam(small, 1e-3, 0.9, 0.999, 1e-8)
    g_tables = [tf.random.normal(v.shape) * 1e-3 for v in tables]
    g_small = [tf.random.normal(v.shape) * 1e-3 for v in small]
    g_rows = [
        tf.IndexedSlices(
            tf.random.normal([args.batch, v.shape[1]]) * 1e-3,
            tf.random.uniform([args.batch], 0, v.shape[0], dtype=tf.int32),
            tf.constant(v.shape, tf.int32),
        )
        for v in tables
    ]

    def adam_loop(opt, grads, vs):
        @tf.function
        def loop(iterator, n):
            for _ in tf.range(n):
                opt.apply(strategy, grads, vs)
            return tf.constant(0.0)

        return loop

    parts = {
        "data": (data_only, dense_t),
        "forward": (forward, dense_t),
        "forward+backward (dense)": (fwd_bwd(grads_dense), dense_t),
        "forward+backward (touched rows)": (fwd_bwd(grads_sparse), dense_t),
        "full step (dense)": (dense_t.train_loop, dense_t),
        "full step (touched rows)": (sparse_t.train_loop, sparse_t),
        "adam: tables (dense)": (adam_loop(adam_tables, g_tables, tables), dense_t),
        "adam: tables (1,024 touched rows)": (adam_loop(adam_tables, g_rows, tables), dense_t),
        "adam: 8 small variables": (adam_loop(adam_small, g_small, small), dense_t),
    }
    if args.parts:
        names = list(parts)
        parts = {k: v for k, v in parts.items() if any(k.startswith(q) for q in args.parts)}
        if not parts:
            sys.exit(f"--parts {args.parts} names none of: {', '.join(names)}")
    times: dict[str, list[float]] = {k: [] for k in parts}
    for rnd in range(args.rounds):
        for name, (fn, owner) in parts.items():
            ds = input_pipeline.train_dataset_fn(owner.meta, data, owner.layout, 0, 0)
            iterator = iter(input_pipeline.distribute(strategy, ds))
            fn(iterator, tf.constant(100))  # Trace and warm up.
            start = time.perf_counter()
            fn(iterator, tf.constant(args.steps))
            us = (time.perf_counter() - start) / args.steps * 1e6
            times[name].append(us)
            print(json.dumps({"round": rnd, "part": name, "us_per_step": round(us, 1)}), flush=True)
    print(f"\n{'part':36} {'us/step (median)':>17} {'rounds':>24}")
    for name, ts in times.items():
        rounds = ", ".join(f"{x:.0f}" for x in ts)
        print(f"{name:36} {statistics.median(ts):>17.0f} {rounds:>24}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


def compare_checkouts(args) -> int:
    """Each round runs one process per ``--code`` checkout (this script, one round, that
    checkout's ``training_core``), in turn; prints each part's median per checkout."""
    codes = [os.path.abspath(c) for c in args.code]
    for code in codes:
        if not os.path.isdir(os.path.join(code, "training_core")):
            sys.exit(f"--code {code}: no training_core/ there (a checkout of this project?)")
    # By file, not with -m, which would put the working folder (and its training_core) ahead of
    # PYTHONPATH, which picks the checkout.
    cmd = [sys.executable, os.path.abspath(__file__), "--shape", args.shape,
           "--batch", str(args.batch), "--rounds", "1", "--steps", str(args.steps),
           "--work", args.work]  # fmt: skip
    if args.parts:
        cmd += ["--parts", *args.parts]
    times: dict[tuple[str, str], list[float]] = {}
    for rnd in range(args.rounds):
        for code in codes:
            path = os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")]))
            env = dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2")
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                if line.startswith("{"):
                    row = json.loads(line)
                    times.setdefault((row["part"], code), []).append(row["us_per_step"])
                    print(json.dumps({"round": rnd, "code": code, **row}), flush=True)
    print(f"\n{'part':36} {'checkout':40} {'us/step (median)':>17}  rounds")
    for (part, code), ts in times.items():
        rounds = ", ".join(f"{x:.0f}" for x in ts)
        print(f"{part:36} {code:40} {statistics.median(ts):>17.0f}  {rounds}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
