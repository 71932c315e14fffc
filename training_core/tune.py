"""Hyperparameter tuning: one search-space file, Optuna here, Vertex AI's tuning job in the cloud.

The search space (``search_space.yaml`` beside this module, or a copy given by path) names
training options (``TrainOptions`` fields) and their ranges in Vertex AI's StudySpec terms;
:func:`load_search_space` reads and checks it. Both runners use it:

- :func:`tune` (``ncf-pipelines tune``): Optuna's TPE sampler, each trial a real training run on
  the prepared data that reports its metric after every epoch; Optuna's median pruner stops a
  trial whose curve falls below the median of the earlier trials at the same epoch (early
  stopping). The preset's own values run first, outside the sampler: the best reported is
  never worse than the preset on this data (the preset's values when nothing beats them).
  The metric is the one every choice is made on (``DatasetMetadata.selection_split``: the
  validation split where the data has one, else test); each run's test-split number, scored
  once on its final weights, is recorded beside it and reported for the best, never chosen on.
  The study lives in ``WORK_DIR/study.db`` (SQLite): a killed
  tune resumes with the trials it finished. ``WORK_DIR/tune_results.json`` gets every trial and
  the best options, and the ``train`` command line that uses them.
- The pipeline (a profile's ``tune: true``): GCPC's ``HyperparameterTuningJobRunOp`` with the
  study spec ``pipelines.pipeline`` serialises from this search space; each trial runs
  ``ncf-pipelines train ... --hypertune-metric METRIC`` (:func:`trial_reporter`:
  ``cloudml-hypertune``, the way Vertex AI reads a trial's metric), with the trial's values
  appended as ``--NAME=VALUE``.

Why Optuna locally: it installs cleanly into this locked set (pure Python; Open Source Vizier
needs JAX and a newer NumPy than TFDV's pin), its TPE and median pruning are well proven, and
its study storage makes a tune resumable. Vertex AI's own tuning (Vizier) runs in the cloud.

Over 500 lines, for one reason: the search space's reader and both of its runners (Optuna
here, the Vertex AI trials' command and reporter) must stay in step on the same names and
spellings; split, each would import the others.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from training_core.common import atomic_writes
from training_core.data.metadata import SPLIT_TEST
from training_core.training.presets import ARCHITECTURES
from training_core.training.train_config import TrainOptions

log = logging.getLogger(__name__)

SEARCH_SPACE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "search_space.yaml")
METRICS = ("hr_at_10", "ndcg_at_10", "full_catalog_hr_at_10", "full_catalog_ndcg_at_10")
TYPES = ("double", "integer", "discrete", "categorical")
SCALES = ("linear", "log")
RESULTS_FILE = "tune_results.json"
STUDY_FILE = "study.db"
TRIALS_DIR = "trials"
PRESET_RUN = "preset"  # TRIALS_DIR/PRESET_RUN: the preset's own values, the bar to clear.


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One dimension of the search space."""

    name: str  # A TrainOptions field.
    type: str  # One of TYPES.
    min: float | None = None
    max: float | None = None
    scale: str = "linear"
    values: tuple[Any, ...] = ()


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """What to search and what to maximise."""

    metric: str
    parameters: tuple[Parameter, ...]
    path: str = SEARCH_SPACE_FILE


# TrainOptions fields a search space may name, with the type a value must have.
TUNABLE: dict[str, type] = {
    "architecture": str,
    "learning_rate": float,
    "l2_regularization": float,
    "num_factors": int,
    "mlp_layers": str,
    "batch_size": int,
}


def _tunable() -> dict[str, type]:
    from training_core.training.train_config import TrainOptions

    fields = {f.name for f in dataclasses.fields(TrainOptions)}
    assert set(TUNABLE) <= fields, set(TUNABLE) - fields
    return TUNABLE


