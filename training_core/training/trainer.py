"""The trainer: epochs of compiled steps, checkpoints, preemption and early stop, for any evaluator.

``train(config, strategy, evaluator)`` restores the latest checkpoint in ``model_dir`` if there is
one, trains epoch by epoch with ``steps_per_loop`` steps per host call inside one ``tf.function``,
has the evaluator score HR@10/NDCG@10 after every epoch, checkpoints every epoch and every
``checkpoint_every_steps`` steps, and stops early once HR@10 reaches the preset's threshold. The
data position is the global step: epoch ``step // steps_per_epoch``, and the epoch's dataset skips
the steps already done, so a run killed at any point and restarted ends with the same step count
and result.

The trainer imports nothing of ``training_core.evaluation``: it is handed an
``EvaluatorFactory`` (``loop.Evaluation`` is the one every run uses), builds the evaluator of the
model it made, and asks it for one split's numbers (``Evaluator``).

Every epoch is measured on the dataset's selection split (``DatasetMetadata.selection_split``):
the validation split where the dataset has one, else the test split. Those numbers make every
choice: the best epoch, patience, the target, and what ``on_epoch`` sees (tuning). The test split
is scored once, after the loop, on the weights the model ends with (``TrainResult.test``); a
dataset without a validation split has its test numbers from the kept epoch, not scored twice.
A rerun of a finished run scores it again (the same weights, the same numbers).

A refit dataset (``DatasetMetadata.refit``, docs/training.md "Refit") trained on its held-out
items, so nothing is measured or chosen on them: no per-epoch evaluation, no target, no
patience, no kept best epoch and no test result; the run trains exactly ``model.epochs`` epochs
(``--refit-of`` sets them to the evaluated run's) and resumes as any other. A test refit
(``--refit-of`` on a dataset prepared with ``--no-validation``, ``train_config.is_test_refit_data``)
trains the same way on every interaction before each user's test item and is scored once on the
test split at the end (``TrainResult.test``): it chooses nothing, so it measures no epoch.

A warm start (``TrainConfig.warm_start_from``, ``warm_start``) fills the freshly built model
with the champion's weights, rows matched by raw id, before anything is restored or trained.

A preset with ``patience`` also stops once that many epochs in a row bring no better HR@10, and
the model it leaves is the best epoch's: each new best epoch's weights are saved (``best_dir``)
before its checkpoint, and at the end they are read back and checkpointed as the final step, so a
kill anywhere in between resumes to the same model.

The compiled step is built in ``compiled_step``, the records in ``results``, and every path and
file of the model folder (``model_config.json`` included) in ``model_dir``. Over 500 lines: one
class, the run's state, whose checkpoint, resume and early-stop steps read each other's fields.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from typing import Protocol

import tensorflow as tf

from training_core.common import atomic_writes, console, faults, folder_lock
from training_core.data.metadata import SPLIT_TEST, DatasetMetadata, read_metadata
from training_core.training import input_pipeline, warm_start
from training_core.training.compiled_step import make_train_loop
from training_core.training.model import NeuMF, NeuMFConfig
from training_core.training.model_dir import (
    best_dir,
    check_model_folder,
    checkpoint_dir,
    history_files,
    history_path,
    summaries_dir,
    worker_scratch_dir,
    write_model_config,
)
from training_core.training.optim import Adam, DynamicLossScale
from training_core.training.results import (
    EpochResult,
    SplitScores,
    TestResult,
    TrainResult,
    best_epoch,
    stop_reason,
)
from training_core.training.strategy import is_multi_worker_or_tpu
from training_core.training.train_config import TrainConfig, reused_negatives_consequence

log = logging.getLogger(__name__)

DENSE_TABLE_LIMIT = 1 << 22  # Embedding elements (both tables) up to which auto picks dense.
# The held-out metrics TensorBoard and the curve get, per epoch (and the test split's once).
_CURVE_METRICS = ("hr_at_10", "ndcg_at_10", "full_catalog_hr_at_10", "full_catalog_ndcg_at_10")


class Evaluator(Protocol):
    """What the trainer measures with: a held-out split's numbers for the current weights."""

    def __call__(self, split: str) -> SplitScores:
        """Scores ``split`` (``test``, or ``validation`` where the dataset has one)."""
        ...


