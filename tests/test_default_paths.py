"""The paths accelerator profiles take by default, exercised on a CPU.

GPU/TPU profiles train in float16 (with dynamic loss scaling) or bfloat16 and apply embedding
gradients densely (the step is XLA-compiled on a TPU, and elsewhere when a caller sets
``jit_compile``), and multi-worker/TPU runs save on a preemption notice; large
tables on CPU take sparse-row (lazy Adam) updates. Tiny test data picks none of these, so each is
forced here: float16 with a loss scale large enough to overflow, `jit_compile=True`, both embedding
update paths, our Adam against the TF1/Keras formula, and a SIGTERM to a multi-worker run.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, WORKER, checkpoint_values

from training_core.data import prepare, synthetic
from training_core.data.config import PrepareConfig
from training_core.data.metadata import read_metadata
from training_core.training import input_pipeline, loop, optim, presets, train_config
from training_core.training import trainer as trainer_lib
from training_core.training.model_dir import checkpoint_dir, config_path, history_path

# A port found free may be taken before a worker binds it: the runs here retry on ADDRESS_IN_USE.
from vertex_emulator.replicas import ADDRESS_IN_USE
from vertex_emulator.replicas import free_port as _free_port


def _prepare(tmp_path_factory, name, shape, **options):
    raw = tmp_path_factory.mktemp(f"{name}_raw") / "ratings.csv"
    synthetic.write(synthetic.generate(shape), str(raw), "csv")
    out = str(tmp_path_factory.mktemp(name) / "data")
    prepare.prepare(
        PrepareConfig(input_path=str(raw), output_dir=out, min_ratings=0, workers=1, **options)
    )
    return out


@pytest.fixture(scope="module")
def two_step_data(tmp_path_factory):
    """One epoch of two 4096-row steps, one per shard: each step holds about half the users
    (all of one shard's) and every item, so some user rows are touched in step 1 only."""
    shape = synthetic.SyntheticConfig(60, 150, 900, min_per_user=5, seed=5)
    return _prepare(
        tmp_path_factory, "two_step", shape, num_epochs=1, eval_negatives=20,
        train_batch_size=4096, num_shards=2, recency_boost=0.0,
    )  # fmt: skip


def _assert_close(actual, expected, rtol, err_msg=""):
    """Within ``rtol`` of each element or of the array's largest magnitude: sums of terms of both
    signs (a batch's gradient, a momentum update) are only exact to round-off of their terms."""
    atol = rtol * float(np.abs(expected).max())
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=err_msg)


def _config(data_dir, model_dir, epochs=1, **options):
    preset = presets.get_preset(
        "tiny", epochs=epochs, batch_size=read_metadata(data_dir).train_prebatch_size
    )
    return train_config.TrainConfig(
        data_dir, model_dir, dataclasses.replace(preset, hr_threshold=None), **options
    )


# -- 1. float16 with dynamic loss scaling ---------------------------------------------------------


def test_dynamic_loss_scale_halves_on_overflow_grows_after_the_interval_and_stops_at_one():
    scale = optim.DynamicLossScale(initial=8.0, growth_interval=3)
    scale.update(tf.constant(False))
    assert (float(scale.scale), int(scale.good_steps)) == (4.0, 0)
    for expected_good in (1, 2):
        scale.update(tf.constant(True))
        assert (float(scale.scale), int(scale.good_steps)) == (4.0, expected_good)
    scale.update(tf.constant(True))  # The third good step in a row doubles it.
    assert (float(scale.scale), int(scale.good_steps)) == (8.0, 0)
    scale.update(tf.constant(True))
    scale.update(tf.constant(False))  # An overflow also forgets the good steps counted so far.
    assert (float(scale.scale), int(scale.good_steps)) == (4.0, 0)
    for _ in range(5):
        scale.update(tf.constant(False))
    assert float(scale.scale) == 1.0  # Never below 1.


def _trainer_and_iterator(data_dir, model_dir, **options):
    config = _config(data_dir, model_dir, **options)
    trainer = trainer_lib._Trainer(config, tf.distribute.get_strategy(), loop.Evaluation)
    dataset_fn = input_pipeline.train_dataset_fn(trainer.meta, data_dir, trainer.layout, 0, 0)
    return trainer, iter(input_pipeline.distribute(trainer.strategy, dataset_fn))


