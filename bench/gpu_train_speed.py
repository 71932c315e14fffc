"""Training examples/s on an accelerator at ml-20m shape, the input pipeline off the critical path.

    uv run python -m bench.gpu_train_speed                       # every visible GPU, defaults
    uv run python -m bench.gpu_train_speed --batch-sizes 65536 1048576 --precisions float32 float16
    uv run python -m bench.gpu_train_speed --jit-compile both    # without and with XLA

The model is the ``ml-20m`` preset's NeuMF (64 factors, MLP 256-256-128-64; MLPerf v0.5's settings)
at ml-20m's shape (138,493 users x 26,744 items); the step is this project's own
(``training_core.training.compiled_step.make_train_loop``: the same loss, gradients, Adam and
float16 loss scaling as ``ncf-pipelines train``), under the strategy ``train`` would pick for the
visible devices, with the embedding updates ``train`` picks there (dense on an accelerator).
``train`` does not XLA-compile the step (``TrainConfig.jit_compile`` is off; only a Python caller
turns it on), so neither does this by default; ``--jit-compile on`` (or ``both``: each configuration
without, then with) measures the XLA-compiled forward and backward pass, to decide that default on a
GPU. The data never touches a file: a pool of training batches (1 positive to 4 negatives, Zipf-like
item popularity) is made once in host memory per replica and fed through
``strategy.distribute_datasets_from_function``, which prefetches each batch onto its device while
the previous step runs; the timed steps therefore measure the step, not the input pipeline.

For each batch size and precision: a warm-up of ``--warmup`` steps (compiling), then
``--steps`` timed steps; examples/s = steps x batch / seconds. One JSON line per configuration
(and ``--out`` appends them to a file). Runs on a CPU too (slowly: a smoke test); the numbers
only mean something on the accelerator they name.

Reference point: NVIDIA publishes about 22.6M samples/s (TF32) and 34.1M (AMP) for its PyTorch
NCF on one A100 at batch 1,048,576; its code measured on an H100 and an H200
(``research/reference/gpu_vs_nvidia.sh``) and the same step in JAX on both
(``research/gpu_ceiling_jax.py``, which bounds this one from above) are in docs/benchmarks.md
'GPU'.
"""

from __future__ import annotations

import argparse
import json
import time

ML20M_USERS, ML20M_ITEMS = 138_493, 26_744
ML20M_RATINGS = 20_000_263


