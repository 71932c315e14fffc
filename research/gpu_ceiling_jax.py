"""The same NeuMF training step in JAX: an accelerator's examples/s where TensorFlow is missing.

    uv run python -m research.gpu_ceiling_jax tf-reference check.npz  # here: TF writes 3 steps
    python3 -m research.gpu_ceiling_jax check check.npz               # JAX repeats them, compares
    python3 -m research.gpu_ceiling_jax measure --out gpu-jax.jsonl   # examples/s, ml-20m shape
    python3 -m research.gpu_ceiling_jax epoch --out epoch.jsonl       # whole epochs, NVIDIA's count
    python3 -m research.gpu_ceiling_jax full-catalog --out fc.jsonl   # every user x every item

(from the repository root, so that ``bench`` and ``training_core`` import)

Why it exists: the GPU machines lent to this project's sessions carry JAX and PyTorch but no
TensorFlow, reach no package index, and take 64 MiB per call, while TensorFlow 2.16 with its
CUDA 12 libraries is about 3 GB; ``bench/gpu_train_speed.py`` (this project's own step) cannot run
there. This script is the step ``make_train_loop`` compiles, written again in JAX: the ``ml-20m``
preset's NeuMF (64 factors, MLP 256-256-128-64; one user and one item table of 192 columns, sliced
into the GMF and MLP parts), sigmoid cross-entropy over the global batch, L2 on the rows used,
dense gradients for the tables and the reference's Adam (``ResourceApplyAdam``'s formula) over
every variable, float16 with dynamic loss scaling (a step that overflows is skipped) or bfloat16
with float32 variables. Both go through XLA (the TF step XLA-compiles its forward and backward
pass on an accelerator); here the whole loop of ``n`` steps is one compiled program.

``tf-reference`` runs the project's own TF step (``make_train_loop``) three times on a small
model and fixed batches and saves the initial weights, the batches, the losses and the final
weights; ``check`` loads the same initial weights, takes the same three steps in JAX and fails
unless losses and weights agree to float32 rounding. Its numbers therefore measure this
project's arithmetic on the accelerator, not its TensorFlow code: a ceiling for the TF path
(``bench/gpu_train_speed.py``) once TensorFlow is installed on such a machine.

``measure``: for each batch size and precision, data resident on the device (a pool of batches,
1 positive to 4 negatives, Zipf-like items, as ``gpu_train_speed.batch_pool``), a compiled and
warmed loop, then ``--steps`` timed steps in one call; one JSON line each.

``epoch``: whole epochs over ``gpu_train_speed.ml20m_positives``, negatives drawn and rows
shuffled on the device each epoch, counted as NVIDIA's ``ncf.py`` counts its throughput, so that
``research/reference/gpu_vs_nvidia.sh`` compares the two the same way on one card.

``full-catalog``: ``FullCatalogEval``'s ranking (``item_side``, the per-side ``score_grid``,
``full_catalog_sums``; ``check`` holds it to the TF model's scores and metrics too) of every
ml-20m user against every item, in steps of ``--pairs-per-step`` scores, timed on its second
call; one JSON line per step size and precision.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from bench.gpu_train_speed import ML20M_ITEMS, ML20M_USERS, batch_pool, emit, ml20m_positives
from training_core.training.presets import NeuMFConfig, get_preset  # pure Python, no TF

PRESET = "ml-20m"  # MLPerf v0.5's model and Adam settings, as bench/gpu_train_speed.py trains.


def to_arrays(pool: dict) -> dict:
    """``batch_pool``'s ``[pool, batch, 1]`` records as the port's ``[pool, batch]`` arrays."""
    return {
        "user_id": pool["user_id"][..., 0].astype(np.int32),
        "item_id": pool["item_id"][..., 0].astype(np.int32),
        "labels": pool["labels"][..., 0].astype(np.float32),
        "mask": pool["valid_point_mask"][..., 0].astype(np.float32),
    }


# --- JAX -------------------------------------------------------------------------------------


def init_params(users: int, items: int, config: NeuMFConfig, seed: int = 0) -> dict:
    """Glorot-uniform tables and layers, lecun-uniform logit (the project's initializers)."""
    rng = np.random.default_rng(seed)

    def glorot(shape):
        limit = np.sqrt(6.0 / (shape[0] + shape[1]))
        return rng.uniform(-limit, limit, shape).astype(np.float32)

    layers, k = config.layers, config.num_factors
    dim = k + layers[0] // 2
    n_in = k + layers[-1]
    return {
        "user_embedding": glorot((users, dim)),
        "item_embedding": glorot((items, dim)),
        "kernels": [glorot((a, b)) for a, b in zip(layers[:-1], layers[1:], strict=True)],
        "biases": [np.zeros(b, np.float32) for b in layers[1:]],
        "logit_kernel": rng.uniform(-np.sqrt(3 / n_in), np.sqrt(3 / n_in), (n_in, 1)).astype(
            np.float32
        ),
        "logit_bias": np.zeros(1, np.float32),
    }


def forward(params: dict, u_rows, v_rows, config: NeuMFConfig, dtype):
    """NeuMF's float32 logits ``[n]`` from the ``[n, dim]`` user and item rows (``NCFModel``)."""
    import jax
    import jax.numpy as jnp

    k, half = config.num_factors, config.layers[0] // 2
    u, v = u_rows.astype(dtype), v_rows.astype(dtype)
    gmf = u[:, :k] * v[:, :k]
    h = jnp.concatenate([u[:, k : k + half], v[:, k : k + half]], axis=1)
    for kernel, bias in zip(params["kernels"], params["biases"], strict=True):
        h = jax.nn.relu(h @ kernel.astype(dtype) + bias.astype(dtype))
    features = jnp.concatenate([gmf, h], axis=1)
    logits = (features @ params["logit_kernel"].astype(dtype)).astype(jnp.float32)
    return logits[:, 0] + params["logit_bias"][0]


def make_step(config: NeuMFConfig, global_batch: int, dtype_name: str):
    """``step(state, (users, items, labels, mask)) -> (state, loss)``: one training step."""
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(dtype_name)
    b1, b2, eps, lr = config.beta1, config.beta2, config.epsilon, config.learning_rate
    l2 = config.l2_regularization
    scaled = dtype_name == "float16"

    def loss_fn(params, users, items, labels, mask, scale):
        u_rows = jnp.take(params["user_embedding"], users, axis=0)
        v_rows = jnp.take(params["item_embedding"], items, axis=0)
        logits = forward(params, u_rows, v_rows, config, dtype)
        # TF's sigmoid_cross_entropy_with_logits formula.
        per_row = jnp.maximum(logits, 0) - logits * labels + jnp.log1p(jnp.exp(-jnp.abs(logits)))
        if l2 > 0:
            per_row += l2 * (jnp.sum(u_rows**2, axis=1) + jnp.sum(v_rows**2, axis=1))
        loss = jnp.sum(per_row * mask) / global_batch
        return loss * scale, loss

    grad_fn = jax.grad(loss_fn, has_aux=True)

    def step(state, batch):
        params, m, v, t, scale, good = state
        grads, loss = grad_fn(params, *batch, scale)
        grads = jax.tree_util.tree_map(lambda g: g / scale, grads)
        finite = jnp.all(
            jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)])
        )
        tt = (t + 1).astype(jnp.float32)
        lr_t = lr * jnp.sqrt(1 - b2**tt) / (1 - b1**tt)
        new_m = jax.tree_util.tree_map(lambda m_, g: b1 * m_ + (1 - b1) * g, m, grads)
        new_v = jax.tree_util.tree_map(lambda v_, g: b2 * v_ + (1 - b2) * g * g, v, grads)
        new_p = jax.tree_util.tree_map(
            lambda p, m_, v_: p - lr_t * m_ / (jnp.sqrt(v_) + eps), params, new_m, new_v
        )
        if scaled:  # DynamicLossScale: skip on overflow, halve; double after 2000 good steps.
            keep = lambda new, old: jax.tree_util.tree_map(  # noqa: E731
                lambda a, b: jnp.where(finite, a, b), new, old
            )
            new_p, new_m, new_v = keep(new_p, params), keep(new_m, m), keep(new_v, v)
            grow = finite & (good + 1 >= 2000)
            scale = jnp.where(finite, jnp.where(grow, scale * 2, scale), jnp.maximum(scale / 2, 1))
            good = jnp.where(finite & ~grow, good + 1, 0)
            t = t + finite.astype(t.dtype)
        else:
            t = t + 1
        return (new_p, new_m, new_v, t, scale, good), loss

    return step


