"""In-process checks: input pipeline, batch checks and the NaN guard (default strategy)."""

import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import checkpoint_values

from training_core.data.metadata import SPLIT_TEST, read_metadata
from training_core.training import input_pipeline, loop, presets, results, train_config, trainer
from training_core.training.model_dir import CHECKPOINT_SUBDIR, MODEL_CONFIG_FILE, checkpoint_dir
from training_core.training.presets import resolve_preset


def _rows(ds, key="item_id"):
    return [e[key].numpy().ravel() for e in ds]


@pytest.mark.parametrize("global_batch,replicas", [(256, 1), (256, 2), (512, 2), (128, 4)])
@pytest.mark.slow
def test_pipelines_split_global_batches_in_order_and_skip_exactly(
    tiny_data, global_batch, replicas
):
    meta = read_metadata(tiny_data)
    layout = input_pipeline.train_layout(meta, global_batch, replicas)
    files = meta.train_file_paths(tiny_data, 1)
    whole = np.concatenate(
        _rows(
            input_pipeline.ordered_records(files).map(
                lambda s: tf.io.parse_single_example(
                    s, {"item_id": tf.io.FixedLenFeature([256, 1], tf.int64)}
                )
            )
        )
    )
    for pipelines in (1, 2):
        if replicas % pipelines:
            continue
        for skip in (0, 3):
            per_pipeline = []
            for i in range(pipelines):
                ctx = tf.distribute.InputContext(pipelines, i, replicas)
                fn = input_pipeline.train_dataset_fn(meta, tiny_data, layout, 1, skip)
                per_pipeline.append(_rows(fn(ctx)))
            local = replicas // pipelines
            steps = layout.steps_per_epoch - skip
            assert all(len(p) == steps * local for p in per_pipeline)
            # Step s, replica r (pipeline r // local) holds rows [s*G + r*B, s*G + (r+1)*B).
            b = layout.per_replica_batch
            for s in (0, steps - 1):
                got = np.concatenate(
                    [per_pipeline[r // local][s * local + r % local] for r in range(replicas)]
                )
                start = (skip + s) * global_batch
                np.testing.assert_array_equal(got, whole[start : start + global_batch])
                assert got.shape == (replicas * b,)


def test_records_alternate_over_shard_files_in_a_fixed_order(tiny_data):
    meta = read_metadata(tiny_data)
    files = meta.train_file_paths(tiny_data, 0)
    assert len(files) >= 2
    per_file = [[r.numpy() for r in tf.data.TFRecordDataset(f)] for f in files]
    expected = []
    for k in range(max(len(p) for p in per_file)):
        expected += [p[k] for p in per_file if k < len(p)]
    got = [r.numpy() for r in input_pipeline.ordered_records(files)]
    assert got == expected  # Round robin, one record per file in turn, every time.
    assert got == [r.numpy() for r in input_pipeline.ordered_records(files)]


def test_impossible_batches_say_what_to_change(tiny_data):
    meta = read_metadata(tiny_data)
    with pytest.raises(ValueError, match="does not split evenly over 3 replicas; use a multiple"):
        input_pipeline.train_layout(meta, 256, 3)
    with pytest.raises(ValueError, match="do not divide one another"):
        input_pipeline.train_layout(meta, 384, 2)
    odd = dataclasses.replace(
        meta,
        eval_users_per_batch=meta.eval_users_per_batch + 1,
        eval_prebatch_size=(meta.eval_users_per_batch + 1) * 100,
    )
    with pytest.raises(ValueError, match="whole users over 2 replicas"):
        input_pipeline.check_eval_layout(odd, 2)


def test_damaged_file_is_caught(tiny_data, tmp_path):
    import shutil

    copy = str(tmp_path / "copy")
    shutil.copytree(tiny_data, copy)
    meta = read_metadata(copy)
    victim = meta.train_file_paths(copy, 0)[0]
    with open(victim, "ab") as f:
        f.write(b"x")
    with pytest.raises(ValueError, match="bytes, metadata.json says"):
        input_pipeline.check_files(meta, copy, 1)


@pytest.mark.slow
def test_nan_loss_stops_and_keeps_last_good_checkpoint(tiny_data, tmp_path):
    model_dir = str(tmp_path / "m")
    good = train_config.TrainConfig(
        tiny_data, model_dir, presets.get_preset("tiny", epochs=1), steps_per_loop=40
    )
    first = loop.train(good, tf.distribute.get_strategy())
    step = first.global_step
    # A learning rate far too large (still a valid option: > 0) blows the weights up.
    bad = dataclasses.replace(good, model=presets.get_preset("tiny", epochs=2, learning_rate=1e38))
    with pytest.raises(trainer.NonFiniteLossError, match="last good checkpoint"):
        loop.train(bad, tf.distribute.get_strategy())
    assert tf.train.latest_checkpoint(checkpoint_dir(model_dir)).endswith(f"ckpt-{step}")


@pytest.mark.parametrize(
    "preset, width, mlp_kernels, logit_in",
    [
        # ml-20m (the MLPerf model): 64 GMF factors + 256 // 2 MLP columns per table,
        # MLP 256 -> 256 -> 128 -> 64, logit over 64 GMF + 64 MLP features.
        ("ml-20m", 64 + 128, [(256, 256), (256, 128), (128, 64)], 64 + 64),
        ("ml-1m", 64 + 128, [(256, 256), (256, 128), (128, 64)], 64 + 64),
        # ml-100k is the dot product (mf): 256 factors and a bias column, no MLP, no head.
        ("ml-100k", 256 + 1, [], None),
        ("quick", 16 + 32, [(64, 32), (32, 16)], 16 + 16),
        ("tiny", 8 + 8, [(16, 16), (16, 8)], 8 + 8),
        ("reference", 8 + 32, [(64, 32), (32, 16), (16, 8)], 8 + 8),
    ],
)
def test_a_model_built_from_a_preset_has_the_preset_s_shapes(
    tiny_data, preset, width, mlp_kernels, logit_in
):
    """Shapes read off the built model's variables, against numbers written out here."""
    meta = read_metadata(tiny_data)
    net = trainer.build_model(presets.get_preset(preset), meta, seed=0)
    assert net.user_embedding.shape == (meta.num_users, width)
    assert net.item_embedding.shape == (meta.num_items, width)
    assert [tuple(k.shape) for k in net.mlp_kernels] == mlp_kernels
    assert [tuple(b.shape) for b in net.mlp_biases] == [(n,) for _, n in mlp_kernels]
    if logit_in is None:
        assert net.logit_kernel is None
    else:
        assert net.logit_kernel.shape == (logit_in, 1)
    logits = net.score(tf.constant([0, 1, 2]), tf.constant([3, 4, 5]))
    assert logits.shape == (3,) and np.all(np.isfinite(logits.numpy()))


def test_ml20m_trains_with_the_mlperf_adam_settings(tiny_data, tmp_path):
    """The optimizer a run builds carries the reference's MLPerf v0.5 Adam settings."""
    cfg = train_config.config_for(tiny_data, str(tmp_path / "m"), "ml-20m", batch_size=256)
    opt = trainer._Trainer(cfg, tf.distribute.get_strategy(), loop.Evaluation).optimizer
    assert (opt.learning_rate, opt.beta1, opt.beta2, opt.epsilon) == pytest.approx(
        (0.00382059, 0.783529, 0.909003, 1.45439e-07), rel=1e-9
    )


def test_preset_overrides_and_unknown_names():
    assert presets.get_preset("tiny", epochs=7, batch_size=None).epochs == 7
    tiny = presets.get_preset("tiny")
    assert presets.get_preset("tiny", batch_size=None).batch_size == tiny.batch_size  # None: kept.
    with pytest.raises(ValueError, match="unknown preset 'ml-2m'; choose one of"):
        presets.get_preset("ml-2m")


@pytest.mark.parametrize(
    "positives, preset",
    [
        (99_057, "ml-100k"),  # MovieLens-100k's training positives (one held out per user).
        (316_228, "ml-100k"),
        (316_229, "ml-1m"),
        (994_169, "ml-1m"),  # MovieLens-1m's.
        (4_472_137, "ml-20m"),
        (19_861_770, "ml-20m"),  # MovieLens-20m's.
    ],
)
def test_auto_picks_the_preset_for_the_nearest_movielens_size(positives, preset):
    assert resolve_preset("auto", positives) == preset
    assert resolve_preset("quick", positives) == "quick"  # A name is kept as given.


def test_the_default_preset_is_resolved_against_the_data(tiny_data):
    """Left out, --preset is auto: the tiny set (8,000 ratings) trains with ml-100k's values,
    and the run's config holds those values, not the name."""
    assert train_config.DEFAULTS["preset"] == "auto"
    got = train_config.config_for(tiny_data, "m").model
    prebatch = read_metadata(tiny_data).train_prebatch_size
    assert got == presets.get_preset("ml-100k", batch_size=prebatch)
    assert train_config.config_for(tiny_data, "m", "auto", num_factors=5).model.num_factors == 5


@pytest.mark.slow
def test_target_hr_stops_training_early(tiny_data, tmp_path):
    """Training stops after the first epoch whose HR@10 reaches the target: not before, not after.

    A run without a target gives the per-epoch HR@10 (training is deterministic); the target is
    then put strictly above epoch 1's HR and at most epoch 2's, so only a run that checks the
    target after each epoch stops after exactly two. A target above every epoch never stops.
    """
    import json

    from pipelines import cli

    def run(name, *extra):
        metrics = tmp_path / f"{name}.json"
        argv = [
            "train",
            "--data",
            tiny_data,
            "--model-dir",
            str(tmp_path / name),
            "--preset",
            "tiny",
            "--epochs",
            "3",
            "--steps-per-loop",
            "50",
            "--metrics-out",
            str(metrics),
            *extra,
        ]
        assert cli.main(argv) == 0
        return json.loads(metrics.read_text())

    full = run("full", "--no-early-stop")
    hr = [e["hr_at_10"] for e in full["epochs"]]
    assert len(hr) == 3 and not full["stopped_early"]
    assert hr[0] < hr[1], f"need an HR@10 rise from epoch 1 to 2 to place the target: {hr}"

    target = (hr[0] + hr[1]) / 2  # Strictly above epoch 1's HR, below epoch 2's.
    stopped = run("target", "--target-hr", str(target))
    assert stopped["stopped_early"] is True
    assert [e["epoch"] for e in stopped["epochs"]] == [1, 2]
    assert stopped["global_step"] == 2 * stopped["steps_per_epoch"]
    assert [e["hr_at_10"] for e in stopped["epochs"]] == pytest.approx(hr[:2], abs=1e-9)

    unreachable = (max(hr) + 1) / 2  # Above every epoch's HR@10 and still a valid option.
    assert max(hr) < unreachable <= 1
    never = run("unreachable", "--target-hr", str(unreachable))
    assert never["stopped_early"] is False and len(never["epochs"]) == 3


@pytest.mark.slow
def test_patience_stops_and_the_model_is_the_best_epoch_s(tiny_data, tmp_path):
    """With patience p, training stops once p epochs bring no better HR@10, and the model left
    (the latest checkpoint, what evaluate and export read) is the best epoch's, also after a
    second run on the finished folder.

    A run without early stopping gives the per-epoch HR@10 (training is deterministic; a high
    learning rate on 2 prepared epochs makes it stall or fall back after a peak); the expected
    stop and the best epoch before it are read off that curve, which differs between CPUs
    (oneDNN's kernels): no epoch number is assumed. Which weights were kept is told by NDCG@10,
    which tells two epochs apart where their HR@10 ties.
    """
    from training_core.evaluation import evaluate as ev
    from training_core.training import curve_page

    strategy = tf.distribute.get_strategy()
    patience, epochs = 1, 7  # Seen: a stall at epoch 3 (one CPU), a dip at epoch 5 (another).

    def config(name, **model):
        c = train_config.config_for(
            tiny_data, str(tmp_path / name), "tiny", epochs=epochs, learning_rate=0.1,
            target_hr=0.0, steps_per_loop=50,
        )  # fmt: skip
        return dataclasses.replace(c, model=dataclasses.replace(c.model, **model))

    full = loop.train(config("full"), strategy)
    hr = [e.hr_at_10 for e in full.epochs]
    ndcg = [e.ndcg_at_10 for e in full.epochs]
    assert len(hr) == epochs and full.kept_epoch is None and full.final is full.last
    stop = next((t for t in range(1, epochs) if t - int(np.argmax(hr[: t + 1])) >= patience), None)
    assert stop is not None and stop < epochs - 1, f"the curve never stalls {patience}: {hr}"
    best = int(np.argmax(hr[: stop + 1]))  # The first of equals.
    assert best < stop and hr[best] >= hr[stop], hr
    assert ndcg[best] != pytest.approx(ndcg[stop], abs=1e-9), ndcg  # Two models told apart.

    model_dir = str(tmp_path / "patient")
    result = loop.train(config("patient", patience=patience), strategy)
    assert [e.hr_at_10 for e in result.epochs] == pytest.approx(hr[: stop + 1], abs=1e-9)
    assert result.stopped_early and result.kept_epoch == best + 1
    assert result.final.epoch == best + 1 and result.to_dict()["kept_epoch"] == best + 1
    page = curve_page.training_plots_html(result.to_dict()["epochs"], kept_epoch=result.kept_epoch)
    assert f"The model is epoch {best + 1}'s weights" in page
    assert "The model is" not in curve_page.training_plots_html(full.to_dict()["epochs"])
    summary = results.summary_metrics(result)
    split = result.selection_split  # Validation where tiny_data has it: the names say so.
    chosen = "hr_at_10" if split == SPLIT_TEST else f"{split}_hr_at_10"
    assert summary[chosen] == pytest.approx(hr[best]) and summary["epochs"] == stop + 1
    # The latest checkpoint holds the best epoch's weights, at the last step trained.
    evaluated = ev.evaluate(tiny_data, model_dir)
    on_split = evaluated.validation or evaluated  # The split the epochs were measured on.
    assert on_split.hr_at_10 == pytest.approx(hr[best], abs=1e-9)
    assert on_split.ndcg_at_10 == pytest.approx(ndcg[best], abs=1e-9)
    assert on_split.ndcg_at_10 != pytest.approx(ndcg[stop], abs=1e-9)  # Not the last epoch's.
    assert result.test.hr_at_10 == pytest.approx(evaluated.hr_at_10, abs=1e-9)
    assert ev.load_model(model_dir, strategy)[2] == result.global_step
    # A second run on the finished folder trains nothing and leaves the same model.
    again = loop.train(config("patient", patience=patience), strategy)
    assert again.global_step == result.global_step and again.kept_epoch == best + 1
    assert len(again.epochs) == stop + 1 and again.test == result.test
    evaluated = ev.evaluate(tiny_data, model_dir)
    assert (evaluated.validation or evaluated).hr_at_10 == pytest.approx(hr[best], abs=1e-9)
    assert (evaluated.validation or evaluated).ndcg_at_10 == pytest.approx(ndcg[best], abs=1e-9)


class _Crash(RuntimeError):
    """A crash injected at one exact moment of a run."""


def _patient_config(tiny_data, model_dir):
    """tiny at a learning rate whose HR@10 peaks and stalls on tiny_data: patience 2 stops it."""
    c = train_config.config_for(
        tiny_data, model_dir, "tiny", epochs=7, learning_rate=0.1, target_hr=0.0,
        steps_per_loop=50,
    )  # fmt: skip
    return dataclasses.replace(c, model=dataclasses.replace(c.model, patience=2))


@pytest.mark.parametrize("moment", ["best-weights-saved", "best-weights-read-back"])
@pytest.mark.slow
def test_a_crash_around_the_best_epoch_s_weights_resumes_to_the_clean_run_s_model(
    tiny_data, tmp_path, monkeypatch, moment
):
    """The two moments the kept model depends on: a crash after the best epoch's weights are
    saved and before its checkpoint (the rerun trains that epoch again), and one after they are
    read back at the end and before the final checkpoint (the rerun reads them again). Either way
    the rerun ends with the clean run's checkpoint, value for value."""
    strategy = tf.distribute.get_strategy()
    clean = loop.train(_patient_config(tiny_data, str(tmp_path / "clean")), strategy)
    assert clean.kept_epoch is not None and clean.kept_epoch < len(clean.epochs)

    real_save, real_save_best, real_keep = (
        trainer._Trainer._save, trainer._Trainer._save_best, trainer._Trainer._keep_best
    )  # fmt: skip
    armed = []

    def save(self, *args):
        if armed:
            armed.clear()
            raise _Crash(moment)
        return real_save(self, *args)

    def save_best(self, epoch):
        real_save_best(self, epoch)
        if moment == "best-weights-saved" and epoch == clean.kept_epoch:
            armed.append(True)  # The epoch's own checkpoint comes next: crash there.

    def keep_best(self, best):
        if moment == "best-weights-read-back":
            armed.append(True)  # Its _save, after the read, crashes.
        return real_keep(self, best)

    monkeypatch.setattr(trainer._Trainer, "_save", save)
    monkeypatch.setattr(trainer._Trainer, "_save_best", save_best)
    monkeypatch.setattr(trainer._Trainer, "_keep_best", keep_best)
    run_dir = str(tmp_path / "crashed")
    with pytest.raises(_Crash):
        loop.train(_patient_config(tiny_data, run_dir), strategy)
    monkeypatch.undo()

    resumed = loop.train(_patient_config(tiny_data, run_dir), strategy)
    assert resumed.kept_epoch == clean.kept_epoch
    assert resumed.global_step == clean.global_step
    assert [e.hr_at_10 for e in resumed.epochs] == [e.hr_at_10 for e in clean.epochs]
    a = checkpoint_values(checkpoint_dir(str(tmp_path / "clean")))
    b = checkpoint_values(checkpoint_dir(run_dir))
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_no_early_stop_turns_off_the_preset_s_patience(tiny_data):
    """``target_hr`` 0 or less (``--no-early-stop``) trains every epoch: no patience either."""
    assert train_config.config_for(tiny_data, "m", "ml-20m").model.patience is not None
    never = train_config.config_for(tiny_data, "m", "ml-20m", target_hr=0.0).model
    assert never.patience is None and never.hr_threshold is None
    other = train_config.config_for(tiny_data, "m", "ml-20m", target_hr=0.9).model
    assert other.patience == train_config.config_for(tiny_data, "m", "ml-20m").model.patience


@pytest.mark.slow
def test_a_refused_run_leaves_the_earlier_model_intact(tiny_data, tmp_path):
    """Another preset into a trained folder is refused before anything in it changes."""
    from training_core.evaluation import evaluate as ev
    from training_core.training import loop as tr

    model_dir = str(tmp_path / "model")
    strategy = tf.distribute.get_strategy()
    tr.train(train_config.config_for(tiny_data, model_dir, "tiny", epochs=1), strategy)
    ckpts = checkpoint_dir(model_dir)
    before = {
        p: open(os.path.join(model_dir, p), "rb").read()
        for p in [
            MODEL_CONFIG_FILE,
            *(os.path.join(CHECKPOINT_SUBDIR, f) for f in os.listdir(ckpts)),
        ]
        if os.path.isfile(os.path.join(model_dir, p))
    }
    with pytest.raises(ValueError) as exc:
        tr.train(train_config.config_for(tiny_data, model_dir, "quick", epochs=1), strategy)
    message = str(exc.value)
    assert model_dir in message and "num_factors 8 here, 16 now" in message
    assert "Nothing in it was changed" in message
    for p, data in before.items():
        assert open(os.path.join(model_dir, p), "rb").read() == data, p
    # The earlier model still evaluates.
    assert 0 < ev.evaluate(tiny_data, model_dir).hr_at_10


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"learning_rate": -1.0}, "--learning-rate must be > 0, got -1.0"),
        ({"learning_rate": float("nan")}, "--learning-rate must be > 0, got nan"),
        ({"batch_size": 0}, "--batch-size must be >= 1 (leave it out for the data's pre-batch"),
        ({"epochs": 0}, "--epochs must be >= 1, got 0"),
        ({"target_hr": 1.5}, "--target-hr must be at most 1, an HR@10"),
        ({"steps_per_loop": 0}, "--steps-per-loop must be >= 1, got 0"),
        ({"checkpoint_every_steps": -1}, "--checkpoint-every must be >= 0 (0: each epoch only)"),
        ({"precision": "float8"}, "--precision must be one of auto, float32, float16, bfloat16"),
        ({"preset": "ml1m"}, "--preset 'ml1m' is unknown (did you mean 'ml-1m'?)"),
    ],
)
def test_config_for_names_the_option_and_the_value(overrides, message):
    """Checked before the data is read: the folder here does not even exist."""
    kw = dict(overrides)
    preset = kw.pop("preset", "tiny")
    with pytest.raises(ValueError) as exc:
        train_config.config_for("/nonexistent/data", "/nonexistent/model", preset, **kw)
    assert message in str(exc.value)