class EvaluatorFactory(Protocol):
    """Builds the ``Evaluator`` of the model a trainer made (under ``strategy``'s scope)."""

    def __call__(
        self,
        model: NeuMF,
        strategy: tf.distribute.Strategy,
        meta: DatasetMetadata,
        data_dir: str,
        dtype: tf.DType,
    ) -> Evaluator:
        """The evaluator of ``model``, trained on ``meta``'s data in ``data_dir``."""
        ...


class NonFiniteLossError(RuntimeError):
    """The loss (or the weights) became NaN or infinite."""


def compute_dtype(precision: str, strategy: tf.distribute.Strategy) -> tf.DType:
    """The compute dtype: under ``auto``, bfloat16 on TPU, float16 on GPUs, float32 on CPU.

    float16 trains with dynamic loss scaling, on one GPU or several (mirrored replicas agree on
    each step's overflow check: all of them skip it or all apply it).
    """
    if precision != "auto":
        return tf.as_dtype(precision)
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return tf.bfloat16
    if _uses_gpu(strategy):
        return tf.float16
    return tf.float32


def _uses_gpu(strategy: tf.distribute.Strategy) -> bool:
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # The default strategy: wherever TensorFlow places ops.
        return bool(tf.config.list_logical_devices("GPU"))
    return any("GPU" in d.upper() for d in devices)


def _on_accelerator(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, tf.distribute.TPUStrategy) or _uses_gpu(strategy)


def reused_negatives_warning(epochs: int, prepared: int, data_dir: str) -> str | None:
    """Warns (and returns the message) when training runs more epochs than were prepared."""
    if epochs <= prepared:
        return None
    message = (
        f"training runs {epochs} epochs but {data_dir} holds {prepared} prepared epoch(s) of "
        f"negatives: {reused_negatives_consequence(prepared)}; prepare the data again without "
        f"--num-epochs (it then prepares as many as training runs; the pipeline's data_epochs "
        f"0) or with --num-epochs {epochs}, or train fewer epochs"
    )
    log.warning(message)
    return message


def _is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    cluster = resolver.cluster_spec().as_dict()
    if not cluster:  # No TF_CONFIG: one worker in local mode (task type and id are None).
        return True
    if "chief" in cluster:
        return task_type == "chief"
    return task_type in (None, "worker") and task_id == 0


def _worker_tag(strategy) -> str:
    resolver = strategy.cluster_resolver
    return f"{resolver.task_type}_{resolver.task_id}"


def build_model(config: NeuMFConfig, meta: DatasetMetadata, seed: int) -> NeuMF:
    """The model for a dataset (create it inside ``strategy.scope()``)."""
    return NeuMF(config, meta.num_users, meta.num_items, seed=seed)


def _dense_gradients(
    config: TrainConfig, meta: DatasetMetadata, strategy: tf.distribute.Strategy
) -> bool:
    """Whether to apply embedding gradients densely: ``config.dense_gradients``, else by size."""
    if config.dense_gradients is not None:
        return config.dense_gradients
    # Dense (exact Adam, fused kernel) is fastest on accelerators and for small tables;
    # on CPU, tables much larger than a batch are cheaper to update row by row.
    table = (meta.num_users + meta.num_items) * config.model.embedding_dim
    return _on_accelerator(strategy) or table <= DENSE_TABLE_LIMIT


# Room a run needs before its first epoch, in checkpoints (a new one beside the last).
CHECKPOINT_ROOM_FACTOR = 2
CHECKPOINT_KEPT = "the last complete checkpoint is kept, and a rerun resumes from it"


