"""A refit (docs/training.md, "Refit"): an evaluated configuration trained on every interaction.

The trainer measures nothing on a refit dataset and trains exactly the evaluated run's kept
epochs; ``--refit-of`` takes that run's hyperparameters and refuses data that is no refit of the
same users and items; the pipeline trains, exports and serves the refit in the gate's blessed
branch (its compiled form here; tests/test_run_local.py runs it).
"""

import dataclasses
import json
import os
import re
import shutil

import numpy as np
import pytest
from conftest import checkpoint_values, prepare_tiny, read_split

from training_core.data.metadata import read_metadata
from training_core.training import model_dir as model_dir_module
from training_core.training import train_config
from training_core.training.model_dir import (
    checkpoint_dir,
    config_path,
    history_files,
    read_model_config,
)


@pytest.fixture(scope="module")
def refit_data(tmp_path_factory, tiny_csv):
    """``tiny_data``'s raw ratings and options, prepared as a refit."""
    return prepare_tiny(
        tiny_csv, str(tmp_path_factory.mktemp("prepared") / "tiny-refit"), refit=True
    )


def _refit(data: str, evaluated: str, folder) -> tuple:
    """``evaluated``'s configuration trained again on ``data`` (``--refit-of``) in ``folder``:
    its config and ``TrainResult``."""
    import tensorflow as tf

    from training_core.training import loop

    config = train_config.config_for(
        data, str(folder / "model"), refit_of=evaluated, steps_per_loop=50
    )
    return config, loop.train(config, tf.distribute.get_strategy())


@pytest.fixture(scope="module")
def refit_run(refit_data, tiny_model, tmp_path_factory):
    """``tiny_model``'s configuration refit on ``refit_data`` (``--refit-of``)."""
    return _refit(refit_data, tiny_model.model_dir, tmp_path_factory.mktemp("refit"))


def test_refit_data_holds_every_held_out_item_as_a_training_positive(tiny_data, refit_data):
    """What the refit's input pipeline reads: the test positives are training positives there."""
    held_out, refit = read_metadata(tiny_data), read_metadata(refit_data)
    assert refit.refit and not held_out.refit
    test = read_split(tiny_data, held_out, training=False)
    last = 1 + held_out.eval_negatives  # Each user's rows: the negatives, then the positive.
    real = test["duplicate_mask"][last - 1 :: last] == 0  # Not a padding user.
    users, items = (test[k][last - 1 :: last][real] for k in ("user_id", "item_id"))
    test_pairs = set(zip(users, items, strict=True))

    def positives(root, meta):
        rows = read_split(root, meta, training=True)
        keep = (rows["labels"] == 1) & (rows["valid_point_mask"] == 1)
        return set(zip(rows["user_id"][keep], rows["item_id"][keep], strict=True))

    assert test_pairs <= positives(refit_data, refit)
    assert not test_pairs & positives(tiny_data, held_out)


def test_a_refit_takes_the_evaluated_configuration_and_its_kept_epochs(tiny_model, refit_run):
    config, _ = refit_run
    evaluated, _, _ = read_model_config(tiny_model.model_dir)
    kept = tiny_model.result.final.epoch
    assert config.model == dataclasses.replace(
        evaluated, epochs=kept, hr_threshold=None, patience=None
    )
    assert config.preset is None  # Not a preset: the evaluated run's values.


def test_a_refit_measures_nothing_and_trains_exactly_its_epochs(refit_run):
    from training_core.training import results

    config, result = refit_run
    assert result.refit and result.test is None and result.best is None
    assert [e.epoch for e in result.epochs] == list(range(1, config.model.epochs + 1))
    assert all(e.eval_users == 0 for e in result.epochs)
    assert result.global_step == config.model.epochs * result.steps_per_epoch
    summary = results.summary_metrics(result)
    assert summary["refit"] == 1 and summary["epochs"] == config.model.epochs
    assert not [k for k in summary if "hr_at_10" in k or "ndcg" in k]
    assert result.to_dict()["refit"] is True
    from training_core.training import curve_page

    page = curve_page.result_page(result.to_dict())  # The loss alone, and why.
    assert "A refit: every interaction was trained on" in page and "HR@10" not in page


