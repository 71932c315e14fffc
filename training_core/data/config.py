"""The options of data preparation: their one home.

``PrepareConfig`` owns every option's default, rule and command-line help (field metadata, read by
``pipelines/commands/config_options.py``); ``prepare_config`` is the one way options become a
config, whoever passes them: ``ncf-pipelines prepare-data``, the ``prepare_data`` KFP component,
and the pipeline's own defaults (``pipelines/pipeline.py`` reads ``DEFAULTS``). "Not set" is
``None`` everywhere: the field keeps its default. The engines that take a config are ``prepare``
(one machine) and ``prepare_beam`` (Apache Beam), chosen by ``RUNNERS``.

Data prep knows nothing of training: with ``num_epochs`` not set it prepares as many epochs as
training will run, which ``epochs_for`` says, handed in where training and data meet (the CLI and
the component, with ``training_core.training.train_config.with_training_epochs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from training_core.common import not_set
from training_core.data import io as rio
from training_core.data import positive_rules, sampling
from training_core.data.ids import ID_AUTO, ID_TYPES

RUNNER_LOCAL = "local"  # One machine: training_core.data.prepare.
RUNNER_BEAM = "beam"  # Apache Beam: in-process here, Dataflow with --runner=DataflowRunner.
RUNNERS = (RUNNER_LOCAL, RUNNER_BEAM)

# Automatic eval records hold a multiple of this many users, so that they split evenly over up to
# this many training replicas (a pipeline passes its profile's replica count instead).
EVAL_USERS_MULTIPLE = 8

# The epochs a training run of (--preset, --epochs) trains on data of so many training positives:
# what data prep prepares when num_epochs is not set (presets.training_epochs, handed in).
EpochsFor = Callable[[str, int | None, int], int]


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    """Options of one data preparation run; each field's default is the option's default.

    A field with ``help`` metadata is also a command-line option of ``ncf-pipelines prepare-data``
    (``help``, ``{default}`` standing for the default, and ``choices``, ``type``: plain data that
    ``pipelines/commands/config_options.py`` turns into the option).
    """

    input_path: str
    output_dir: str
    format: str = "auto"  # An input layout name or alias (data.formats.FORMAT_ALIASES).
    columns: rio.Columns = rio.Columns()
    # How the user and item columns' ids are read (data.id_columns: auto, int64, string).
    id_type: str = dataclasses.field(
        default=ID_AUTO,
        metadata={
            "help": "the kind of the user and item ids: auto (default: integers if every id of "
            "a column is one, else text), int64, or string (every id as its text, e.g. ISBNs)",
            "choices": ID_TYPES,
        },
    )
    # Rows rated below it are seen only (never positives, never negatives); None: every row.
    min_rating: float | None = dataclasses.field(
        default=None,
        metadata={
            "help": "rows rated below it count as seen, not as positives (never sampled as "
            "negatives, never recommended back; default: every row is a positive; the rating "
            "column: --rating-col)"
        },
    )
    # Comma-separated events that are positives; other events' rows are seen only. "": every.
    positive_events: str = dataclasses.field(
        default="",
        metadata={
            "help": "comma-separated events that are positives, e.g. purchase,add_to_cart; rows "
            "of other events count as seen, not as positives (default: every event; the event "
            "column: --event-col)"
        },
    )
    min_ratings: int = dataclasses.field(  # As the reference; 0 disables the filter.
        default=20,
        metadata={
            "help": "drop users with fewer ratings (default {default} as the reference; 0 disables)"
        },
    )
    # Epochs of training data, each with a fresh negative draw. None: as many as training runs
    # (``resolved_epochs``), so that no trained epoch reuses another's negatives.
    num_epochs: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "epochs of training data, each with a fresh negative draw (default: as many "
            "as training runs, from --train-preset and --train-epochs; epochs trained past the "
            "prepared ones reuse their negatives and overfit)"
        },
    )
    # What training will run, for num_epochs None: its --preset (auto: by the data's size, known
    # only once it is read) and --epochs (None: the preset's), named as training names them, with
    # its defaults (tests/test_config_flow.py holds them equal). Data prep does not read them:
    # they key the dataset and are what ``epochs_for`` is asked.
    train_preset: str = dataclasses.field(
        default="auto",
        metadata={
            "help": "the preset training will use (its --preset), for the default --num-epochs: "
            "its epochs (default {default}: the preset for the data's size)"
        },
    )
    train_epochs: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "the epochs training will run (its --epochs), for the default --num-epochs "
            "(default: the preset's)"
        },
    )
    num_neg: int = dataclasses.field(
        default=4, metadata={"help": "training negatives per positive (default {default})"}
    )
    # Recent taste weighs more (sampling.recency_copies): chosen on real MovieLens-100k's
    # validation split, docs/tuning-log.md#honest-numbers-on-real-movielens-100k-issue-52.
    recency_boost: float = dataclasses.field(
        default=8.0,
        metadata={
            "help": "extra copies of each user's latest training positives in every epoch, each "
            "with its --num-neg negatives: the k-th latest (k = 0, 1, ...) appears "
            "1 + round(B * exp(-k / S)) times, B this, S --recency-scale (default {default}; "
            "0: every positive once, as the reference)"
        },
    )
    recency_scale: float = dataclasses.field(
        default=20.0,
        metadata={
            "help": "how fast --recency-boost fades, in positives: S of exp(-k / S) "
            "(default {default})"
        },
    )
    eval_negatives: int = dataclasses.field(
        default=999, metadata={"help": "eval negatives per user (default {default})"}
    )
    eval_sampling: str = dataclasses.field(
        default=sampling.EVAL_DISTINCT,
        metadata={
            "help": f"{sampling.EVAL_DISTINCT}: never-seen negatives without repeats (default), "
            "or the reference's sampling with replacement, for side-by-side comparison",
            "choices": sampling.EVAL_SAMPLINGS,
        },
    )
    # Each user's second-to-last interaction held out as the validation split (users with at
    # least sampling.VALIDATION_MIN_INTERACTIONS), where every choice is made; off: the reference's
    # leave-one-out, the test split only (and the same bytes as before validation splits).
    validation: bool = dataclasses.field(
        default=True,
        metadata={
            "help": "hold out no validation split (each user's second-to-last interaction): "
            "the reference's leave-one-out, with choices made on the test split",
            "flag": "--no-validation",
            "action": "store_false",
        },
    )
    # A refit: every interaction is a training positive (nothing held out of training), for the
    # model that ships once evaluation is done. The held-out splits' records are written as
    # without it, but their items were trained on, so they measure nothing (DatasetMetadata.refit).
    refit: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "train on every interaction, each user's latest included (a refit, for the "
            "model that ships after evaluation); its held-out records are no measure"
        },
    )
    train_batch_size: int = dataclasses.field(
        default=1024,
        metadata={"help": "rows per training record = global training batch (default {default})"},
    )
    eval_batch_size: int | None = dataclasses.field(  # Rows; None: whole users, automatically.
        default=None,
        metadata={
            "help": "rows per eval record; rounded to whole users (default auto)",
            "type": "positive_or_auto",
        },
    )
    seed: int = dataclasses.field(default=0, metadata={"help": "random seed (default {default})"})
    num_shards: int | None = dataclasses.field(  # None: one per million interactions, >= 2.
        default=None, metadata={"help": "user shards (default: 1 per 1M rows, >= 2)"}
    )
    workers: int | None = dataclasses.field(  # Processes; None: one per CPU core, 1: in-process.
        default=None, metadata={"help": "worker processes (default: one per CPU core)"}
    )
    overwrite: bool = dataclasses.field(
        default=False, metadata={"help": "replace a different dataset already in --output"}
    )
    eval_users_multiple: int = EVAL_USERS_MULTIPLE  # The component's only (its replica count).
    # Not an option: the epochs training runs (``EpochsFor``), for num_epochs None, handed in by
    # the caller that knows training; not part of what the config is (compare=False).
    epochs_for: EpochsFor | None = dataclasses.field(default=None, compare=False, repr=False)

    def problems(self) -> list[tuple[str, str]]:
        """``(field, rule)`` for each value out of range, e.g. ``("num_neg", "must be >= 0")``.

        ``train_preset`` is training's name, checked where training and data meet
        (``train_config.with_training_epochs``).
        """
        rules = [
            ("id_type", self.id_type in ID_TYPES, f"must be one of {', '.join(ID_TYPES)}"),
            (
                "positive_events",
                not self.positive_events or bool(positive_rules.parse_events(self.positive_events)),
                "must name events, separated by commas",
            ),
            ("min_ratings", self.min_ratings >= 0, "must be >= 0 (0 disables the filter)"),
            (
                "num_epochs",
                self.num_epochs is None or self.num_epochs >= 1,
                "must be >= 1 (or not set: as many as training runs)",
            ),
            (
                "train_epochs",
                self.train_epochs is None or self.train_epochs >= 1,
                "must be >= 1 (or not set: the preset's)",
            ),
            ("num_neg", self.num_neg >= 0, "must be >= 0"),
            ("recency_boost", self.recency_boost >= 0, "must be >= 0 (0: each positive once)"),
            ("recency_scale", self.recency_scale > 0, "must be > 0"),
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

    def positive_rule(self) -> positive_rules.PositiveRule:
        """The reader's rule for positives (``min_rating``, ``positive_events``)."""
        return positive_rules.PositiveRule.from_options(self.min_rating, self.positive_events)

    def resolved_epochs(self, num_train_positives: int) -> int:
        """The epochs to prepare for data of ``num_train_positives``.

        ``num_epochs`` when set, else the epochs training will run (``epochs_for``).

        Raises:
            ValueError: neither is given (a caller that did not say what training runs).
        """
        if self.num_epochs is not None:
            return self.num_epochs
        if self.epochs_for is None:
            raise ValueError(
                "num_epochs is not set and no epochs_for says how many epochs training runs "
                "(training_core.training.train_config.with_training_epochs gives it)"
            )
        return self.epochs_for(self.train_preset, self.train_epochs, num_train_positives)

    def check(self) -> None:
        """Rejects impossible option values with a message naming the option and the value."""
        for field, rule in self.problems():
            option = "--" + field.replace("_", "-")
            raise ValueError(f"{option} {rule}, got {getattr(self, field)!r}")