class _Trainer:
    """Holds the state of one run; ``train`` below is the entry point."""

    def __init__(
        self, config: TrainConfig, strategy: tf.distribute.Strategy, evaluator: EvaluatorFactory
    ):
        self.config = config
        self.strategy = strategy
        self.meta = read_metadata(config.data_dir)
        # A test refit measures no epoch (it chooses nothing) and scores the test split once.
        self.test_refit = config.refit_of is not None and self.meta.held_out_unseen
        # Nothing to measure on (see the docstring), or nothing to choose.
        self.refit = not self.meta.held_out_unseen or self.test_refit
        self.split = "" if self.refit else self.meta.selection_split  # What epochs measure.
        self.layout = input_pipeline.train_layout(
            self.meta, config.model.batch_size, strategy.num_replicas_in_sync
        )
        input_pipeline.check_eval_layout(self.meta, strategy.num_replicas_in_sync)
        input_pipeline.check_files(self.meta, config.data_dir, config.model.epochs)
        self.dtype = compute_dtype(config.precision, strategy)
        self.dense = _dense_gradients(config, self.meta, strategy)
        on_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
        self.jit = bool(config.jit_compile and self.dense and not on_tpu)
        self.is_chief = _is_chief(strategy)
        self.history: list[EpochResult] = []
        self._partial = (0.0, 0, 0.0)  # The running epoch's (loss sum, steps, seconds) so far.
        os.makedirs(config.model_dir, exist_ok=True)

        self._build_model_and_optimizer()
        self._checkpointing()
        self.preemption = self._preemption_handler()
        self.train_loop = make_train_loop(
            strategy,
            self.model,
            self.variables,
            self.optimizer,
            self.loss_scale,
            self.step,
            global_batch=self.layout.global_batch,
            dtype=self.dtype,
            dense=self.dense,
            jit=self.jit,
        )
        self.evaluate: Evaluator | None = None  # Built only where something is measured.
        if not self.refit or self.test_refit:
            self.evaluate = evaluator(self.model, strategy, self.meta, config.data_dir, self.dtype)
        self.writer = self._summary_writer()

    # -- construction -------------------------------------------------------------------------

    def _build_model_and_optimizer(self) -> None:
        """Creates the model and the training state under the strategy.

        Sets ``model``, ``variables`` (the trained ones, in the optimizer's order), ``optimizer``,
        ``loss_scale`` (float16 only, else ``None``) and the global ``step``.
        """
        m = self.config.model
        champion = None
        if self.config.warm_start_from is not None:  # Read before the strategy places anything.
            champion = warm_start.read_champion(self.config.warm_start_from)
        self.warm_started: warm_start.WarmStart | None = None
        with self.strategy.scope():
            self.model = build_model(m, self.meta, self.config.seed)
            if champion is not None:  # A resumed run's checkpoint then replaces these weights.
                self.warm_started = warm_start.apply(
                    champion, self.model, self.meta, self.config.data_dir
                )
                log.info("warm start: %s", self.warm_started.record())
            self.variables = self.model.trained_variables()
            self.optimizer = Adam(self.variables, m.learning_rate, m.beta1, m.beta2, m.epsilon)
            self.loss_scale = DynamicLossScale() if self.dtype == tf.float16 else None
            self.step = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )

    def _checkpointing(self) -> None:
        """Creates ``checkpoint``, its ``manager`` over ``ckpt_dir``, and ``write_manager``.

        ``write_manager`` is what this worker saves through: the manager on the chief, a scratch
        folder's on the other workers (they take part in saving but must not write the model's).
        """
        parts = dict(model=self.model, optimizer=self.optimizer, step=self.step)
        if self.loss_scale is not None:
            parts["loss_scale"] = self.loss_scale
        self.checkpoint = tf.train.Checkpoint(**parts)
        self.ckpt_dir = checkpoint_dir(self.config.model_dir)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.ckpt_dir, max_to_keep=self.config.keep_checkpoints
        )
        if self.is_chief:
            self.write_manager = self.manager
        else:
            scratch = worker_scratch_dir(self.config.model_dir, _worker_tag(self.strategy))
            self.write_manager = tf.train.CheckpointManager(self.checkpoint, scratch, max_to_keep=1)
        # The best epoch's model weights (patience only), numbered by epoch; saved as above.
        self.best_checkpoint = tf.train.Checkpoint(model=self.model)
        folder = best_dir(self.config.model_dir) if self.is_chief else scratch
        self.best_manager = tf.train.CheckpointManager(self.best_checkpoint, folder, max_to_keep=1)

    def _preemption_handler(self) -> tf.distribute.experimental.PreemptionCheckpointHandler | None:
        """Multi-worker and TPU runs: the handler that checkpoints on a preemption notice."""
        if not is_multi_worker_or_tpu(self.strategy):
            return None
        # Saves a checkpoint and exits cleanly when the platform announces a preemption;
        # it also restores the latest checkpoint on creation. It saves through _save, as every
        # other checkpoint here: named by step, with the history and the running epoch's sums
        # (its own save would name it by save count, without them).
        return tf.distribute.experimental.PreemptionCheckpointHandler(
            self.strategy.cluster_resolver,
            self.manager,
            termination_config=tf.distribute.experimental.TerminationConfig(
                save_fn=lambda: self._save(self._partial)
            ),
        )

    def _summary_writer(self) -> tf.summary.SummaryWriter:
        """TensorBoard's writer on the chief (``summaries_dir``, else the folder's); no-op else."""
        if not self.is_chief:
            return tf.summary.create_noop_writer()
        cfg = self.config
        return tf.summary.create_file_writer(cfg.summaries_dir or summaries_dir(cfg.model_dir))

    def _current_step(self) -> int:
        return int(self.step.numpy())

    @property
    def _summary_group(self) -> str:
        """TensorBoard's group of the per-epoch metrics: the selection split's name.

        ``eval`` for the test split, as it was named before validation splits existed.
        """
        return "eval" if self.split == SPLIT_TEST else self.split

    # -- checkpoints and history --------------------------------------------------------------

    def _history_path(self, step: int) -> str:
        return history_path(self.config.model_dir, step)

    def _save(self, partial: tuple[float, int, float] = (0.0, 0, 0.0)) -> None:
        """Checkpoints at the current step; ``partial`` is the running epoch's (loss, steps, s)."""
        weights_ok = all(bool(tf.reduce_all(tf.math.is_finite(v))) for v in self.variables)
        if not weights_ok:
            raise NonFiniteLossError(
                f"the weights became NaN or infinite by step {self._current_step()}; the last good "
                f"checkpoint in {self.ckpt_dir} was kept. Lower the learning rate or use float32."
            )
        step = self._current_step()
        if self.is_chief:
            os.makedirs(self.ckpt_dir, exist_ok=True)
            history = {"epochs": [dataclasses.asdict(e) for e in self.history], "partial": partial}
            # Published whole: a kill mid-write must not leave JSON the resume cannot read.
            atomic_writes.write_text_atomic(self._history_path(step), json.dumps(history))
        self.write_manager.save(checkpoint_number=step)
        if not self.is_chief:
            shutil.rmtree(self.write_manager.directory, ignore_errors=True)
        else:
            kept = {int(p.rsplit("-", 1)[1]) for p in self.manager.checkpoints}
            for saved, path in history_files(self.config.model_dir).items():
                if saved not in kept:
                    os.remove(path)

    def _restore(self) -> tuple[float, int, float]:
        """Restores the latest checkpoint and history; returns the running epoch's partial sums."""
        latest = self.manager.latest_checkpoint
        if latest is None:
            return (0.0, 0, 0.0)
        self.checkpoint.restore(latest).assert_existing_objects_matched()
        step = self._current_step()
        log.info("resumed from %s at step %d", latest, step)
        path = self._history_path(step)
        if not os.path.exists(path):
            log.warning("%s is missing: per-epoch history before step %d is lost", path, step)
            return (0.0, 0, 0.0)
        with open(path) as f:
            raw = json.load(f)
        self.history = [EpochResult(**e) for e in raw["epochs"]]
        loss, steps, seconds = raw["partial"]
        return (float(loss), int(steps), float(seconds))

    def _save_best(self, epoch: int) -> None:
        """Keeps the model's weights as epoch ``epoch``'s, the best so far (every worker saves)."""
        self.best_manager.save(checkpoint_number=epoch)
        if not self.is_chief:
            shutil.rmtree(self.best_manager.directory, ignore_errors=True)

    def _keep_best(self, best: EpochResult) -> int | None:
        """Puts epoch ``best``'s saved weights back and checkpoints them at the final step.

        Returns the epoch kept, or ``None`` (its weights are missing: the last epoch's stay, with
        a warning). Every worker reads the chief's copy (the model folder is shared storage).
        """
        folder = best_dir(self.config.model_dir)
        path = tf.train.latest_checkpoint(folder)
        if path is None or not path.endswith(f"-{best.epoch}"):
            log.warning(
                "the best epoch's (%d) weights are not in %s (found %s): the model keeps the "
                "last epoch's weights",
                best.epoch,
                folder,
                path,
            )
            return None
        self.best_checkpoint.read(path).assert_existing_objects_matched()
        self._save()
        log.info(
            "the model holds epoch %d's weights, the best (%s HR@10 %.4f)",
            best.epoch,
            self.split,
            best.hr_at_10,
        )
        return best.epoch

    def _score_test(self, final: EpochResult | None) -> TestResult | None:
        """The test split's result for the model's current weights, ``final`` the epoch they are.

        Scored here only where the epochs were measured on another split; else ``final``'s own.
        """
        if final is None or (self.refit and not self.test_refit):
            return None
        if self.split == SPLIT_TEST:
            return TestResult(
                final.hr_at_10,
                final.ndcg_at_10,
                final.eval_users,
                final.full_catalog_hr_at_10,
                final.full_catalog_ndcg_at_10,
                final.full_catalog_users,
            )
        with console.progress("test split evaluation"):
            scores = self.evaluate(SPLIT_TEST)
        log.info(
            "test split, scored once on the "
            + ("test refit's" if self.test_refit else "model's")
            + " final weights (epoch %d's): HR@10 %.4f "
            "NDCG@10 %.4f (%d users); full catalog HR@10 %.4f NDCG@10 %.4f over %s",
            final.epoch,
            scores.hr_at_10,
            scores.ndcg_at_10,
            scores.users,
            scores.full_catalog_hr_at_10,
            scores.full_catalog_ndcg_at_10,
            scores.full_catalog_users_text,
        )
        test = TestResult(
            scores.hr_at_10,
            scores.ndcg_at_10,
            scores.users,
            scores.full_catalog_hr_at_10,
            scores.full_catalog_ndcg_at_10,
            scores.full_catalog_users,
        )
        with self.writer.as_default():
            for name in _CURVE_METRICS:
                tf.summary.scalar(f"{SPLIT_TEST}/{name}", getattr(test, name), step=final.step)
        self.writer.flush()
        return test

    # -- the run ------------------------------------------------------------------------------

    def checkpoint_bytes(self) -> int:
        """One checkpoint's size: the model's variables and the optimizer's two moments."""
        tensors = [*self.model.variables, *self.optimizer.m, *self.optimizer.v]
        return sum(v.shape.num_elements() * v.dtype.size for v in tensors)

    def run(self, on_epoch: Callable[[EpochResult], bool] | None = None) -> TrainResult:
        # Room for a new checkpoint beside the last one (each save writes a new one, then drops
        # the oldest); checked before the first epoch rather than found at its end.
        one = self.checkpoint_bytes()
        need = CHECKPOINT_ROOM_FACTOR * one
        if self.is_chief:
            faults.check_room(
                self.config.model_dir,
                need,
                "training checkpoints",
                "--model-dir",
                f"{CHECKPOINT_ROOM_FACTOR} x a checkpoint of {faults.size_text(one)}: the "
                "weights and Adam's moments",
            )
        with faults.writing(
            "a training checkpoint", self.config.model_dir, need, "--model-dir", CHECKPOINT_KEPT
        ):
            return self._run(on_epoch)

    def _run(self, on_epoch: Callable[[EpochResult], bool] | None) -> TrainResult:
        cfg, layout = self.config, self.layout
        check_model_folder(cfg.model_dir, cfg.model, self.meta)
        partial = self._restore()
        if self.is_chief:  # Only once the folder's checkpoint, if any, was restored into it.
            warm = None if self.warm_started is None else self.warm_started.record()
            write_model_config(cfg.model_dir, cfg.model, self.meta, cfg.data_dir, warm, self.split)
        history = self.history
        spe = layout.steps_per_epoch
        patience = None if self.refit else cfg.model.patience
        stopped = not self.refit and stop_reason(cfg.model, history, self.split) is not None
        if self.refit:
            if on_epoch is not None:
                raise ValueError(
                    f"{cfg.data_dir} is a refit dataset: its held-out items are training data, so "
                    "no epoch is measured for a tuning trial (or any caller) to see"
                )
            log.info(
                "a test refit: %s trains on every interaction before each user's test item, so "
                "no epoch is evaluated and nothing stops it early; training exactly %d epochs, "
                "then scoring the test split once"
                if self.test_refit
                else "a refit: %s trains on every interaction, the held-out ones too, so no epoch "
                "is evaluated and nothing stops it early; training exactly %d epochs",
                cfg.data_dir,
                cfg.model.epochs,
            )
        log.info(
            "training: %d replicas, global batch %d (%d per replica), %d steps per epoch, "
            "%d epochs, compute dtype %s, %s embedding updates; epochs measured on the %s split",
            layout.num_replicas,
            layout.global_batch,
            layout.per_replica_batch,
            spe,
            cfg.model.epochs,
            self.dtype.name,
            "dense" if self.dense else "sparse-row",
            self.split or "no (a refit)",
        )
        reused_negatives_warning(cfg.model.epochs, self.meta.num_epochs, cfg.data_dir)
        with self.writer.as_default():
            while not stopped and self._current_step() < cfg.model.epochs * spe:
                epoch = self._current_step() // spe
                result = self._run_epoch(epoch, self._current_step() % spe, partial)
                partial = (0.0, 0, 0.0)
                history.append(result)
                if patience is not None and best_epoch(history) is result:
                    self._save_best(result.epoch)  # Before the epoch's checkpoint: see above.
                for name in () if self.refit else _CURVE_METRICS:
                    tf.summary.scalar(
                        f"{self._summary_group}/{name}", getattr(result, name), step=result.step
                    )
                self._save()
                if self.refit:
                    log.info("epoch %d done: loss %.4f", epoch + 1, result.loss)
                    continue
                log.info(
                    "epoch %d done: loss %.4f %s HR@10 %.4f NDCG@10 %.4f (%d users)",
                    epoch + 1,
                    result.loss,
                    self.split,
                    result.hr_at_10,
                    result.ndcg_at_10,
                    result.eval_users,
                )
                reason = stop_reason(cfg.model, history, self.split)
                if reason is not None:
                    log.info("%s", reason)
                    stopped = True
                if on_epoch is not None and on_epoch(result) and not stopped:
                    log.info("stopping after epoch %d, as the caller asked", epoch + 1)
                    stopped = True
            self.writer.flush()
        kept = None
        if patience is not None and history and best_epoch(history) is not history[-1]:
            kept = self._keep_best(best_epoch(history))
        result = TrainResult(
            epochs=history,
            global_step=self._current_step(),
            steps_per_epoch=spe,
            stopped_early=stopped,
            num_replicas=layout.num_replicas,
            strategy=type(self.strategy).__name__,
            is_chief=self.is_chief,
            kept_epoch=kept,
            selection_split=self.split,
            refit=self.refit,
        )
        # After the best epoch's weights are back: the test split sees only the final model.
        return dataclasses.replace(result, test=self._score_test(result.final))

    def _steps(
        self,
        iterator,
        epoch: int,
        start: int,
        partial: tuple[float, int, float],
        bar: console.Progress,
    ) -> tuple[float, int, float]:
        """Trains the rest of one epoch from step ``start``; returns (loss sum, steps, seconds)."""
        cfg, layout = self.config, self.layout
        spe = layout.steps_per_epoch
        done = start
        loss_sum, trained, seconds = partial
        every = cfg.checkpoint_every_steps
        while done < spe:
            self._partial = (loss_sum, trained, seconds)  # What a preemption save records.
            n = min(cfg.steps_per_loop, spe - done)
            if every:
                n = min(n, every - self._current_step() % every)
            t0 = time.perf_counter()
            if self.preemption is not None:
                total = self.preemption.run(self.train_loop, iterator, tf.constant(n))
            else:
                total = self.train_loop(iterator, tf.constant(n))
            total = float(total)
            dt = time.perf_counter() - t0
            if not math.isfinite(total):
                raise NonFiniteLossError(
                    f"the training loss became {total} in epoch {epoch + 1} before step "
                    f"{self._current_step()}; stopped, and the last good checkpoint in "
                    f"{self.ckpt_dir} was kept. Lower the learning rate, or train in float32."
                )
            done += n
            trained += n
            loss_sum += total
            seconds += dt
            rate = n * layout.global_batch / dt
            step = self._current_step()
            tf.summary.scalar("train/loss", total / n, step=step)
            tf.summary.scalar("train/examples_per_sec", rate, step=step)
            bar.update(done, f"loss {total / n:.4f}, {rate:,.0f} examples/s")
            log.log(
                bar.level,
                "epoch %d step %d/%d (global %d): loss %.4f, %.0f examples/s",
                epoch + 1,
                done,
                spe,
                step,
                total / n,
                rate,
            )
            if every and step % every == 0 and done < spe:
                self._save((loss_sum, trained, seconds))
        return loss_sum, trained, seconds

    def _run_epoch(self, epoch: int, start: int, partial: tuple[float, int, float]) -> EpochResult:
        cfg, layout = self.config, self.layout
        dist = input_pipeline.distribute(
            self.strategy,
            input_pipeline.train_dataset_fn(self.meta, cfg.data_dir, layout, epoch, start),
        )
        files = self.meta.train_file_paths(cfg.data_dir, epoch)
        what = f"epoch {epoch + 1}/{cfg.model.epochs}"
        with (
            input_pipeline.naming_damaged_files(files),
            console.progress(what, layout.steps_per_epoch, "steps") as bar,
        ):
            bar.update(start)
            loss_sum, trained, seconds = self._steps(iter(dist), epoch, start, partial, bar)
        loss = loss_sum / trained if trained else float("nan")
        rate = trained * layout.global_batch / seconds if seconds else 0.0
        if self.refit:  # Nothing held out to measure on.
            return EpochResult(epoch + 1, self._current_step(), loss, 0.0, 0.0, rate, 0)
        with console.progress(f"{what} evaluation ({self.split} split)"):
            scores = self.evaluate(self.split)
        log.info(
            "epoch %d full catalog: %s HR@10 %.4f NDCG@10 %.4f over %s (%.1fs)",
            epoch + 1,
            self.split,
            scores.full_catalog_hr_at_10,
            scores.full_catalog_ndcg_at_10,
            scores.full_catalog_users_text,
            scores.full_catalog_seconds,
        )
        return EpochResult(
            epoch=epoch + 1,
            step=self._current_step(),
            loss=loss,
            hr_at_10=scores.hr_at_10,
            ndcg_at_10=scores.ndcg_at_10,
            examples_per_sec=rate,
            eval_users=scores.users,
            full_catalog_hr_at_10=scores.full_catalog_hr_at_10,
            full_catalog_ndcg_at_10=scores.full_catalog_ndcg_at_10,
            full_catalog_users=scores.full_catalog_users,
        )


def train(
    config: TrainConfig,
    strategy: tf.distribute.Strategy,
    evaluator: EvaluatorFactory,
    on_epoch: Callable[[EpochResult], bool] | None = None,
) -> TrainResult:
    """Trains (or resumes), scoring each epoch with ``evaluator``; returns the per-epoch history.

    ``on_epoch`` is called with each epoch's result once its checkpoint is saved (on every
    worker); returning True stops training there (a tuning trial pruned, say), as the target
    HR@10 does.

    Raises:
        NonFiniteLossError: the loss became NaN/Inf (the last good checkpoint is kept).
        folder_lock.FolderBusyError: another train run is writing to ``model_dir``.
        ValueError: the data, the batch and the strategy do not fit together.
    """
    if not _is_chief(strategy):  # The chief holds the folder for the whole cluster.
        return _Trainer(config, strategy, evaluator).run(on_epoch)
    with folder_lock.hold(config.model_dir, "train", wait=False):
        return _Trainer(config, strategy, evaluator).run(on_epoch)