def test_the_refit_model_ranks_the_test_items_it_trained_on_higher(
    tiny_data, tiny_model, refit_run
):
    """Trained on each user's latest interaction, the refit ranks it higher than the held-out
    model does (the point of a refit; its number is no estimate of anything)."""
    import tensorflow as tf

    from training_core.evaluation.evaluate import load_model, run_eval

    strategy = tf.distribute.get_strategy()
    meta = read_metadata(tiny_data)
    (config, _), ndcg = refit_run, []
    for model_dir in (tiny_model.model_dir, config.model_dir):
        model, _, _ = load_model(model_dir, strategy)
        ndcg.append(run_eval(model, strategy, meta, tiny_data).ndcg)
    held_out, refit = ndcg
    assert refit > held_out + 0.05, ndcg


def test_refit_of_refuses_data_that_is_no_refit_of_the_same_users(
    tiny_data, refit_data, tiny_model, tmp_path
):
    def config(data, model_dir=tiny_model.model_dir, **options):
        return train_config.config_for(data, str(tmp_path / "m"), refit_of=model_dir, **options)

    with pytest.raises(ValueError, match="needs a refit dataset.*--refit"):
        config(tiny_data)
    with pytest.raises(ValueError, match="leave out --epochs, --learning-rate"):
        config(refit_data, epochs=3, learning_rate=0.1, seed=4)
    assert config(refit_data, seed=4).seed == 4  # The seed and how it runs are the refit's own.
    other = tmp_path / "other"
    shutil.copytree(tiny_model.model_dir, other, ignore=shutil.ignore_patterns("*.data-*"))
    raw = json.loads(open(config_path(str(other))).read())
    raw["num_items"] += 1
    with open(config_path(str(other)), "w") as f:
        json.dump(raw, f)
    with pytest.raises(ValueError, match="trained on .* items: prepare the refit"):
        config(refit_data, str(other))
    # As many users and items, other ones: the vocabularies' digest tells them apart.
    raw["num_items"] -= 1
    assert raw[model_dir_module.VOCAB_DIGEST] == model_dir_module.vocab_digest(
        refit_data, read_metadata(refit_data)
    )
    raw[model_dir_module.VOCAB_DIGEST] = "0" * 64
    with open(config_path(str(other)), "w") as f:
        json.dump(raw, f)
    with pytest.raises(ValueError, match="other users or items .* vocabularies differ"):
        config(refit_data, str(other))
    for path in history_files(str(other)).values():
        os.remove(path)
    del raw[model_dir_module.VOCAB_DIGEST]  # A folder from before the digest: counts checked only.
    with open(config_path(str(other)), "w") as f:
        json.dump(raw, f)
    with pytest.raises(ValueError, match="finished no epoch"):
        config(refit_data, str(other))


# --- a test refit: every interaction before the test item, scored once on the test split --------


@pytest.fixture(scope="module")
def test_refit_run(tiny_data_without_validation, tiny_model, tmp_path_factory):
    """``tiny_model``'s configuration trained again on ``tiny_data`` without validation."""
    folder = tmp_path_factory.mktemp("test-refit")
    return _refit(tiny_data_without_validation, tiny_model.model_dir, folder)


def _positives(root, meta):
    rows = read_split(root, meta, training=True)
    keep = (rows["labels"] == 1) & (rows["valid_point_mask"] == 1)
    return set(zip(rows["user_id"][keep], rows["item_id"][keep], strict=True))


def _held_out_pairs(root, meta):
    rows = read_split(root, meta, training=False)
    last = 1 + meta.eval_negatives  # Each user's rows: the negatives, then the positive.
    real = rows["duplicate_mask"][last - 1 :: last] == 0  # Not a padding user.
    return set(zip(*(rows[k][last - 1 :: last][real] for k in ("user_id", "item_id")), strict=True))


