"""The options of training: their one home (no TensorFlow import).

``TrainOptions`` owns every option's default (what ``ncf-pipelines train``, the ``train_model``
KFP component and the pipeline's parameters offer), ``_OPTION_RULES`` their rules, and
``config_for`` is the one way options become a ``TrainConfig``: a preset resolved against the
prepared data, every value checked first with a message naming the option. "Not set" is
``None``: the option's default (for ``epochs``, ``learning_rate`` and ``target_hr`` the preset's,
for ``batch_size`` the data's pre-batch size). One switch stops training early: ``target_hr``
(``None``: the preset's target; 0 or less: never), which also turns off the preset's
``patience`` (stop after epochs without a better HR@10, keeping the best one's weights).
``refit_of`` (a refit, docs/training.md) takes the hyperparameters and the epochs from an
evaluated run's model folder instead (``refit_model``). ``warm_start_uri`` (``--warm-start-from``)
starts the model from a champion's weights instead of fresh ones (``warm_start``).
``with_training_epochs`` hands data prep, which does not know the presets, the epochs a run trains.

Over 500 lines, for one reason: it is the one home of training's options (each one's default,
rule and help beside the others, ``TrainOptions``, ``_OPTION_RULES``) and of the paths from
options to a ``TrainConfig`` (``config_for``, a refit's ``refit_model``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from training_core.common import not_set
from training_core.training.presets import (
    ARCHITECTURES,
    PRESET_NAMES,
    PRESETS,
    NeuMFConfig,
    training_epochs,
)

if TYPE_CHECKING:
    from training_core.data.config import PrepareConfig

PRECISIONS = ("auto", "float32", "float16", "bfloat16")
# --embedding-updates: how embedding gradients are applied (TrainConfig.dense_gradients).
EMBEDDING_UPDATES = {"auto": None, "dense": True, "sparse": False}
# Where Vertex AI asks a custom job to write TensorBoard summaries (a run's default there).
SUMMARIES_ENV = "AIP_TENSORBOARD_LOG_DIR"


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """What a user sets for a training run; each field's default is the option's default.

    Each field is also an option of ``ncf-pipelines train``: its metadata holds the help
    (``{default}``: the default), and the flag and choices where they are not the field's own
    (plain data, turned into the option by ``pipelines/commands/config_options.py``).
    """

    preset: str = dataclasses.field(  # A presets.PRESET_NAMES name; auto: by the data's size.
        default="auto",
        metadata={
            "help": f"hyperparameter preset: {', '.join(PRESET_NAMES)} (default {{default}}: the "
            "one tuned for the MovieLens size nearest the data's)"
        },
    )
    architecture: str | None = dataclasses.field(  # A key of ARCHITECTURES; None: the preset's.
        default=None,
        metadata={
            "flag": "--model",
            "choices": tuple(ARCHITECTURES),
            "help": "the scorer: neumf (default: the preset's), or a baseline to compare with it: "
            "mf (dot product with biases), gmf or mlp (either NeuMF tower alone)",
        },
    )
    epochs: int | None = dataclasses.field(  # None: the preset's.
        default=None, metadata={"help": "training epochs (default: the preset's)"}
    )
    batch_size: int | None = dataclasses.field(  # None: the data's pre-batch size.
        default=None,
        metadata={
            "help": "global batch over all replicas, >= 1 (default: the data's pre-batch size)"
        },
    )
    learning_rate: float | None = dataclasses.field(  # None: the preset's.
        default=None, metadata={"help": "Adam learning rate, > 0 (default: the preset's)"}
    )
    num_factors: int | None = dataclasses.field(  # GMF / MF width; None: the preset's.
        default=None,
        metadata={"help": "GMF embedding width (mf: its factors), >= 1 (default: the preset's)"},
    )
    mlp_layers: str | None = dataclasses.field(  # "256,128,64" (first even); None: the preset's.
        default=None,
        metadata={
            "help": "MLP widths, comma-separated, the first even: e.g. 256,128,64 (default: the "
            "preset's)"
        },
    )
    l2_regularization: float | None = dataclasses.field(  # Embedding L2; None: the preset's.
        default=None,
        metadata={
            "flag": "--l2",
            "help": "L2 penalty on the user and item embeddings each example uses, >= 0 "
            "(default: the preset's; 0: none)",
        },
    )
    seed: int = dataclasses.field(
        default=0, metadata={"help": "initialization seed (default {default})"}
    )
    steps_per_loop: int = dataclasses.field(
        default=200, metadata={"help": "training steps per host call (default {default})"}
    )
    checkpoint_every_steps: int = dataclasses.field(  # 0: each epoch only.
        default=0,
        metadata={
            "flag": "--checkpoint-every",
            "help": "also checkpoint every N steps (default {default}: each epoch only)",
        },
    )
    precision: str = dataclasses.field(  # bfloat16 on TPU, float16 on GPU, else float32.
        default="auto",
        metadata={
            "choices": PRECISIONS,
            "help": "compute dtype (default {default}: bfloat16 on TPU, float16 on GPU)",
        },
    )
    embedding_updates: str = dataclasses.field(  # A key of EMBEDDING_UPDATES.
        default="auto",
        metadata={
            "choices": tuple(EMBEDDING_UPDATES),
            "help": "dense: exact Adam over whole tables (reference); sparse: touched rows "
            "only; auto (default): dense on GPU/TPU and for small tables, else sparse",
        },
    )
    # Stop at this HR@10; None: the preset's; <= 0: never (nor by the preset's patience).
    target_hr: float | None = dataclasses.field(
        default=None,
        metadata={
            "help": "stop early once HR@10 reaches this (default: the preset's target; 0: never "
            "stop early, nor by the preset's patience)"
        },
    )
    # Stop after this many epochs without a better HR@10, keeping the best epoch's weights;
    # None: the preset's; <= 0: never.
    patience: int | None = dataclasses.field(
        default=None,
        metadata={
            "help": "stop once this many epochs in a row bring no better HR@10, and keep the best "
            "epoch's weights as the model (default: the preset's: "
            + ", ".join(f"{n} {c.patience}" for n, c in PRESETS.items() if c.patience)
            + ", else none; 0: never)"
        },
    )
    # A refit (docs/training.md, "Refit"): the evaluated run whose configuration and chosen
    # number of epochs are trained again, on a refit dataset (prepare-data --refit).
    refit_of: str | None = dataclasses.field(
        default=None,
        metadata={
            "metavar": "MODEL_DIR",
            "help": "train MODEL_DIR's configuration again, for the epochs whose weights it kept, "
            "on --data prepared from the same raw data with --refit (every interaction a "
            "training positive: the model to serve; nothing is evaluated) or with "
            "--no-validation (every interaction before each user's test item: a test refit, "
            "scored once on the test split at the end). Takes the hyperparameters from "
            "MODEL_DIR, so no hyperparameter option may be given with it",
        },
    )
    # A warm start (docs/weekly-runs.md): the champion whose weights the run starts from, its
    # rows matched by raw id (training_core/training/warm_start.py); None: a cold start.
    warm_start_uri: str | None = dataclasses.field(
        default=None,
        metadata={
            "flag": "--warm-start-from",
            "metavar": "PATH",
            "help": "start from the weights of PATH, the champion's export (or a training output "
            "folder) of the same architecture and sizes: users and items it knows keep its "
            "embedding rows (matched by raw id), new ones start fresh, and the other weights are "
            "its too (default: a cold start)",
        },
    )


OPTIONS = tuple(f.name for f in dataclasses.fields(TrainOptions))
DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(TrainOptions)}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs besides the strategy (``config_for`` builds it).

    Attributes:
        data_dir: a prepared dataset (``metadata.json``).
        model_dir: checkpoints, ``model_config.json`` and summaries go here.
        model: hyperparameters (a preset, see ``training_core.training.presets``); training stops
        early
            once HR@10 reaches ``model.hr_threshold`` (``None``: never), or once
            ``model.patience`` epochs bring no better HR@10 (then keeping the best epoch's
            weights).
        seed: initialization seed.
        steps_per_loop: training steps per host call.
        checkpoint_every_steps: also checkpoint every this many steps (0: only per epoch).
        keep_checkpoints: checkpoints kept.
        precision: ``auto`` (bfloat16 on TPU, float16 on GPU, else float32) or a dtype name.
        dense_gradients: apply embedding gradients densely (exact Adam, the reference's trick);
            ``None``: dense on GPU/TPU and for small tables, else touched rows only (lazy Adam).
        jit_compile: XLA-compile the forward/backward pass (with dense gradients, not on TPU,
            which compiles everything anyway).
        summaries_dir: TensorBoard folder; ``None``: ``model_dir/summaries``.
        preset: the preset ``model`` came from, by name (``auto`` resolved); ``None``: not one.
        warm_start_from: the champion the run starts from (``--warm-start-from``,
            ``training_core.training.warm_start``); ``None``: a cold start.
        refit_of: the evaluated run this one trains again (``--refit-of``, ``refit_model``);
            ``None``: not a refit.
    """

    data_dir: str
    model_dir: str
    model: NeuMFConfig
    seed: int = TrainOptions.seed
    steps_per_loop: int = TrainOptions.steps_per_loop
    checkpoint_every_steps: int = TrainOptions.checkpoint_every_steps
    keep_checkpoints: int = 3
    precision: str = TrainOptions.precision
    dense_gradients: bool | None = EMBEDDING_UPDATES[TrainOptions.embedding_updates]
    summaries_dir: str | None = None
    jit_compile: bool = False
    preset: str | None = None
    warm_start_from: str | None = None
    refit_of: str | None = None

    def __post_init__(self) -> None:
        m = self.model
        check_options(
            architecture=m.architecture,
            epochs=m.epochs,
            batch_size=m.batch_size,
            learning_rate=m.learning_rate,
            l2_regularization=m.l2_regularization,
            target_hr=m.hr_threshold,
            steps_per_loop=self.steps_per_loop,
            checkpoint_every_steps=self.checkpoint_every_steps,
            keep_checkpoints=self.keep_checkpoints,
            precision=self.precision,
        )


