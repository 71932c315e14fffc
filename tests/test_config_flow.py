"""One options -> config path per step: defaults cannot drift, every flag and parameter arrives.

The step configs (``training_core.data.config.PrepareConfig``,
``training_core.training.train_config.TrainOptions``) own the defaults. These tests hold to them
what the other entry points offer, read as they run: each KFP component's parameters from its
compiled component spec, the pipeline's parameters from the compiled pipeline (following each one to
the task input it feeds), and each CLI flag by running the subcommand with the flag set and catching
the config it builds. The flags themselves are made from the configs' fields (their metadata:
``pipelines/commands/config_options.py``), and data prep is told the epochs training runs by the
CLI and the component (``train_config.with_training_epochs``).
"""

from __future__ import annotations

import argparse
import dataclasses
import operator

import pytest

from components.evaluate_model import evaluate_model
from components.prepare_data import prepare_data
from components.train_model import train_model
from components.validate_data import validate_data
from pipelines import cli, yaml_io
from training_core.common import not_set
from training_core.data import config as prep_config
from training_core.data import io as rio
from training_core.data.metadata import read_metadata
from training_core.evaluation import eval_config
from training_core.serving.batch_recommend import RecommendConfig
from training_core.serving.export_config import ExportConfig
from training_core.training import train_config
from training_core.training.presets import get_preset, resolve_preset
from training_core.tune import TuneConfig

# Component parameters that are not step options, and why; any other must be an option.
NOT_OPTIONS = {
    "prepare_data": {
        "raw_data": "input artifact",
        "examples": "output artifact",
        "data_fingerprint": "keys the cache only",
        "runner": "which engine (training_core.data.config.RUNNERS)",
        "beam_pipeline_args": "how the Beam engine runs",
        "worker_image": "the Dataflow workers' image (components/_image.py)",
    },
    "train_model": {
        "examples": "input artifact",
        "model": "output artifact",
        "metrics": "output artifact",
        "plots": "output artifact",
        "distribution_strategy": "strategy_config(name=...)",
        "tpu_address": "strategy_config",
        "expect_accelerator": "strategy_config",
        "expect_accelerator_count": "strategy_config",
    },
    "evaluate_model": {
        "examples": "input artifact",
        "model": "input artifact",
        "metrics": "output artifact",
        "strategy": "StrategyConfig(name=...)",
    },
}
STEPS = {
    "prepare_data": (prepare_data, prep_config.DEFAULTS, prep_config.COMPONENT_NAMES),
    "train_model": (train_model, train_config.DEFAULTS, {}),
    "evaluate_model": (evaluate_model, eval_config.DEFAULTS, {}),
}
_KFP_TYPES = {"Integer": int, "Float": float, "String": str, "Boolean": bool}
# The parameters that name the raw table's columns (the steps' ``user_col`` ...): each is a field
# of data prep's ``columns`` option (training_core.data.io.Columns), whose default is the field's.
COLUMN_PARAMETERS = {
    "user_col": "user",
    "item_col": "item",
    "time_col": "timestamp",
    "rating_col": "rating",
    "event_col": "event",
}
# How the raw table is read: the parameters validate_data takes as prepare_data does.
READER_PARAMETERS = (*COLUMN_PARAMETERS, "id_type", "min_rating", "positive_events")


def _option(step: str, parameter: str) -> str | None:
    """The option a component parameter sets (``columns.user`` for ``user_col``), or None."""
    _, defaults, renames = STEPS[step]
    if step == "prepare_data" and parameter in COLUMN_PARAMETERS:
        return f"columns.{COLUMN_PARAMETERS[parameter]}"
    by_parameter = {renames.get(o, o): o for o in defaults}
    return by_parameter.get(parameter)


def _default(step: str, option: str):
    """The config's default of ``option`` (a field of ``columns`` too: ``columns.user``)."""
    _, defaults, _ = STEPS[step]
    name, _, field = option.partition(".")
    return getattr(defaults[name], field) if field else defaults[name]


