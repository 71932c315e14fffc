"""Choices on the validation split, the test split scored once: the trainer and evaluate.

A dataset with a validation split (each user's second-to-last interaction) has every epoch
measured on it (the best epoch, patience, the target, ``on_epoch``), and the test split scored
once, after training, on the model's final weights; ``evaluate`` reports both splits. A dataset
without one (``--no-validation``, or prepared before validation splits existed) trains and
reports as it always did. The tiny ratings are prepared here both ways, whatever ``tiny_data``'s
default is.
"""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION, read_metadata
from training_core.evaluation import baselines, eval_config, full_catalog
from training_core.evaluation import evaluate as ev
from training_core.evaluation.eval_config import CURVE_FULL_CATALOG_USERS
from training_core.training import curve_page, loop, presets, results, train_config
from training_core.training.model_dir import checkpoint_dir

# The metric names a run and evaluate reported before validation splits: a dataset without one
# still gets exactly these.
OLD_SUMMARY = {
    "hr_at_10", "ndcg_at_10", "loss", "examples_per_sec", "epochs", "best_hr_at_10",
    "full_catalog_hr_at_10", "full_catalog_ndcg_at_10", "global_step",
}  # fmt: skip
OLD_EVALUATE = {
    "step", "hr_at_10", "ndcg_at_10", "eval_users", "full_catalog_hr_at_10",
    "full_catalog_ndcg_at_10", "full_catalog_recall_at_10", "full_catalog_users",
    "full_catalog_capped", "popularity_hr_at_10", "popularity_ndcg_at_10",
    "popularity_full_catalog_hr_at_10", "popularity_full_catalog_ndcg_at_10", "beats_popularity",
}  # fmt: skip
# The EASE baseline's numbers, beside popularity's since issue 52.
EASE_KEYS = {
    "ease_hr_at_10", "ease_ndcg_at_10", "ease_full_catalog_hr_at_10",
    "ease_full_catalog_ndcg_at_10", "ease_lambda", "beats_ease",
}  # fmt: skip
CURVE_EPOCHS = 7
PATIENCE = 1  # The tiny curve (each positive once) peaks at epoch 4, dips at 5, then rises.
ALL_USERS = eval_config.EvalOptions(full_catalog_users=CURVE_FULL_CATALOG_USERS)  # >= 200 users.


def _config(data, model_dir, **model):
    """tiny at a learning rate whose HR@10 on these data peaks and stalls (test_train_core)."""
    c = train_config.config_for(
        data, model_dir, "tiny", epochs=CURVE_EPOCHS, learning_rate=0.1, target_hr=0.0,
        steps_per_loop=50,
    )  # fmt: skip
    c = dataclasses.replace(c, keep_checkpoints=CURVE_EPOCHS + 1)  # Every epoch's, to evaluate.
    return dataclasses.replace(c, model=dataclasses.replace(c.model, **model))


class EvalCalls:
    """Which split each ``run_eval`` of the training loop scored, in order."""

    def __init__(self, monkeypatch, data_dir):
        self.splits: list[str] = []
        meta = read_metadata(data_dir)
        names = {tuple(meta.split(s).eval_file_paths(data_dir)): s for s in _splits(meta)}
        real = loop.run_eval

        def counted(model, strategy, meta, data_dir, *args):
            self.splits.append(names[tuple(meta.eval_file_paths(data_dir))])
            return real(model, strategy, meta, data_dir, *args)

        monkeypatch.setattr(loop, "run_eval", counted)


def _splits(meta):
    return [SPLIT_TEST, *([SPLIT_VALIDATION] if meta.has_validation else [])]


@pytest.fixture(scope="module")
def curve(tiny_data, tmp_path_factory):
    """Every epoch of a run without early stopping, with ``evaluate`` of each epoch's checkpoint.

    Returns ``(the run's TrainResult, [EvalResult per epoch])``: the per-epoch validation and
    test numbers of the same weights (training is deterministic, so a patient run on the same
    data follows this curve until it stops).
    """
    model_dir = str(tmp_path_factory.mktemp("curve") / "model")
    result = loop.train(_config(tiny_data, model_dir), tf.distribute.get_strategy())
    evaluated = [
        ev.evaluate(
            tiny_data,
            model_dir,
            checkpoint=f"{checkpoint_dir(model_dir)}/ckpt-{e.step}",
            options=ALL_USERS,
        )  # fmt: skip
        for e in result.epochs
    ]
    return result, evaluated


