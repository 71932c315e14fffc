"""The champion/challenger gate (training_core/gate.py) on real exports of trained models.

A trained model of the tiny data (the session's ``tiny_model`` and ``tiny_export``) and an almost
untrained one are exported; the gate ranks both through their ``score`` signatures on the same
held-out set. A champion trained on other ids is refused by name.
"""

from __future__ import annotations

import dataclasses

import pytest
import tensorflow as tf
from conftest import TINY

from training_core.data import prepare, synthetic
from training_core.data.config import PrepareConfig
from training_core.evaluation import gate
from training_core.evaluation.evaluate import evaluate
from training_core.serving import export
from training_core.training import loop, train_config


def _train_and_export(data_dir, root, name, **options):
    model_dir = str(root / f"{name}-model")
    config = train_config.config_for(data_dir, model_dir, "tiny", steps_per_loop=50, **options)
    loop.train(config, tf.distribute.get_strategy())
    out = str(root / f"{name}-export")
    export.export(export.ExportConfig(model_dir, data_dir, out))
    return model_dir, out


@pytest.fixture(scope="module")
def models(tiny_data, tiny_model, tiny_export, tmp_path_factory):
    """(model folder, export) of a good and a weak model; the good one is the session's."""
    good = (tiny_model.model_dir, tiny_export.export_dir)
    # The weak model is its own: one epoch at a learning rate that barely moves the weights,
    # close to the initial model, so that the gate has a clearly worse challenger to refuse.
    root = tmp_path_factory.mktemp("compare")
    weak = _train_and_export(tiny_data, root, "weak", epochs=1, learning_rate=1e-7)
    return {"good": good, "weak": weak}


@pytest.fixture(scope="module")
def other_ids_export(tmp_path_factory):
    """A model of data whose raw ids share nothing with the tiny data's."""
    root = tmp_path_factory.mktemp("other-ids")
    raw = synthetic.generate(TINY)
    shifted = dataclasses.replace(raw, users=raw.users + 1_000_000, items=raw.items + 1_000_000)
    csv = str(root / "ratings.csv")
    synthetic.write(shifted, csv, "csv")
    data = str(root / "data")
    prepare.prepare(
        PrepareConfig(input_path=csv, output_dir=data, num_epochs=1, eval_negatives=99, workers=1)
    )
    return _train_and_export(data, root, "other", epochs=1)[1]


def test_an_export_scores_as_its_checkpoint_evaluates(models, tiny_data):
    """Raw ids through the SavedModel's signature rank like the checkpoint on index ids."""
    for model_dir, export_dir in models.values():
        via_export = gate.score_export(export_dir, tiny_data)
        via_checkpoint = evaluate(tiny_data, model_dir)
        assert via_export.users == via_checkpoint.eval_users
        assert via_export.hr_at_10 == pytest.approx(via_checkpoint.hr_at_10, abs=1e-9)
        assert via_export.ndcg_at_10 == pytest.approx(via_checkpoint.ndcg_at_10, rel=1e-5)
        assert via_export.known_users == 1.0 and via_export.known_items == 1.0


def test_a_better_challenger_is_blessed_and_a_worse_one_refused(models, tiny_data):
    good, weak = models["good"][1], models["weak"][1]
    up = gate.compare(good, tiny_data, champion_dir=weak)
    down = gate.compare(weak, tiny_data, champion_dir=good)
    assert up.challenger.hr_at_10 > down.challenger.hr_at_10  # The models really differ.
    assert up.blessed and "not worse than" in up.reason
    assert not down.blessed
    assert f"{down.challenger.hr_at_10:.4f} is worse than the champion's" in down.reason
    assert f"{up.challenger.hr_at_10:.4f}" in down.reason  # Both models' numbers are named.
    metrics = down.to_metrics()
    assert metrics["blessed"] == 0.0 and metrics["champion_hr_at_10"] == up.challenger.hr_at_10
    page = gate.decision_html(down)
    assert "not blessed" in page and weak in page and good in page


def test_tolerance_and_metric_choose_what_worse_means(models, tiny_data):
    good, weak = models["good"][1], models["weak"][1]
    strict = gate.compare(weak, tiny_data, champion_dir=good, metric="ndcg_at_10")
    gap = strict.champion.ndcg_at_10 - strict.challenger.ndcg_at_10
    assert gap > 0 and not strict.blessed and "ndcg_at_10" in strict.reason
    lenient = gate.compare(
        weak, tiny_data, champion_dir=good, metric="ndcg_at_10", tolerance=gap + 1e-6
    )
    assert lenient.blessed


def test_without_a_champion_the_first_model_is_blessed(models, tiny_data):
    decision = gate.compare(models["weak"][1], tiny_data)
    assert decision.blessed and decision.champion is None and "first model" in decision.reason
    assert "champion_hr_at_10" not in decision.to_metrics()


def test_a_champion_of_other_ids_is_refused_naming_both(models, tiny_data, other_ids_export):
    challenger = models["good"][1]
    with pytest.raises(ValueError) as e:
        gate.compare(challenger, tiny_data, champion_dir=other_ids_export)
    assert other_ids_export in str(e.value) and challenger in str(e.value)
    assert "knows 0% of the eval users" in str(e.value)


def test_bad_choices_and_folders_are_named(models, tiny_data, tmp_path):
    with pytest.raises(ValueError, match="--metric must be one of hr_at_10, ndcg_at_10"):
        gate.compare(models["good"][1], tiny_data, metric="auc")
    with pytest.raises(ValueError, match="--tolerance must be >= 0"):
        gate.compare(models["good"][1], tiny_data, tolerance=-0.1)
    with pytest.raises(ValueError, match=f"{tmp_path} holds no SavedModel"):
        gate.compare(str(tmp_path), tiny_data)
    model_dir = models["good"][0]  # A training folder, not an export.
    with pytest.raises(ValueError, match="holds no SavedModel"):
        gate.compare(models["good"][1], tiny_data, champion_dir=model_dir)


def test_the_compare_models_component_blesses_and_refuses(models, tiny_data, tmp_path):
    """The component's own function with real artifacts: a champion given by URI, and none."""
    from kfp import dsl

    from components.compare_models import compare_models

    def run(challenger, champion_uri):
        decision = dsl.Metrics(uri=str(tmp_path / "decision"))
        report = dsl.HTML(uri=str(tmp_path / "report.html"))
        out = compare_models.python_func(
            challenger=dsl.Model(uri=challenger),
            examples=dsl.Dataset(uri=tiny_data),
            decision=decision,
            report=report,
            champion_uri=champion_uri,
        )
        return out, decision, open(report.path).read()

    (blessed, champion), decision, page = run(models["weak"][1], models["good"][1])
    assert (blessed, champion) == (False, "")  # No registry model: a URI champion.
    assert decision.metadata["blessed"] == 0.0 and "worse than" in decision.metadata["reason"]
    assert "not blessed" in page
    (blessed, _), decision, _ = run(models["good"][1], "")
    assert blessed and "first model" in decision.metadata["reason"]
