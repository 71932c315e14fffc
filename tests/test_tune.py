"""Tuning (training_core/tune.py): the search-space file, Optuna trials on real training runs, a
trial reporting to Vertex AI the way its tuning service reads it."""

from __future__ import annotations

import json
import logging
import os

import pytest
import tensorflow as tf

from pipelines import cli, pipeline, tuning_job
from training_core import tune
from training_core.training import loop, train_config
from training_core.training.model_dir import read_model_config


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
    for spec in tuning_job.vertex_parameter_spec(space):
        parsed = json_format.ParseDict(spec, StudySpec.ParameterSpec()._pb)
        assert parsed.parameter_id in tune.TUNABLE
    (metric,) = tuning_job.vertex_metric_spec(space)
    parsed = json_format.ParseDict(metric, StudySpec.MetricSpec()._pb)
    assert parsed.metric_id == "hr_at_10"
    assert parsed.goal == StudySpec.MetricSpec.GoalType.MAXIMIZE
    # The preset's own values are a point of the space's parameters, as train takes them.
    values = tune.preset_values(space, "ml-1m", None)
    assert values["mlp_layers"] == "256,256,128,64" and values["num_factors"] == 64
    assert values["architecture"] == "neumf"
    assert tune.preset_values(space, "ml-100k", None)["architecture"] == "mf"
    assert tune.train_flags({"learning_rate": 0.01}) == ["--learning_rate=0.01"]
    # The architecture is searched too, and a trial's --architecture=VALUE (as Vertex AI appends
    # it) is train's --model.
    (arch,) = [p for p in space.parameters if p.name == "architecture"]
    assert set(arch.values) == {"neumf", "mf", "gmf"}
    from pipelines import cli

    for value in arch.values:
        args = cli.build_parser().parse_args(
            ["train", "--data", "d", *tune.train_flags({"architecture": value})]
        )
        assert args.architecture == value