@pytest.mark.parametrize("step", sorted(STEPS))
def test_every_component_parameter_is_an_option_with_its_default(step):
    component, defaults, _ = STEPS[step]
    inputs = component.component_spec.inputs
    outputs = component.component_spec.outputs or {}
    seen = set()
    for name in [*inputs, *outputs]:
        option = _option(step, name)
        if option is None:
            assert name in NOT_OPTIONS[step], f"{step}.{name} is neither an option nor listed"
            continue
        seen.add(option.partition(".")[0])
        spec = inputs[name]
        expected = not_set.kfp_default(_default(step, option), _KFP_TYPES[spec.type])
        assert spec.default == expected, f"{step}.{name}: {spec.default!r} != {expected!r}"
        assert type(spec.default) is type(expected), f"{step}.{name}"
    assert not set(NOT_OPTIONS[step]) - set(inputs) - set(outputs), "stale NOT_OPTIONS entries"
    # Options a component does not offer are the ones only a command line has.
    only_cli = {
        "prepare_data": {"num_shards", "workers", "overwrite"},
        "train_model": {
            "steps_per_loop",
            "precision",
            "embedding_updates",
            "refit_of",  # refit_model's evaluated_model artifact gives it (a refit).
        },
        # A test refit's evaluation (docs/model-quality.md); the pipeline chooses on validation.
        "evaluate_model": {"ease_lambda"},
    }[step]
    assert set(defaults) - seen == only_cli
    if step == "prepare_data":  # Every column, not only some.
        assert {_option(step, p) for p in COLUMN_PARAMETERS} == {
            f"columns.{f.name}" for f in dataclasses.fields(defaults["columns"])
        }


def test_validate_data_reads_the_table_as_prepare_data_does():
    """The reader's parameters: the same names, types and defaults on both steps (a pipeline
    passes both the same values)."""
    validate, prepare = (c.component_spec.inputs for c in (validate_data, prepare_data))
    for name in READER_PARAMETERS:
        assert (validate[name].type, validate[name].default) == (
            prepare[name].type,
            prepare[name].default,
        ), name
        assert type(validate[name].default) is type(prepare[name].default), name


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from pipelines import pipeline, profiles

    path = tmp_path_factory.mktemp("compiled") / "ncf.yaml"
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(path))
    return yaml_io.load(open(path))


def test_pipeline_parameters_default_to_what_the_steps_they_feed_default_to(compiled):
    """Each pipeline parameter followed, as compiled, to the task inputs it is bound to."""
    declared = compiled["root"]["inputDefinitions"]["parameters"]
    tasks = compiled["root"]["dag"]["tasks"]
    checked = {}
    for task_name, task in tasks.items():
        step = task["componentRef"]["name"].removeprefix("comp-")
        step = step.replace("-", "_")
        if step not in STEPS:
            continue
        for name, binding in task["inputs"].get("parameters", {}).items():
            pipeline_param = binding.get("componentInputParameter")
            option = _option(step, name)
            if pipeline_param is None or option is None:
                continue
            kfp_type = {
                "NUMBER_INTEGER": int,
                "NUMBER_DOUBLE": float,
                "STRING": str,
                "BOOLEAN": bool,
            }[declared[pipeline_param]["parameterType"]]
            expected = not_set.kfp_default(_default(step, option), kfp_type)
            got = declared[pipeline_param].get("defaultValue")
            assert got == expected, f"{pipeline_param} -> {task_name}.{name}"
            checked[pipeline_param] = option
    assert checked == {
        "data_format": "format",
        "user_col": "columns.user",
        "item_col": "columns.item",
        "time_col": "columns.timestamp",
        "rating_col": "columns.rating",
        "event_col": "columns.event",
        "id_type": "id_type",
        "min_rating": "min_rating",
        "positive_events": "positive_events",
        "min_ratings": "min_ratings",
        "data_epochs": "num_epochs",
        "num_neg": "num_neg",
        "recency_boost": "recency_boost",
        "recency_scale": "recency_scale",
        "eval_negatives": "eval_negatives",
        "train_batch_size": "train_batch_size",
        "eval_batch_size": "eval_batch_size",
        "validation_split": "validation",
        "seed": "seed",
        "preset": "preset",
        "architecture": "architecture",
        "epochs": "epochs",
        "target_hr": "target_hr",
        "patience": "patience",
        "warm_start_uri": "warm_start_uri",
    }


# --- every parameter of a component reaches its config -------------------------------------


