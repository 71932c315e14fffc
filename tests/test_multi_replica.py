"""Several replicas on one machine: float16 loss scaling and touched-rows updates under mirrored.

``MirroredStrategy`` over 2 logical CPU devices stands in for several GPUs in one machine: in
``merge_call`` each gradient, and the loss scale's overflow flag, is a per-replica value, and every
variable has one copy per device. Logical devices must be configured before TensorFlow
initializes, so each check runs this module as a script in a fresh process
(``python tests/test_multi_replica.py CASE DATA OUT``); it trains, saves what it saw (every
replica's copy of every variable, at chosen steps) to ``OUT/seen.npz`` and the test asserts on it.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

REPLICAS = 2
SCALE = 2.0**15  # DynamicLossScale's default start: no overflow on the tiny data.
OVERFLOW = 2.0**40  # Far above what float16 gradients can hold.


# -- in the pytest process ----------------------------------------------------------------------


def _seen(procs, case: str, data_dir: str, out_dir) -> dict[str, np.ndarray]:
    """Runs ``case`` in a fresh process with 2 logical CPU devices; what it saved."""
    from conftest import ROOT, communicate

    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    # This tree's training_core first, whatever else is installed (the script's own folder,
    # tests/, is the child's sys.path[0]).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    proc = procs.popen(
        [sys.executable, os.path.abspath(__file__), case, data_dir, str(out_dir)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = communicate(proc, 240)
    assert proc.returncode == 0, out[-4000:]
    with np.load(os.path.join(out_dir, "seen.npz")) as f:
        return dict(f)


def _snapshot(seen: dict[str, np.ndarray], snapshot: str) -> dict[str, np.ndarray]:
    """One snapshot's ``{variable: copies}`` (axis 0 of each: the replicas)."""
    return {k.split("/", 1)[1]: v for k, v in seen.items() if k.startswith(f"{snapshot}/")}


def _first(seen: dict[str, np.ndarray], snapshot: str) -> dict[str, np.ndarray]:
    """One snapshot's ``{variable: value}`` on the first replica."""
    return {k: v[0] for k, v in _snapshot(seen, snapshot).items()}


def _assert_replicas_identical(seen: dict[str, np.ndarray], snapshot: str) -> None:
    """Every variable's copies are bitwise equal."""
    variables = _snapshot(seen, snapshot)
    assert len(variables) >= 8 * 3, sorted(variables)  # Weights, both moments, the counters.
    for name, copies in variables.items():
        assert copies.shape[0] == REPLICAS, (name, copies.shape)
        for i in range(1, REPLICAS):
            np.testing.assert_array_equal(copies[i], copies[0], err_msg=f"{snapshot} {name}")


def _assert_close(actual, expected, rtol, err_msg=""):
    """Within ``rtol`` of each element or of the array's largest magnitude (sums of terms of both
    signs, as a batch's gradient, are only exact to the round-off of their terms)."""
    atol = rtol * float(np.abs(expected).max())
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=err_msg)


def _assert_mostly_close(actual, expected, rtol, err_msg="", share=0.005):
    """``_assert_close`` for float16 steps on all but ``share`` of the elements. Gradients of a
    few 1e-5 are float16 subnormals, and Adam divides each moment by the root of the other, so
    where a coordinate's gradient is about its round-off, another summation order moves it by
    a visible part of a step (on tiny_data up to 7 of 3,200 elements of a moment)."""
    atol = rtol * float(np.abs(expected).max())
    off = ~np.isclose(actual, expected, rtol=rtol, atol=atol)
    assert off.mean() <= share, f"{err_msg}: {off.sum()} of {off.size} elements off"


def _trained(name: str) -> bool:
    return name.startswith(("model/", "m/", "v/"))


@pytest.mark.slow
def test_float16_overflow_is_skipped_by_every_replica_and_the_scale_halves_on_each(
    tiny_data, tmp_path, procs
):
    """3 good steps, one forced overflow, 3 good steps, in float16 with loss scaling."""
    seen = _seen(procs, "float16", tiny_data, tmp_path)
    for snapshot in ("good", "overflow", "end"):
        _assert_replicas_identical(seen, snapshot)
    good, over, end = (_snapshot(seen, s) for s in ("good", "overflow", "end"))

    # The good steps were applied: Adam counted them, so did the scale.
    assert (good["iterations"] == 3).all() and (good["good_steps"] == 3).all()
    assert (good["scale"] == SCALE).all()
    # The overflow step: on both replicas no weight, moment or count moved; the scale halved on
    # both, the good steps were forgotten; the global step still counts it.
    for name in good:
        if _trained(name) or name == "iterations":
            np.testing.assert_array_equal(over[name], good[name], err_msg=name)
    assert (over["scale"] == OVERFLOW / 2).all() and (over["good_steps"] == 0).all()
    assert (over["step"] == 4).all()
    # Back at a sound scale it trains on, on every replica alike.
    assert (end["iterations"] == 6).all() and (end["step"] == 7).all()
    assert all(np.isfinite(end[n]).all() for n in end if _trained(n))
    assert not np.array_equal(end["model/user_embedding"], over["model/user_embedding"])

    # The same seven batches on one replica, in the same process (one batch per step, not two
    # halves): the same steps skipped and applied, and the same weights and moments to float16
    # accuracy (the halves' float16 gradients are summed in another order).
    one = _first(seen, "one")
    assert one["iterations"] == 6 and one["step"] == 7 and one["scale"] == SCALE
    for name in one:
        if _trained(name):
            _assert_mostly_close(end[name][0], one[name], 5e-3, err_msg=name)