def _state(trainer):
    opt = trainer.optimizer
    return [v.numpy() for v in (*trainer.variables, *opt.m, *opt.v)]


def _float32_gradients(trainer, data_dir, step):
    """The training loss's gradients at the initial weights for one batch of epoch 1, in float32."""
    meta, layout = trainer.meta, trainer.layout
    dataset = input_pipeline.train_dataset_fn(meta, data_dir, layout, 0, step)
    batch = next(iter(dataset(tf.distribute.InputContext(1, 0, 1))))
    fresh = trainer_lib.build_model(trainer.config.model, meta, trainer.config.seed)
    variables = [fresh.user_embedding, fresh.item_embedding, *fresh.dense_variables()]
    with tf.GradientTape() as tape:
        logits = fresh.score(batch["user_id"], batch["item_id"], tf.float32)
        labels = tf.cast(batch["labels"], tf.float32)
        per_row = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
        weights = tf.cast(batch["valid_point_mask"], tf.float32)
        loss = tf.reduce_sum(per_row * weights) / layout.global_batch
    return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, variables)]


def test_float16_overflow_step_is_skipped_the_scale_halves_and_training_goes_on(
    tiny_data, tmp_path
):
    """The real train step (trainer._Trainer's loop) in float16 on the CPU, one step at a time."""
    trainer, it = _trainer_and_iterator(tiny_data, str(tmp_path / "m"), precision="float16")
    assert trainer.dtype == tf.float16 and trainer.loss_scale is not None
    loss_scale, opt = trainer.loss_scale, trainer.optimizer
    assert float(loss_scale.scale) == 2.0**15  # The default a GPU run starts from.

    # 2**40 times the loss overflows float16 in the backward pass (|grad| > 65504).
    loss_scale.scale.assign(2.0**40)
    overflows = 0
    while True:
        before = _state(trainer)
        scale = float(loss_scale.scale)
        loss = float(trainer.train_loop(it, tf.constant(1)))
        assert np.isfinite(loss)  # The loss itself is unscaled, so finite either way.
        if float(loss_scale.scale) == scale / 2:  # An overflow: nothing may have moved.
            overflows += 1
            for a, b in zip(before, _state(trainer), strict=True):
                np.testing.assert_array_equal(a, b)
            assert int(opt.iterations) == 0 and int(loss_scale.good_steps) == 0
            assert overflows < 40
            continue
        break
    # The first finite step was applied: weights and moments moved, Adam counted one step.
    assert overflows >= 10, overflows  # 2**40 is far above what float16 gradients can hold.
    assert float(loss_scale.scale) == scale and int(loss_scale.good_steps) == 1
    assert int(opt.iterations) == 1 and int(trainer.step) == overflows + 1
    assert any(not np.array_equal(a, b) for a, b in zip(before, _state(trainer), strict=True))
    # It applied the *unscaled* gradient (Adam would train on with a scaled one, but its epsilon
    # would shrink by the scale): from zero moments m = (1 - beta1) g, against the float32
    # gradient of the same batch at the same weights (the initial ones: every earlier step was
    # skipped), to float16 accuracy: measured within 5e-2 of the largest element of the
    # embeddings' (batch sums of float16 terms; 1e-3 on some batches), within 1e-2 elsewhere. A
    # gradient left scaled would be 2**20 times too large here.
    expected = _float32_gradients(trainer, tiny_data, step=overflows)
    for i, g in enumerate(expected):
        _assert_close(opt.m[i].numpy(), (1 - trainer.config.model.beta1) * g, 1e-1, f"m {i}")
    # It goes on: finite losses; each later step is applied or, where its gradient still
    # overflows at this scale (2**20 here: a gradient over 0.06), skipped with the scale halved.
    losses = [float(trainer.train_loop(it, tf.constant(1))) for _ in range(20)]
    assert all(np.isfinite(losses))
    halvings = round(np.log2(scale / float(loss_scale.scale)))
    assert float(loss_scale.scale) == scale / 2**halvings and halvings <= 2
    assert int(opt.iterations) == 21 - halvings
    assert all(np.isfinite(v).all() for v in _state(trainer))