def load_search_space(path: str | None = None) -> SearchSpace:
    """Reads and checks a search-space file; errors name the file, the parameter and the fix."""
    import yaml

    path = path or SEARCH_SPACE_FILE
    try:
        with open(path) as f:
            raw = yaml.safe_load(f) or {}
    except FileNotFoundError:
        raise ValueError(f"search space {path} does not exist") from None
    except yaml.YAMLError as e:
        raise ValueError(f"search space {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict) or set(raw) - {"metric", "parameters"}:
        raise ValueError(f"{path}: expected the keys metric and parameters")
    metric = raw.get("metric", "hr_at_10")
    if metric not in METRICS:
        raise ValueError(f"{path}: metric {metric!r} is not one of {', '.join(METRICS)}")
    tunable = _tunable()
    params = []
    for name, spec in (raw.get("parameters") or {}).items():
        where = f"{path}: parameter {name!r}"
        if name not in tunable:
            raise ValueError(f"{where} is not tunable; use one of {', '.join(tunable)}")
        if not isinstance(spec, dict) or spec.get("type") not in TYPES:
            raise ValueError(f"{where}: type must be one of {', '.join(TYPES)}")
        kind = spec["type"]
        unknown = set(spec) - {"type", "min", "max", "scale", "values"}
        if unknown:
            raise ValueError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
        if kind in ("double", "integer"):
            lo, hi, scale = spec.get("min"), spec.get("max"), spec.get("scale", "linear")
            if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)) or lo >= hi:
                raise ValueError(f"{where}: needs numbers min < max, got {lo!r} and {hi!r}")
            if scale not in SCALES or (scale == "log" and lo <= 0):
                raise ValueError(f"{where}: scale must be linear or log (log needs min > 0)")
            if kind == "integer" and tunable[name] is not int:
                raise ValueError(f"{where}: takes {tunable[name].__name__} values, not integers")
            params.append(Parameter(name, kind, float(lo), float(hi), scale))
        else:
            values = spec.get("values")
            want = str if kind == "categorical" else (int, float)
            if not values or not all(isinstance(v, want) for v in values):
                raise ValueError(
                    f"{where}: values must be a non-empty list of "
                    f"{'strings' if kind == 'categorical' else 'numbers'}"
                )
            if kind == "discrete" and tunable[name] is int and any(v != int(v) for v in values):
                raise ValueError(f"{where}: values must be whole numbers")
            if name == "architecture":
                from training_core.training.presets import ARCHITECTURES

                unknown = [v for v in values if v not in ARCHITECTURES]
                if unknown:
                    raise ValueError(
                        f"{where}: unknown {', '.join(map(repr, unknown))}; use "
                        f"{', '.join(ARCHITECTURES)}"
                    )
            params.append(Parameter(name, kind, values=tuple(values)))
    if not params:
        raise ValueError(f"{path}: no parameters to search")
    return SearchSpace(metric, tuple(params), path)


