"""Tuning (training_core/tune.py): the search-space file, Optuna trials on real training runs, a
trial reporting to Vertex AI the way its tuning service reads it."""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf

from pipelines import cli
from training_core import train, train_config, tune
from training_core.model_dir import read_model_config


def _space(tmp_path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def test_the_shipped_search_space_is_valid_for_vertex_ai_and_optuna():
    from google.cloud.aiplatform_v1.types import StudySpec
    from google.protobuf import json_format

    space = tune.load_search_space()
    assert space.metric == "hr_at_10"
    assert {p.name for p in space.parameters} <= set(tune.TUNABLE)
    # GCPC's serialised specs parse strictly as the service's own StudySpec messages.
    for spec in tune.vertex_parameter_spec(space):
        parsed = json_format.ParseDict(spec, StudySpec.ParameterSpec()._pb)
        assert parsed.parameter_id in tune.TUNABLE
    (metric,) = tune.vertex_metric_spec(space)
    parsed = json_format.ParseDict(metric, StudySpec.MetricSpec()._pb)
    assert parsed.metric_id == "hr_at_10"
    assert parsed.goal == StudySpec.MetricSpec.GoalType.MAXIMIZE
    # The preset's own values are a point of the space's parameters, as train takes them.
    values = tune.preset_values(space, "ml-1m", None)
    assert values["mlp_layers"] == "256,256,128,64" and values["num_factors"] == 64
    assert tune.train_flags({"learning_rate": 0.01}) == ["--learning_rate=0.01"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("metric: hr_at_10\nparameters:\n  dropout: {type: double, min: 0, max: 1}\n",
         "parameter 'dropout' is not tunable; use one of learning_rate"),
        ("parameters:\n  learning_rate: {type: float, min: 0.1, max: 1}\n",
         "parameter 'learning_rate': type must be one of double"),
        ("parameters:\n  learning_rate: {type: double, min: 1, max: 0.1}\n",
         "needs numbers min < max, got 1 and 0.1"),
        ("parameters:\n  learning_rate: {type: double, min: 0, max: 1, scale: log}\n",
         "log needs min > 0"),
        ("metric: auc\nparameters:\n  learning_rate: {type: double, min: 0.1, max: 1}\n",
         "metric 'auc' is not one of hr_at_10"),
        ("parameters:\n  mlp_layers: {type: categorical, values: [64, 32]}\n",
         "values must be a non-empty list of strings"),
        ("parameters: {}\n", "no parameters to search"),
    ],
)  # fmt: skip
def test_a_bad_search_space_is_named(tmp_path, text, message):
    path = _space(tmp_path, text)
    with pytest.raises(ValueError, match=message) as e:
        tune.load_search_space(path)
    assert path in str(e.value)


def test_on_epoch_stops_training_where_it_says(tiny_data, tmp_path):
    seen = []

    def stop_after_first(epoch) -> bool:
        seen.append(epoch.epoch)
        return True

    config = train_config.config_for(
        tiny_data, str(tmp_path / "m"), "tiny", epochs=2, steps_per_loop=50, target_hr=0.0
    )
    result = train.train(config, tf.distribute.get_strategy(), on_epoch=stop_after_first)
    assert seen == [1] and len(result.epochs) == 1 and result.stopped_early


@pytest.mark.slow
def test_tune_is_never_worse_than_the_preset_and_resumes(tiny_data, tmp_path):
    space = _space(
        tmp_path,
        "metric: hr_at_10\n"
        "parameters:\n"
        "  learning_rate: {type: double, min: 0.0005, max: 0.05, scale: log}\n"
        "  num_factors: {type: discrete, values: [4, 8, 16]}\n"
        "  l2_regularization: {type: double, min: 1.0e-6, max: 1.0e-3, scale: log}\n",
    )
    work = str(tmp_path / "tune")
    config = tune.TuneConfig(tiny_data, work, "tiny", trials=4, epochs=2, search_space=space)
    result = tune.tune(config)
    assert len(result.trials) == 4
    # The preset's own values ran first, outside the space (l2 0 is not on its log scale).
    preset_model, _, _ = read_model_config(f"{work}/{tune.TRIALS_DIR}/{tune.PRESET_RUN}")
    assert (preset_model.learning_rate, preset_model.num_factors) == (0.01, 8)
    assert preset_model.l2_regularization == 0.0
    assert result.best_value >= result.preset_value > 0
    if result.best_value == result.preset_value:
        assert result.best_options["num_factors"] == 8
    saved = json.loads((tmp_path / "tune" / tune.RESULTS_FILE).read_text())
    assert saved["best_options"] == result.best_options
    assert saved["train_flags"] == tune.train_flags(result.best_options)
    # Each trial trained with its own options (its model folder records them).
    for trial in result.trials:
        if trial["state"] != "COMPLETE":
            continue
        model, _, _ = read_model_config(f"{work}/{tune.TRIALS_DIR}/{trial['number']:04d}")
        assert model.num_factors == trial["options"]["num_factors"]
        assert model.learning_rate == pytest.approx(trial["options"]["learning_rate"])

    # Run again asking for 5: the study resumes, one more trial runs, the preset not again.
    preset_pb = f"{work}/{tune.TRIALS_DIR}/{tune.PRESET_RUN}/model_config.json"
    before = os.stat(preset_pb).st_mtime_ns
    again = tune.tune(dataclasses_replace(config, trials=5))
    assert len(again.trials) == 5
    assert again.trials[:4] == result.trials
    assert again.preset_value == result.preset_value
    assert os.stat(preset_pb).st_mtime_ns == before


def dataclasses_replace(config, **kw):
    import dataclasses

    return dataclasses.replace(config, **kw)


def test_a_trial_takes_vertex_ai_flags_and_reports_its_metric(tiny_data, tmp_path, monkeypatch):
    """As a Vertex AI tuning job runs a trial: the trial's values appended as --NAME=VALUE,
    the metric written with cloudml-hypertune to the file the service reads."""
    metric_file = tmp_path / "hypertune" / "output.metrics"
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(metric_file))
    monkeypatch.setenv("CLOUD_ML_TRIAL_ID", "7")
    metrics_out = tmp_path / "metrics.json"
    model_dir = tmp_path / "trial"
    code = cli.main(
        [
            "train", "--data", tiny_data, "--model-dir", str(model_dir), "--preset", "tiny",
            "--epochs", "2", "--hypertune-metric", "ndcg_at_10", "--metrics-out",
            str(metrics_out),
            # Appended by the tuning service:
            "--learning_rate=0.005", "--num_factors=4", "--mlp_layers=8,4",
            "--l2_regularization=1e-05", "--batch_size=128",
        ]
    )  # fmt: skip
    assert code == 0
    model, _, _ = read_model_config(str(model_dir))
    assert (model.learning_rate, model.num_factors, model.layers) == (0.005, 4, (8, 4))
    assert (model.l2_regularization, model.batch_size) == (1e-05, 128)
    epochs = json.loads(metrics_out.read_text())["epochs"]
    lines = [json.loads(line) for line in metric_file.read_text().splitlines()]
    assert [float(line["ndcg_at_10"]) for line in lines] == [e["ndcg_at_10"] for e in epochs]
    assert [int(line["global_step"]) for line in lines] == [e["step"] for e in epochs]
    assert {line["trial"] for line in lines} == {"7"}