def make_loop(config: NeuMFConfig, global_batch: int, dtype_name: str):
    """``loop(state, pool, start, n) -> (state, summed loss)``: ``n`` compiled steps."""
    import jax
    import jax.numpy as jnp

    step = make_step(config, global_batch, dtype_name)

    def loop(state, pool, start, n):
        size = pool["user_id"].shape[0]

        def body(i, carry):
            state, total = carry
            j = (start + i) % size
            batch = tuple(pool[key][j] for key in ("user_id", "item_id", "labels", "mask"))
            state, loss = step(state, batch)
            return state, total + loss

        return jax.lax.fori_loop(0, n, body, (state, jnp.float32(0)))

    return jax.jit(loop, static_argnums=(3,), donate_argnums=(0,))


def make_epoch(config: NeuMFConfig, global_batch: int, dtype_name: str, negatives: int):
    """``epoch(state, users, items, key) -> (state, summed loss)``: one epoch as NVIDIA counts it.

    What NVIDIA's ``TrainDataloader.get_epoch_data`` and training loop do each epoch, on the
    device: ``negatives`` uniformly drawn items per positive (their sampler; ours, in data prep,
    draws never-seen items), a permutation of all rows, then every whole batch in order (the
    last, partial one dropped) through the step.
    """
    import jax
    import jax.numpy as jnp

    step = make_step(config, global_batch, dtype_name)
    num_items = ML20M_ITEMS

    def epoch(state, users, items, key):
        p = users.shape[0]
        k_neg, k_perm = jax.random.split(key)
        neg = jax.random.randint(k_neg, (negatives * p,), 0, num_items, dtype=jnp.int32)
        all_u = jnp.concatenate([users, jnp.tile(users, negatives)])
        all_i = jnp.concatenate([items, neg])
        all_l = jnp.concatenate([jnp.ones(p, jnp.float32), jnp.zeros(negatives * p, jnp.float32)])
        perm = jax.random.permutation(k_perm, all_u.shape[0])
        all_u, all_i, all_l = all_u[perm], all_i[perm], all_l[perm]
        mask = jnp.ones(global_batch, jnp.float32)

        def body(i, carry):
            state, total = carry
            at = i * global_batch
            batch = tuple(
                jax.lax.dynamic_slice(a, (at,), (global_batch,)) for a in (all_u, all_i, all_l)
            )
            state, loss = step(state, (*batch, mask))
            return state, total + loss

        return jax.lax.fori_loop(0, all_u.shape[0] // global_batch, body, (state, jnp.float32(0)))

    return jax.jit(epoch, donate_argnums=(0,))


def measure_epochs(batch: int, precision: str, epochs: int, negatives: int = 4) -> dict:
    """Epochs over ``ml20m_positives`` with negatives drawn on the device; examples/s per epoch.

    Counted as NVIDIA's ``ncf.py`` counts ``train_throughput``: every positive and negative of
    the epoch over the epoch's wall time (sampling and shuffling included). The first epoch
    compiles and is reported apart.
    """
    import jax
    import jax.numpy as jnp

    config = get_preset(PRESET, batch_size=batch)
    users, items = (jnp.asarray(a, jnp.int32) for a in ml20m_positives(0))
    run = make_epoch(config, batch, precision, negatives)
    state = initial_state(init_params(ML20M_USERS, ML20M_ITEMS, config), precision)
    key = jax.random.PRNGKey(0)
    samples = users.shape[0] * (negatives + 1)
    times = []
    for e in range(epochs + 1):
        t0 = time.perf_counter()
        state, total = run(state, users, items, jax.random.fold_in(key, e))
        float(total)  # Waits for the device.
        times.append(time.perf_counter() - t0)
    later = times[1:]
    return {
        "framework": f"jax {jax.__version__}",
        "device": str(jax.devices()[0].device_kind),
        "mode": "epoch (negatives drawn and rows shuffled on the device, as NVIDIA's ncf.py)",
        "batch": batch,
        "precision": precision,
        "samples_per_epoch": samples,
        "first_epoch_s": times[0],
        "epoch_s": later,
        "examples_per_sec": samples / float(np.median(later)),
        "mean_loss_last_epoch": float(total) / (samples // batch),
    }


def initial_state(params: dict, dtype_name: str):
    import jax
    import jax.numpy as jnp

    params = jax.tree_util.tree_map(jnp.asarray, params)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    scale = jnp.float32(2.0**15 if dtype_name == "float16" else 1.0)
    return (params, zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.int32(0), scale,
            jnp.int32(0))  # fmt: skip


def make_full_catalog(config: NeuMFConfig, users_per_step: int, dtype_name: str):
    """``rank(params, users, held_out, seen, n) -> (hits, ndcg_sum)``: the full-catalog metrics.

    ``FullCatalogEval``'s arithmetic for NeuMF: each item's share of the score once
    (``item_side``), user x every item in steps of ``users_per_step`` users (``score_grid``, the
    first MLP layer split per side), the user's training positives (``seen``: ``[users, S]`` item
    ids, -1 padding) masked out, the held-out item's rank among the rest, ties against it
    (``metrics.full_catalog_sums``), top 10. ``users`` is a multiple of ``users_per_step``.
    """
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(dtype_name)
    k, half = config.num_factors, config.layers[0] // 2

    def item_side(params):
        v = params["item_embedding"].astype(dtype)
        first = params["kernels"][0].astype(dtype)
        return v[:, :k], v[:, k : k + half] @ first[half:] + params["biases"][0].astype(dtype)

    def grid(params, item_gmf, item_mlp, users):  # [b, num_items] float32 logits
        u = jnp.take(params["user_embedding"], users, axis=0).astype(dtype)
        w = params["logit_kernel"].astype(dtype)
        logits = (u[:, :k] * w[:k, 0]) @ item_gmf.T
        first = u[:, k : k + half] @ params["kernels"][0].astype(dtype)[:half]
        h = jax.nn.relu(first[:, None, :] + item_mlp[None])
        b, n = h.shape[0], h.shape[1]
        h = h.reshape(b * n, -1)
        for kernel, bias in zip(params["kernels"][1:], params["biases"][1:], strict=True):
            h = jax.nn.relu(h @ kernel.astype(dtype) + bias.astype(dtype))
        logits = logits + (h @ w[k:]).reshape(b, n)
        return logits.astype(jnp.float32) + params["logit_bias"][0]

    def sums(scores, seen, positives):
        b, n = scores.shape
        rows = jnp.broadcast_to(jnp.arange(b)[:, None], seen.shape)
        excluded = (
            jnp.zeros((b, n), bool).at[rows, jnp.where(seen < 0, n, seen)].set(True, mode="drop")
        )
        positive = jnp.take_along_axis(scores, positives[:, None], axis=1)
        candidate = ~excluded & (jnp.arange(n)[None, :] != positives[:, None])
        rank = jnp.sum(candidate & (scores >= positive), axis=1)
        hit = rank < 10
        ndcg = jnp.where(hit, jnp.log(2.0) / jnp.log(rank.astype(jnp.float32) + 2.0), 0.0)
        return jnp.sum(hit.astype(jnp.int32)), jnp.sum(ndcg)

    def rank(params, users, held_out, seen):
        item_gmf, item_mlp = item_side(params)
        steps = users.shape[0] // users_per_step

        def body(i, carry):
            start = i * users_per_step
            pick = lambda a: jax.lax.dynamic_slice_in_dim(a, start, users_per_step)  # noqa: E731
            scores = grid(params, item_gmf, item_mlp, pick(users))
            h, d = sums(scores, pick(seen), pick(held_out))
            return carry[0] + h, carry[1] + d

        return jax.lax.fori_loop(0, steps, body, (jnp.int32(0), jnp.float32(0)))

    return jax.jit(rank), jax.jit(grid), item_side


# --- the check against this project's TF step --------------------------------------------------

CHECK_SHAPE = dict(users=500, items=300, batch=1024, steps=3)


def tf_reference(path: str, overrides: dict | None = None) -> int:
    """This project's TF step (make_train_loop), 3 steps on a small model; saved to ``path``.

    ``overrides``: preset fields other than the ``ml-20m`` preset's (``--set``), saved with the
    weights so that ``check`` takes the same model (e.g. a tuned width or an L2 penalty).
    """
    import tensorflow as tf

    from training_core.evaluation import metrics
    from training_core.training.compiled_step import make_train_loop
    from training_core.training.model import NCFModel
    from training_core.training.optim import Adam

    overrides = overrides or {}
    config = get_preset(PRESET, **{**overrides, "batch_size": CHECK_SHAPE["batch"]})
    users, items, batch, steps = (CHECK_SHAPE[k] for k in ("users", "items", "batch", "steps"))
    strategy = tf.distribute.get_strategy()
    model = NCFModel(config, users, items, seed=0)
    variables = [model.user_embedding, model.item_embedding, *model.dense_variables()]
    optimizer = Adam(variables, config.learning_rate, config.beta1, config.beta2, config.epsilon)
    step = tf.Variable(0, dtype=tf.int64)
    loop = make_train_loop(
        strategy, model, variables, optimizer, None, step,
        global_batch=batch, dtype=tf.float32, dense=True, jit=False,
    )  # fmt: skip
    names = _flat_names(model)
    saved = {f"init/{name}": v.numpy() for name, v in zip(names, variables, strict=True)}
    pool = batch_pool(batch, steps, seed=1, users=users, items=items)
    iterator = iter(tf.data.Dataset.from_tensor_slices(pool))
    losses = [float(loop(iterator, tf.constant(1, tf.int64))) for _ in range(steps)]
    saved.update({f"final/{name}": v.numpy() for name, v in zip(names, variables, strict=True)})
    saved.update({f"pool/{key}": value for key, value in pool.items()})
    # The full-catalog ranking on the final weights: every user against every item.
    rng = np.random.default_rng(2)
    grid = model.score_grid(tf.range(users), model.item_side()).numpy()
    held_out = rng.integers(0, items, users)
    seen = np.full((users, 20), -1, np.int64)
    for u in range(users):  # Up to 20 training positives per user, never the held-out item.
        n = rng.integers(0, 21)
        seen[u, :n] = rng.choice(np.setdiff1d(np.arange(items), [held_out[u]]), n, replace=False)
    excluded = np.zeros((users, items), bool)
    for u in range(users):
        excluded[u, seen[u][seen[u] >= 0]] = True
    hits, ndcg, _ = metrics.full_catalog_sums(grid, excluded, held_out, np.ones(users, bool))
    saved.update({"grid": grid, "held_out": held_out, "seen": seen})
    saved.update({"hits": int(hits), "ndcg": float(ndcg)})
    saved["losses"] = np.array(losses, np.float32)
    saved["overrides"] = json.dumps(overrides)
    np.savez(path, **saved)
    print(f"TF step: losses {losses}; saved {path}")
    return 0


def _flat_names(model) -> list[str]:
    n = len(model.mlp_kernels)
    return ["user_embedding", "item_embedding", *[f"kernels/{i}" for i in range(n)],
            *[f"biases/{i}" for i in range(n)], "logit_kernel", "logit_bias"]  # fmt: skip


def _unflatten(saved, prefix: str) -> dict:
    n = sum(1 for key in saved.files if key.startswith(f"{prefix}/kernels/"))
    return {
        "user_embedding": saved[f"{prefix}/user_embedding"],
        "item_embedding": saved[f"{prefix}/item_embedding"],
        "kernels": [saved[f"{prefix}/kernels/{i}"] for i in range(n)],
        "biases": [saved[f"{prefix}/biases/{i}"] for i in range(n)],
        "logit_kernel": saved[f"{prefix}/logit_kernel"],
        "logit_bias": saved[f"{prefix}/logit_bias"],
    }


def check(path: str) -> int:
    """The JAX step from the TF step's initial weights: same losses and weights, or exit 1."""
    import jax

    jax.config.update("jax_default_matmul_precision", "highest")  # Compare in true float32.
    saved = np.load(path)
    pool = to_arrays({key: saved[f"pool/{key}"] for key in
                      ("user_id", "item_id", "labels", "valid_point_mask")})  # fmt: skip
    steps = len(saved["losses"])
    config = get_preset(PRESET, **json.loads(str(saved["overrides"])))
    loop = make_loop(config, pool["user_id"].shape[1], "float32")
    state = initial_state(_unflatten(saved, "init"), "float32")
    losses = []
    for i in range(steps):
        state, loss = loop(state, pool, i, 1)
        losses.append(float(loss))
    final = _unflatten(saved, "final")
    worst = 0.0
    for got, want in zip(jax.tree_util.tree_leaves(state[0]), jax.tree_util.tree_leaves(final),
                         strict=True):  # fmt: skip
        worst = max(worst, float(np.max(np.abs(np.asarray(got) - want))))
    loss_err = float(np.max(np.abs(np.array(losses) - saved["losses"])))
    ok = loss_err < 1e-5 and worst < 1e-5
    print(json.dumps({"check": "jax step vs tf step", "device": str(jax.devices()[0]),
                      "overrides": json.loads(str(saved["overrides"])),
                      "losses_jax": losses, "losses_tf": saved["losses"].tolist(),
                      "max_loss_diff": loss_err, "max_weight_diff": worst, "ok": ok}))  # fmt: skip
    # The full-catalog ranking, from the TF step's final weights.
    users = len(saved["held_out"])
    rank, grid, item_side = make_full_catalog(config, users, "float32")
    params = _unflatten(saved, "final")
    scores = np.asarray(grid(params, *item_side(params), np.arange(users)))
    grid_err = float(np.max(np.abs(scores - saved["grid"])))
    hits, ndcg = rank(params, np.arange(users), saved["held_out"], saved["seen"])
    ranked = (grid_err < 1e-5 and int(hits) == int(saved["hits"])
              and abs(float(ndcg) - float(saved["ndcg"])) < 1e-4)  # fmt: skip
    print(json.dumps({"check": "jax full-catalog vs tf", "max_score_diff": grid_err,
                      "hits_jax": int(hits), "hits_tf": int(saved["hits"]),
                      "ndcg_jax": float(ndcg), "ndcg_tf": float(saved["ndcg"]),
                      "ok": ranked}))  # fmt: skip
    return 0 if ok and ranked else 1


# --- measure -----------------------------------------------------------------------------------


def measure(batch: int, precision: str, steps: int, warmup: int, pool_size: int) -> dict:
    import jax
    import jax.numpy as jnp

    config = get_preset(PRESET, batch_size=batch)
    params = init_params(ML20M_USERS, ML20M_ITEMS, config)
    pool = {k: jnp.asarray(v) for k, v in to_arrays(batch_pool(batch, pool_size)).items()}
    loop = make_loop(config, batch, precision)
    state = initial_state(params, precision)
    t0 = time.perf_counter()
    state, total = loop(state, pool, 0, warmup)  # Compiles.
    float(total)
    compile_s = time.perf_counter() - t0
    state, total = loop(state, pool, warmup, steps)  # Same n: no recompilation, warm.
    float(total)
    t0 = time.perf_counter()
    state, total = loop(state, pool, 0, steps)
    total = float(total)  # Waits for the device.
    seconds = time.perf_counter() - t0
    return {
        "framework": f"jax {jax.__version__}",
        "device": str(jax.devices()[0].device_kind),
        "batch": batch,
        "precision": precision,
        "steps": steps,
        "seconds": seconds,
        "examples_per_sec": steps * batch / seconds,
        "mean_loss": total / steps,
        "first_call_s": compile_s,
        "loss_scale": float(state[4]),
    }


def measure_full_catalog(pairs_per_step: int, precision: str, users: int, seen: int) -> dict:
    """One full-catalog ranking of ``users`` users x every item at ml-20m shape, timed."""
    import jax
    import jax.numpy as jnp

    config = get_preset(PRESET)
    per_step = max(1, pairs_per_step // ML20M_ITEMS)  # As FullCatalogEval sizes its steps.
    ranked = -(-users // per_step) * per_step  # Whole steps: up to per_step - 1 extra users.
    rng = np.random.default_rng(0)
    params = jax.tree_util.tree_map(jnp.asarray, init_params(ML20M_USERS, ML20M_ITEMS, config))
    user_ids = jnp.asarray(np.arange(ranked) % ML20M_USERS, jnp.int32)
    held_out = jnp.asarray(rng.integers(0, ML20M_ITEMS, ranked), jnp.int32)
    positives = jnp.asarray(rng.integers(0, ML20M_ITEMS, (ranked, seen)), jnp.int32)
    rank, _, _ = make_full_catalog(config, per_step, precision)
    t0 = time.perf_counter()
    hits, _ = rank(params, user_ids, held_out, positives)  # Compiles.
    int(hits)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    hits, ndcg = rank(params, user_ids, held_out, positives)
    int(hits)  # Waits for the device.
    seconds = time.perf_counter() - t0
    return {
        "framework": f"jax {jax.__version__}",
        "device": str(jax.devices()[0].device_kind),
        "pairs_per_step": pairs_per_step,
        "users_per_step": per_step,
        "precision": precision,
        "users": ranked,
        "items": ML20M_ITEMS,
        "seconds": seconds,
        "scores_per_sec": ranked * ML20M_ITEMS / seconds,
        "first_call_s": first,
        "hits": int(hits),
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    ref = sub.add_parser("tf-reference", help="run the TF step (needs this project's venv)")
    ref.add_argument("path")
    ref.add_argument("--set", default="{}", help="preset fields to change, as JSON")
    chk = sub.add_parser("check", help="repeat the TF step's 3 steps in JAX and compare")
    chk.add_argument("path")
    m = sub.add_parser("measure", help="examples/s at ml-20m shape")
    m.add_argument("--batch-sizes", type=int, nargs="+", default=[65_536, 262_144, 1_048_576])
    m.add_argument("--precisions", nargs="+", default=["float32", "bfloat16", "float16"],
                   choices=["float32", "bfloat16", "float16"])  # fmt: skip
    m.add_argument("--steps", type=int, default=50)
    m.add_argument("--warmup", type=int, default=50, help="steps in the compiling call")
    m.add_argument("--pool", type=int, default=8, help="distinct batches kept on the device")
    m.add_argument("--out", help="append JSON lines here")
    ep = sub.add_parser(
        "epoch", help="whole epochs, negatives drawn on the device (NVIDIA's count)"
    )
    ep.add_argument("--batch-sizes", type=int, nargs="+", default=[1_048_576])
    ep.add_argument("--precisions", nargs="+", default=["float32", "float16"],
                    choices=["float32", "bfloat16", "float16"])  # fmt: skip
    ep.add_argument("--epochs", type=int, default=3, help="timed epochs after a compiling one")
    ep.add_argument("--out", help="append JSON lines here")
    fc = sub.add_parser("full-catalog", help="full-catalog ranking time at ml-20m shape")
    fc.add_argument("--pairs-per-step", type=int, nargs="+", default=[1 << 19, 1 << 21, 1 << 23],
                    help="scores per step; full_catalog.PAIRS_PER_STEP is 2**19")  # fmt: skip
    fc.add_argument("--precisions", nargs="+", default=["float32"],
                    choices=["float32", "bfloat16", "float16"])  # fmt: skip
    fc.add_argument("--users", type=int, default=ML20M_USERS)
    fc.add_argument("--seen", type=int, default=144, help="training positives per user masked")
    fc.add_argument("--out", help="append JSON lines here")
    args = p.parse_args()
    if args.cmd == "tf-reference":
        return tf_reference(args.path, json.loads(args.set))
    if args.cmd == "check":
        return check(args.path)
    if args.cmd == "epoch":
        for batch in args.batch_sizes:
            for precision in args.precisions:
                emit(measure_epochs(batch, precision, args.epochs), args.out)
        return 0
    if args.cmd == "full-catalog":
        for pairs in args.pairs_per_step:
            for precision in args.precisions:
                emit(measure_full_catalog(pairs, precision, args.users, args.seen), args.out)
        return 0
    rows = []
    for batch in args.batch_sizes:
        for precision in args.precisions:
            row = measure(batch, precision, args.steps, args.warmup, args.pool)
            rows.append(row)
            emit(row, args.out)
    print(f"\n{'batch':>10} {'precision':>9} {'examples/s':>16}")
    for r in rows:
        print(f"{r['batch']:>10,} {r['precision']:>9} {r['examples_per_sec']:>16,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
