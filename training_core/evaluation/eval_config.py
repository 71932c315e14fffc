"""The options of evaluation: their one home (no TensorFlow import).

``EvalOptions`` owns each option's default (what ``ncf-pipelines evaluate`` and the
``evaluate_model`` KFP component offer); ``eval_options`` is the one way options become
``EvalOptions``, checked first with a message naming the option. "Not set" is ``None``: the
option's default. ``CURVE_FULL_CATALOG_USERS`` is the smaller cap of the training loop's
per-epoch full-catalog curve.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from training_core.common import not_set


@dataclasses.dataclass(frozen=True)
class EvalOptions:
    """What a user sets for an evaluation; each field's default is the option's default.

    Attributes:
        full_catalog_users: users ranked against the full catalog, a fixed-seed sample when
            there are more (the result says how many and whether it was capped); 0: every user.
            It bounds the cost, users x items scores (see docs/training.md, "Evaluation").

    Each field is also an option of ``ncf-pipelines evaluate``, its help (``{default}``: the
    default) in its metadata (``pipelines/commands/config_options.py``).
    """

    full_catalog_users: int = dataclasses.field(
        default=10_000,
        metadata={
            "help": "users to rank against the full catalog, a fixed-seed sample (default "
            "{default}; 0: every user)"
        },
    )
    # EASE's L2, fixed instead of chosen on the validation split: for data without one (a test
    # refit's, docs/model-quality.md), the lambda the evaluated run's validation chose.
    ease_lambda: float | None = dataclasses.field(
        default=None,
        metadata={
            "help": "EASE's L2 lambda, instead of the one the validation split chooses (for "
            "data without a validation split, such as a test refit's: give the lambda the "
            "evaluated run's evaluation chose; default: chosen on the validation split, else "
            "the first of training_core.evaluation.baselines.EASE_LAMBDAS)"
        },
    )

    def __post_init__(self) -> None:
        check_options(**dataclasses.asdict(self))


OPTIONS = tuple(f.name for f in dataclasses.fields(EvalOptions))
DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(EvalOptions)}

# Users the training loop ranks against the full catalog after every epoch (the curve; a
# fixed-seed sample, the same users every epoch), fewer than ``evaluate``'s: on a CPU a full
# catalog pass over 10,000 users costs more than a training epoch of ml-1m (docs/training.md).
CURVE_FULL_CATALOG_USERS = 1_000

# What each option accepts: (the option that sets it, the rule, its check).
_OPTION_RULES: dict[str, tuple[str, str, Any]] = {
    "full_catalog_users": (
        "--full-catalog-users",
        "must be >= 0 (0: every user)",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    ),
    "ease_lambda": (
        "--ease-lambda",
        "must be > 0",
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v > 0,
    ),
}


def check_options(**values: Any) -> None:
    """Rejects option values an evaluation cannot use; ``None`` (the default) is not checked.

    Raises:
        ValueError: naming every bad value, e.g. ``--full-catalog-users must be >= 0 (0: every
            user), got -1``.
    """
    problems = []
    for field, value in values.items():
        option, rule, ok = _OPTION_RULES[field]
        if value is not None and not ok(value):
            problems.append(f"{option} {rule}, got {value!r}")
    if problems:
        raise ValueError("; ".join(problems))


def eval_options(**given: Any) -> EvalOptions:
    """The ``EvalOptions`` for these options (``EvalOptions`` fields; ``None``: the default).

    Raises:
        TypeError: a name that is not an option (a caller out of step with ``EvalOptions``).
        ValueError: a value an evaluation cannot use, naming the option and the value.
    """
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise TypeError(f"not evaluation options: {', '.join(unknown)}; the options are {OPTIONS}")
    values = {k: v for k, v in given.items() if v is not None}
    check_options(**values)
    return EvalOptions(**values)


def from_parameters(parameters: Mapping[str, Any]) -> EvalOptions:
    """``eval_options`` for a component's parameters (its ``locals()``); others are skipped.

    ``tests/test_config_flow.py`` holds every parameter of ``evaluate_model`` to an option (same
    default) or to the list of those that are not options.
    """
    return eval_options(**not_set.from_kfp(parameters, DEFAULTS))