PREP_VALUES = {
    "data_format": ("format", "ml-1m"),
    "user_col": ("columns.user", "customer_id"),
    "item_col": ("columns.item", "product_id"),
    "time_col": ("columns.timestamp", "event_time"),
    "rating_col": ("columns.rating", "stars"),
    "event_col": ("columns.event", "action"),
    "id_type": ("id_type", "string"),
    "min_rating": ("min_rating", 4.0),
    "positive_events": ("positive_events", "purchase,add_to_cart"),
    "min_ratings": ("min_ratings", 3),
    "num_epochs": ("num_epochs", 2),
    "train_preset": ("train_preset", "ml-1m"),
    "train_epochs": ("train_epochs", 3),
    "num_neg": ("num_neg", 7),
    "recency_boost": ("recency_boost", 2.5),
    "recency_scale": ("recency_scale", 30.0),
    "eval_negatives": ("eval_negatives", 50),
    "eval_sampling": ("eval_sampling", "reference"),
    "train_batch_size": ("train_batch_size", 512),
    "eval_batch_size": ("eval_batch_size", 1000),
    "seed": ("seed", 5),
    "eval_users_multiple": ("eval_users_multiple", 4),
    "validation": ("validation", False),
    "refit": ("refit", True),
}


@pytest.fixture
def prepare_data_config(monkeypatch, tmp_path):
    """The ``PrepareConfig`` the prepare_data component builds for its parameters (not run)."""
    from kfp.dsl import Dataset

    from training_core.data import prepare

    seen = []

    def capture(config, runner, beam_args):
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(prepare, "run", capture)

    def built(**parameters):
        with pytest.raises(SystemExit):
            prepare_data.python_func(
                raw_data=Dataset(uri="in"), examples=Dataset(uri=str(tmp_path / "e")), **parameters
            )
        return seen[-1]

    return built


def test_each_prepare_data_parameter_reaches_the_config(prepare_data_config):
    names = set(prepare_data.component_spec.inputs) - set(NOT_OPTIONS["prepare_data"])
    assert names == set(PREP_VALUES)
    default = prepare_data_config()
    assert default == prep_config.prepare_config(default.input_path, default.output_dir)
    for name, (field, value) in PREP_VALUES.items():
        config = prepare_data_config(**{name: value})
        got, was = (operator.attrgetter(field)(c) for c in (config, default))
        assert got == value != was, name
    # "Not set" in KFP: the zero value of an option whose default is None; "" detects a column.
    not_set_values = {
        "eval_batch_size": 0,
        "num_epochs": 0,
        "train_epochs": 0,
        "min_rating": 0.0,
        **{name: "" for name in COLUMN_PARAMETERS},
    }
    assert prepare_data_config(**not_set_values) == default
    assert default.eval_batch_size is None and default.min_rating is None
    assert default.columns == rio.Columns()


def test_each_reader_parameter_of_validate_data_reaches_its_config(monkeypatch, tmp_path):
    """The reader's parameters (those prepare_data takes too) in the ``ValidateConfig``."""
    from kfp.dsl import HTML, Artifact, Dataset

    from training_core.data import validate

    seen = []

    def capture(config):
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(validate, "validate", capture)

    def built(**parameters):
        names = ("statistics", "schema", "anomalies")
        outputs = {n: Artifact(uri=str(tmp_path / n)) for n in names}
        outputs["report"] = HTML(uri=str(tmp_path / "report.html"))
        with pytest.raises(SystemExit):
            validate_data.python_func(raw_data=Dataset(uri="in"), **outputs, **parameters)
        return seen[-1]

    default = built()
    for name in READER_PARAMETERS:
        field, value = PREP_VALUES[name]
        got, was = (operator.attrgetter(field)(c) for c in (built(**{name: value}), default))
        assert got == value != was, name
    assert default.columns == rio.Columns() and default.min_rating is None
    assert (default.id_type, default.positive_events) == (
        prep_config.DEFAULTS["id_type"],
        prep_config.DEFAULTS["positive_events"],
    )


@pytest.fixture(scope="module")
def data_dir(tiny_data):
    return tiny_data