def test_train_config_names_each_field_it_refuses(tiny_data):
    tiny = presets.get_preset("tiny")
    with pytest.raises(ValueError, match=r"--steps-per-loop must be >= 1, got 0"):
        train_config.TrainConfig(tiny_data, "m", tiny, steps_per_loop=0)
    with pytest.raises(ValueError, match=r"keep_checkpoints must be >= 1, got 0"):
        train_config.TrainConfig(tiny_data, "m", tiny, keep_checkpoints=0)
    with pytest.raises(ValueError, match=r"--learning-rate must be > 0, got -0.5"):
        train_config.TrainConfig(tiny_data, "m", presets.get_preset("tiny", learning_rate=-0.5))
    # Several at once are all named.
    with pytest.raises(ValueError) as exc:
        train_config.TrainConfig(tiny_data, "m", tiny, steps_per_loop=0, checkpoint_every_steps=-1)
    assert "--steps-per-loop" in str(exc.value) and "--checkpoint-every" in str(exc.value)


def test_batch_size_none_is_the_data_s_pre_batch_size_and_zero_is_an_error(tiny_data):
    prebatch = read_metadata(tiny_data).train_prebatch_size
    assert train_config.config_for(tiny_data, "m", "ml-1m").model.batch_size == prebatch
    assert train_config.config_for(tiny_data, "m", "ml-1m", batch_size=512).model.batch_size == 512
    with pytest.raises(ValueError, match="--batch-size must be >= 1 .*, got 0"):
        train_config.config_for(tiny_data, "m", "ml-1m", batch_size=0)