@pytest.mark.parametrize(
    "text, message",
    [
        ("metric: hr_at_10\nparameters:\n  dropout: {type: double, min: 0, max: 1}\n",
         "parameter 'dropout' is not tunable; use one of architecture, learning_rate"),
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
        ("parameters:\n  architecture: {type: categorical, values: [mf, ncf]}\n",
         "unknown 'ncf'; use neumf, mf"),
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
    result = loop.train(config, tf.distribute.get_strategy(), on_epoch=stop_after_first)
    assert seen == [1] and len(result.epochs) == 1 and result.stopped_early


@pytest.mark.slow
def test_tune_is_never_worse_than_the_preset_and_resumes(tiny_data, tmp_path, caplog):
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
    with caplog.at_level(logging.INFO, logger=tune.log.name):
        result = tune.tune(config)
    assert len(result.trials) == 4
    # A line for the preset's run, then one as each trial starts and one as it ends, k/N.
    said = [r.getMessage() for r in caplog.records if r.name == tune.log.name]
    assert said[0].startswith("the preset's own values (tiny)")
    for k in range(1, 5):
        assert sum(line.startswith(f"trial {k}/4: ") for line in said) == 1
        ends = (f"trial {k}/4 done: {result.split} hr_at_10 ", f"trial {k}/4 stopped")
        assert sum(line.startswith(ends) for line in said) == 1
    # The preset's own values ran first, outside the space (l2 0 is not on its log scale).
    preset_model, _, _ = read_model_config(f"{work}/{tune.TRIALS_DIR}/{tune.PRESET_RUN}")
    assert (preset_model.learning_rate, preset_model.num_factors) == (0.01, 8)
    assert preset_model.l2_regularization == 0.0
    assert result.best_value >= result.preset_value > 0
    # The best is the top complete trial when it beats the preset, else the preset's values.
    complete = [t for t in result.trials if t["state"] == "COMPLETE"]
    top = max(complete, key=lambda t: t["value"])
    if top["value"] > result.preset_value:
        assert (result.best_value, result.best_options) == (top["value"], top["options"])
    else:
        assert result.best_value == result.preset_value
        assert result.best_options == {
            "learning_rate": 0.01,
            "num_factors": 8,
            "l2_regularization": 0.0,
        }
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


@pytest.mark.slow  # About 5-10 s with the suite beside it.
def test_tune_chooses_on_validation_and_reports_the_best_run_s_test_number(tiny_csv, tmp_path):
    """One trial of one epoch on data with a validation split: the objective is the validation
    split's HR@10 and the best run's test HR@10 is reported beside it, each what ``evaluate``
    measures on that split for the run's model (one epoch: its final weights)."""
    from training_core.data import prepare
    from training_core.data.config import PrepareConfig
    from training_core.data.metadata import SPLIT_VALIDATION
    from training_core.evaluation.evaluate import evaluate

    data = str(tmp_path / "data")
    prepare.prepare(PrepareConfig(
        input_path=tiny_csv, output_dir=data, min_ratings=0, num_epochs=1, eval_negatives=99,
        train_batch_size=256, workers=1, validation=True,
    ))  # fmt: skip
    space = _space(
        tmp_path,
        "metric: hr_at_10\nparameters:\n  learning_rate: {type: double, min: 0.001, max: 0.02}\n",
    )
    work = str(tmp_path / "tune")
    config = tune.TuneConfig(data, work, "tiny", trials=1, epochs=1, search_space=space)
    result = tune.tune(config)
    assert result.split == SPLIT_VALIDATION
    (trial,) = result.trials
    won = trial["state"] == "COMPLETE" and trial["value"] > result.preset_value
    best_run = f"{work}/{tune.TRIALS_DIR}/{'0000' if won else tune.PRESET_RUN}"
    measured = evaluate(data, best_run)
    assert result.best_value == pytest.approx(measured.validation.hr_at_10, abs=1e-9)
    assert result.best_test_value == pytest.approx(measured.hr_at_10, abs=1e-9)
    saved = json.loads((tmp_path / "tune" / tune.RESULTS_FILE).read_text())
    assert (saved["split"], saved["best_test_value"]) == ("validation", result.best_test_value)
    assert saved["trials"][0]["test_value"] == trial["test_value"] is not None
    text = tune.describe(result)
    assert f"best validation hr_at_10 {result.best_value:.4f}" in text
    assert f"its test hr_at_10 {result.best_test_value:.4f} (final weights; reported, not " in text


def test_describe_names_the_split_chosen_on_and_the_test_number():
    result = tune.TuneResult(
        "hr_at_10", 0.5, {"learning_rate": 0.01}, 0.25, [], "r.json", 1.0, "test", 0.375
    )
    text = tune.describe(result)
    assert text.startswith("best test hr_at_10 0.5000 (the preset's own values: 0.2500)")
    assert "its test hr_at_10 0.3750 (final weights; the split chosen on: the data has no " in text
    older = tune.TuneResult("hr_at_10", 0.5, {}, 0.25, [], "r.json", 1.0)  # Before recording.
    assert "its test" not in tune.describe(older) and older.split == "test"


def dataclasses_replace(config, **kw):
    import dataclasses

    return dataclasses.replace(config, **kw)


@pytest.mark.slow
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
            "--learning_rate=0.005", "--num_factors=4.0", "--mlp_layers=8,4",
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


# --- the pipeline's tuning job (a profile with tune: true) ----------------------------------------


TUNE_PROFILE = """gpu-tune:
  train: {machine_type: g2-standard-8, accelerator_type: NVIDIA_L4, accelerator_count: 1}
  strategy: one_device
  tune: true
"""


@pytest.fixture(scope="module")
def tune_spec(tmp_path_factory):
    from pipelines import profiles, yaml_io

    root = tmp_path_factory.mktemp("tune-compile")
    (root / "profiles.yaml").write_text(TUNE_PROFILE)
    profile = profiles.get_profile("gpu-tune", str(root / "profiles.yaml"))
    pipeline.compile_pipeline(profile, str(root / "p.yaml"))
    return yaml_io.load((root / "p.yaml").read_text())


def test_the_compiled_tuning_job_is_a_valid_request_and_feeds_training(tune_spec, tmp_path):
    """The tuning job's payload, as GCPC's launcher sends it, with the worker pool our
    ``tuning_trial_spec`` builds, parses as the service's HyperparameterTuningJob; the best
    trial's values are bound to train-model's options."""
    from google.cloud.aiplatform_v1.types import HyperparameterTuningJob
    from google.protobuf import json_format
    from kfp import dsl

    from components.tuning import tuning_trial_spec
    from pipelines.tuning_job import TUNE_TASK

    tasks = tune_spec["root"]["dag"]["tasks"]
    hpt = tasks["hyperparameter-tuning-job"]
    consts = {k: v["runtimeValue"]["constant"] for k, v in hpt["inputs"]["parameters"].items()
              if "runtimeValue" in v}  # fmt: skip
    space = tune.load_search_space()
    assert consts["study_spec_parameters"] == tuning_job.vertex_parameter_spec(space)
    assert consts["study_spec_metrics"] == tuning_job.vertex_metric_spec(space)
    assert consts["display_name"] == TUNE_TASK
    for name, key in (("worker_pool_specs", "worker_pool_specs"),
                      ("base_output_directory", "base_output_directory")):  # fmt: skip
        assert hpt["inputs"]["parameters"][name]["taskOutputParameter"] == {
            "outputParameterKey": key,
            "producerTask": "tuning-trial-spec",
        }
    for name in ("max_trial_count", "parallel_trial_count"):
        assert "componentInputParameter" in hpt["inputs"]["parameters"][name]

    # The trial spec the step builds (its own function), then the launcher's payload template
    # filled in as KFP fills it.
    trials = dsl.Artifact(uri="gs://b/root/run/tuning-trial-spec/trials")
    examples = dsl.Dataset(uri="gs://b/root/run/prepare-data/examples")
    specs, base = tuning_trial_spec.python_func(
        examples=examples, trials=trials, image="us-docker.pkg.dev/p/r/ncf:1-gpu",
        machine_type="g2-standard-8", preset="ml-1m", metric="hr_at_10",
        accelerator_type="NVIDIA_L4", accelerator_count=1, epochs=5, seed=3,
    )  # fmt: skip
    assert base == trials.uri
    command = specs[0]["container_spec"]["command"]
    assert command[:4] == [
        "ncf-pipelines",
        "train",
        "--data",
        "/gcs/b/root/run/prepare-data/examples",
    ]
    assert command[-2:] == ["--hypertune-metric", "hr_at_10"]
    executor = tune_spec["deploymentSpec"]["executors"][hpt["componentRef"]["name"].replace(
        "comp-", "exec-")]["container"]  # fmt: skip
    from pipelines.run_plan import placeholders

    values = {
        "display_name": TUNE_TASK, "worker_pool_specs": specs, "base_output_directory": base,
        "study_spec_metrics": consts["study_spec_metrics"],
        "study_spec_parameters": consts["study_spec_parameters"],
        "max_trial_count": 20, "parallel_trial_count": 4, "max_failed_trial_count": 0,
        "study_spec_algorithm": "ALGORITHM_UNSPECIFIED",
        "study_spec_measurement_selection_type": "BEST_MEASUREMENT",
        "encryption_spec_key_name": "", "service_account": "", "network": "",
    }  # fmt: skip
    # The launcher's arguments with KFP's own placeholder resolution (kfp.local's, as verify).
    executor_input = {
        "inputs": {"parameterValues": {**values, "location": "us-central1", "project": "p"}},
        "outputs": {"parameters": {"gcp_resources": {"outputFile": str(tmp_path / "gcp")}}},
    }
    args = placeholders.resolve_command(executor["args"], executor_input, {})
    payload = args[args.index("--payload") + 1]
    job = json_format.ParseDict(json.loads(payload), HyperparameterTuningJob()._pb)
    assert job.trial_job_spec.worker_pool_specs[0].container_spec.command == command
    assert job.trial_job_spec.base_output_directory.output_uri_prefix == base
    assert [p.parameter_id for p in job.study_spec.parameters] == [p.name for p in space.parameters]

    train = tasks["train-model"]["inputs"]["parameters"]
    for name in tune.TUNABLE:
        assert train[name]["taskOutputParameter"] == {
            "outputParameterKey": name,
            "producerTask": "best-tuning-options",
        }


@pytest.mark.slow
def test_the_best_trial_is_read_from_the_trials_folders_and_handed_to_training(tiny_data, tmp_path):
    """``best_tuning_options``' own function on a tuning job's output folder as Vertex AI lays
    it out (``<base>/<trial id>/model/``, what each trial's train wrote): the trial with the
    best epoch wins, a trial that never finished an epoch is left out, the values come typed
    for train_model."""
    from kfp import dsl

    from components.tuning import best_tuning_options

    base = tmp_path / "trials"
    runs = {"1": {"learning_rate": 1e-7, "num_factors": 4}, "2": {"learning_rate": 0.01}}
    results = {}
    for trial_id, options in runs.items():
        config = train_config.config_for(
            tiny_data, str(base / trial_id / "model"), "tiny", epochs=1, steps_per_loop=50,
            **options,
        )  # fmt: skip
        results[trial_id] = loop.train(config, tf.distribute.get_strategy()).best.hr_at_10
    (base / "3" / "model").mkdir(parents=True)  # Failed before its first epoch.
    winner = max(results, key=results.get)
    assert results["2"] > results["1"]  # An untrained model cannot win.
    with open(tune.SEARCH_SPACE_FILE) as f:
        space_text = f.read()
    gcp_resources = json.dumps({"resources": [{
        "resourceType": "HyperparameterTuningJob",
        "resourceUri": "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/"
                       "us-central1/hyperparameterTuningJobs/42",
    }]})  # fmt: skip
    trials = dsl.Artifact(uri="gs://b/trials")
    trials.path = str(base)  # Where /gcs/b/trials is here.
    tuned = dsl.Metrics(uri="gs://b/tuned")
    best = best_tuning_options.python_func(
        gcp_resources=gcp_resources, trials=trials, search_space=space_text, tuned=tuned
    )
    assert winner == "2" and tuned.metadata["trial"] == "2"
    assert tuned.metadata["hr_at_10"] == pytest.approx(results["2"])
    assert tuned.metadata["job"].endswith("/hyperparameterTuningJobs/42")
    assert (best.learning_rate, best.num_factors, best.mlp_layers) == (0.01, 8, "16,16,8")
    assert (best.batch_size, best.l2_regularization) == (256, 0.0)
    assert isinstance(best.num_factors, int) and isinstance(best.batch_size, int)
    with pytest.raises(RuntimeError, match="no trial under .* finished an epoch"):
        tune.best_trial_folder(str(tmp_path / "none"), tune.load_search_space())


@pytest.mark.slow
def test_a_trial_runs_the_compiled_command_as_vertex_ai_runs_it(tiny_data, tmp_path):
    """The trial command ``tuning_trial_spec`` builds, with what Vertex AI adds: the trial's
    --NAME=VALUE values, AIP_MODEL_DIR and the metric file; a real process. (On Vertex AI the
    folder is gs://..., which train reads as its /gcs/ mount path.)"""
    import os
    import subprocess
    import sys

    command = tune.trial_command(tiny_data, "tiny", "", 2, 0, "hr_at_10")
    values = {"learning_rate": 0.004, "num_factors": 4, "mlp_layers": "8,4",
              "l2_regularization": 1e-6, "batch_size": 128}  # fmt: skip
    metric_file = tmp_path / "output.metrics"
    model_dir = tmp_path / "tuning" / "7" / "model"
    env = {
        **os.environ,
        "AIP_MODEL_DIR": f"{model_dir}/",
        "CLOUD_ML_HP_METRIC_FILE": str(metric_file),
        "CLOUD_ML_TRIAL_ID": "7",
    }
    argv = [sys.executable, "-m", "pipelines.cli", *command[1:], *tune.train_flags(values)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    model, _, _ = read_model_config(str(model_dir))
    assert (model.num_factors, model.layers, model.batch_size) == (4, (8, 4), 128)
    lines = [json.loads(line) for line in metric_file.read_text().splitlines()]
    assert len(lines) == 2 and {line["trial"] for line in lines} == {"7"}
    from training_core.serving.vertex_registry import mounted_path

    assert mounted_path("gs://bucket/tuning/7/model/") == "/gcs/bucket/tuning/7/model/"