def test_each_train_model_parameter_reaches_the_config(data_dir):
    def build(**parameters):
        return train_config.from_parameters(data_dir, "m", parameters)

    default = build()
    tiny = get_preset("tiny")
    cases = {
        "preset": ({"preset": "tiny"}, lambda c: c.model.num_factors == tiny.num_factors),
        "architecture": ({"architecture": "gmf"}, lambda c: c.model.architecture == "gmf"),
        "epochs": ({"epochs": 7}, lambda c: c.model.epochs == 7),
        "batch_size": ({"batch_size": 64}, lambda c: c.model.batch_size == 64),
        "seed": ({"seed": 3}, lambda c: c.seed == 3),
        "checkpoint_every_steps": (
            {"checkpoint_every_steps": 9},
            lambda c: c.checkpoint_every_steps == 9,
        ),
        "target_hr": ({"target_hr": 0.4}, lambda c: c.model.hr_threshold == 0.4),
        "patience": ({"patience": 5}, lambda c: c.model.patience == 5),
        "learning_rate": ({"learning_rate": 0.5}, lambda c: c.model.learning_rate == 0.5),
        "l2_regularization": (
            {"l2_regularization": 0.01},
            lambda c: c.model.l2_regularization == 0.01,
        ),
        "num_factors": ({"num_factors": 5}, lambda c: c.model.num_factors == 5),
        "mlp_layers": ({"mlp_layers": "12,6"}, lambda c: c.model.layers == (12, 6)),
        "warm_start_uri": ({"warm_start_uri": "champ"}, lambda c: c.warm_start_from == "champ"),
    }
    names = set(train_model.component_spec.inputs) - set(NOT_OPTIONS["train_model"])
    assert names == set(cases)
    for name, (parameters, holds) in cases.items():
        assert holds(build(**parameters)) and not holds(default), name
    # Zero is "not set": the preset's epochs and target, the data's batch; negative: never stop.
    assert build(epochs=0, target_hr=0.0, patience=0, batch_size=0) == default
    assert build(learning_rate=0.0, l2_regularization=0.0, num_factors=0, mlp_layers="") == default
    # The default preset (auto) is the one for this data's size, its target included.
    size = read_metadata(data_dir).num_train_positives
    want = get_preset(resolve_preset(default_preset(), size), batch_size=default.model.batch_size)
    assert default.model == want
    # A preset with a target keeps it unless told otherwise; negative: never stop.
    assert build(preset="ml-1m").model.hr_threshold == get_preset("ml-1m").hr_threshold
    assert get_preset("ml-1m").hr_threshold is not None
    assert build(preset="ml-1m", target_hr=-1.0).model.hr_threshold is None
    # ml-20m's patience likewise: negative patience (or never stopping early) turns it off.
    assert build(preset="ml-20m").model.patience == get_preset("ml-20m").patience is not None
    assert build(preset="ml-20m", patience=-1).model.patience is None
    assert build(preset="ml-20m", target_hr=-1.0).model.patience is None
    assert build(preset="ml-20m", target_hr=-1.0, patience=2).model.patience == 2


def test_each_evaluate_model_parameter_reaches_the_options():
    names = set(evaluate_model.component_spec.inputs) - set(NOT_OPTIONS["evaluate_model"])
    assert names == {"full_catalog_users"}
    assert eval_config.from_parameters({}) == eval_config.EvalOptions()
    assert eval_config.from_parameters({"full_catalog_users": 7}).full_catalog_users == 7
    # The default is not None, so a KFP 0 is a value: every user.
    assert eval_config.from_parameters({"full_catalog_users": 0}).full_catalog_users == 0


def default_preset() -> str:
    return train_config.DEFAULTS["preset"]


# --- every CLI flag reaches the config --------------------------------------------------------