def _fake_strategy(*devices):
    """What compute_dtype reads of a strategy: the devices of this machine's replicas."""
    import types

    return types.SimpleNamespace(extended=types.SimpleNamespace(worker_devices=devices))


def test_auto_precision_is_float16_on_gpus_however_many_one_machine_holds():
    """float16's loss scaling agrees across a machine's replicas (tests/test_multi_replica.py
    trains with it under mirrored): ``auto`` picks it for one GPU and for eight alike, float32 on
    CPU however many devices, and no precision asked for by name is refused."""
    one, eight = _fake_strategy("/gpu:0"), _fake_strategy(*(f"/gpu:{i}" for i in range(8)))
    cpus = _fake_strategy("/cpu:0", "/cpu:1")
    assert trainer.compute_dtype("auto", one) == tf.float16
    assert trainer.compute_dtype("auto", eight) == tf.float16
    assert trainer.compute_dtype("auto", cpus) == tf.float32
    assert trainer.compute_dtype("float16", eight) == tf.float16
    assert trainer.compute_dtype("float16", cpus) == tf.float16
    assert trainer.compute_dtype("bfloat16", eight) == tf.bfloat16
    assert trainer.compute_dtype("float32", one) == tf.float32


def test_embedding_updates_do_not_depend_on_how_many_replicas_one_machine_holds(
    tiny_data, monkeypatch
):
    """Row updates work under mirrored (tests/test_multi_replica.py): asked for, they are kept
    with several replicas; under ``auto`` the choice is by device kind and table size only."""
    meta = read_metadata(tiny_data)
    config = train_config.config_for(tiny_data, "m", "tiny", embedding_updates="sparse")
    one, two = _fake_strategy("/cpu:0"), _fake_strategy("/cpu:0", "/cpu:1")
    assert trainer._dense_gradients(config, meta, two) is False
    auto = dataclasses.replace(config, dense_gradients=None)
    assert trainer._dense_gradients(auto, meta, two) is True  # Tiny tables: dense.
    monkeypatch.setattr(trainer, "DENSE_TABLE_LIMIT", 0)  # Tables "large": rows on CPU.
    assert trainer._dense_gradients(auto, meta, one) is False
    assert trainer._dense_gradients(auto, meta, two) is False
    assert trainer._dense_gradients(auto, meta, _fake_strategy("/gpu:0", "/gpu:1")) is True