def option_values(space: SearchSpace, values: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's values as training options of the right types (``config_for`` keywords)."""
    tunable = _tunable()
    return {p.name: tunable[p.name](values[p.name]) for p in space.parameters}


def preset_values(space: SearchSpace, preset: str, architecture: str | None) -> dict[str, Any]:
    """The preset's own values of the searched options (the bar a tune must clear)."""
    from training_core.training.presets import get_preset

    return trial_options(get_preset(preset, architecture=architecture), space)


def train_flags(values: Mapping[str, Any]) -> list[str]:
    """``--NAME=VALUE`` for each option: how ``train`` takes them, as Vertex AI passes them."""
    return [f"--{name}={value}" for name, value in values.items()]


# --- the cloud side: Vertex AI's tuning job ------------------------------------------------------


def trial_command(
    data_path: str,
    preset: str,
    architecture: str,
    epochs: int,
    seed: int,
    metric: str,
    accelerator_type: str = "",
    accelerator_count: int = 0,
) -> list[str]:
    """A tuning trial's container command.

    Vertex AI appends the trial's ``--NAME=VALUE`` s and sets ``AIP_MODEL_DIR`` (the trial's
    own folder, where ``train`` writes when no ``--model-dir`` is given). ``architecture`` ""
    and ``epochs`` 0: the preset's. ``accelerator_type``/``accelerator_count`` (the trial's
    machine, as ``trial_worker_pool_specs`` gets it) become ``--expect-accelerator``: a trial
    that cannot see its accelerators fails, as the training job does, instead of training on
    the CPU and reporting a CPU trial's metric.
    """
    command = ["ncf-pipelines", "train", "--data", data_path, "--preset", preset]
    if architecture:
        command += ["--model", architecture]
    if epochs:
        command += ["--epochs", str(epochs)]
    if accelerator_type:
        command += [
            "--expect-accelerator",
            accelerator_type,
            "--expect-accelerator-count",
            str(int(accelerator_count or 1)),
        ]
    return command + ["--seed", str(seed), "--no-early-stop", "--hypertune-metric", metric]


def trial_worker_pool_specs(
    command: list[str],
    image: str,
    machine_type: str,
    accelerator_type: str = "",
    accelerator_count: int = 0,
) -> list[dict[str, Any]]:
    """A trial's one worker pool: the training image on the profile's training machine.

    As ``CustomJobSpec.worker_pool_specs``, snake_case, the way GCPC's tuning op takes it.
    """
    machine: dict[str, Any] = {"machine_type": machine_type}
    if accelerator_type:
        machine.update(accelerator_type=accelerator_type, accelerator_count=accelerator_count or 1)
    return [
        {
            "machine_spec": machine,
            "replica_count": 1,
            "container_spec": {"image_uri": image, "command": command},
        }
    ]


def trial_options(model: Any, space: SearchSpace) -> dict[str, Any]:
    """The searched options a trained model folder's config records (``NeuMFConfig``)."""
    own = {
        "architecture": model.architecture,
        "learning_rate": model.learning_rate,
        "l2_regularization": model.l2_regularization,
        "num_factors": model.num_factors,
        "mlp_layers": ",".join(str(w) for w in model.layers),
        "batch_size": model.batch_size,
    }
    return {p.name: own[p.name] for p in space.parameters}


def best_trial_folder(
    trials_dir: str, space: SearchSpace, max_trials: int = 0
) -> tuple[dict[str, Any], float, str]:
    """The best trial of a Vertex AI tuning job, read from its trials' folders.

    Vertex AI gives each trial ``TRIALS_DIR/<trial id>/`` (the job's ``base_output_directory``)
    and sets ``AIP_MODEL_DIR`` to its ``model/``, where ``train`` writes its config and its
    per-epoch history. The best trial is the one whose best epoch has the highest metric (the
    job's ``BEST_MEASUREMENT``); a trial without one finished epoch is left out. Returns its
    options, that metric and the trial's id.

    The folder must be the job's own (the pipeline gives every tuning job a fresh one):
    ``max_trials`` (the job's ``max_trial_count``; 0: not checked) refuses a folder holding
    more trial folders than the job ran, which only an earlier job's trials can be.

    Raises:
        RuntimeError: no trial finished an epoch, or the folder holds another job's trials.
    """
    from training_core.training.model_dir import history_files, read_model_config

    found = sorted(os.listdir(trials_dir)) if os.path.isdir(trials_dir) else []
    trial_ids = [t for t in found if os.path.isdir(os.path.join(trials_dir, t))]
    if max_trials and len(trial_ids) > max_trials:
        raise RuntimeError(
            f"{trials_dir} holds {len(trial_ids)} trial folders ({', '.join(trial_ids)}) but the "
            f"tuning job ran at most {max_trials}: it holds an earlier job's trials, and its best "
            "could be stale. Give each tuning job a fresh base_output_directory "
            "(tuning_trial_spec runs uncached for this)"
        )
    best: tuple[dict[str, Any], float, str] | None = None
    looked = []
    for trial_id in trial_ids:
        model_dir = os.path.join(trials_dir, trial_id, "model")
        histories = history_files(model_dir) if os.path.isdir(model_dir) else {}
        looked.append(trial_id)
        if not histories:
            continue
        with open(histories[max(histories)]) as f:
            epochs = json.load(f)["epochs"]
        if not epochs:
            continue
        value = max(float(e[space.metric]) for e in epochs)
        if best is None or value > best[1]:
            model, _, _ = read_model_config(model_dir)
            best = (trial_options(model, space), value, trial_id)
    if best is None:
        raise RuntimeError(
            f"no trial under {trials_dir} finished an epoch (trial folders: "
            f"{', '.join(looked) or 'none'}); see the tuning job's trials in the Vertex AI console"
        )
    return best


def trial_reporter(metric: str, metric_file: str | None = None) -> Callable[[Any], bool]:
    """An ``on_epoch`` for ``train`` that reports the epoch's ``metric`` to Vertex AI.

    It writes with ``cloudml-hypertune`` (its file, ``CLOUD_ML_HP_METRIC_FILE``, given as
    ``metric_file``: None for its default), which the tuning service reads; it never stops
    training. Made at the trial's start: the file's folder is checked then
    (``first_run.check_metric_file``), not at the first report after an epoch.
    """
    import hypertune

    from training_core.common import first_run

    if metric not in METRICS:
        raise ValueError(f"--hypertune-metric {metric!r} is not one of {', '.join(METRICS)}")
    first_run.check_metric_file(metric_file)
    reporter = hypertune.HyperTune()

    def report(epoch) -> bool:
        reporter.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=metric,
            metric_value=getattr(epoch, metric),
            global_step=epoch.step,
        )
        return False

    return report