def test_float16_training_from_an_overflowing_scale_skips_exactly_the_halving_steps(
    tiny_data, tmp_path, monkeypatch
):
    """A whole ``train()`` run in float16: skipped steps == halvings, and it still learns."""
    initial = 2.0**40
    monkeypatch.setattr(
        trainer_lib, "DynamicLossScale", functools.partial(optim.DynamicLossScale, initial)
    )
    model_dir = str(tmp_path / "m")
    result = loop.train(
        _config(tiny_data, model_dir, precision="float16"), tf.distribute.get_strategy()
    )
    spe = read_metadata(tiny_data).train_steps_per_epoch
    assert result.global_step == spe
    ckpt = checkpoint_values(checkpoint_dir(model_dir))
    final_scale = float(ckpt["loss_scale/scale"])
    halvings = round(np.log2(initial / final_scale))
    assert 2.0**halvings == initial / final_scale and halvings >= 10
    # Growth needs 2000 good steps (more than this run has), so the scale only went down, and
    # every step that halved it was skipped by Adam, every other one applied.
    assert int(ckpt["optimizer/iterations"]) == spe - halvings
    assert int(ckpt["loss_scale/good_steps"]) > 0
    last = result.last
    assert np.isfinite(last.loss) and last.loss < 0.6  # ln 2 = 0.69 is where it started.
    assert last.hr_at_10 > 0.2  # Random ranking of 100 candidates: 0.1.
    assert all(np.isfinite(v).all() for k, v in ckpt.items() if v.dtype.kind == "f")


# -- 2. sparse-row (lazy Adam) and dense embedding updates ---------------------------------------


