"""train_model and evaluate_model through ``python_func`` with real artifacts (default strategy)."""

import os

import pytest
from kfp import dsl

from components.evaluate_model import evaluate_model
from components.train_model import train_model
from training_core.data.metadata import read_metadata
from training_core.training.model_dir import config_path


@pytest.mark.slow
def test_train_then_evaluate_components(tiny_data, tmp_path):
    examples = dsl.Dataset(uri=tiny_data)
    model = dsl.Model(uri=str(tmp_path / "model"))
    metrics = dsl.Metrics(uri=str(tmp_path / "metrics"))
    plots = dsl.HTML(uri=str(tmp_path / "plots.html"))
    train_model.python_func(
        examples=examples,
        model=model,
        metrics=metrics,
        plots=plots,
        preset="tiny",
        epochs=2,
        distribution_strategy="default",
    )
    m = metrics.metadata
    # Where the data has a validation split, the epochs' numbers are named for it, and the test
    # split's (scored once, on the final model) for the test split: no name is both.
    validated = read_metadata(tiny_data).has_validation
    test_hr, chosen_hr = (
        ("test_hr_at_10", "validation_hr_at_10") if validated else ("hr_at_10",) * 2
    )
    for key in (test_hr, chosen_hr, "loss", "examples_per_sec", "epochs"):
        assert key in m
    assert ("hr_at_10" in m) is not validated
    assert m["epochs"] == 2 and 0 < m[test_hr] <= 1 and m["examples_per_sec"] > 0
    assert os.path.exists(config_path(model.path))
    assert model.metadata["preset"] == "tiny"
    html = open(plots.path).read()
    assert html.count("<svg") == 3 and "HR@10" in html and "NDCG@10" in html

    ev = dsl.Metrics(uri=str(tmp_path / "eval_metrics"))
    evaluate_model.python_func(examples=examples, model=model, metrics=ev)
    assert ev.metadata["hr_at_10"] == pytest.approx(m[test_hr], abs=1e-9)  # The test split's.
    if validated:
        assert ev.metadata["validation_hr_at_10"] == pytest.approx(m[chosen_hr], abs=1e-9)
        assert 0 < ev.metadata["validation_popularity_hr_at_10"] < 1
    assert ("validation_hr_at_10" in ev.metadata) is validated
    assert ev.metadata["step"] == m["global_step"]
    # The popularity baseline beside it, and which wins, as numbers the Metrics artifact holds.
    assert 0 < ev.metadata["popularity_hr_at_10"] < 1
    assert ev.metadata["beats_popularity"] == int(
        ev.metadata["hr_at_10"] > ev.metadata["popularity_hr_at_10"]
    )


def test_train_component_names_the_preset_auto_picked(tiny_data, tmp_path):
    """Left at its default (auto), the component records the preset it trained with: the tiny
    set's size picks ml-100k, whose GMF width the model's config holds."""
    import json

    model = dsl.Model(uri=str(tmp_path / "model"))
    train_model.python_func(
        examples=dsl.Dataset(uri=tiny_data),
        model=model,
        metrics=dsl.Metrics(uri=str(tmp_path / "metrics")),
        plots=dsl.HTML(uri=str(tmp_path / "plots.html")),
        epochs=1,
        distribution_strategy="default",
    )
    assert model.metadata["preset"] == "ml-100k"
    with open(config_path(model.path)) as f:
        assert json.load(f)["model"]["num_factors"] == 256


def test_cli_help_lists_train_and_evaluate(monkeypatch):
    """Each subcommand has its own line in the COMMAND list, name then its help text.

    The program description already says "training, evaluation", so a bare substring check
    passes with both subcommands gone; these line patterns match only the subcommand entries.
    """
    import re

    from pipelines.cli import build_parser

    monkeypatch.setenv("COLUMNS", "200")  # One line per subcommand: no wrapping of help texts.
    text = build_parser().format_help()
    assert re.search(r"^ {4}train +train NeuMF on a prepared dataset$", text, re.M), text
    assert re.search(
        r"^ {4}evaluate +evaluate a trained model on a prepared dataset$", text, re.M
    ), text