def test_a_test_refit_trains_on_the_validation_items_and_keeps_the_test_items_out(
    tiny_data, tiny_data_without_validation
):
    """Its data: the evaluated dataset's test split record for record, and every interaction
    before it (the validation items too) as training positives, never the test items."""
    held_out = read_metadata(tiny_data)
    loo = read_metadata(tiny_data_without_validation)
    assert train_config.is_test_refit_data(loo) and not train_config.is_test_refit_data(held_out)
    test_files = [p for p in held_out.eval_file_paths(tiny_data)]
    loo_files = [p for p in loo.eval_file_paths(tiny_data_without_validation)]
    assert [open(p, "rb").read() for p in test_files] == [open(p, "rb").read() for p in loo_files]
    validation = _held_out_pairs(tiny_data, held_out.split("validation"))
    test = _held_out_pairs(tiny_data, held_out)
    trained = _positives(tiny_data_without_validation, loo)
    assert validation <= trained and not validation & _positives(tiny_data, held_out)
    assert not test & trained


def test_a_test_refit_measures_no_epoch_and_scores_the_test_split_once(
    tiny_data, tiny_model, test_refit_run
):
    import tensorflow as tf

    from training_core.evaluation.evaluate import load_model, run_eval
    from training_core.training import results

    config, result = test_refit_run
    evaluated, _, _ = read_model_config(tiny_model.model_dir)
    assert config.model == dataclasses.replace(
        evaluated, epochs=tiny_model.result.final.epoch, hr_threshold=None, patience=None
    )
    assert result.refit and result.best is None and result.kept_epoch is None
    assert all(e.eval_users == 0 for e in result.epochs)  # Nothing chosen, nothing measured.
    assert result.global_step == config.model.epochs * result.steps_per_epoch
    # Scored once, on the final weights, on the candidates the evaluated run's test split holds.
    strategy = tf.distribute.get_strategy()
    model, _, _ = load_model(config.model_dir, strategy)
    on_held_out_data = run_eval(model, strategy, read_metadata(tiny_data), tiny_data)
    assert result.test.eval_users == on_held_out_data.users > 0
    assert result.test.hr_at_10 == on_held_out_data.hr
    assert result.test.ndcg_at_10 == pytest.approx(on_held_out_data.ndcg, abs=1e-6)
    summary = results.summary_metrics(result)
    assert summary["refit"] == 1 and summary["test_hr_at_10"] == result.test.hr_at_10
    assert not [k for k in summary if "hr_at_10" in k and not k.startswith("test_")]
    recorded = json.loads(open(config_path(config.model_dir)).read())
    assert recorded[model_dir_module.SELECTION_SPLIT] == ""  # It chose nothing.


def test_a_test_refit_refuses_an_evaluated_run_that_chose_on_the_test_split(
    tiny_data_without_validation, tiny_model, tmp_path
):
    """Its epochs would have been chosen on the split it is scored on; a folder from before the
    record is refused too (it cannot say)."""
    import tensorflow as tf

    from training_core.training import loop

    chose_on_test = str(tmp_path / "loo")
    loop.train(
        train_config.config_for(
            tiny_data_without_validation, chose_on_test, "tiny", epochs=1, steps_per_loop=50
        ),
        tf.distribute.get_strategy(),
    )
    recorded = json.loads(open(config_path(chose_on_test)).read())
    assert recorded[model_dir_module.SELECTION_SPLIT] == "test"
    on_validation = json.loads(open(config_path(tiny_model.model_dir)).read())
    assert on_validation[model_dir_module.SELECTION_SPLIT] == "validation"

    def refit(evaluated):
        return train_config.config_for(
            tiny_data_without_validation, str(tmp_path / "r"), refit_of=evaluated
        )

    with pytest.raises(ValueError, match="chosen on a validation split; .* chose them on the test"):
        refit(chose_on_test)
    old = tmp_path / "old"
    shutil.copytree(tiny_model.model_dir, old, ignore=shutil.ignore_patterns("*.data-*"))
    del on_validation[model_dir_module.SELECTION_SPLIT]
    with open(config_path(str(old)), "w") as f:
        json.dump(on_validation, f)
    with pytest.raises(ValueError, match="does not record where it chose them"):
        refit(str(old))