def _adam_numpy(var, m, v, g, t, lr, b1, b2, eps):
    """The reference formula (TF1/Keras Adam, "epsilon hat"): float64."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    lr_t = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
    return var - lr_t * m / (np.sqrt(v) + eps), m, v


def test_sparse_rows_update_touched_rows_as_adam_and_leave_the_rest_alone():
    """Lazy Adam: duplicate ids summed, touched rows take the Adam step (with the global step's
    bias correction), untouched rows keep value *and* moments (dense Adam would decay them)."""
    rng = np.random.default_rng(0)
    hp = dict(lr=0.05, b1=0.8, b2=0.95, eps=1e-3)
    init = rng.normal(size=(10, 3)).astype(np.float32)
    table = tf.Variable(init)
    opt = optim.Adam([table], hp["lr"], hp["b1"], hp["b2"], hp["eps"])
    strategy = tf.distribute.get_strategy()
    ref_var, ref_m, ref_v = init.astype(np.float64), np.zeros((10, 3)), np.zeros((10, 3))
    steps = [[1, 4, 4, 7], [2, 4], [7, 7, 7, 0], [9]]
    for t, ids in enumerate(steps, start=1):
        values = rng.normal(size=(len(ids), 3)).astype(np.float32)
        before_m, before_v, before = opt.m[0].numpy(), opt.v[0].numpy(), table.numpy()
        opt.apply(strategy, [tf.IndexedSlices(values, tf.constant(ids), (10, 3))], [table])
        g = np.zeros((10, 3))
        np.add.at(g, ids, values.astype(np.float64))
        touched = sorted(set(ids))
        new = _adam_numpy(ref_var, ref_m, ref_v, g, t, **hp)
        for ref, got in zip(new, (table, opt.m[0], opt.v[0]), strict=True):
            np.testing.assert_allclose(got.numpy()[touched], ref[touched], rtol=2e-6, atol=1e-7)
        untouched = [r for r in range(10) if r not in touched]
        np.testing.assert_array_equal(table.numpy()[untouched], before[untouched])
        np.testing.assert_array_equal(opt.m[0].numpy()[untouched], before_m[untouched])
        np.testing.assert_array_equal(opt.v[0].numpy()[untouched], before_v[untouched])
        for ref, got in zip((ref_var, ref_m, ref_v), new, strict=True):
            ref[touched] = got[touched]
        assert int(opt.iterations) == t


@pytest.mark.slow
def test_sparse_and_dense_embedding_updates_differ_exactly_as_lazy_adam_does(
    two_step_data, tmp_path
):
    """The same two training steps with each update path, through ``train()``.

    Step 1 starts from zero moments, where lazy and dense Adam agree on every row (a zero
    gradient leaves a zero-moment row where it is). In step 2 they differ only on rows touched in
    step 1 and not in step 2: dense Adam decays their moments once more and moves them by the
    decayed momentum; lazy Adam leaves them. Everything else must agree to float32 round-off
    (the paths sum duplicate ids in another order, and dense uses the fused kernel).
    """
    ckpts, results = {}, {}
    for dense in (True, False):
        model_dir = str(tmp_path / f"dense_{dense}")
        config = _config(two_step_data, model_dir, steps_per_loop=1, dense_gradients=dense)
        results[dense] = loop.train(config, tf.distribute.get_strategy())
        assert results[dense].global_step == 2
        ckpts[dense] = checkpoint_values(checkpoint_dir(model_dir))
    dense, lazy = ckpts[True], ckpts[False]

    meta = read_metadata(two_step_data)
    layout = input_pipeline.train_layout(meta, meta.train_prebatch_size, 1)
    batches = input_pipeline.train_dataset_fn(meta, two_step_data, layout, 0, 0)(
        tf.distribute.InputContext(1, 0, 1)
    )
    users = [set(b["user_id"].numpy().ravel().tolist()) for b in batches]  # Padding rows too.
    items = [set(b["item_id"].numpy().ravel().tolist()) for b in batches]
    assert len(users) == 2 and items[0] == items[1] == set(range(meta.num_items))
    first_only = sorted(users[0] - users[1])
    others = sorted(set(range(meta.num_users)) - set(first_only))
    assert len(first_only) > 10 and len(others) > 10

    # Variables to 1e-5. Moments to 5e-5: the fused kernel forms 1 - beta2 as
    # 1 - float32(0.999) = 0.00099998713, the sparse path as float32(1 - 0.999) = 0.001, so v
    # differs by 1.3e-5 relative on every row (m by 2e-7).
    def close(name, rows=slice(None)):
        rtol = 1e-5 if name.startswith("model/") else 5e-5
        _assert_close(lazy[name][rows], dense[name][rows], rtol, err_msg=name)

    user_table = ("model/user_embedding", "optimizer/m/0", "optimizer/v/0")
    compared = [n for n in dense if n.startswith(("model/", "optimizer/m/", "optimizer/v/"))]
    assert len(compared) == 3 * 8
    for name in compared:  # Every other table is touched in both steps: all rows agree.
        close(name, others if name in user_table else slice(None))

    # Rows of step 1 only: dense decayed the moments and took one more step; lazy did not.
    hp = presets.get_preset("tiny")
    b1, b2 = hp.beta1, hp.beta2
    m_d, v_d = dense["optimizer/m/0"][first_only], dense["optimizer/v/0"][first_only]
    _assert_close(m_d, b1 * lazy["optimizer/m/0"][first_only], 5e-5)
    _assert_close(v_d, b2 * lazy["optimizer/v/0"][first_only], 5e-5)
    lr_2 = hp.learning_rate * np.sqrt(1 - b2**2) / (1 - b1**2)
    moved = lazy["model/user_embedding"][first_only] - dense["model/user_embedding"][first_only]
    # The difference of two float32 values near 0.3: 3e-8 absolute, 1e-5 of the 3e-3 step.
    _assert_close(moved, lr_2 * m_d / (np.sqrt(v_d) + hp.epsilon), 1e-4)
    assert np.abs(moved).max() > 1e-3  # A real difference, far above the tolerances.
    assert results[True].last.loss == pytest.approx(results[False].last.loss, rel=1e-6)


def test_auto_picks_sparse_rows_on_cpu_for_large_tables(tiny_data, tmp_path, monkeypatch):
    strategy = tf.distribute.get_strategy()
    assert trainer_lib._Trainer(
        _config(tiny_data, str(tmp_path / "a")), strategy, loop.Evaluation
    ).dense  # Tiny: dense.
    monkeypatch.setattr(
        trainer_lib, "DENSE_TABLE_LIMIT", 300 * 16
    )  # Now (200 + 300) * 16 is large.
    assert not trainer_lib._Trainer(
        _config(tiny_data, str(tmp_path / "b")), strategy, loop.Evaluation
    ).dense
    forced = trainer_lib._Trainer(
        _config(tiny_data, str(tmp_path / "c"), dense_gradients=True), strategy, loop.Evaluation
    )
    assert forced.dense


# -- 3. our Adam against the TF1/Keras formula ------------------------------------------------


def _adam_paper(var, m, v, g, t, lr, b1, b2, eps):
    """The Adam paper's Algorithm 1 (epsilon added to the bias-corrected sqrt(v)): float64."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
    return var - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


