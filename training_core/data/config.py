"""The options of data preparation: their one home.

``PrepareConfig`` owns every option's default and rule; ``prepare_config`` is the one way options
become a config, whoever passes them: ``ncf-pipelines prepare-data``, the ``prepare_data`` KFP
component, and the pipeline's own defaults (``pipelines/pipeline.py`` reads ``DEFAULTS``). "Not
set" is ``None`` everywhere: the field keeps its default. The engines that take a config are
``prepare`` (one machine) and ``prepare_beam`` (Apache Beam), chosen by ``RUNNERS``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from training_core import options, presets
from training_core.data import io as rio
from training_core.data import sampling
from training_core.train_config import DEFAULTS as TRAIN_DEFAULTS

RUNNER_LOCAL = "local"  # One machine: training_core.data.prepare.
RUNNER_BEAM = "beam"  # Apache Beam: in-process here, Dataflow with --runner=DataflowRunner.
RUNNERS = (RUNNER_LOCAL, RUNNER_BEAM)

# Automatic eval records hold a multiple of this many users, so that they split evenly over up to
# this many training replicas (a pipeline passes its profile's replica count instead).
EVAL_USERS_MULTIPLE = 8


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    """Options of one data preparation run; each field's default is the option's default."""

    input_path: str
    output_dir: str
    format: str = "auto"  # An input layout name or alias (training_core.data.io.FORMAT_ALIASES).
    columns: rio.Columns = rio.Columns()
    min_ratings: int = 20  # As the reference; 0 disables the filter.
    # Epochs of training data, each with a fresh negative draw. None: as many as training runs
    # (``resolved_epochs``), so that no trained epoch reuses another's negatives.
    num_epochs: int | None = None
    # What training will run, for num_epochs None: --preset (auto: by the data's size, known only
    # once it is read) and --epochs (None: the preset's). Training's own defaults.
    train_preset: str = TRAIN_DEFAULTS["preset"]
    train_epochs: int | None = TRAIN_DEFAULTS["epochs"]
    num_neg: int = 4
    eval_negatives: int = 999
    eval_sampling: str = sampling.EVAL_DISTINCT
    train_batch_size: int = 1024
    eval_batch_size: int | None = None  # Rows; None picks whole users automatically.
    seed: int = 0
    num_shards: int | None = None  # None: one per million interactions, at least 2.
    workers: int | None = None  # Processes; None: one per CPU core, 1: in this process.
    overwrite: bool = False
    eval_users_multiple: int = EVAL_USERS_MULTIPLE

    def problems(self) -> list[tuple[str, str]]:
        """``(field, rule)`` for each value out of range, e.g. ``("num_neg", "must be >= 0")``."""
        rules = [
            ("min_ratings", self.min_ratings >= 0, "must be >= 0 (0 disables the filter)"),
            (
                "num_epochs",
                self.num_epochs is None or self.num_epochs >= 1,
                "must be >= 1 (or not set: as many as training runs)",
            ),
            (
                "train_preset",
                self.train_preset in presets.PRESET_NAMES,
                f"must be a training preset: one of {', '.join(presets.PRESET_NAMES)}",
            ),
            (
                "train_epochs",
                self.train_epochs is None or self.train_epochs >= 1,
                "must be >= 1 (or not set: the preset's)",
            ),
            ("num_neg", self.num_neg >= 0, "must be >= 0"),
            ("eval_negatives", self.eval_negatives >= 0, "must be >= 0"),
            ("train_batch_size", self.train_batch_size >= 1, "must be >= 1"),
            (
                "eval_batch_size",
                self.eval_batch_size is None or self.eval_batch_size >= 1,
                "must be >= 1 (or auto)",
            ),
            ("num_shards", self.num_shards is None or self.num_shards >= 1, "must be >= 1"),
            ("workers", self.workers is None or self.workers >= 1, "must be >= 1"),
            ("eval_users_multiple", self.eval_users_multiple >= 1, "must be >= 1"),
            (
                "eval_sampling",
                self.eval_sampling in sampling.EVAL_SAMPLINGS,
                f"must be one of {', '.join(sampling.EVAL_SAMPLINGS)}",
            ),
        ]
        return [(field, rule) for field, ok, rule in rules if not ok]

    def resolved_epochs(self, num_train_positives: int) -> int:
        """The epochs to prepare for data of ``num_train_positives``.

        ``num_epochs`` when set, else the epochs training will run (``presets.training_epochs``).
        """
        if self.num_epochs is not None:
            return self.num_epochs
        return presets.training_epochs(self.train_preset, self.train_epochs, num_train_positives)

    def check(self) -> None:
        """Rejects impossible option values with a message naming the option and the value."""
        for field, rule in self.problems():
            option = "--" + field.replace("_", "-")
            raise ValueError(f"{option} {rule}, got {getattr(self, field)!r}")


OPTIONS = tuple(f.name for f in dataclasses.fields(PrepareConfig))[2:]  # All but the two paths.
DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(PrepareConfig) if f.name in OPTIONS
}


def prepare_config(input_path: str, output_dir: str, **options: Any) -> PrepareConfig:
    """The config for these options, checked; ``None`` (not set) keeps an option's default.

    Raises:
        TypeError: a name that is not an option (a caller out of step with ``PrepareConfig``).
        ValueError: a value out of range, naming the option and the value.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"not data prep options: {', '.join(unknown)}; the options are {OPTIONS}")
    config = PrepareConfig(
        input_path, output_dir, **{k: v for k, v in options.items() if v is not None}
    )
    config.check()
    return config


# The prepare_data component's parameters named otherwise than their field (a pipeline passes
# data_format to validate_data too). Every other option is a parameter of its own name.
COMPONENT_NAMES = {"format": "data_format"}


def from_parameters(input_path: str, output_dir: str, parameters: Mapping[str, Any]):
    """``prepare_config`` for a component's parameters (its ``locals()``); others are skipped.

    In KFP parameters "not set" is the zero value (``training_core.options``).
    ``tests/test_config_flow.py`` holds every parameter of the component to an option (same
    default) or to the list of those that are not options, so none can be dropped here unseen.
    """
    by_option = {
        option: parameters[COMPONENT_NAMES.get(option, option)]
        for option in OPTIONS
        if COMPONENT_NAMES.get(option, option) in parameters
    }
    return prepare_config(input_path, output_dir, **options.from_kfp(by_option, DEFAULTS))


def check_runner(runner: str, beam_pipeline_args: tuple[str, ...] | list[str] = ()) -> None:
    """Rejects an unknown runner, and Beam options given to the single-machine runner."""
    if runner not in RUNNERS:
        raise ValueError(f"unknown data prep runner {runner!r}; use one of {', '.join(RUNNERS)}")
    if runner == RUNNER_LOCAL and beam_pipeline_args:
        raise ValueError("--beam-pipeline-args needs --runner beam (Beam pipeline options)")