def test_evaluate_takes_a_fixed_ease_lambda_for_data_without_a_validation_split(
    tiny_data_without_validation, test_refit_run
):
    """A test refit's evaluation ranks EASE at the lambda the evaluated run's validation chose
    (``--ease-lambda``), not at the first of the list."""
    from training_core.evaluation import baselines, eval_config
    from training_core.evaluation import evaluate as ev

    config, _ = test_refit_run
    chosen = baselines.EASE_LAMBDAS[-1]
    assert chosen != baselines.EASE_LAMBDAS[0]
    fixed = ev.evaluate(
        tiny_data_without_validation,
        config.model_dir,
        options=eval_config.eval_options(ease_lambda=chosen, full_catalog_users=0),
    )
    first = ev.evaluate(
        tiny_data_without_validation,
        config.model_dir,
        options=eval_config.eval_options(full_catalog_users=0),
    )
    assert (fixed.ease_lambda, first.ease_lambda) == (chosen, baselines.EASE_LAMBDAS[0])
    assert fixed.hr_at_10 == first.hr_at_10  # The model's numbers do not depend on it.
    with pytest.raises(ValueError, match="--ease-lambda must be > 0, got 0"):
        eval_config.eval_options(ease_lambda=0)


@pytest.mark.parametrize(
    ("patience", "kept"),
    [(None, 4), (2, 2)],
)
def test_the_epochs_a_refit_trains_are_those_the_evaluated_run_kept(patience, kept):
    rows = [{"epoch": e, "hr_at_10": hr} for e, hr in enumerate([0.1, 0.5, 0.4, 0.5], 1)]
    assert train_config.kept_epoch(rows, patience) == kept


def test_a_refit_resumes_exactly(refit_data, refit_run, tmp_path):
    """A refit killed after its first epoch and run again ends where one straight run does."""
    import tensorflow as tf

    from training_core.training import loop

    config, result = refit_run
    resumed = dataclasses.replace(config, model_dir=str(tmp_path / "m"))
    first = dataclasses.replace(resumed, model=dataclasses.replace(config.model, epochs=1))
    loop.train(first, tf.distribute.get_strategy())
    again = loop.train(resumed, tf.distribute.get_strategy())
    assert again.global_step == result.global_step
    assert [e.loss for e in again.epochs] == pytest.approx([e.loss for e in result.epochs])
    want = checkpoint_values(checkpoint_dir(config.model_dir))
    got = checkpoint_values(checkpoint_dir(resumed.model_dir))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_train_offers_refit_of():
    from pipelines.cli import build_parser

    args = build_parser().parse_args(
        ["train", "--data", "d", "--model-dir", "m", "--refit-of", "runs/evaluated"]
    )
    assert args.refit_of == "runs/evaluated"


# --- the pipeline ---------------------------------------------------------------------------------


def _compiled(profile, path) -> dict:
    from pipelines import pipeline, yaml_io

    pipeline.compile_pipeline(profile, str(path))
    return yaml_io.load(path.read_text())


def _tasks(spec: dict) -> dict[tuple[str, ...], tuple[dict, list[dict]]]:
    """Every task by its branch's names and its own (a name is unique only in its branch), with
    the condition tasks that enclose it (innermost first)."""
    found = {}

    def walk(tasks: dict, enclosing: list[dict]) -> None:
        for name, task in tasks.items():
            found[(*_conditions(enclosing), name)] = (task, enclosing)
            body = spec["components"][task["componentRef"]["name"]].get("dag")
            if body:
                walk(body["tasks"], [task, *enclosing])

    walk(spec["root"]["dag"]["tasks"], [])
    return found


def _source(binding: dict, enclosing: list[dict]) -> dict:
    """Where a task input comes from, followed out through its enclosing condition tasks."""
    for task in enclosing:
        name = binding.get("componentInputParameter") or binding.get("componentInputArtifact")
        if name is None:
            break
        kind = "parameters" if "componentInputParameter" in binding else "artifacts"
        binding = task["inputs"][kind][name]
    return binding


def _conditions(enclosing: list[dict]) -> list[str]:
    return [t["taskInfo"]["name"] for t in reversed(enclosing)]


def _artifact(producer: str, key: str) -> dict:
    return {"taskOutputArtifact": {"outputArtifactKey": key, "producerTask": producer}}