# --- here: Optuna -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TuneConfig:
    """A local tuning run.

    Attributes:
        data_dir: the prepared data every trial trains on.
        work_dir: the study (``study.db``), each trial's model folder, ``tune_results.json``.
        preset: the preset the trials start from (its other options stay).
        architecture: ``--model`` (None: the preset's).
        trials: trials to run (in all, counting those a resumed study already has).
        epochs: epochs per trial (the pruner may stop a trial earlier).
        search_space: the search-space file (None: the shipped one).
        seed: the sampler's and every trial's training seed.

    Each field but the two folders is also an option of ``ncf-pipelines tune``, its help
    (``{default}``: the default) in its metadata (``pipelines/commands/config_options.py``).
    """

    data_dir: str
    work_dir: str
    preset: str = dataclasses.field(
        default=TrainOptions.preset, metadata={"help": "start from this preset ({default})"}
    )
    architecture: str | None = dataclasses.field(
        default=None,
        metadata={
            "flag": "--model",
            "choices": ARCHITECTURES,
            "help": "the scorer to tune (default: the preset's)",
        },
    )
    trials: int = dataclasses.field(default=20, metadata={"help": "trials ({default})"})
    epochs: int = dataclasses.field(default=10, metadata={"help": "epochs per trial ({default})"})
    search_space: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": f"search-space YAML (default: {SEARCH_SPACE_FILE}; metric one of "
            f"{', '.join(METRICS)})"
        },
    )
    seed: int = dataclasses.field(default=0, metadata={"help": "sampler and training seed"})

    def check(self) -> None:
        """Raises ``ValueError`` naming the option."""
        if self.trials < 1:
            raise ValueError(f"--trials must be >= 1, got {self.trials}")
        if self.epochs < 1:
            raise ValueError(f"--epochs must be >= 1, got {self.epochs}")


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """The study's outcome."""

    metric: str
    best_value: float  # On ``split``: what the search maximised.
    best_options: dict[str, Any]
    preset_value: float  # The preset's own values' result on this data (on ``split``).
    trials: list[dict[str, Any]]
    results_file: str
    seconds: float
    split: str = SPLIT_TEST  # The split the objective was measured on (the data's selection).
    # The best run's ``metric`` on the test split, of its final weights; reported, never chosen
    # on (None: a run that predates its recording).
    best_test_value: float | None = None