@pytest.mark.slow
def test_sparse_row_updates_under_two_replicas_match_one_replica_and_dense_updates(
    tiny_data, tmp_path, procs
):
    """Touched-rows (lazy Adam) updates with 2 replicas, against 1 replica and against dense.

    Each replica's batch repeats user and item ids, and so do the two halves: every duplicate,
    within and across replicas, must be summed before the row update. After one step from zero
    moments lazy and dense Adam agree on every row (a zero gradient leaves a zero-moment row
    where it is); after five, lazy Adam on 2 replicas agrees with lazy Adam on one.
    """
    seen = _seen(procs, "sparse", tiny_data, tmp_path)
    for snapshot in ("sparse_1", "sparse_5", "dense_1"):
        _assert_replicas_identical(seen, snapshot)
    sparse_1, sparse_5, dense_1, one_5 = (
        _first(seen, s) for s in ("sparse_1", "sparse_5", "dense_1", "one_5")
    )
    assert sparse_5["iterations"] == one_5["iterations"] == 5
    trained = [n for n in sparse_5 if _trained(n)]
    assert len(trained) == 3 * 8
    # Moments to 5e-5: the fused dense kernel forms 1 - beta2 as 1 - float32(0.999), the row
    # update as float32(1 - 0.999): 1.3e-5 relative in v (see test_default_paths).
    for name in trained:
        rtol = 1e-5 if name.startswith("model/") else 5e-5
        _assert_close(sparse_1[name], dense_1[name], rtol, err_msg=f"1 step: {name}")
        _assert_close(sparse_5[name], one_5[name], 1e-5, err_msg=f"5 steps: {name}")
    # What was compared moved: many user rows took steps.
    init = seen["init/model/user_embedding"][0]
    assert np.any(sparse_5["model/user_embedding"] != init, axis=1).sum() > 10


@pytest.mark.slow
def test_mirrored_training_in_float16_with_row_updates_learns_and_keeps_copies_equal(
    tiny_data, tmp_path, procs
):
    """``train`` end to end under mirrored over 2 devices, ``precision float16`` and
    ``embedding_updates sparse`` as a user would ask for them: neither is refused, it learns, and
    the two replicas' copies of every variable are still bitwise equal at the end."""
    seen = _seen(procs, "train", tiny_data, tmp_path)
    _assert_replicas_identical(seen, "end")
    end = _first(seen, "end")
    hr_before, hr_after, loss = seen["hr_before"], seen["hr_after"], seen["loss"]
    assert hr_before < 0.2  # An untrained model: about 0.1 (1 positive among 100 candidates).
    assert hr_after > hr_before + 0.1, (hr_before, hr_after)
    assert np.isfinite(loss) and loss < 0.6  # ln 2 = 0.69 is where it started.
    # Every step is in the global step; those that overflowed (each halved the scale, which
    # only grows after 2000 good steps) are not in Adam's.
    halvings = round(np.log2(SCALE / float(end["scale"])))
    assert end["step"] == seen["steps"] and end["iterations"] == seen["steps"] - halvings


# -- in the child process -----------------------------------------------------------------------


def _copies(strategy, trainer) -> dict[str, np.ndarray]:
    """Every replica's copy of every training variable, stacked on axis 0, by a short name."""
    opt, named = trainer.optimizer, {}
    for i, var in enumerate(trainer.variables):
        named[f"model/{var.name.split(':')[0]}"] = var
        named[f"m/{i}"], named[f"v/{i}"] = opt.m[i], opt.v[i]
    named["iterations"], named["step"] = opt.iterations, trainer.step
    if trainer.loss_scale is not None:
        named["scale"] = trainer.loss_scale.scale
        named["good_steps"] = trainer.loss_scale.good_steps
    return {
        name: np.stack([c.numpy() for c in strategy.experimental_local_results(var)])
        for name, var in named.items()
    }


