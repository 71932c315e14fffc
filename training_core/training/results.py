"""What a training run records and returns: each epoch's numbers, the run's result, the stop rule.

Plain data, no TensorFlow: the trainer fills these (``trainer``), the model folder's history
JSON holds the epochs, and ``summary_metrics`` is what a training component publishes.
``SplitScores`` is what an evaluator hands the trainer for one split (``trainer.Evaluator``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from training_core.data.metadata import SPLIT_TEST
from training_core.training.presets import NeuMFConfig


@dataclasses.dataclass(frozen=True)
class SplitScores:
    """One held-out split's numbers for the model's current weights, as an evaluator gives them.

    HR@10/NDCG@10 over each user's sampled candidates, and over the full catalog for a fixed
    sample of users (``full_catalog_users_text`` names it for the log, ``full_catalog_seconds``
    is its wall time).
    """

    hr_at_10: float
    ndcg_at_10: float
    users: int
    full_catalog_hr_at_10: float
    full_catalog_ndcg_at_10: float
    full_catalog_users: int
    full_catalog_users_text: str
    full_catalog_seconds: float


@dataclasses.dataclass(frozen=True)
class EpochResult:
    """One epoch's record (also the rows of the metrics JSON).

    The metrics are the selection split's (``TrainResult.selection_split``): validation where
    the dataset has one. A refit's epochs measure nothing: ``eval_users`` 0 and zero metrics.
    """

    epoch: int
    step: int
    loss: float
    hr_at_10: float
    ndcg_at_10: float
    examples_per_sec: float
    eval_users: int
    # Over every item the user did not train on, for a fixed sample of at most
    # CURVE_FULL_CATALOG_USERS users (0 users: a history written before these were recorded).
    full_catalog_hr_at_10: float = 0.0
    full_catalog_ndcg_at_10: float = 0.0
    full_catalog_users: int = 0


@dataclasses.dataclass(frozen=True)
class TestResult:
    """The test split's numbers for the weights a run ended with (the reported result)."""

    hr_at_10: float
    ndcg_at_10: float
    eval_users: int
    full_catalog_hr_at_10: float  # Over the same fixed-seed sample of users as the epochs'.
    full_catalog_ndcg_at_10: float
    full_catalog_users: int


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a run produced.

    ``epochs`` were measured on ``selection_split``; ``test`` is the test split's result for the
    model's final weights (scored after training where the selection split is validation; the
    final epoch's own numbers where it is the test split). ``None`` when no epoch ran.
    ``refit``: trained on a refit dataset, so no epoch was measured, none is ``best`` and
    ``test`` is ``None``; ``selection_split`` is empty.
    """

    epochs: list[EpochResult]
    global_step: int
    steps_per_epoch: int
    stopped_early: bool
    num_replicas: int
    strategy: str
    is_chief: bool = True  # False on the other workers of a multi-worker run: they publish nothing.
    kept_epoch: int | None = None  # The epoch whose weights the model holds, when not the last.
    selection_split: str = SPLIT_TEST
    test: TestResult | None = None
    refit: bool = False

    @property
    def last(self) -> EpochResult | None:
        """The final epoch."""
        return self.epochs[-1] if self.epochs else None

    @property
    def best(self) -> EpochResult | None:
        """The epoch with the highest HR@10 (the first of equals); ``None`` in a refit."""
        return None if self.refit else best_epoch(self.epochs)

    @property
    def final(self) -> EpochResult | None:
        """The epoch whose weights the model holds: the kept (best) one, else the last."""
        if self.kept_epoch is not None:
            return next(e for e in self.epochs if e.epoch == self.kept_epoch)
        return self.last

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: per-epoch records, best, last and run facts."""
        return {
            "epochs": [dataclasses.asdict(e) for e in self.epochs],
            "best": dataclasses.asdict(self.best) if self.best else None,
            "last": dataclasses.asdict(self.last) if self.last else None,
            "global_step": self.global_step,
            "steps_per_epoch": self.steps_per_epoch,
            "stopped_early": self.stopped_early,
            "kept_epoch": self.kept_epoch,
            "selection_split": self.selection_split,
            "test": dataclasses.asdict(self.test) if self.test is not None else None,
            "refit": self.refit,
            "num_replicas": self.num_replicas,
            "strategy": self.strategy,
        }


def best_epoch(history: list[EpochResult]) -> EpochResult | None:
    """The epoch with the highest HR@10; of equals the first (a later tie is no better)."""
    return max(history, key=lambda e: e.hr_at_10) if history else None


def epochs_without_better(history: list[EpochResult]) -> int:
    """Epochs trained since the best one (0: the last epoch is the best)."""
    best = best_epoch(history)
    return history[-1].epoch - best.epoch if best else 0


def stop_reason(
    model: NeuMFConfig, history: list[EpochResult], split: str = SPLIT_TEST
) -> str | None:
    """Why a run with this history stops early (the target reached, or patience), else None.

    The one rule: checked after each epoch, and on a resume against the restored history.
    ``split``: the split the history was measured on, for the message.
    """
    if not history:
        return None
    last, target = history[-1], model.hr_threshold
    if target is not None and last.hr_at_10 >= target:
        return f"{split} HR@10 {last.hr_at_10:.4f} reached the target {target:.4f}: stopping"
    if model.patience is not None and epochs_without_better(history) >= model.patience:
        best = best_epoch(history)
        return (
            f"no better HR@10 than epoch {best.epoch}'s {best.hr_at_10:.4f} for "
            f"{model.patience} epochs on the {split} split: stopping"
        )
    return None


def summary_metrics(result: TrainResult) -> dict[str, float]:
    """A run's headline numbers (of the epoch the model is), as a Metrics artifact records them.

    Measured on a validation split, the epoch's numbers are named ``validation_*`` (the best
    epoch's ``best_validation_hr_at_10``) and the test split's, scored once on the final weights,
    ``test_*``: no key is both. Measured on the test split (a dataset without validation), the
    names are unprefixed, as they always were, and the test numbers are the epoch's own. A
    refit's are ``refit`` 1 and the run's facts only: it measured nothing; a test refit's add
    its ``test_*`` numbers, scored once at the end.
    """
    final = result.final
    if final is None:
        return {"epochs": 0}
    chosen = {
        "hr_at_10": final.hr_at_10,
        "ndcg_at_10": final.ndcg_at_10,
        "full_catalog_hr_at_10": final.full_catalog_hr_at_10,
        "full_catalog_ndcg_at_10": final.full_catalog_ndcg_at_10,
    }
    run = {
        "loss": final.loss,
        "examples_per_sec": final.examples_per_sec,
        "epochs": len(result.epochs),
        "global_step": result.global_step,
    }
    test = dataclasses.asdict(result.test) if result.test else {}
    if result.refit:
        return {"refit": 1, **{f"{SPLIT_TEST}_{k}": test[k] for k in chosen if k in test}, **run}
    if result.selection_split == SPLIT_TEST:
        return {**chosen, **run, "best_hr_at_10": result.best.hr_at_10}
    split = result.selection_split
    return {
        **{f"{split}_{k}": v for k, v in chosen.items()},
        f"best_{split}_hr_at_10": result.best.hr_at_10,
        **{f"{SPLIT_TEST}_{k}": test[k] for k in chosen if k in test},
        **run,
    }