def _parser_flags(command: str) -> dict[str, str]:
    """Option string -> dest of every flag of a subcommand."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return {
        action.option_strings[-1]: action.dest
        for action in sub.choices[command]._actions
        if action.option_strings
        and action.dest not in ("help", "verbose")  # Not options.
        and action.help != argparse.SUPPRESS  # Unlisted spellings (--learning_rate=...).
    }


def test_each_prepare_data_flag_reaches_the_config(monkeypatch, tmp_path):
    from training_core.data import prep_result, prepare

    seen = []

    def capture(config, runner, beam_args):
        seen.append((config, runner, beam_args))
        raise SystemExit(0)

    monkeypatch.setattr(prepare, "run", capture)
    monkeypatch.setattr(prep_result, "summary", lambda result: "")
    flags = {
        "--format": (["ml-1m"], lambda c: c.format == "ml-1m"),
        "--user-col": (["u"], lambda c: c.columns.user == "u"),
        "--item-col": (["i"], lambda c: c.columns.item == "i"),
        "--time-col": (["t"], lambda c: c.columns.timestamp == "t"),
        "--rating-col": (["r"], lambda c: c.columns.rating == "r"),
        "--event-col": (["e"], lambda c: c.columns.event == "e"),
        "--id-type": (["string"], lambda c: c.id_type == "string"),
        "--min-rating": (["3.5"], lambda c: c.min_rating == 3.5),
        "--positive-events": (["purchase"], lambda c: c.positive_events == "purchase"),
        "--min-ratings": (["3"], lambda c: c.min_ratings == 3),
        "--num-epochs": (["2"], lambda c: c.num_epochs == 2),
        "--train-preset": (["ml-1m"], lambda c: c.train_preset == "ml-1m"),
        "--train-epochs": (["3"], lambda c: c.train_epochs == 3),
        "--num-neg": (["7"], lambda c: c.num_neg == 7),
        "--recency-boost": (["2.5"], lambda c: c.recency_boost == 2.5),
        "--recency-scale": (["30"], lambda c: c.recency_scale == 30.0),
        "--eval-negatives": (["50"], lambda c: c.eval_negatives == 50),
        "--no-validation": ([], lambda c: not c.validation),
        "--refit": ([], lambda c: c.refit),
        "--eval-sampling": (["reference"], lambda c: c.eval_sampling == "reference"),
        "--train-batch-size": (["512"], lambda c: c.train_batch_size == 512),
        "--eval-batch-size": (["1000"], lambda c: c.eval_batch_size == 1000),
        "--seed": (["5"], lambda c: c.seed == 5),
        "--num-shards": (["3"], lambda c: c.num_shards == 3),
        "--workers": (["1"], lambda c: c.workers == 1),
        "--overwrite": ([], lambda c: c.overwrite),
        "--input": (["x.csv"], lambda c: c.input_path == "x.csv"),
    }
    not_config = {"--output", "--runner", "--beam-pipeline-args"}  # Checked below.
    assert set(_parser_flags("prepare-data")) == set(flags) | not_config

    def run(*extra):
        seen.clear()
        with pytest.raises(SystemExit):
            cli.main(["prepare-data", "--output", str(tmp_path / "o"), *extra])
        return seen[-1]

    default, runner, beam_args = run()
    assert (runner, beam_args) == ("local", ())
    assert dataclasses.replace(default, input_path="", output_dir="") == prep_config.PrepareConfig(
        "", ""
    )
    for flag, (values, holds) in flags.items():
        config, _, _ = run(flag, *values)
        assert holds(config) and not holds(default), flag
    _, runner, beam_args = run(
        "--runner", "beam", "--beam-pipeline-args=--runner=X --a=1", "--beam-pipeline-args=--b=2"
    )
    assert (runner, beam_args) == ("beam", ("--runner=X", "--a=1", "--b=2"))


def test_each_train_flag_reaches_the_config(monkeypatch, data_dir, tmp_path):
    from pipelines.commands import train as train_command
    from training_core.training import loop

    seen = []

    def capture(config, strategy, on_epoch=None):
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(train_command, "strategy_from_args", lambda args: None)
    monkeypatch.setattr(loop, "train", capture)
    tiny = get_preset("tiny")
    flags = {
        "--preset": (["tiny"], lambda c: c.model.num_factors == tiny.num_factors),
        "--model": (["gmf"], lambda c: c.model.architecture == "gmf"),
        "--epochs": (["7"], lambda c: c.model.epochs == 7),
        "--batch-size": (["64"], lambda c: c.model.batch_size == 64),
        "--learning-rate": (["0.5"], lambda c: c.model.learning_rate == 0.5),
        "--l2": (["0.01"], lambda c: c.model.l2_regularization == 0.01),
        "--num-factors": (["5"], lambda c: c.model.num_factors == 5),
        "--mlp-layers": (["12,6"], lambda c: c.model.layers == (12, 6)),
        "--seed": (["3"], lambda c: c.seed == 3),
        "--steps-per-loop": (["9"], lambda c: c.steps_per_loop == 9),
        "--checkpoint-every": (["11"], lambda c: c.checkpoint_every_steps == 11),
        "--precision": (["float16"], lambda c: c.precision == "float16"),
        "--embedding-updates": (["dense"], lambda c: c.dense_gradients is True),
        "--target-hr": (["0.4"], lambda c: c.model.hr_threshold == 0.4),
        "--no-early-stop": ([], lambda c: c.model.hr_threshold is None),
        "--patience": (["5"], lambda c: c.model.patience == 5),
        "--warm-start-from": (["champ"], lambda c: c.warm_start_from == "champ"),
    }
    not_config = {  # Paths, outputs, and the strategy's flags (strategy_config).
        "--data",
        "--model-dir",
        "--metrics-out",
        "--plots-out",
        "--strategy",
        "--num-gpus",
        "--tpu",
        "--all-reduce-alg",
        "--num-packs",
        "--expect-accelerator",
        "--expect-accelerator-count",
        "--hypertune-metric",  # Where metrics go (training_core/tune.py), not how it trains.
        "--refit-of",  # The evaluated model folder a refit reads: tests/test_refit.py.
    }
    assert set(_parser_flags("train")) == set(flags) | not_config

    def run(*extra):
        seen.clear()
        with pytest.raises(SystemExit):
            cli.main(["train", "--data", data_dir, "--model-dir", str(tmp_path / "m"), *extra])
        return seen[-1]

    default = run()
    assert default == train_config.config_for(data_dir, str(tmp_path / "m"))
    # Each flag against a preset with an HR@10 target (auto picks ml-100k here, which has
    # none), so that --no-early-stop changes something; a later --preset replaces it.
    base = run("--preset", "ml-1m")
    for flag, (values, holds) in flags.items():
        config = run("--preset", "ml-1m", flag, *values)
        assert holds(config) and not holds(base), flag


def test_each_evaluate_flag_reaches_the_options(monkeypatch, tmp_path):
    from pipelines.commands import evaluate as evaluate_command
    from training_core.evaluation import evaluate

    seen = []

    def capture(data_dir, model_dir, strategy, checkpoint, options):
        seen.append(options)
        raise SystemExit(0)

    monkeypatch.setattr(evaluate_command, "strategy_from_args", lambda args: None)
    monkeypatch.setattr(evaluate, "evaluate", capture)
    flags = {
        "--full-catalog-users": (["0"], lambda o: o.full_catalog_users == 0),
        "--ease-lambda": (["50"], lambda o: o.ease_lambda == 50.0),
    }
    not_options = {  # Paths, outputs, and the strategy's flags (strategy_config).
        "--data",
        "--model-dir",
        "--checkpoint",
        "--metrics-out",
        "--strategy",
        "--num-gpus",
        "--tpu",
        "--all-reduce-alg",
        "--num-packs",
        "--expect-accelerator",
        "--expect-accelerator-count",
    }
    assert set(_parser_flags("evaluate")) == set(flags) | not_options

    def run(*extra):
        seen.clear()
        with pytest.raises(SystemExit):
            cli.main(["evaluate", "--data", "d", "--model-dir", str(tmp_path / "m"), *extra])
        return seen[-1]

    default = run()
    assert default == eval_config.EvalOptions()
    for flag, (values, holds) in flags.items():
        options_ = run(flag, *values)
        assert holds(options_) and not holds(default), flag


def test_summaries_go_where_vertex_ai_asks_whichever_way_the_run_starts(monkeypatch, data_dir):
    monkeypatch.setenv(train_config.SUMMARIES_ENV, "gs://b/logs")
    assert train_config.config_for(data_dir, "m").summaries_dir == "gs://b/logs"
    assert train_config.from_parameters(data_dir, "m", {}).summaries_dir == "gs://b/logs"
    monkeypatch.delenv(train_config.SUMMARIES_ENV)
    assert train_config.config_for(data_dir, "m").summaries_dir is None


def test_options_that_are_not_options_are_refused():
    with pytest.raises(TypeError, match="not data prep options: min_rate;"):
        prep_config.prepare_config("in", "out", min_rating=3, min_rate=3)
    with pytest.raises(TypeError, match="not training options: epoch"):
        train_config.config_for("/nonexistent", "m", epoch=3)
    with pytest.raises(TypeError, match="not evaluation options: full_catalog"):
        eval_config.eval_options(full_catalog=3)


# --- data prep is told the epochs training runs -------------------------------------------------


def test_data_prep_is_told_the_epochs_training_runs_where_the_two_meet():
    """Data prep does not know the presets: it names the run (training's names and defaults)
    and is handed the epochs that run trains (``train_config.with_training_epochs``)."""
    from training_core.training import presets

    assert prep_config.DEFAULTS["train_preset"] == train_config.DEFAULTS["preset"]
    assert prep_config.DEFAULTS["train_epochs"] == train_config.DEFAULTS["epochs"]

    def told(**options):
        return train_config.with_training_epochs(prep_config.prepare_config("in", "out", **options))

    for size in (1_000, 1_000_000, 19_000_000):  # auto: the preset for the size, as training.
        assert told().resolved_epochs(size) == get_preset(resolve_preset("auto", size)).epochs
    assert told(train_preset="tiny").resolved_epochs(10**9) == presets.PRESETS["tiny"].epochs
    assert told(train_preset="tiny", train_epochs=7).resolved_epochs(5) == 7
    assert told(train_preset="tiny", num_epochs=2).resolved_epochs(5) == 2
    # Handed in, the function is not what the config is: same options, same config.
    assert told() == prep_config.prepare_config("in", "out")
    with pytest.raises(ValueError, match="num_epochs is not set and no epochs_for"):
        prep_config.prepare_config("in", "out").resolved_epochs(1_000)
    with pytest.raises(
        ValueError, match=r"^--train-preset must be a training preset: one of auto, .*got 'ml-2m'$"
    ):
        told(train_preset="ml-2m")


def test_the_command_and_the_component_hand_data_prep_the_epochs(monkeypatch, tmp_path):
    from kfp.dsl import Dataset

    from training_core.data import prepare

    seen = []

    def capture(config, runner, beam_args):
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(prepare, "run", capture)
    with pytest.raises(SystemExit):
        cli.main(["prepare-data", "--output", str(tmp_path / "o"), "--train-preset", "tiny"])
    with pytest.raises(SystemExit):
        prepare_data.python_func(
            raw_data=Dataset(uri="in"), examples=Dataset(uri=str(tmp_path / "e")), train_epochs=7
        )
    command, component = seen
    assert command.resolved_epochs(10**9) == get_preset("tiny").epochs
    assert component.resolved_epochs(10**9) == 7


# --- each option is written once, on its config's field ------------------------------------------


@pytest.mark.parametrize(
    "command, config_class, elsewhere",
    [
        # --input, --format and the columns: add_input_arguments, shared with validate.
        ("prepare-data", prep_config.PrepareConfig, {"format", "columns"}),
        ("train", train_config.TrainOptions, set()),
        ("evaluate", eval_config.EvalOptions, set()),
        ("tune", TuneConfig, {"data_dir", "work_dir"}),  # --data, --work-dir: folders.
        # --model, --data, --output: folders; --beam-pipeline-args: add_beam_pipeline_args;
        # num_shards: the pipeline's and the Python API's only.
        (
            "recommend",
            RecommendConfig,
            {"export_dir", "data_dir", "output_dir", "pipeline_args", "num_shards"},
        ),
        # --model-dir, --data, --output: folders; model_name: serving_metadata.json's label only.
        ("export", ExportConfig, {"model_dir", "data_dir", "export_dir", "model_name"}),
    ],
)
def test_each_option_of_a_command_is_its_config_field(command, config_class, elsewhere):
    """Flag, help (with the default), choices and dest come from the field; a field without help
    is no flag (the pipeline's only)."""
    from pipelines.commands.config_options import flag

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    actions = {s: a for a in sub._actions for s in a.option_strings if a.help != argparse.SUPPRESS}
    not_options = {"input_path", "output_dir", "epochs_for"}
    component_only = {"eval_users_multiple"}
    for field in dataclasses.fields(config_class):
        if field.name in not_options | elsewhere:
            continue
        if field.name in component_only:
            assert "help" not in field.metadata and flag(field) not in actions, field.name
            continue
        action = actions[flag(field)]
        assert action.dest == field.name, field.name
        assert action.help == field.metadata["help"].format(default=field.default)
        # Not given: the config's default (a flag that turns a default-on field off: True).
        off = field.metadata.get("action") == "store_false"
        assert action.default is (True if off else None) or action.default is False, field.name
        if "choices" in field.metadata:
            assert tuple(action.choices) == tuple(field.metadata["choices"]), field.name