class _Runs:
    """What each case trains with: the strategies, the data, and what it saw so far."""

    def __init__(self, data_dir: str, out_dir: str):
        import tensorflow as tf

        from training_core.data.metadata import read_metadata
        from training_core.training.strategy import StrategyConfig, build_strategy

        self.mirrored = build_strategy(StrategyConfig(name="mirrored", num_gpus=0))
        assert self.mirrored.num_replicas_in_sync == REPLICAS
        self.one = tf.distribute.get_strategy()
        self.data_dir, self.out_dir = data_dir, out_dir
        self.meta = read_metadata(data_dir)
        self.seen: dict[str, np.ndarray] = {}

    def trainer(self, strategy, name: str, **options):
        """A trainer of the tiny preset (one epoch, no early stop) and its epoch-1 iterator."""
        from training_core.training import input_pipeline, loop, presets, train_config
        from training_core.training import trainer as trainer_lib

        preset = presets.get_preset("tiny", epochs=1, batch_size=self.meta.train_prebatch_size)
        preset = dataclasses.replace(preset, hr_threshold=None)
        model_dir = os.path.join(self.out_dir, name)
        t = trainer_lib._Trainer(
            train_config.TrainConfig(self.data_dir, model_dir, preset, **options),
            strategy,
            loop.Evaluation,
        )
        fn = input_pipeline.train_dataset_fn(self.meta, self.data_dir, t.layout, 0, 0)
        return t, iter(input_pipeline.distribute(strategy, fn))

    def record(self, snapshot: str, strategy, trainer) -> None:
        for name, value in _copies(strategy, trainer).items():
            self.seen[f"{snapshot}/{name}"] = value


def _steps(trainer, iterator, n: int) -> None:
    import tensorflow as tf

    for _ in range(n):
        assert np.isfinite(float(trainer.train_loop(iterator, tf.constant(1))))


def _float16(runs: _Runs) -> None:
    """3 steps, 1 at an overflowing scale, 3 more: on 2 replicas, then on 1."""
    import tensorflow as tf

    for strategy, prefix in ((runs.mirrored, ""), (runs.one, "one")):
        t, it = runs.trainer(strategy, f"float16{prefix}", precision="float16")
        assert t.dtype == tf.float16 and float(t.loss_scale.scale.numpy()) == SCALE
        _steps(t, it, 3)
        if not prefix:
            runs.record("good", strategy, t)
        t.loss_scale.scale.assign(OVERFLOW)  # In cross-replica context: every copy.
        _steps(t, it, 1)
        if not prefix:
            runs.record("overflow", strategy, t)
        t.loss_scale.scale.assign(SCALE)
        _steps(t, it, 3)
        runs.record(prefix or "end", strategy, t)


def _sparse(runs: _Runs) -> None:
    """Row updates on 2 replicas (1 and 5 steps), dense on 2 (1 step), rows on 1 (5 steps)."""
    t, it = runs.trainer(runs.mirrored, "sparse", dense_gradients=False)
    assert not t.dense
    runs.record("init", runs.mirrored, t)
    _steps(t, it, 1)
    runs.record("sparse_1", runs.mirrored, t)
    _steps(t, it, 4)
    runs.record("sparse_5", runs.mirrored, t)
    t, it = runs.trainer(runs.mirrored, "dense", dense_gradients=True)
    _steps(t, it, 1)
    runs.record("dense_1", runs.mirrored, t)
    t, it = runs.trainer(runs.one, "one", dense_gradients=False)
    _steps(t, it, 5)
    runs.record("one_5", runs.one, t)


def _train(runs: _Runs) -> None:
    """Two epochs through ``_Trainer.run`` with the options a user would pass; HR before, after."""
    import tensorflow as tf

    from training_core.evaluation.evaluate import run_eval
    from training_core.training import loop, train_config
    from training_core.training import trainer as trainer_lib

    config = train_config.config_for(
        runs.data_dir,
        os.path.join(runs.out_dir, "model"),
        "tiny",
        epochs=2,  # Both prepared epochs: tiny_data gives each positive once.
        precision="float16",
        embedding_updates="sparse",
        steps_per_loop=50,
        target_hr=-1,
    )
    t = trainer_lib._Trainer(config, runs.mirrored, loop.Evaluation)
    assert t.dtype == tf.float16 and not t.dense
    before = run_eval(t.model, runs.mirrored, runs.meta, runs.data_dir, t.dtype)
    result = t.run()
    runs.record("end", runs.mirrored, t)
    runs.seen["hr_before"] = np.float64(before.hr)
    runs.seen["hr_after"] = np.float64(result.last.hr_at_10)
    runs.seen["loss"] = np.float64(result.last.loss)
    runs.seen["steps"] = np.int64(result.global_step)


def _child(case: str, data_dir: str, out_dir: str) -> None:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * REPLICAS
    )
    runs = _Runs(data_dir, out_dir)
    {"float16": _float16, "sparse": _sparse, "train": _train}[case](runs)
    np.savez(os.path.join(out_dir, "seen.npz"), **runs.seen)


if __name__ == "__main__":
    _child(*sys.argv[1:])