@pytest.mark.parametrize(
    "hp",
    [
        dict(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8),  # The reference's.
        dict(learning_rate=0.00382059, beta1=0.783529, beta2=0.909003, epsilon=1.45439e-07),
        # An epsilon as large as the gradients: placing it inside the bias correction (the
        # paper's Algorithm 1) instead of outside (TF1/Keras) would change every step visibly.
        dict(learning_rate=0.05, beta1=0.5, beta2=0.7, epsilon=1e-2),
    ],
    ids=["reference", "mlperf", "large-epsilon"],
)
def test_our_adam_matches_the_tf1_keras_formula_step_for_step(hp):
    """Weights and both moments, step for step, against ``_adam_numpy`` in float64: the update
    of ``tf.compat.v1.train.AdamOptimizer`` and Keras' ``Adam`` (which the reference trains
    with), epsilon outside the bias correction. Keras was this test's oracle until it left the
    environment (docs/dependencies.md); the two agreed to rtol 1e-6 on these three cases."""
    rng = np.random.default_rng(1)
    shapes = [(7, 5), (5,), (3, 1)]
    init = [rng.normal(size=s).astype(np.float32) for s in shapes]
    ours = [tf.Variable(x) for x in init]
    opt = optim.Adam(ours, **hp)
    args = (hp["learning_rate"], hp["beta1"], hp["beta2"], hp["epsilon"])
    reference = [x.astype(np.float64) for x in init]
    paper = [x.astype(np.float64) for x in init]
    moments = [(np.zeros(s), np.zeros(s)) for s in shapes]
    paper_moments = [(np.zeros(s), np.zeros(s)) for s in shapes]
    strategy = tf.distribute.get_strategy()
    for step in range(1, 31):
        # Gradients over several magnitudes, including some near epsilon and exact zeros.
        grads = [
            (rng.normal(size=s) * 10.0 ** rng.integers(-6, 2, size=s)).astype(np.float32)
            for s in shapes
        ]
        grads[0][step % 7] = 0.0
        opt.apply(strategy, [tf.constant(g) for g in grads], ours)
        assert int(opt.iterations) == step
        for i, g in enumerate(grads):
            where = f"variable {i}, step {step}"
            reference[i], m, v = _adam_numpy(
                reference[i], *moments[i], g.astype(np.float64), step, *args
            )
            moments[i] = (m, v)
            paper[i], *paper_moments[i] = _adam_paper(
                paper[i], *paper_moments[i], g.astype(np.float64), step, *args
            )
            np.testing.assert_allclose(
                ours[i].numpy(), reference[i], rtol=1e-5, atol=1e-6, err_msg=where
            )
            # The moments too. Our dense path is TensorFlow's fused ResourceApplyAdam, which forms
            # 1 - beta in float32 (1 - float32(0.999) = 0.00099998713, not 0.001): 1.3e-5
            # relative in v at beta2 0.999 (at most 3e-7 at the other betas here).
            _assert_close(opt.m[i].numpy(), m, 1e-5, err_msg=where)
            _assert_close(opt.v[i].numpy(), v, 3e-5, err_msg=where)
    # The large epsilon tells the two placements apart: the test would see the paper's.
    gap = max(float(np.abs(a - b).max()) for a, b in zip(reference, paper, strict=True))
    if hp["epsilon"] >= 1e-2:
        assert gap > 1e-3, gap


# -- 4. XLA ---------------------------------------------------------------------------------------


