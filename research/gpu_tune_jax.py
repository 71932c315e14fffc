"""Tune the ``ml-20m`` preset on a GPU machine, with the JAX port of this project's training step.

    uv run python -m research.gpu_tune_jax data ml20m.npz          # here: MovieLens-like ml-20m
    python3 -m research.gpu_tune_jax run ml20m.npz --out tune.jsonl  # on the GPU machine

Why it exists: a tune of the ``ml-20m`` preset at its real shape (138,493 users, 26,744 items,
20M ratings, 100M training rows an epoch, 14-20 epochs a trial) is hours per trial on this
project's 2-core machine, and the GPU machines lent to its sessions have JAX but no TensorFlow
(``research/gpu_ceiling_jax.py`` says why). The arithmetic is ``gpu_ceiling_jax``'s port of
``make_train_loop`` (its ``check`` holds it to the TF step: same losses and weights after three
steps, to float32 rounding); everything else is this project's own code:

- ``data`` draws the interactions with ``training_core.data.synthetic`` (``--structure
  movielens``: as hard as real MovieLens-100k, long-tailed items, skewed users) and saves them
  compactly (each user's items in time order, uint16: about 30 MB, small enough to travel).
- ``run`` prepares them as ``prepare-data`` does, with its own functions and defaults
  (``PrepareConfig``): ``index_interactions``, ``auto_num_shards``, ``make_shard``, and per shard
  ``sampling.eval_rows`` (999 distinct never-seen negatives a user) and ``sampling.train_rows``
  (4 never-seen negatives a positive, drawn afresh every epoch), each shard's epoch padded to
  whole records and the records taken round robin over the shards (``ordered_records``), one
  global batch a step. Then each trial trains from its own initial weights over those epochs and
  after every epoch ranks each user's held-out item against their 999 negatives (ties count
  against it, as ``metrics``): HR@10 and NDCG@10 per epoch, one JSON line per trial.

Trials run in the order given (``--trials``, or the built-in coordinate search: embedding width,
then learning rate at the best width, then L2 at the best of those) until ``--budget-s`` would be
exceeded; a trial cut short by the budget is reported with the epochs it finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import time

import numpy as np

from bench.gpu_train_speed import emit
from training_core.data import indexing, sampling, synthetic
from training_core.data import io as rio
from training_core.data.config import PrepareConfig
from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION
from training_core.data.prep_plan import auto_num_shards
from training_core.training.presets import get_preset

PRESET = "ml-20m"
PREP = PrepareConfig(input_path="", output_dir="")  # prepare-data's defaults.
TOP_K = 10


# --- data (here) -------------------------------------------------------------------------------


def write_data(path: str, shape: str, structure: str, seed: int) -> int:
    """Synthetic interactions, saved as each user's items in time order."""
    config = dataclasses.replace(
        synthetic.with_structure(synthetic.SHAPES[shape], structure), seed=seed
    )
    t0 = time.perf_counter()
    data = synthetic.generate(config)
    order = np.lexsort((data.timestamps, data.users))
    counts = np.bincount(data.users[order] - 1, minlength=config.num_users)
    np.savez_compressed(
        path,
        counts=counts.astype(np.int32),
        items=(data.items[order] - 1).astype(np.uint16),
        num_items=np.int64(config.num_items),
        shape=shape,
        structure=structure,
        seed=np.int64(seed),
    )
    seconds, size = time.perf_counter() - t0, os.path.getsize(path) / 1e6
    print(
        f"{len(order):,} interactions of {shape} ({structure}, seed {seed}), {seconds:.0f} s: "
        f"{path} ({size:.1f} MB)"
    )
    return 0


def load_interactions(path: str) -> rio.Interactions:
    """``write_data``'s file as raw interactions (1-based ids, times increasing per user)."""
    saved = np.load(path)
    counts = saved["counts"].astype(np.int64)
    users = np.repeat(np.arange(1, len(counts) + 1, dtype=np.int64), counts)
    items = saved["items"].astype(np.int64) + 1
    return rio.Interactions(users, items, np.arange(len(items), dtype=np.int64), (path,), "npz")


# --- preparation, as prepare-data does it (CPU, worker processes) -----------------------------

