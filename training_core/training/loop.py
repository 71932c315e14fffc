"""A training run with its per-epoch evaluation: the trainer handed evaluation's scorers.

``train(config, strategy)`` is what every caller runs (the CLI's ``train``, tuning, the training
components): ``trainer.train`` with ``Evaluation``, sampled HR@10/NDCG@10 (``evaluate.run_eval``)
and the full catalog for a fixed sample of users (``full_catalog.FullCatalogEval``) on the split
the trainer asks for. This is the one module of ``training_core.training`` that imports
``training_core.evaluation`` (the trainer takes any ``trainer.EvaluatorFactory``): evaluation
builds on training's model, and training reaches evaluation only here.

``train_step`` and ``step_outputs`` are the training components' adapters (``train_model``,
``refit_model``): options to a config and a strategy, a run, and what the step publishes. They
use nothing of this module but ``train``, so they move out of it as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from training_core.common import faults
from training_core.data.metadata import DatasetMetadata
from training_core.evaluation.eval_config import CURVE_FULL_CATALOG_USERS
from training_core.evaluation.evaluate import make_eval_fn, run_eval
from training_core.evaluation.full_catalog import FullCatalogEval
from training_core.training import input_pipeline, trainer
from training_core.training.model import NeuMF
from training_core.training.results import EpochResult, SplitScores, TrainResult, summary_metrics
from training_core.training.train_config import TrainConfig


class Evaluation:
    """The evaluator of a model being trained (a ``trainer.EvaluatorFactory``): build once.

    The eval step is compiled once; the full-catalog ranking reads its users on its first call
    per split and the training positives once.
    """

    def __init__(
        self,
        model: NeuMF,
        strategy: tf.distribute.Strategy,
        meta: DatasetMetadata,
        data_dir: str,
        dtype: tf.DType,
    ):
        self.model = model
        self.strategy = strategy
        self.meta = meta
        self.data_dir = data_dir
        self.dtype = dtype
        k = input_pipeline.eval_items_per_user(meta)
        self.eval_fn = make_eval_fn(model, strategy, k, dtype)
        self._full: FullCatalogEval | None = None

    def _full_catalog(self, split: str) -> FullCatalogEval:
        if self._full is None:  # In float32 (FullCatalogEval's note on ties).
            self._full = FullCatalogEval(
                self.model,
                self.strategy,
                self.meta,
                self.data_dir,
                CURVE_FULL_CATALOG_USERS,
                split=split,
            )
        return self._full if self._full.split == split else self._full.for_split(split)

    def __call__(self, split: str) -> SplitScores:
        """``split``'s sampled and full-catalog numbers for the model's current weights."""
        sampled = run_eval(
            self.model,
            self.strategy,
            self.meta.split(split),
            self.data_dir,
            self.dtype,
            self.eval_fn,
        )
        full = self._full_catalog(split)()
        return SplitScores(
            hr_at_10=sampled.hr,
            ndcg_at_10=sampled.ndcg,
            users=sampled.users,
            full_catalog_hr_at_10=full.metrics.hr,
            full_catalog_ndcg_at_10=full.metrics.ndcg,
            full_catalog_users=full.metrics.users,
            full_catalog_users_text=full.users_text,
            full_catalog_seconds=full.seconds,
        )


def train(
    config: TrainConfig,
    strategy: tf.distribute.Strategy,
    on_epoch: Callable[[EpochResult], bool] | None = None,
) -> TrainResult:
    """Trains (or resumes) and evaluates; returns the per-epoch history (``trainer.train``).

    ``on_epoch`` is called with each epoch's result once its checkpoint is saved (on every
    worker); returning True stops training there (a tuning trial pruned, say), as the target
    HR@10 does.
    """
    return trainer.train(config, strategy, Evaluation, on_epoch)


def train_step(
    data_dir: str, model_dir: str, parameters: dict[str, Any]
) -> tuple[TrainConfig, TrainResult]:
    """A training component's run: its parameters (``locals()``) to a config, a strategy, a run.

    ``train_model`` and ``refit_model`` (``refit_of`` set) both call it: the options through
    ``train_config.from_parameters``, the strategy from ``distribution_strategy``,
    ``tpu_address`` and ``expect_accelerator``/``_count``; a missing accelerator is reported in
    one line, a full disk or too little memory in one paragraph.
    """
    from training_core.training import strategy as st
    from training_core.training.train_config import from_parameters

    config = from_parameters(data_dir, model_dir, parameters)
    try:
        strategy = st.build_strategy(
            st.strategy_config(
                name=parameters["distribution_strategy"],
                tpu_address=parameters["tpu_address"],
                expect_accelerator=parameters["expect_accelerator"],
                expect_accelerator_count=parameters["expect_accelerator_count"],
            )
        )
    except st.MissingAccelerator as e:  # One line, no traceback: the machine is the problem.
        raise SystemExit(f"error: {e}") from None
    with faults.reported():
        return config, train(config, strategy)


def step_outputs(
    config: TrainConfig, result: TrainResult
) -> tuple[dict[str, float], str, dict[str, Any]]:
    """What a training component publishes: its metrics, its curve page, the model's metadata.

    The metadata names the preset as it trained (auto's pick for the data; its values are in
    ``model_config.json``; a refit's is its evaluated run's, none by name) and says a refit.
    """
    from training_core.training import curve_page

    facts = {
        "framework": "tensorflow",
        "framework_version": tf.__version__,  # The image's (the tpu image's is newer).
        "preset": config.preset or "",
        "global_step": result.global_step,
        "refit": result.refit,
    }
    return summary_metrics(result), curve_page.result_page(result.to_dict()), facts