# What each option of a run accepts, by field: (the option that sets it, the rule, its check).
# TrainConfig and config_for check with it, so a message names the option and the value given,
# whichever way the value came in (the CLI, the component, a test).
_OPTION_RULES: dict[str, tuple[str, str, Any]] = {
    "architecture": (
        "--model",
        f"must be one of {', '.join(ARCHITECTURES)}",
        ARCHITECTURES.__contains__,
    ),
    "epochs": ("--epochs", "must be >= 1", lambda v: v >= 1),
    "batch_size": (
        "--batch-size",
        "must be >= 1 (leave it out for the data's pre-batch size)",
        lambda v: v >= 1,
    ),
    "learning_rate": ("--learning-rate", "must be > 0", lambda v: math.isfinite(v) and v > 0),
    "l2_regularization": (
        "--l2",
        "must be >= 0 (0: no penalty)",
        lambda v: math.isfinite(v) and v >= 0,
    ),
    "num_factors": ("--num-factors", "must be >= 1", lambda v: isinstance(v, int) and v >= 1),
    "mlp_layers": (
        "--mlp-layers",
        "must be comma-separated widths >= 1, the first even (it splits between user and item), "
        "e.g. 256,128,64",
        lambda v: parse_layers(v) is not None,
    ),
    "target_hr": (
        "--target-hr",
        "must be at most 1, an HR@10 (0 or less: never stop early)",
        lambda v: not math.isnan(v) and v <= 1,
    ),
    "patience": (
        "--patience",
        "must be a whole number of epochs (0 or less: never)",
        lambda v: isinstance(v, int),
    ),
    "seed": ("--seed", "must be an integer", lambda v: isinstance(v, int)),
    "steps_per_loop": ("--steps-per-loop", "must be >= 1", lambda v: v >= 1),
    "checkpoint_every_steps": (
        "--checkpoint-every",
        "must be >= 0 (0: each epoch only)",
        lambda v: v >= 0,
    ),
    "keep_checkpoints": ("keep_checkpoints", "must be >= 1", lambda v: v >= 1),
    "refit_of": (
        "--refit-of",
        "must name the evaluated run's model folder",
        lambda v: isinstance(v, str) and bool(v),
    ),
    "warm_start_uri": (
        "--warm-start-from",
        "must name the champion's export or training output folder",
        lambda v: isinstance(v, str) and bool(v),
    ),
    "precision": (
        "--precision",
        f"must be one of {', '.join(PRECISIONS)}",
        PRECISIONS.__contains__,
    ),
    "embedding_updates": (
        "--embedding-updates",
        f"must be one of {', '.join(EMBEDDING_UPDATES)}",
        EMBEDDING_UPDATES.__contains__,
    ),
}