def _xla_functions(trainer) -> list[str]:
    """Functions in the traced train loop marked for XLA compilation (`_XlaMustCompile`, what
    `tf.function(jit_compile=True)` sets; read through a private but stable TF 2.16 method)."""
    names = []
    for concrete in trainer.train_loop._list_all_concrete_functions():
        for f in concrete.graph.as_graph_def().library.function:
            if f.attr["_XlaMustCompile"].b:
                names.append(f.signature.name)
    return names


@pytest.mark.slow
def test_jit_compile_trains_to_the_same_model_as_without(tiny_data, tmp_path):
    strategy = tf.distribute.get_strategy()
    runs = {}
    for jit in (True, False):
        model_dir = str(tmp_path / f"jit_{jit}")
        config = _config(tiny_data, model_dir, steps_per_loop=50, jit_compile=jit)
        trainer = trainer_lib._Trainer(config, strategy, loop.Evaluation)
        assert trainer.jit is jit
        result = trainer.run()
        runs[jit] = (result, checkpoint_values(checkpoint_dir(model_dir)), _xla_functions(trainer))
    (xla, xla_ckpt, compiled), (plain, plain_ckpt, not_compiled) = runs[True], runs[False]
    assert [n for n in compiled if "loss_and_grads" in n] and not not_compiled
    assert xla.global_step == plain.global_step == read_metadata(tiny_data).train_steps_per_epoch
    # XLA may fuse and reorder float32 sums; over 151 Adam steps that stays at round-off level.
    assert xla.last.loss == pytest.approx(plain.last.loss, rel=1e-5)
    assert xla.last.hr_at_10 == pytest.approx(plain.last.hr_at_10, abs=0.011)  # 2 of 200 users.
    assert xla.last.ndcg_at_10 == pytest.approx(plain.last.ndcg_at_10, abs=0.01)
    for name, value in plain_ckpt.items():
        if name.startswith("model/"):
            np.testing.assert_allclose(xla_ckpt[name], value, rtol=1e-3, atol=1e-4, err_msg=name)


# -- 5. preemption: PreemptionCheckpointHandler's SIGTERM path ------------------------------------

# What the handler needs: on a machine it does not take for a GCE VM, a SIGTERM is the preemption
# notice (it installs its own handler), and after saving it exits with code 42. On GCE (Vertex AI
# included) it asks the metadata server instead: a GPU VM polls `instance/maintenance-event` for
# TERMINATE_ON_HOST_MAINTENANCE (exit code 143), and on CPU-only or Cloud TPU VMs it logs that it
# is not supported there and does nothing (the per-epoch and --checkpoint-every checkpoints are
# all those runs have). Which one it is, it decides by asking metadata.google.internal, so the
# runs here point GCE_METADATA_IP at a closed local port: a machine that is not GCE, every time.

EPOCHS = 2
STEPS_PER_LOOP = 5
PREEMPT_AT = 10  # Steps into epoch 2 (a loop boundary).