@pytest.mark.slow
def test_each_epoch_is_measured_on_validation_and_the_end_on_test(curve):
    """An epoch's numbers are ``evaluate``'s validation split of its weights; the run's test
    result is ``evaluate``'s test split of the weights it ended with."""
    result, evaluated = curve
    assert result.selection_split == SPLIT_VALIDATION and len(result.epochs) == CURVE_EPOCHS
    for epoch, e in zip(result.epochs, evaluated, strict=True):
        v = e.validation
        assert epoch.hr_at_10 == pytest.approx(v.hr_at_10, abs=1e-9), epoch.epoch
        assert epoch.ndcg_at_10 == pytest.approx(v.ndcg_at_10, rel=1e-5)
        assert epoch.eval_users == v.eval_users
        assert epoch.full_catalog_hr_at_10 == pytest.approx(v.full_catalog_hr_at_10, abs=1e-9)
        assert epoch.full_catalog_ndcg_at_10 == pytest.approx(v.full_catalog_ndcg_at_10, rel=1e-5)
    last, test = evaluated[-1], result.test
    assert test.hr_at_10 == pytest.approx(last.hr_at_10, abs=1e-9)
    assert test.ndcg_at_10 == pytest.approx(last.ndcg_at_10, rel=1e-5)
    assert test.eval_users == last.eval_users
    assert test.full_catalog_hr_at_10 == pytest.approx(last.full_catalog_hr_at_10, abs=1e-9)
    assert test.full_catalog_ndcg_at_10 == pytest.approx(last.full_catalog_ndcg_at_10, rel=1e-5)
    # The two splits are other items: they do not score the same throughout.
    assert [e.hr_at_10 for e in evaluated] != [e.validation.hr_at_10 for e in evaluated]


@pytest.mark.slow
def test_patience_keeps_the_best_epoch_by_validation_and_scores_test_once(
    curve, tiny_data, tmp_path, monkeypatch
):
    """The curve's validation and test numbers disagree on the best epoch: the patient run stops
    and keeps by validation, ``on_epoch`` sees validation, and the test split is scored once,
    after the loop, on the kept epoch's weights."""
    _, evaluated = curve
    val = [e.validation.hr_at_10 for e in evaluated]
    test = [e.hr_at_10 for e in evaluated]
    stop = next(t for t in range(CURVE_EPOCHS) if t - int(np.argmax(val[: t + 1])) >= PATIENCE)
    best = int(np.argmax(val[: stop + 1]))  # The first of equals, as best_epoch.
    by_test = int(np.argmax(test[: stop + 1]))
    assert best != by_test, f"validation {val} and test {test} agree on the best epoch"

    calls = EvalCalls(monkeypatch, tiny_data)
    seen = []
    model_dir = str(tmp_path / "patient")
    config = _config(tiny_data, model_dir, patience=PATIENCE)
    result = loop.train(config, tf.distribute.get_strategy(), on_epoch=seen.append)
    assert [e.hr_at_10 for e in result.epochs] == pytest.approx(val[: stop + 1], abs=1e-9)
    assert [e.hr_at_10 for e in seen] == [e.hr_at_10 for e in result.epochs]
    assert result.stopped_early and result.kept_epoch == best + 1 != by_test + 1
    assert calls.splits == [SPLIT_VALIDATION] * (stop + 1) + [SPLIT_TEST]
    assert result.test.hr_at_10 == pytest.approx(test[best], abs=1e-9)
    assert result.test.hr_at_10 != pytest.approx(test[by_test], abs=1e-9)

    summary = results.summary_metrics(result)
    assert "hr_at_10" not in summary and "best_hr_at_10" not in summary
    assert summary["validation_hr_at_10"] == summary["best_validation_hr_at_10"]
    assert summary["validation_hr_at_10"] == pytest.approx(val[best], abs=1e-9)
    assert summary["test_hr_at_10"] == pytest.approx(test[best], abs=1e-9)
    assert summary["test_full_catalog_hr_at_10"] == result.test.full_catalog_hr_at_10
    payload = result.to_dict()
    assert payload["selection_split"] == SPLIT_VALIDATION
    assert payload["test"] == dataclasses.asdict(result.test)
    page = curve_page.result_page(payload)
    assert "validation HR@10" in page and "Test split, scored once on the final model" in page
    assert f"HR@10 {result.test.hr_at_10:.4f}" in page

    # A rerun on the finished folder trains nothing and reports the same test result.
    calls.splits.clear()
    again = loop.train(config, tf.distribute.get_strategy())
    assert again.kept_epoch == result.kept_epoch and again.test == result.test
    assert calls.splits == [SPLIT_TEST]