def batch_pool(
    batch: int, pool: int, seed: int = 0, users: int = ML20M_USERS, items: int = ML20M_ITEMS
) -> dict:
    """``pool`` training batches as NumPy arrays ``[pool, batch, 1]`` (the records' layout).

    Uniform users, Zipf-like items (a few take most interactions, as in MovieLens), 1 positive
    to 4 negatives. ``research/gpu_ceiling_jax.py`` times its steps on the same batches.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    n = batch * pool
    user_ids = rng.integers(0, users, n, dtype=np.int64)
    item_ids = rng.choice(items, n, p=zipf_weights(items)).astype(np.int64)
    labels = (rng.random(n) < 0.2).astype(np.int32)  # 1 positive : 4 negatives.
    shape = (pool, batch, 1)
    return {
        "user_id": user_ids.reshape(shape),
        "item_id": item_ids.reshape(shape),
        "labels": labels.reshape(shape),
        "valid_point_mask": np.ones(shape, dtype=bool),
    }


def ml20m_positives(seed: int = 0) -> tuple:
    """ml-20m-shaped training positives ``(users, items)`` as int64 arrays, grouped by user.

    19,861,770 pairs (ml-20m's 20,000,263 ratings less one held out per user), every user at least
    19 (ml-20m keeps users with 20 ratings or more), skewed activity (lognormal), Zipf-like items
    as ``batch_pool``. For epoch-level benchmarks that sample negatives on the device
    (``research/gpu_ceiling_jax.py epoch``, ``research/reference/nvidia_ncf.py data``).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    users, items = ML20M_USERS, ML20M_ITEMS
    train = ML20M_RATINGS - users
    extra = rng.lognormal(0.0, 1.2, users)
    counts = 19 + np.floor(extra / extra.sum() * (train - 19 * users)).astype(np.int64)
    counts[rng.choice(users, train - counts.sum(), replace=False)] += 1
    user_ids = np.repeat(np.arange(users, dtype=np.int64), counts)
    return user_ids, zipf_items(rng, train, items)


def zipf_weights(items: int):
    """Item ``k``'s share of interactions, proportional to ``1 / (k + 1) ** 0.8`` (Zipf-like)."""
    import numpy as np

    weights = 1.0 / np.arange(1, items + 1, dtype=np.float64) ** 0.8
    return weights / weights.sum()


def zipf_items(rng, n: int, items: int):
    """``n`` item ids drawn by ``zipf_weights`` (inverse CDF over ``rng.random``), int64."""
    import numpy as np

    cdf = np.cumsum(zipf_weights(items))
    return np.minimum(np.searchsorted(cdf, rng.random(n)), items - 1).astype(np.int64)


def measure(
    strategy, batch: int, precision: str, steps: int, warmup: int, pool: int, jit_compile: bool
) -> dict:
    import tensorflow as tf

    from training_core.training.compiled_step import make_train_loop
    from training_core.training.model import NCFModel
    from training_core.training.optim import Adam, DynamicLossScale
    from training_core.training.presets import get_preset
    from training_core.training.trainer import compute_dtype

    config = get_preset("ml-20m", batch_size=batch)
    dtype = compute_dtype(precision, strategy)
    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        model = NCFModel(config, ML20M_USERS, ML20M_ITEMS, seed=0)
        variables = [model.user_embedding, model.item_embedding, *model.dense_variables()]
        optimizer = Adam(
            variables, config.learning_rate, config.beta1, config.beta2, config.epsilon
        )
        loss_scale = DynamicLossScale() if dtype == tf.float16 else None
        step = tf.Variable(0, dtype=tf.int64, trainable=False,
                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)  # fmt: skip
    # trainer._dense_gradients' rule at this table size: dense on an accelerator, else touched rows;
    # train XLA-compiles only with dense gradients (trainer._Trainer.jit).
    dense = bool(tf.config.list_logical_devices("GPU"))
    train_loop = make_train_loop(
        strategy, model, variables, optimizer, loss_scale, step,
        global_batch=batch, dtype=dtype, dense=dense, jit=jit_compile and dense,
    )  # fmt: skip
    per_replica = batch // replicas

    def dataset_fn(context):  # Each replica its own pool, already split per replica.
        data = batch_pool(per_replica, pool, seed=context.input_pipeline_id)
        return tf.data.Dataset.from_tensor_slices(data).repeat().prefetch(2)

    # The distributed dataset prefetches each replica's next batch onto its device.
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
    train_loop(iterator, tf.constant(warmup, tf.int64))  # Traces, compiles, warms the allocator.
    float(train_loop(iterator, tf.constant(1, tf.int64)))
    t0 = time.perf_counter()
    total = train_loop(iterator, tf.constant(steps, tf.int64))
    float(total)  # Waits for the device.
    seconds = time.perf_counter() - t0
    return {
        "batch": batch,
        "precision": precision,
        "compute_dtype": dtype.name,
        "replicas": replicas,
        "dense_gradients": dense,
        "jit_compile": jit_compile and dense,
        "devices": [d.name for d in tf.config.list_logical_devices("GPU")] or ["CPU"],
        "steps": steps,
        "seconds": seconds,
        "examples_per_sec": steps * batch / seconds,
        "mean_loss": float(total) / steps,
    }


def emit(row: dict, out: str | None) -> None:
    """Prints one result as a JSON line, and appends it to ``out`` when given."""
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[65_536, 262_144, 1_048_576])
    p.add_argument("--precisions", nargs="+", default=["float32", "float16"],
                   choices=["float32", "float16", "bfloat16"])  # fmt: skip
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--pool", type=int, default=8, help="distinct batches kept in host memory")
    p.add_argument("--out", help="append JSON lines here")
    p.add_argument("--jit-compile", choices=["off", "on", "both"], default="off",
                   help="XLA-compile the forward and backward pass (train: off)")  # fmt: skip
    args = p.parse_args()
    jits = {"off": [False], "on": [True], "both": [False, True]}[args.jit_compile]

    from training_core.common import console

    console.setup()
    from training_core.training import strategy as st

    strategy = st.build_strategy(st.strategy_config(name="auto"))
    rows = []
    for batch in args.batch_sizes:
        for precision in args.precisions:
            for jit in jits:
                row = measure(strategy, batch, precision, args.steps, args.warmup, args.pool, jit)
                rows.append(row)
                emit(row, args.out)
    print(f"\n{'batch':>10} {'precision':>9} {'XLA':>4} {'replicas':>8} {'examples/s':>14}")
    for r in rows:
        xla = "on" if r["jit_compile"] else "off"
        print(f"{r['batch']:>10,} {r['precision']:>9} {xla:>4} {r['replicas']:>8} "
              f"{r['examples_per_sec']:>14,.0f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