def pruner_warmup_epochs(epochs: int) -> int:
    """Epochs a trial runs before the median pruner may stop it: a quarter of them, at least 1."""
    return max(1, epochs // 4)


def tune(config: TuneConfig) -> TuneResult:
    """Runs (or resumes) the study; writes ``tune_results.json``; returns the best options."""
    import optuna
    import tensorflow as tf

    from training_core.data.metadata import read_metadata
    from training_core.training import loop, train_config
    from training_core.training.presets import resolve_preset

    config.check()
    space = load_search_space(config.search_space)
    train_config.check_options(config.preset, architecture=config.architecture)
    meta = read_metadata(config.data_dir)
    # auto: the preset for this data's size, named in the results.
    preset = resolve_preset(config.preset, meta.num_train_positives)
    split = meta.selection_split  # What every trial's epochs are measured on.
    os.makedirs(config.work_dir, exist_ok=True)
    t0 = time.perf_counter()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name="ncf",
        storage=f"sqlite:///{os.path.abspath(os.path.join(config.work_dir, STUDY_FILE))}",
        load_if_exists=True,
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=config.seed),
        # No stop in the first quarter of the epochs: a low learning rate or a wide model starts
        # slowly, and a trial stopped after epoch 1 can be one that would have come out near
        # the top (docs/tuning-log.md#the-median-pruners-warm-up).
        pruner=optuna.pruners.MedianPruner(
            n_startup_trials=3, n_warmup_steps=pruner_warmup_epochs(config.epochs)
        ),
    )

    def run(options: dict[str, Any], name: str, report=None):
        options = dict(options)  # A searched architecture is the trial's, else the run's.
        architecture = options.pop("architecture", config.architecture)
        model_dir = os.path.join(config.work_dir, TRIALS_DIR, name)
        # A run interrupted by a kill starts again from nothing: its folder may hold a half-run
        # with other values under the same name.
        if os.path.exists(model_dir):
            import shutil

            shutil.rmtree(model_dir)
        cfg = train_config.config_for(
            config.data_dir,
            model_dir,
            preset,
            architecture=architecture,
            epochs=config.epochs,
            seed=config.seed,
            target_hr=0.0,  # Every epoch: the pruner decides when to stop.
            **options,
        )
        return loop.train(cfg, tf.distribute.get_strategy(), on_epoch=report)

    # The preset's own values first, outside the sampler (they may lie outside the space, as
    # l2 0 does on a log scale): the bar the search must clear.
    own = option_values(space, preset_values(space, preset, config.architecture))
    if "preset_value" not in study.user_attrs:
        log.info(
            "the preset's own values (%s), the bar the %d trials must clear", preset, config.trials
        )
        ran = run(own, PRESET_RUN)
        study.set_user_attr("preset_test_value", final_test_value(ran, space.metric))
        study.set_user_attr("preset_value", max(getattr(e, space.metric) for e in ran.epochs))
    preset_value = float(study.user_attrs["preset_value"])

    def objective(trial) -> float:
        options = option_values(space, {p.name: _suggest(trial, p) for p in space.parameters})

        def report(epoch) -> bool:
            trial.report(getattr(epoch, space.metric), epoch.epoch)
            return trial.should_prune()

        log.info(
            "trial %d/%d: %s",
            trial.number + 1,
            config.trials,
            ", ".join(
                f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in sorted(options.items())
            ),
        )
        result = run(options, f"{trial.number:04d}", report)
        trial.set_user_attr("epochs_run", len(result.epochs))
        trial.set_user_attr("test_value", final_test_value(result, space.metric))
        value = max(getattr(e, space.metric) for e in result.epochs)
        if result.stopped_early and len(result.epochs) < config.epochs:
            log.info(
                "trial %d/%d stopped after %d epoch(s): below the median (%s %.4f)",
                trial.number + 1, config.trials, len(result.epochs), space.metric, value,
            )  # fmt: skip
            raise optuna.TrialPruned(f"below the median after {len(result.epochs)} epochs")
        log.info(
            "trial %d/%d done: %s %s %.4f (the preset's %.4f)",
            trial.number + 1, config.trials, split, space.metric, value, preset_value,
        )  # fmt: skip
        return value

    remaining = config.trials - len([t for t in study.trials if t.state.is_finished()])
    if remaining > 0:
        study.optimize(objective, n_trials=remaining, catch=())
    trials = [
        {
            "number": t.number,
            "state": t.state.name,
            "value": t.value,
            "epochs_run": t.user_attrs.get("epochs_run"),
            "test_value": t.user_attrs.get("test_value"),
            "options": option_values(space, t.params)
            if len(t.params) == len(space.parameters)
            else t.params,
        }
        for t in study.trials
    ]
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    best = max(complete, key=lambda t: t.value) if complete else None
    if best is None or best.value <= preset_value:
        best_value, best_options = preset_value, own  # The preset's values stay best.
        best_test = study.user_attrs.get("preset_test_value")
    else:
        best_value, best_options = float(best.value), option_values(space, best.params)
        best_test = best.user_attrs.get("test_value")
    result = TuneResult(
        metric=space.metric,
        best_value=best_value,
        best_options=best_options,
        preset_value=preset_value,
        trials=trials,
        results_file=os.path.join(config.work_dir, RESULTS_FILE),
        seconds=time.perf_counter() - t0,
        split=split,
        best_test_value=best_test,
    )
    payload = {
        "metric": result.metric,
        "split": result.split,
        "best_value": result.best_value,
        "best_test_value": result.best_test_value,
        "best_options": result.best_options,
        "preset": preset,
        "architecture": config.architecture,
        "preset_value": result.preset_value,
        "epochs_per_trial": config.epochs,
        "search_space": space.path,
        "train_flags": train_flags(result.best_options),
        "trials": trials,
    }
    atomic_writes.write_text_atomic(result.results_file, json.dumps(payload, indent=2) + "\n")
    return result