_DATA: dict = {}


def _eval_shard(shard_index: int):
    d = _DATA
    shard = indexing.make_shard(d["data"], shard_index, d["num_shards"])
    # The split prepare-data's defaults choose on: validation (the tune chooses, so never test).
    draw = sampling.validation_rows if PREP.validation else sampling.eval_rows
    split = SPLIT_VALIDATION if PREP.validation else SPLIT_TEST
    comp = sampling.split_complement(shard, split)  # What came before the split's item.
    rows = draw(shard, comp, PREP.eval_negatives, PREP.seed, PREP.eval_sampling)
    return rows.users.astype(np.int32), rows.items.astype(np.int32), rows.duplicate_mask > 0


def _train_shard(task: tuple[int, int]):
    """One epoch of one shard as ``[records, prebatch]`` arrays, padding masked."""
    shard_index, epoch = task
    d = _DATA
    shard = indexing.make_shard(d["data"], shard_index, d["num_shards"])
    comp = sampling.train_complement(shard, PREP.validation)  # Held-out items drawable.
    rows = sampling.train_rows(
        shard, comp, PREP.num_neg, PREP.seed, epoch, PREP.validation, False,
        PREP.recency_boost, PREP.recency_scale,
    )  # fmt: skip
    p = d["prebatch"]
    n = len(rows.users)
    total = max(1, -(-n // p)) * p

    def pad(a, dtype):
        out = np.zeros(total, dtype)
        out[:n] = a
        return out.reshape(-1, p)

    valid = np.zeros(total, np.uint8)
    valid[:n] = 1
    return (pad(rows.users, np.int32), pad(rows.items, np.int32), pad(rows.labels, np.uint8),
            valid.reshape(-1, p))  # fmt: skip


def round_robin(parts: list[tuple]) -> tuple:
    """Records in ``ordered_records``' order: one from each shard's file in turn."""
    order = sorted(
        ((r, s) for s, part in enumerate(parts) for r in range(part[0].shape[0])),
    )
    return tuple(np.stack([parts[s][k][r] for r, s in order]) for k in range(4))


def prepare_all(path: str, epochs: int, prebatch: int, workers: int) -> dict:
    t0 = time.perf_counter()
    data = indexing.index_interactions(load_interactions(path), PREP.min_ratings)
    num_shards = auto_num_shards(data.stats["rows_kept"])
    _DATA.update(data=data, num_shards=num_shards, prebatch=prebatch)
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        ev = pool.map(_eval_shard, range(num_shards))
        order = np.argsort(np.concatenate([e[0] for e in ev]))
        eval_items = np.concatenate([e[1] for e in ev])[order]
        eval_dup = np.concatenate([e[2] for e in ev])[order]
        train = []
        for epoch in range(epochs):
            parts = pool.map(_train_shard, [(s, epoch) for s in range(num_shards)])
            train.append(round_robin(parts))
    return {
        "num_users": data.num_users,
        "num_items": data.num_items,
        "rows_kept": data.stats["rows_kept"],
        "num_shards": num_shards,
        "eval_items": eval_items,
        "eval_dup": eval_dup,
        "train": train,
        "prepare_s": time.perf_counter() - t0,
    }


# --- training and evaluation (JAX) -------------------------------------------------------------


def make_epoch(config, prebatch: int, dtype_name: str):
    """``epoch(state, users, items, labels, valid) -> (state, loss sum)`` over whole batches."""
    import jax
    import jax.numpy as jnp
    from gpu_ceiling_jax import make_step

    per_step = config.batch_size // prebatch
    step = make_step(config, config.batch_size, dtype_name)

    def epoch(state, users, items, labels, valid):
        steps = users.shape[0] // per_step

        def body(i, carry):
            state, total = carry
            take = lambda a: jax.lax.dynamic_slice_in_dim(a, i * per_step, per_step).reshape(-1)  # noqa: E731
            batch = (take(users), take(items), take(labels).astype(jnp.float32),
                     take(valid).astype(jnp.float32))  # fmt: skip
            state, loss = step(state, batch)
            return state, total + loss

        return jax.lax.fori_loop(0, steps, body, (state, jnp.float32(0)))

    return jax.jit(epoch, donate_argnums=(0,))


def make_eval(config, users_per_chunk: int, dtype_name: str):
    """``evaluate(params, items, dup) -> (hits, ndcg sum)`` over every user (sampled metric)."""
    import jax
    import jax.numpy as jnp
    from gpu_ceiling_jax import forward

    dtype = jnp.dtype(dtype_name)

    def chunk(params, users, items, dup):
        b, n = items.shape
        u_rows = jnp.take(params["user_embedding"], jnp.repeat(users, n), axis=0)
        v_rows = jnp.take(params["item_embedding"], items.reshape(-1), axis=0)
        scores = forward(params, u_rows, v_rows, config, dtype).reshape(b, n)
        positive = scores[:, -1:]
        rank = jnp.sum(~dup[:, :-1] & (scores[:, :-1] >= positive), axis=1)
        hit = rank < TOP_K
        ndcg = jnp.where(hit, jnp.log(2.0) / jnp.log(rank.astype(jnp.float32) + 2.0), 0.0)
        return hit, ndcg

    def evaluate(params, items, dup, real):
        u = items.shape[0]
        users = jnp.arange(u, dtype=jnp.int32).reshape(-1, users_per_chunk)
        shaped = lambda a: a.reshape(-1, users_per_chunk, a.shape[-1])  # noqa: E731
        hit, ndcg = jax.lax.map(lambda x: chunk(params, *x), (users, shaped(items), shaped(dup)))
        hit, ndcg = hit.reshape(-1) & real, jnp.where(real, ndcg.reshape(-1), 0.0)
        return jnp.sum(hit.astype(jnp.int32)), jnp.sum(ndcg)

    return jax.jit(evaluate)


def run_trial(name: str, overrides: dict, prepared: dict, device_data: dict, args, deadline: float):
    import jax
    from gpu_ceiling_jax import init_params, initial_state

    overrides = dict(overrides)
    seed = overrides.pop("seed", args.seed)  # Initial weights; the data's seed is prepare's.
    config = get_preset(PRESET, **overrides)
    epochs = min(config.epochs, len(device_data["train"]))
    t0 = time.perf_counter()
    params = init_params(prepared["num_users"], prepared["num_items"], config, seed=seed)
    state = initial_state(params, args.precision)
    run_epoch = make_epoch(config, args.prebatch, args.precision)
    evaluate = make_eval(config, args.eval_users_per_chunk, args.precision)
    users = prepared["num_users"]
    curve, epoch_s, losses = [], [], []
    cut = False
    for e in range(epochs):
        if e and time.perf_counter() + float(np.mean(epoch_s)) > deadline:
            cut = True
            break
        t = time.perf_counter()
        state, total = run_epoch(state, *device_data["train"][e])
        losses.append(float(total))
        hits, ndcg = evaluate(state[0], device_data["eval_items"], device_data["eval_dup"],
                              device_data["real"])  # fmt: skip
        curve.append((int(hits) / users, float(ndcg) / users))
        epoch_s.append(time.perf_counter() - t)
    steps = device_data["train"][0][0].shape[0] // (config.batch_size // args.prebatch)
    hr = [c[0] for c in curve]
    best = int(np.argmax(hr)) if hr else -1
    del state
    jax.clear_caches()
    return {
        "trial": name,
        "overrides": overrides,
        "config": dataclasses.asdict(config),
        "device": str(jax.devices()[0].device_kind),
        "framework": f"jax {jax.__version__}",
        "precision": args.precision,
        "seed": seed,
        "epochs_run": len(curve),
        "cut_by_budget": cut,
        "hr_at_10": hr,
        "ndcg_at_10": [c[1] for c in curve],
        "mean_loss": [x / steps for x in losses],
        "best_hr_at_10": hr[best] if hr else None,
        "best_epoch": best + 1,
        "best_hr_first_14": max(hr[:14]) if hr else None,
        "epoch_s": epoch_s,
        "trial_s": time.perf_counter() - t0,
    }


# Coordinate search: each stage's values at the best settings found so far (HR@10, best epoch).
STAGES: tuple[tuple[str, tuple], ...] = (
    ("num_factors", (64, 128, 256)),
    ("learning_rate", (0.00382059, 0.0076, 0.0019)),
    ("l2_regularization", (0.0, 1e-6)),
)


def run(args) -> int:
    t_start = time.perf_counter()
    deadline = t_start + args.budget_s
    prepared = prepare_all(args.data, args.epochs, args.prebatch, args.workers)
    import jax
    import jax.numpy as jnp

    u = prepared["num_users"]
    padded = -(-u // args.eval_users_per_chunk) * args.eval_users_per_chunk
    pad = lambda a: np.concatenate([a, np.repeat(a[-1:], padded - u, axis=0)])  # noqa: E731
    device_data = {
        "eval_items": jnp.asarray(pad(prepared["eval_items"])),
        "eval_dup": jnp.asarray(pad(prepared["eval_dup"])),
        "real": jnp.asarray(np.arange(padded) < u),
        "train": [tuple(jnp.asarray(a) for a in epoch) for epoch in prepared.pop("train")],
    }
    emit({"prepared": {k: v for k, v in prepared.items() if np.isscalar(v)},
          "eval_negatives": PREP.eval_negatives, "num_neg": PREP.num_neg,
          "train_rows_per_epoch": int(device_data["train"][0][3].sum()),
          "records_per_epoch": int(device_data["train"][0][0].shape[0]),
          "prebatch": args.prebatch, "device": str(jax.devices()[0].device_kind),
          "setup_s": time.perf_counter() - t_start}, args.out)  # fmt: skip
    trials = [json.loads(t) for t in args.trials] if args.trials else None
    if trials is not None:
        for i, overrides in enumerate(trials):
            if time.perf_counter() + 30 > deadline:
                break
            emit(run_trial(f"t{i}", overrides, prepared, device_data, args, deadline), args.out)
        return 0
    best: dict = {"epochs": args.epochs}
    best_hr, done = -1.0, {}
    last_s = 0.0
    for field, values in STAGES:
        stage_best = best.get(field, values[0])
        for value in values:
            overrides = {**best, field: value}
            key = json.dumps(dataclasses.asdict(get_preset(PRESET, **overrides)), sort_keys=True)
            if key in done:
                continue
            if time.perf_counter() + max(last_s, 30) > deadline:
                emit({"stopped": "budget", "best_overrides": best, "best_hr": best_hr}, args.out)
                return 0
            row = run_trial(f"{field}={value}", overrides, prepared, device_data, args, deadline)
            emit(row, args.out)
            last_s = row["trial_s"]
            done[key] = row["best_hr_at_10"]
            if row["best_hr_at_10"] is not None and row["best_hr_at_10"] > best_hr:
                best_hr, stage_best = row["best_hr_at_10"], value
        best[field] = stage_best
    emit({"finished": True, "best_overrides": best, "best_hr": best_hr}, args.out)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="write MovieLens-like interactions (run here)")
    d.add_argument("path")
    d.add_argument("--shape", default="ml-20m", choices=sorted(synthetic.SHAPES))
    d.add_argument("--structure", default="movielens", choices=sorted(synthetic.STRUCTURES))
    d.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run", help="prepare and train the trials (GPU machine)")
    r.add_argument("data")
    r.add_argument("--epochs", type=int, default=20, help="epochs prepared (trials' most)")
    r.add_argument(
        "--prebatch",
        type=int,
        default=get_preset(PRESET).batch_size,
        help="rows a record (prepare-data --train-batch-size; default: the preset's batch, as "
        "docs/training.md advises); every trial's batch is a multiple",
    )
    r.add_argument(
        "--trials", nargs="*", help="JSON preset fields (and seed), e.g. '{\"num_factors\": 128}'"
    )
    r.add_argument("--budget-s", type=float, default=480.0)
    r.add_argument("--precision", default="float32", choices=["float32", "bfloat16"])
    r.add_argument("--seed", type=int, default=0, help="initial weights")
    r.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    r.add_argument("--eval-users-per-chunk", type=int, default=2048)
    r.add_argument("--out", help="append JSON lines here")
    args = p.parse_args()
    if args.cmd == "data":
        return write_data(args.path, args.shape, args.structure, args.seed)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