@pytest.mark.slow
def test_the_target_stops_when_validation_reaches_it(curve, tiny_data, tmp_path):
    """A target that validation reaches in another epoch than test stops on validation's."""
    _, evaluated = curve
    val = [e.validation.hr_at_10 for e in evaluated]
    test = [e.hr_at_10 for e in evaluated]

    def first(curve_, target):
        return next((i for i, hr in enumerate(curve_) if hr >= target), None)

    target = next((t for t in sorted(set(val)) if first(val, t) != first(test, t)), None)
    assert target is not None, f"validation {val} and test {test} reach every target together"
    config = _config(tiny_data, str(tmp_path / "target"), hr_threshold=target)
    result = loop.train(config, tf.distribute.get_strategy())
    assert result.stopped_early and len(result.epochs) == first(val, target) + 1


@pytest.mark.slow  # About 5-10 s with the suite beside it.
def test_a_dataset_without_validation_trains_and_reports_as_before(
    tiny_data_without_validation, tmp_path, monkeypatch
):
    """Epochs measured on the test split, the test result the final epoch's own (not scored a
    second time), and the names every reader knew."""
    calls = EvalCalls(monkeypatch, tiny_data_without_validation)
    model_dir = str(tmp_path / "model")
    config = train_config.config_for(
        tiny_data_without_validation, model_dir, "tiny", epochs=2, steps_per_loop=50
    )
    result = loop.train(config, tf.distribute.get_strategy())
    assert result.selection_split == SPLIT_TEST and calls.splits == [SPLIT_TEST] * 2
    last = result.last
    assert result.test == results.TestResult(
        last.hr_at_10, last.ndcg_at_10, last.eval_users, last.full_catalog_hr_at_10,
        last.full_catalog_ndcg_at_10, last.full_catalog_users,
    )  # fmt: skip
    summary = results.summary_metrics(result)
    assert set(summary) == OLD_SUMMARY
    assert (summary["hr_at_10"], summary["best_hr_at_10"]) == (last.hr_at_10, result.best.hr_at_10)
    assert "Test split" not in curve_page.result_page(result.to_dict())

    evaluated = ev.evaluate(tiny_data_without_validation, model_dir, options=ALL_USERS)
    assert evaluated.validation is None
    assert set(evaluated.metrics()) == OLD_EVALUATE | EASE_KEYS
    assert evaluated.ease_lambda == baselines.EASE_LAMBDAS[0]  # Nothing to choose it on.
    assert evaluated.hr_at_10 == pytest.approx(last.hr_at_10, abs=1e-9)
    assert evaluated.full_catalog_hr_at_10 == pytest.approx(last.full_catalog_hr_at_10, abs=1e-9)