def _train(procs, data_dir, model_dir, cluster: bool, on_line=None, attempts=3):
    """``ncf-pipelines train`` under MultiWorkerMirroredStrategy in a fresh process, to its end.

    With ``cluster``, a one-worker TF_CONFIG cluster on a loopback port: the handler then goes
    through the coordination service. Without, the strategy (and the handler) run in local mode.
    ``on_line(proc, line)`` sees the log as it comes. A run that could not bind its port (taken
    since it was found free) fails before training and is started again on another.
    Returns ``(exit status, output)``.
    """
    args = [
        *("train", "--data", data_dir, "--model-dir", model_dir, "--preset", "tiny"),
        *("--epochs", str(EPOCHS), "--steps-per-loop", str(STEPS_PER_LOOP)),
        *("--metrics-out", f"{model_dir}.json", "--strategy", "multi_worker_mirrored"),
    ]
    for _ in range(attempts):
        env = dict(os.environ, NCF_TEST_CPU_DEVICES="1")
        env["GCE_METADATA_IP"] = f"127.0.0.1:{_free_port()}"  # Not GCE: see above.
        env.pop("TF_CONFIG", None)
        if cluster:
            tf_config = {
                "cluster": {"worker": [f"127.0.0.1:{_free_port()}"]},
                "task": {"type": "worker", "index": 0},
            }
            env["TF_CONFIG"] = json.dumps(tf_config)
        proc = procs.popen(
            [sys.executable, WORKER, *args],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines = []
        for line in proc.stdout:  # pytest-timeout (conftest) ends a run that hangs.
            lines.append(line)
            if on_line:
                on_line(proc, line)
        proc.wait()
        out = "".join(lines)
        if not (cluster and proc.returncode not in (0, 42) and ADDRESS_IN_USE in out):
            return proc.returncode, out
    pytest.fail(f"no free port for a one-worker cluster in {attempts} attempts")


@pytest.fixture(scope="module")
def uninterrupted(tiny_data, tmp_path_factory):
    """The same training without a preemption, here on the default strategy: one replica either
    way, the same arithmetic (checked once against a multi-worker run: equal HR/NDCG, epoch
    losses within 4e-9, the per-loop float32 loss sums being the only difference)."""
    # Not the session's tiny_model: the preempted run's own settings (steps_per_loop 5, no HR
    # target), which the comparison needs.
    model_dir = str(tmp_path_factory.mktemp("uninterrupted") / "model")
    config = _config(tiny_data, model_dir, epochs=EPOCHS, steps_per_loop=STEPS_PER_LOOP)
    return loop.train(config, tf.distribute.get_strategy()).to_dict()


@pytest.mark.slow
@pytest.mark.parametrize("cluster", [True, False], ids=["tf_config_cluster", "no_tf_config"])
def test_sigterm_saves_through_the_preemption_handler_and_the_rerun_resumes(
    tiny_data, tmp_path, uninterrupted, cluster, procs
):
    """SIGTERM mid-epoch 2: the handler saves (through the trainer's own save: named by step, with
    the history and the running epoch's sums) and exits; a rerun resumes there and ends with the
    uninterrupted run's steps, epochs and metrics."""
    spe = read_metadata(tiny_data).train_steps_per_epoch
    model_dir = str(tmp_path / "model")
    ckpt_dir = checkpoint_dir(model_dir)

    def preempt(proc, line):
        if f"epoch 2 step {PREEMPT_AT}/{spe} " in line:
            proc.send_signal(signal.SIGTERM)

    status, out = _train(procs, tiny_data, model_dir, cluster, on_line=preempt)
    # Exit code 42 is the handler's exit_fn: the signal was caught, not fatal (that is -15).
    assert status == 42, out[-4000:]
    assert "PreemptionCheckpointHandler: checkpoint saved. Exiting." in out
    assert not os.path.exists(f"{model_dir}.json")  # The run did not finish.
    latest = tf.train.latest_checkpoint(ckpt_dir)
    assert latest is not None, f"no checkpoint in {ckpt_dir}: {os.listdir(model_dir)}"
    saved = int(checkpoint_values(latest)["step"])
    # It saved at a loop boundary after the signal: mid-epoch 2 (unless this reader fell more than
    # a hundred steps behind the run's log).
    assert spe + PREEMPT_AT < saved < EPOCHS * spe, (saved, spe)
    # Named by its step like every other checkpoint here, with that step's history beside it.
    assert latest.endswith(f"ckpt-{saved}")
    assert os.path.exists(history_path(model_dir, saved))
    assert os.path.exists(config_path(model_dir))

    status, out = _train(procs, tiny_data, model_dir, cluster)
    assert status == 0, out[-4000:]
    assert f"resumed from {latest} at step {saved}" in out, out[-4000:]
    assert "is missing" not in out  # The per-epoch history came back with it.
    with open(f"{model_dir}.json") as f:
        resumed = json.load(f)
    assert resumed["global_step"] == uninterrupted["global_step"] == EPOCHS * spe
    assert len(resumed["epochs"]) == len(uninterrupted["epochs"]) == EPOCHS
    for a, b in zip(resumed["epochs"], uninterrupted["epochs"], strict=True):
        assert a["step"] == b["step"] and a["hr_at_10"] == b["hr_at_10"]
        # The epoch's loss is its mean over all of its steps, those before the preemption too.
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["ndcg_at_10"] == pytest.approx(b["ndcg_at_10"], rel=1e-6)