def final_test_value(result: Any, metric: str) -> float | None:
    """A run's ``metric`` on the test split, of its final weights (``TrainResult.test``)."""
    test = result.test
    return None if test is None else float(getattr(test, metric))


def _suggest(trial, p: Parameter) -> Any:
    """The trial's value of one parameter, through Optuna's public suggest API."""
    if p.type == "double":
        return trial.suggest_float(p.name, p.min, p.max, log=p.scale == "log")
    if p.type == "integer":
        return trial.suggest_int(p.name, int(p.min), int(p.max), log=p.scale == "log")
    return trial.suggest_categorical(p.name, list(p.values))


def describe(result: TuneResult) -> str:
    """Lines for the console: the best options against the preset's, on the split chosen on.

    The best run's test-split number is shown beside them: reported, not chosen on (where the
    data has no validation split, the test split is also the one chosen on, and says so).
    """
    lines = [
        f"best {result.split} {result.metric} {result.best_value:.4f} "
        + (
            f"(the preset's own values: {result.preset_value:.4f})"
            if result.preset_value is not None and not math.isnan(result.preset_value)
            else ""
        ),
        "best options: " + " ".join(train_flags(result.best_options)),
        f"all trials: {result.results_file}",
    ]
    if result.best_test_value is not None:
        why = (
            "reported, not chosen on"
            if result.split != SPLIT_TEST
            else "the split chosen on: the data has no validation split"
        )
        line = f"its test {result.metric} {result.best_test_value:.4f} (final weights; {why})"
        lines.insert(1, line)
    return "\n".join(lines)