def parse_layers(text: str) -> tuple[int, ...] | None:
    """``"256,128,64"`` as MLP widths; ``None`` if it is not that (the first must be even)."""
    try:
        layers = tuple(int(p) for p in str(text).split(","))
    except ValueError:
        return None
    if not layers or min(layers) < 1 or layers[0] % 2:
        return None
    return layers


def check_options(preset: str | None = None, **values: Any) -> None:
    """Rejects option values a run cannot use; each message names the option and the value.

    Args:
        preset: a preset name (``--preset``), if one was given.
        values: by field (a ``TrainOptions`` field, or ``keep_checkpoints``); ``None`` means
            "the default" and is not checked.

    Raises:
        ValueError: naming every bad value, e.g. ``--learning-rate must be > 0, got -1.0``.
    """
    import difflib

    problems = []
    if preset is not None and preset not in PRESET_NAMES:
        close = difflib.get_close_matches(str(preset), list(PRESET_NAMES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(
            f"--preset {preset!r} is unknown{hint}; choose one of {', '.join(PRESET_NAMES)}"
        )
    for field, value in values.items():
        option, rule, ok = _OPTION_RULES[field]
        if value is not None and not ok(value):
            problems.append(f"{option} {rule}, got {value!r}")
    if problems:
        raise ValueError("; ".join(problems))


def config_for(
    data_dir: str,
    model_dir: str,
    preset: str | None = None,
    *,
    keep_checkpoints: int = TrainConfig.keep_checkpoints,
    jit_compile: bool = TrainConfig.jit_compile,
    summaries_dir: str | None = None,
    **options: Any,
) -> TrainConfig:
    """The ``TrainConfig`` for these options (``TrainOptions`` fields; ``None``: the default).

    Every value is checked first (``check_options``), before the data is read; then the preset
    is resolved (``auto``: by the data's training positives, ``presets.resolve_preset``),
    ``batch_size`` defaulting to the data's pre-batch size; with ``refit_of``, the evaluated
    run's hyperparameters and kept epochs instead (``refit_model``). ``summaries_dir``
    defaults to ``$AIP_TENSORBOARD_LOG_DIR`` when Vertex AI sets it, else ``model_dir/summaries``.

    Raises:
        TypeError: a name that is not an option (a caller out of step with ``TrainOptions``).
        ValueError: a value a run cannot use, naming the option and the value.
        FileNotFoundError: ``data_dir`` holds no prepared dataset.
    """
    from training_core.data.metadata import read_metadata

    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"not training options: {', '.join(unknown)}; the options are {OPTIONS}")
    given = {k: v for k, v in options.items() if v is not None}
    if preset is not None:
        given["preset"] = preset
    check_options(
        given.pop("preset", None),
        keep_checkpoints=keep_checkpoints,
        **{k: v for k, v in given.items()},
    )
    opts = TrainOptions(**{"preset": preset or TrainOptions.preset, **given})
    meta = read_metadata(data_dir)
    if opts.refit_of is not None:
        model, preset_name = refit_model(opts.refit_of, data_dir, meta, given), None
    else:
        model, preset_name = _model_for(opts, meta)
    return TrainConfig(
        data_dir=data_dir,
        model_dir=model_dir,
        model=model,
        seed=opts.seed,
        steps_per_loop=opts.steps_per_loop,
        checkpoint_every_steps=opts.checkpoint_every_steps,
        keep_checkpoints=keep_checkpoints,
        precision=opts.precision,
        dense_gradients=EMBEDDING_UPDATES[opts.embedding_updates],
        summaries_dir=summaries_dir or os.environ.get(SUMMARIES_ENV) or None,
        jit_compile=jit_compile,
        preset=preset_name,
        warm_start_from=opts.warm_start_uri,
        refit_of=opts.refit_of,
    )


def _model_for(opts: TrainOptions, meta: Any) -> tuple[NeuMFConfig, str]:
    """The hyperparameters these options give on this data, and the preset they start from."""
    from training_core.training.presets import get_preset, resolve_preset

    preset_name = resolve_preset(opts.preset, meta.num_train_positives)
    model = get_preset(
        preset_name,
        architecture=opts.architecture,
        epochs=opts.epochs,
        batch_size=meta.train_prebatch_size if opts.batch_size is None else opts.batch_size,
        learning_rate=opts.learning_rate,
        l2_regularization=opts.l2_regularization,
        num_factors=opts.num_factors,
        layers=parse_layers(opts.mlp_layers) if opts.mlp_layers is not None else None,
    )
    if opts.target_hr is not None and opts.target_hr > 0:
        model = dataclasses.replace(model, hr_threshold=opts.target_hr)
    elif opts.target_hr is not None:  # Never stop early: every epoch trained, the last kept.
        model = dataclasses.replace(model, hr_threshold=None, patience=None)
    if opts.patience is not None:  # Set: it wins over the preset's and over target_hr's "never".
        model = dataclasses.replace(model, patience=opts.patience if opts.patience > 0 else None)
    return model, preset_name


# What a refit takes from the evaluated run (``refit_of``): every option that shapes the model
# or decides its epochs. The others (the seed, how the run runs) are the refit's own.
REFIT_TAKES = (
    "preset",
    "architecture",
    "epochs",
    "batch_size",
    "learning_rate",
    "l2_regularization",
    "num_factors",
    "mlp_layers",
    "target_hr",
    "patience",
)


def kept_epoch(epochs: list[Mapping[str, Any]], patience: int | None) -> int:
    """The epoch whose weights a finished run kept, from its history rows (``epoch``, HR@10).

    The trainer's rule (``trainer._Trainer._run``): with patience the best HR@10 (the first of
    equals), else the last.
    """
    if patience is not None:
        return max(epochs, key=lambda e: e["hr_at_10"])["epoch"]
    return epochs[-1]["epoch"]


def is_test_refit_data(meta: Any) -> bool:
    """Whether ``meta`` is a test refit's dataset: prepared with ``--no-validation`` (not a refit).

    Its training rows are every interaction before each user's test item, the validation item
    included, and its test split is the evaluated dataset's, record for record (the test
    candidates exclude everything before the test item either way).
    """
    return not meta.refit and not meta.has_validation


def refit_model(refit_of: str, data_dir: str, meta: Any, given: Mapping[str, Any]) -> NeuMFConfig:
    """The evaluated run's hyperparameters, for the epochs it kept, to train again.

    On a refit dataset (``prepare-data --refit``: the model to serve) or a test refit's
    (``--no-validation``, ``is_test_refit_data``: the model that knows every interaction before
    the test item, whose test score estimates the served model's). The model ``refit_of`` holds
    decides everything the gate's evidence is about: its shape, optimizer and batch from its
    ``model_config.json``, and its epochs from its history (the epoch it kept). Nothing is
    evaluated during a refit, so nothing stops it early.

    Raises:
        ValueError: ``data_dir`` is neither kind, or not one of the evaluated run's users and
            items; a hyperparameter option was given too (naming it); ``refit_of`` never
            finished an epoch; for a test refit, ``refit_of`` chose its epoch on the test split
            (or does not say where it chose).
        FileNotFoundError: ``refit_of`` is no training output folder.
    """
    from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION
    from training_core.training.model_dir import (
        history_files,
        read_model_config,
        recorded_selection_split,
        recorded_vocab_digest,
        vocab_digest,
    )

    taken = [k for k in REFIT_TAKES if given.get(k, DEFAULTS[k]) not in (None, DEFAULTS[k])]
    if taken:
        raise ValueError(
            f"--refit-of takes the configuration of {refit_of}; leave out "
            + ", ".join(_OPTION_RULES[k][0] if k in _OPTION_RULES else f"--{k}" for k in taken)
        )
    test_refit = is_test_refit_data(meta)
    if not meta.refit and not test_refit:
        raise ValueError(
            f"--refit-of needs a refit dataset, and {data_dir} is not one (it holds a validation "
            "split): prepare the same raw data with the same options and --refit (the model to "
            "serve) or --no-validation (a test refit, scored on the test split)"
        )
    evaluated, num_users, num_items = read_model_config(refit_of)
    chosen_on = recorded_selection_split(refit_of)
    if test_refit and chosen_on != SPLIT_VALIDATION:
        raise ValueError(
            f"a test refit is scored on the test split, so the epochs it trains must have been "
            f"chosen on a validation split; {refit_of} "
            + (
                "chose them on the test split (it was trained on data prepared with "
                "--no-validation)"
                if chosen_on == SPLIT_TEST
                else "does not record where it chose them (trained before this was recorded)"
            )
            + ": train it on data prepared without --no-validation, then refit"
        )
    if (num_users, num_items) != (meta.num_users, meta.num_items):
        raise ValueError(
            f"{data_dir} holds {meta.num_users} users and {meta.num_items} items, but {refit_of} "
            f"was trained on {num_users} users and {num_items} items: prepare the refit from the "
            "evaluated run's raw data with its options, adding --refit"
        )
    recorded = recorded_vocab_digest(refit_of)
    if recorded is not None and recorded != vocab_digest(data_dir, meta):
        raise ValueError(
            f"{data_dir} holds other users or items than {refit_of} was trained on (their "
            "vocabularies differ): prepare the refit from the evaluated run's raw data with its "
            "options, adding --refit"
        )
    found = history_files(refit_of)
    epochs = []
    if found:
        with open(found[max(found)]) as f:
            epochs = json.load(f)["epochs"]
    if not epochs:
        raise ValueError(f"{refit_of} finished no epoch: train it (and evaluate it) first")
    return dataclasses.replace(
        evaluated,
        epochs=kept_epoch(epochs, evaluated.patience),
        hr_threshold=None,
        patience=None,
    )


def from_parameters(data_dir: str, model_dir: str, parameters: Mapping[str, Any]) -> TrainConfig:
    """``config_for`` for a component's parameters (its ``locals()``); others are skipped.

    In KFP parameters "not set" is the zero value (``training_core.common.not_set``): ``epochs`` 0
    is the preset's, ``target_hr`` 0 the preset's target (a negative one never stops early).
    ``tests/test_config_flow.py`` holds every parameter of the component to an option (same
    default) or to the list of those that are not options.
    """
    return config_for(data_dir, model_dir, **not_set.from_kfp(parameters, DEFAULTS))


def reused_negatives_consequence(prepared: int) -> str:
    """What training past ``prepared`` epochs of data does (the trainer's and submit's warning).

    Epochs past the prepared ones wrap (``DatasetMetadata.train_file_paths``).
    """
    return (
        f"epochs past the {prepared} prepared reuse the same negatives in the same order, which "
        "overfits (real MovieLens-100k, run-local's default preset: HR@10 0.16 with 1 prepared "
        "epoch against 0.35 with 20)"
    )


def with_training_epochs(config: PrepareConfig) -> PrepareConfig:
    """``config`` told the epochs its training run trains, for ``num_epochs`` not set.

    Where training and data meet (``ncf-pipelines prepare-data``, the ``prepare_data``
    component): data prep names the run (``train_preset``, ``train_epochs``) but does not know
    the presets, so it is handed ``presets.training_epochs`` and asks it once the data's training
    positives are counted: one epoch of fresh negatives for each epoch trained.

    Raises:
        ValueError: ``train_preset`` is not a preset, naming ``--train-preset``.
    """
    if config.train_preset not in PRESET_NAMES:
        raise ValueError(
            f"--train-preset must be a training preset: one of {', '.join(PRESET_NAMES)}, "
            f"got {config.train_preset!r}"
        )
    return dataclasses.replace(config, epochs_for=training_epochs)