# Every field but the two paths and epochs_for (handed in by the caller, not an option).
_NOT_OPTIONS = ("input_path", "output_dir", "epochs_for")
OPTIONS = tuple(f.name for f in dataclasses.fields(PrepareConfig) if f.name not in _NOT_OPTIONS)
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

    In KFP parameters "not set" is the zero value (``training_core.common.not_set``).
    ``tests/test_config_flow.py`` holds every parameter of the component to an option (same
    default) or to the list of those that are not options, so none can be dropped here unseen.
    """
    by_option = {
        option: parameters[COMPONENT_NAMES.get(option, option)]
        for option in OPTIONS
        if COMPONENT_NAMES.get(option, option) in parameters
    }
    return prepare_config(input_path, output_dir, **not_set.from_kfp(by_option, DEFAULTS))


def check_runner(runner: str, beam_pipeline_args: tuple[str, ...] | list[str] = ()) -> None:
    """Rejects an unknown runner, and Beam options given to the single-machine runner."""
    if runner not in RUNNERS:
        raise ValueError(f"unknown data prep runner {runner!r}; use one of {', '.join(RUNNERS)}")
    if runner == RUNNER_LOCAL and beam_pipeline_args:
        raise ValueError("--beam-pipeline-args needs --runner beam (Beam pipeline options)")