def test_the_pipeline_serves_the_refit_in_the_blessed_branch_when_asked(tmp_path):
    from pipelines import profiles

    spec = _compiled(profiles.BUILTIN["cpu"], tmp_path / "cpu.yaml")
    assert spec["root"]["inputDefinitions"]["parameters"]["refit"]["defaultValue"] is False
    tasks = _tasks(spec)
    by_display = {t["taskInfo"]["name"]: (key[-1], t, e) for key, (t, e) in tasks.items()}
    refit_steps = {k: v for k, v in by_display.items() if k.startswith("Refit on all")}
    assert len(refit_steps) == 3  # Prepare, train, export.
    for _, _, enclosing in refit_steps.values():
        assert _conditions(enclosing) == ["refit-requested", "refit-blessed"]
    refit_flag = tasks[("condition-7",)][0]["inputs"]["parameters"]["pipelinechannel--refit"]
    assert refit_flag == {"componentInputParameter": "refit"}
    (prep_name, prep, _) = by_display["Refit on all interactions: prepare every interaction for "
                                      "training"]  # fmt: skip
    (train_name, train, enclosing) = next(
        v for k, v in refit_steps.items() if k.startswith("Refit on all interactions: train")
    )
    (export_name, export, _) = by_display["Refit on all interactions: export serving SavedModel"]
    assert prep["inputs"]["parameters"]["refit"]["runtimeValue"]["constant"] is True
    held_out_prep = tasks[("prepare-data",)][0]["inputs"]["parameters"]
    for name, binding in held_out_prep.items():  # The same raw data and options.
        assert _source(prep["inputs"]["parameters"][name], enclosing) == binding, name
    assert _source(train["inputs"]["artifacts"]["evaluated_model"], enclosing) == _artifact(
        "train-model", "model"
    )
    assert train["inputs"]["artifacts"]["examples"] == _artifact(prep_name, "examples")
    assert set(train["inputs"]["parameters"]) & {"epochs", "preset", "patience"} == set()
    assert export["inputs"]["artifacts"]["model"] == _artifact(train_name, "model")

    # Registration and batch recommendations: the refit's export with refit on, else the
    # held-out one; never both in one run (their branches' conditions exclude each other).
    served = {}
    for task, enclosing in tasks.values():
        step = re.sub(r"-\d+$", "", task["componentRef"]["name"].removeprefix("comp-"))
        if step in ("register-model", "recommend"):
            binding = _source(task["inputs"]["artifacts"]["exported_model"], enclosing)
            served[(*_conditions(enclosing), step)] = binding
    held_out, refit = (_artifact(e, "exported_model") for e in ("export-model", export_name))
    assert served == {
        ("register-requested", "challenger-blessed", "held-out-model-served", "register-model"):
            held_out,
        ("recommend-requested", "recommend-blessed", "held-out-model-recommends", "recommend"):
            held_out,
        ("refit-requested", "refit-blessed", "register-refit", "register-model"): refit,
        ("refit-requested", "refit-blessed", "recommend-refit", "recommend"): refit,
    }  # fmt: skip
    for name in ("held-out-model-served", "held-out-model-recommends"):
        (task, _) = next(v for v in tasks.values() if v[0]["taskInfo"]["name"] == name)
        assert task["triggerPolicy"]["condition"].endswith("== false")
    # The gate, the evaluation and the report stay the held-out model's.
    assert tasks[("evaluate-model",)][0]["inputs"]["artifacts"]["model"] == _artifact(
        "train-model", "model"
    )
    compare = tasks[("compare-models",)][0]["inputs"]["artifacts"]["challenger"]
    assert compare == _artifact("export-model", "exported_model")


@pytest.mark.slow
def test_refit_is_on_by_default_where_the_pipeline_deploys(tmp_path):
    from pipelines import profiles

    path = tmp_path / "profiles.yaml"
    path.write_text(
        "serving:\n  train: {machine_type: n1-standard-8, cpu_limit: 8, memory_limit: 30G}\n"
        "  deploy: true\n"
        "  serve: {machine_type: n1-standard-8}\n"
    )
    spec = _compiled(profiles.get_profile("serving", str(path)), tmp_path / "p.yaml")
    assert spec["root"]["inputDefinitions"]["parameters"]["refit"]["defaultValue"] is True
    tasks = _tasks(spec)
    deployed = [
        t for t, _ in tasks.values() if t["componentRef"]["name"].startswith("comp-deploy-model")
    ]
    assert len(deployed) == 2  # The held-out model's branch and the refit's.