@pytest.mark.slow
def test_evaluate_reports_both_splits_each_as_its_own_ranking(tiny_data, tmp_path):
    """``evaluate``'s test numbers are ``run_eval``'s and ``FullCatalogEval``'s on the test
    split, its validation numbers theirs on the validation split, the popularity baseline too;
    the flat metrics keep the test split's names and prefix the validation split's."""
    model_dir = str(tmp_path / "model")
    config = train_config.config_for(tiny_data, model_dir, "tiny", epochs=1, steps_per_loop=50)
    trained = loop.train(config, tf.distribute.get_strategy())
    result = ev.evaluate(tiny_data, model_dir, options=ALL_USERS)
    strategy = tf.distribute.get_strategy()
    model, _, _ = ev.load_model(model_dir, strategy)
    meta = read_metadata(tiny_data)
    for split, got in ((SPLIT_TEST, result), (SPLIT_VALIDATION, result.validation)):
        sampled = ev.run_eval(model, strategy, meta.split(split), tiny_data)
        ranking = full_catalog.FullCatalogEval(model, strategy, meta, tiny_data, 0, split=split)
        full = ranking()
        pop, pop_full = ev.rank_popularity(ranking, strategy, meta.split(split), tiny_data)
        assert (got.hr_at_10, got.eval_users) == (sampled.hr, sampled.users), split
        assert got.ndcg_at_10 == pytest.approx(sampled.ndcg, rel=1e-6), split
        assert got.full_catalog_hr_at_10 == full.metrics.hr, split
        assert got.full_catalog_ndcg_at_10 == pytest.approx(full.metrics.ndcg, rel=1e-6)
        assert (got.popularity_hr_at_10, got.popularity_full_catalog_hr_at_10) == (
            pop.hr,
            pop_full.metrics.hr,
        ), split
    assert result.hr_at_10 != result.validation.hr_at_10  # Two splits, two numbers.
    # What training reported is the same: each epoch on validation, the end on test.
    assert trained.last.hr_at_10 == result.validation.hr_at_10
    assert trained.test.hr_at_10 == result.hr_at_10
    flat = result.metrics()
    keys = OLD_EVALUATE | EASE_KEYS
    assert set(flat) == keys | {f"validation_{k}" for k in keys - {"step"}}
    assert flat["validation_hr_at_10"] == result.validation.hr_at_10
    assert flat["hr_at_10"] == result.hr_at_10


def test_summary_metrics_name_each_split_and_never_one_for_the_other():
    epoch = results.EpochResult(
        epoch=1, step=10, loss=0.5, hr_at_10=0.4, ndcg_at_10=0.2, examples_per_sec=9.0,
        eval_users=100, full_catalog_hr_at_10=0.1, full_catalog_ndcg_at_10=0.05,
        full_catalog_users=100,
    )  # fmt: skip
    test = results.TestResult(0.3, 0.15, 120, 0.08, 0.04, 120)
    result = results.TrainResult(
        epochs=[epoch], global_step=10, steps_per_epoch=10, stopped_early=False, num_replicas=1,
        strategy="x", selection_split=SPLIT_VALIDATION, test=test,
    )  # fmt: skip
    assert results.summary_metrics(result) == {
        "validation_hr_at_10": 0.4,
        "validation_ndcg_at_10": 0.2,
        "validation_full_catalog_hr_at_10": 0.1,
        "validation_full_catalog_ndcg_at_10": 0.05,
        "best_validation_hr_at_10": 0.4,
        "test_hr_at_10": 0.3,
        "test_ndcg_at_10": 0.15,
        "test_full_catalog_hr_at_10": 0.08,
        "test_full_catalog_ndcg_at_10": 0.04,
        "loss": 0.5,
        "examples_per_sec": 9.0,
        "epochs": 1,
        "global_step": 10,
    }
    from pipelines.commands.train import result_line

    line = result_line(result)
    assert "validation HR@10 0.4000" in line and "test HR@10 0.3000" in line
    reason = results.stop_reason(
        presets.get_preset("tiny", hr_threshold=0.4), [epoch], "validation"
    )
    assert reason is not None and reason.startswith("validation HR@10 0.4000 reached the target")


def test_a_missing_validation_file_is_named_before_training(tiny_data, tmp_path):
    import os
    import shutil

    data = str(tmp_path / "data")
    shutil.copytree(tiny_data, data)
    gone = os.path.join(data, read_metadata(data).validation_files[0].path)
    os.remove(gone)
    config = train_config.config_for(data, str(tmp_path / "model"), "tiny", epochs=1)
    with pytest.raises(FileNotFoundError, match="is listed in metadata.json but missing"):
        loop.train(config, tf.distribute.get_strategy())
