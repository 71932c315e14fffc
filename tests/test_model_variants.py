"""The scorers ``--model`` chooses (neumf, mf, gmf, mlp): their formulas, training and export.

Each architecture's logits are recomputed here in NumPy from its own weights (the formula written
out, not the model's code); each trains under the same loop, resumes only as itself, and exports
a SavedModel whose ``score`` signature gives the model's own probabilities for raw ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from training_core.data.metadata import read_metadata, read_vocab
from training_core.evaluation.evaluate import evaluate, load_model
from training_core.serving import export
from training_core.training import architectures, loop, model, presets, train_config, trainer
from training_core.training.model_dir import read_model_config

ARCHITECTURES = ("neumf", "mf", "gmf", "mlp")


def _numpy_logits(net: model.NCFModel, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    c = net.config
    u = net.user_embedding.numpy()[users]
    v = net.item_embedding.numpy()[items]
    k, half = c.num_factors, c.layers[0] // 2
    if c.architecture == "mf":
        dot = np.sum(u[:, :k] * v[:, :k], axis=1)
        return dot + u[:, k] + v[:, k] + net.logit_bias.numpy()[0]
    parts = []
    if c.architecture in ("neumf", "gmf"):
        parts.append(u[:, :k] * v[:, :k])
    if c.architecture in ("neumf", "mlp"):
        start = k if c.architecture == "neumf" else 0
        h = np.concatenate([u[:, start : start + half], v[:, start : start + half]], axis=1)
        for w, b in zip(net.mlp_kernels, net.mlp_biases, strict=True):
            h = np.maximum(h @ w.numpy() + b.numpy(), 0.0)
        parts.append(h)
    x = np.concatenate(parts, axis=1)
    return (x @ net.logit_kernel.numpy())[:, 0] + net.logit_bias.numpy()[0]


def test_the_registry_names_every_architecture_in_order_without_tensorflow():
    # --model's choices come from the registry (presets.ARCHITECTURES), read without TensorFlow.
    code = (
        "import sys; from training_core.training import presets; "
        "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'; "
        "print(list(presets.ARCHITECTURES))"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(list(ARCHITECTURES))
    for name in ARCHITECTURES:
        assert architectures.get(name).name == name
    unknown = "unknown model 'nosuch'; choose one of neumf, mf, gmf, mlp"
    with pytest.raises(ValueError, match=unknown):
        presets.get_preset("tiny", architecture="nosuch")


@pytest.mark.parametrize(
    "architecture, width, n_dense",
    [
        # tiny preset: 8 factors, layers (16, 16, 8).
        ("neumf", 8 + 8, 2 + 2 + 2),  # 2 MLP kernels and biases, logit kernel and bias.
        ("mf", 8 + 1, 1),  # Factors and a bias column; the global bias only.
        ("gmf", 8, 2),
        ("mlp", 8, 2 + 2 + 2),
    ],
)
def test_each_architecture_scores_by_its_formula(tiny_data, architecture, width, n_dense):
    meta = read_metadata(tiny_data)
    config = presets.get_preset("tiny", architecture=architecture)
    net = trainer.build_model(config, meta, seed=1)
    assert net.user_embedding.shape == (meta.num_users, width)
    assert net.item_embedding.shape == (meta.num_items, width)
    assert len(net.dense_variables()) == n_dense
    rng = np.random.default_rng(0)
    # Move the biases and the MF bias column off their zero start so they count in the check.
    for var in net.dense_variables():
        var.assign(var + rng.normal(0, 0.1, var.shape).astype(np.float32))
    for table in (net.user_embedding, net.item_embedding):
        table.assign(table + rng.normal(0, 0.1, table.shape).astype(np.float32))
    users = rng.integers(0, meta.num_users, 64)
    items = rng.integers(0, meta.num_items, 64)
    got = net.score(tf.constant(users), tf.constant(items)).numpy()
    np.testing.assert_allclose(got, _numpy_logits(net, users, items), rtol=1e-5, atol=1e-5)


def test_mf_bias_columns_start_at_zero_and_the_neumf_weights_are_unchanged(tiny_data):
    """MF's bias column starts at 0; NeuMF's initial weights are what they were before --model."""
    meta = read_metadata(tiny_data)
    mf = trainer.build_model(presets.get_preset("tiny", architecture="mf"), meta, seed=0)
    assert not np.any(mf.user_embedding.numpy()[:, -1]) and not np.any(mf.item_embedding[:, -1])
    assert np.std(mf.user_embedding.numpy()[:, :-1]) > 0
    neumf = trainer.build_model(presets.get_preset("tiny"), meta, seed=0)
    # The NeuMF tables come from stateless draws with seeds (0, 0) and (0, 1): fixed forever,
    # so checkpoints and quality curves from before --model stay reproducible.
    dim = neumf.config.embedding_dim
    limit = np.sqrt(6.0 / (meta.num_users + dim))
    want = tf.random.stateless_uniform((meta.num_users, dim), (0, 0), -limit, limit).numpy()
    np.testing.assert_array_equal(neumf.user_embedding.numpy(), want)


@pytest.fixture(scope="module")
def trained(tiny_data, tiny_model, tmp_path_factory):
    """Each architecture trained 2 epochs on the tiny data: (model folder, training result).

    NeuMF, the default, is the session's ``tiny_model``; the others need their own models.
    """
    out = {"neumf": tiny_model}
    for arch in (a for a in ARCHITECTURES if a != "neumf"):
        model_dir = str(tmp_path_factory.mktemp(f"variant-{arch}") / "model")
        config = train_config.config_for(
            tiny_data, model_dir, "tiny", architecture=arch, epochs=2, steps_per_loop=50
        )
        result = loop.train(config, tf.distribute.get_strategy())
        out[arch] = (model_dir, result)
    return out


def test_every_architecture_trains_and_beats_chance(trained, tiny_data):
    meta = read_metadata(tiny_data)
    chance = 10 / (1 + meta.eval_negatives)  # HR@10 of a random scorer.
    for arch, (model_dir, result) in trained.items():
        epochs = result.to_dict()["epochs"]
        assert epochs[-1]["loss"] < epochs[0]["loss"], arch
        config, _, _ = read_model_config(model_dir)
        assert config.architecture == arch
        evaluated = evaluate(tiny_data, model_dir)
        assert evaluated.hr_at_10 > 2 * chance, (arch, evaluated.hr_at_10)


def test_a_model_folder_resumes_only_as_its_own_architecture(trained, tiny_data):
    model_dir, _ = trained["mf"]
    other = train_config.config_for(tiny_data, model_dir, "tiny", architecture="gmf", epochs=3)
    with pytest.raises(ValueError, match="architecture mf here, gmf now"):
        loop.train(other, tf.distribute.get_strategy())


@pytest.mark.parametrize("arch", ["mf", "mlp"])
def test_other_architectures_export_the_same_signatures(
    trained, tiny_export, tiny_data, tmp_path, arch
):
    model_dir, _ = trained[arch]
    out = str(tmp_path / "saved")
    export.export(export.ExportConfig(model_dir, tiny_data, out, top_k=5))
    loaded = tf.saved_model.load(out)
    neumf = tf.saved_model.load(tiny_export.export_dir)  # The default architecture's export.
    assert set(loaded.signatures) == set(neumf.signatures)
    # The score signature takes raw ids and gives the model's own probabilities.
    meta = read_metadata(tiny_data)
    users_raw = read_vocab(os.path.join(tiny_data, meta.user_vocab))
    items_raw = read_vocab(os.path.join(tiny_data, meta.item_vocab))
    net, _, _ = load_model(model_dir, tf.distribute.get_strategy())
    assert net.config.architecture == arch
    u_idx, i_idx = np.arange(5), np.arange(5, 10)
    want = tf.sigmoid(net.score(tf.constant(u_idx), tf.constant(i_idx))).numpy()
    response = loaded.signatures["score"](
        user_id=tf.constant(users_raw[u_idx]), item_id=tf.constant(items_raw[i_idx])
    )
    assert response["known"].numpy().all()
    np.testing.assert_allclose(response["score"].numpy(), want, rtol=1e-5, atol=1e-6)
    with open(os.path.join(model_dir, "model_config.json")) as f:
        assert json.load(f)["model"]["architecture"] == arch


def test_an_unknown_architecture_is_named_with_the_choices(tiny_data, tmp_path):
    with pytest.raises(ValueError, match=r"--model must be one of neumf, mf, gmf, mlp, got 'nmf'"):
        train_config.config_for(tiny_data, str(tmp_path / "m"), "tiny", architecture="nmf")


def test_popularity_baseline_ranks_by_training_count(tiny_data):
    """run_eval over the popularity scorer equals a NumPy ranking by epoch-0 positive counts."""
    from conftest import read_split

    from training_core.evaluation import baselines, evaluate

    meta = read_metadata(tiny_data)
    train_rows = read_split(tiny_data, meta, training=True)
    positive = (train_rows["labels"] == 1) & (train_rows["valid_point_mask"] == 1)
    # Distinct training positives per item: recent ones appear several times in an epoch's rows.
    pairs = np.unique(
        train_rows["user_id"][positive] * meta.num_items + train_rows["item_id"][positive]
    )
    counts = np.bincount(pairs % meta.num_items, minlength=meta.num_items)
    ev = read_split(tiny_data, meta, training=False)
    n = 1 + meta.eval_negatives
    scores = counts[ev["item_id"]].reshape(-1, n)
    masked = ev["duplicate_mask"].reshape(-1, n).astype(bool)
    rank = ((~masked[:, :-1]) & (scores[:, :-1] >= scores[:, -1:])).sum(axis=1)
    evaluated = ~masked[:, -1]
    hit = evaluated & (rank < 10)
    want_hr = hit.sum() / evaluated.sum()
    want_ndcg = (hit / np.log2(rank + 2.0)).sum() / evaluated.sum()

    scorer = baselines.popularity(meta, tiny_data)
    np.testing.assert_array_equal(scorer.item_counts.numpy(), counts)
    got = evaluate.run_eval(scorer, tf.distribute.get_strategy(), meta, tiny_data)
    assert got.users == evaluated.sum() > 0
    assert got.hr == pytest.approx(want_hr) and got.ndcg == pytest.approx(want_ndcg, rel=1e-5)
    assert 0 < got.hr < 1


# --- --l2: the embedding penalty --------------------------------------------------------------


@pytest.mark.parametrize("dense", [True, False])
def test_l2_adds_the_penalty_of_the_rows_each_example_uses(dense):
    """Loss and embedding gradients with ``l2_regularization`` against NumPy: the cross entropy
    plus ``l2 * (|u|^2 + |v|^2)`` per valid example over the global batch; the gradient of a
    table row gains ``2 * l2 * row * (its valid uses) / global_batch``, also as touched rows."""
    from training_core.training import compiled_step

    l2, global_batch = 0.05, 8.0
    users = np.array([[0], [1], [1], [2], [3], [0]], np.int64)
    items = np.array([[4], [4], [5], [6], [7], [2]], np.int64)
    features = {
        "user_id": tf.constant(users),
        "item_id": tf.constant(items),
        "labels": tf.constant([[1], [0], [1], [0], [1], [0]], tf.int32),
        "valid_point_mask": tf.constant([[True], [True], [True], [True], [True], [False]]),
    }

    def run(penalty):
        config = presets.get_preset("tiny", architecture="mf", l2_regularization=penalty)
        net = model.NCFModel(config, num_users=5, num_items=9, seed=4)
        variables = [net.user_embedding, net.item_embedding, *net.dense_variables()]
        fn = compiled_step._loss_and_grads_fn(net, variables, None, global_batch, tf.float32, dense)
        loss, grads = fn(features)
        return net, float(loss), [tf.convert_to_tensor(g).numpy() for g in grads[:2]]

    net, plain_loss, plain_grads = run(0.0)
    _, loss, grads = run(l2)
    u, v = net.user_embedding.numpy(), net.item_embedding.numpy()
    valid = np.array([1, 1, 1, 1, 1, 0], np.float64)
    rows = np.sum(u[users[:, 0]] ** 2, axis=1) + np.sum(v[items[:, 0]] ** 2, axis=1)
    assert loss - plain_loss == pytest.approx(l2 * np.sum(valid * rows) / global_batch, rel=1e-5)
    want_u, want_v = np.zeros_like(u), np.zeros_like(v)
    for n in range(len(users)):
        want_u[users[n, 0]] += valid[n] * 2 * l2 * u[users[n, 0]] / global_batch
        want_v[items[n, 0]] += valid[n] * 2 * l2 * v[items[n, 0]] / global_batch
    np.testing.assert_allclose(grads[0] - plain_grads[0], want_u, atol=1e-6)
    np.testing.assert_allclose(grads[1] - plain_grads[1], want_v, atol=1e-6)


@pytest.mark.slow
def test_l2_trains_smaller_embeddings_through_the_cli_options(tiny_data, tmp_path):
    norms = {}
    for penalty in (0.0, 0.01):
        config = train_config.config_for(
            tiny_data,
            str(tmp_path / f"l2-{penalty}"),
            "tiny",
            architecture="mf",
            epochs=2,
            steps_per_loop=50,
            l2_regularization=penalty,
        )
        assert config.model.l2_regularization == penalty
        loop.train(config, tf.distribute.get_strategy())
        net, _, _ = load_model(str(tmp_path / f"l2-{penalty}"), tf.distribute.get_strategy())
        assert net.config.l2_regularization == penalty  # Recorded in model_config.json.
        norms[penalty] = float(np.linalg.norm(net.user_embedding.numpy()))
    assert norms[0.01] < 0.9 * norms[0.0], norms
    with pytest.raises(ValueError, match=r"--l2 must be >= 0 \(0: no penalty\), got -1.0"):
        train_config.config_for(tiny_data, str(tmp_path / "bad"), "tiny", l2_regularization=-1.0)


@pytest.mark.parametrize(
    "architecture, layers",
    [("neumf", None), ("mf", None), ("gmf", None), ("mlp", None), ("neumf", (16,)), ("mlp", (8,))],
)
def test_score_grid_is_score_over_every_pair(tiny_data, architecture, layers):
    """The per-side grid (item side once, NeuMF's first layer split) gives ``score``'s logits
    for every user x item pair, and for each user's own candidates, with and without hidden MLP
    layers; the popularity baseline's grid and candidates are its counts."""
    import dataclasses

    from training_core.evaluation.baselines import popularity

    meta = read_metadata(tiny_data)
    config = presets.get_preset("tiny", architecture=architecture)
    if layers:
        config = dataclasses.replace(config, layers=layers)
    net = trainer.build_model(config, meta, seed=2)
    users = tf.constant([0, 3, 7], tf.int64)
    n = net.num_items
    grid = net.score_grid(users, net.item_side()).numpy()
    pairs = net.score(tf.repeat(users, n), tf.tile(tf.range(n, dtype=tf.int64), [3]))
    np.testing.assert_allclose(grid, pairs.numpy().reshape(3, n), rtol=1e-5, atol=1e-5)
    # And the NumPy formula for a few pairs (the grid is not read back from score alone).
    u, i = np.array([3, 3, 7]), np.array([0, 5, n - 1])
    np.testing.assert_allclose(grid[[1, 1, 2], i], _numpy_logits(net, u, i), rtol=1e-5, atol=1e-5)
    # Each user's own candidates (as evaluation scores the eval records): score's logits too.
    cand = tf.constant([[n - 1, 0, 4, 4], [2, 9, 1, 0], [7, 7, 3, n - 2]], tf.int64)
    got = net.score_candidates(users, net.item_side(), cand).numpy()
    want = net.score(tf.repeat(users, 4), tf.reshape(cand, [-1])).numpy().reshape(3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.shape == (3, 4)
    pop = popularity(meta, tiny_data)
    np.testing.assert_array_equal(
        pop.score_grid(users, pop.item_side()).numpy(),
        np.tile(pop.item_counts.numpy(), (3, 1)),
    )
    np.testing.assert_array_equal(
        pop.score_candidates(users, pop.item_side(), cand).numpy(),
        pop.item_counts.numpy()[cand.numpy()],
    )
