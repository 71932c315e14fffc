"""The custom training loop: NeuMF on pre-batched records under any ``tf.distribute`` strategy.

``train(config, strategy)`` restores the latest checkpoint in ``model_dir`` if there is one, trains
epoch by epoch with ``steps_per_loop`` steps per host call inside one ``tf.function``, evaluates
HR@10/NDCG@10 after every epoch, checkpoints every epoch and every ``checkpoint_every_steps``
steps, and stops early once HR@10 reaches the preset's threshold. The data position is the global
step: epoch ``step // steps_per_epoch``, and the epoch's dataset skips the steps already done, so a
run killed at any point and restarted ends with the same step count and result.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import math
import os
import shutil
import time
from typing import Any

import tensorflow as tf

from training_core import input_pipeline, metrics, publish
from training_core.data.metadata import DatasetMetadata, read_metadata
from training_core.model import NeuMF, NeuMFConfig
from training_core.optim import Adam, DynamicLossScale
from training_core.strategy import is_multi_worker_or_tpu

log = logging.getLogger(__name__)

MODEL_CONFIG_FILE = "model_config.json"
CHECKPOINT_SUBDIR = "checkpoints"
PRECISIONS = ("auto", "float32", "float16", "bfloat16")
DENSE_TABLE_LIMIT = 1 << 22  # Embedding elements (both tables) up to which auto picks dense.


class NonFiniteLossError(RuntimeError):
    """The loss (or the weights) became NaN or infinite."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs besides the strategy.

    Attributes:
        data_dir: a prepared dataset (``metadata.json``).
        model_dir: checkpoints, ``model_config.json`` and summaries go here.
        model: hyperparameters (a preset, see ``training_core.model.PRESETS``).
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
        early_stop: stop once HR@10 reaches ``model.hr_threshold``.
    """

    data_dir: str
    model_dir: str
    model: NeuMFConfig
    seed: int = 0
    steps_per_loop: int = 200
    checkpoint_every_steps: int = 0
    keep_checkpoints: int = 3
    precision: str = "auto"
    dense_gradients: bool | None = None
    summaries_dir: str | None = None
    early_stop: bool = True
    jit_compile: bool = False

    def __post_init__(self) -> None:
        m = self.model
        check_options(
            epochs=m.epochs,
            batch_size=m.batch_size,
            learning_rate=m.learning_rate,
            hr_threshold=m.hr_threshold,
            steps_per_loop=self.steps_per_loop,
            checkpoint_every_steps=self.checkpoint_every_steps,
            keep_checkpoints=self.keep_checkpoints,
            precision=self.precision,
        )


# What each option of a run accepts, by field: (the option that sets it, the rule, its check).
# TrainConfig, config_for and `ncf-pipelines train` check with it, so a message names the option
# and the value given, whichever way the value came in.
_OPTION_RULES: dict[str, tuple[str, str, Any]] = {
    "epochs": ("--epochs", "must be >= 1", lambda v: v >= 1),
    "batch_size": (
        "--batch-size",
        "must be >= 1 (leave it out for the data's pre-batch size)",
        lambda v: v >= 1,
    ),
    "learning_rate": ("--learning-rate", "must be > 0", lambda v: math.isfinite(v) and v > 0),
    "hr_threshold": (
        "--target-hr",
        "must be at most 1, an HR@10 (0 or less: never stop early)",
        lambda v: not math.isnan(v) and v <= 1,
    ),
    "steps_per_loop": ("--steps-per-loop", "must be >= 1", lambda v: v >= 1),
    "checkpoint_every_steps": (
        "--checkpoint-every",
        "must be >= 0 (0: each epoch only)",
        lambda v: v >= 0,
    ),
    "keep_checkpoints": ("keep_checkpoints", "must be >= 1", lambda v: v >= 1),
    "precision": (
        "--precision",
        f"must be one of {', '.join(PRECISIONS)}",
        PRECISIONS.__contains__,
    ),
}


def check_options(preset: str | None = None, **values: Any) -> None:
    """Rejects option values a run cannot use; each message names the option and the value.

    Args:
        preset: a preset name (``--preset``), if one was given.
        values: by field (``epochs``, ``batch_size``, ``learning_rate``, ``hr_threshold``,
            ``steps_per_loop``, ``checkpoint_every_steps``, ``keep_checkpoints``, ``precision``);
            ``None`` means "the default" and is not checked.

    Raises:
        ValueError: naming every bad value, e.g. ``--learning-rate must be > 0, got -1.0``.
    """
    import difflib

    from training_core.presets import PRESETS

    problems = []
    if preset is not None and preset not in PRESETS:
        close = difflib.get_close_matches(str(preset), list(PRESETS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(f"--preset {preset!r} is unknown{hint}; choose one of {', '.join(PRESETS)}")
    for field, value in values.items():
        option, rule, ok = _OPTION_RULES[field]
        if value is not None and not ok(value):
            problems.append(f"{option} {rule}, got {value!r}")
    if problems:
        raise ValueError("; ".join(problems))


@dataclasses.dataclass(frozen=True)
class EpochResult:
    """One epoch's record (also the rows of the metrics JSON)."""

    epoch: int
    step: int
    loss: float
    hr_at_10: float
    ndcg_at_10: float
    examples_per_sec: float
    eval_users: int


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a run produced."""

    epochs: list[EpochResult]
    global_step: int
    steps_per_epoch: int
    stopped_early: bool
    num_replicas: int
    strategy: str
    is_chief: bool = True  # False on the other workers of a multi-worker run: they publish nothing.

    @property
    def last(self) -> EpochResult | None:
        """The final epoch."""
        return self.epochs[-1] if self.epochs else None

    @property
    def best(self) -> EpochResult | None:
        """The epoch with the highest HR@10."""
        return max(self.epochs, key=lambda e: e.hr_at_10) if self.epochs else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: per-epoch records, best, last and run facts."""
        return {
            "epochs": [dataclasses.asdict(e) for e in self.epochs],
            "best": dataclasses.asdict(self.best) if self.best else None,
            "last": dataclasses.asdict(self.last) if self.last else None,
            "global_step": self.global_step,
            "steps_per_epoch": self.steps_per_epoch,
            "stopped_early": self.stopped_early,
            "num_replicas": self.num_replicas,
            "strategy": self.strategy,
        }


def compute_dtype(precision: str, strategy: tf.distribute.Strategy) -> tf.DType:
    """The compute dtype: float16 on GPU, bfloat16 on TPU under ``auto``."""
    if precision != "auto":
        return tf.as_dtype(precision)
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return tf.bfloat16
    return tf.float16 if _uses_gpu(strategy) else tf.float32


def _uses_gpu(strategy: tf.distribute.Strategy) -> bool:
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # The default strategy: wherever TensorFlow places ops.
        return bool(tf.config.list_logical_devices("GPU"))
    return any("GPU" in d.upper() for d in devices)


def _on_accelerator(strategy: tf.distribute.Strategy) -> bool:
    return isinstance(strategy, tf.distribute.TPUStrategy) or _uses_gpu(strategy)


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


def write_model_config(model_dir: str, config: NeuMFConfig, meta: DatasetMetadata) -> None:
    """Records what ``evaluate``/``export`` need to rebuild the model."""
    payload = {
        "model": dataclasses.asdict(config),
        "num_users": meta.num_users,
        "num_items": meta.num_items,
        "dataset_fingerprint": meta.fingerprint,
    }
    publish.write_text_atomic(
        os.path.join(model_dir, MODEL_CONFIG_FILE), json.dumps(payload, indent=2)
    )


def check_model_folder(model_dir: str, config: NeuMFConfig, meta: DatasetMetadata) -> None:
    """Refuses to train into a folder that holds a model of another shape or other data.

    Checked before anything in the folder is touched, so a refused run leaves the earlier model
    (its checkpoints and ``model_config.json``) as it was, still fit to evaluate and export.

    Raises:
        ValueError: naming the folder, what differs, and what to do.
    """
    path = os.path.join(model_dir, MODEL_CONFIG_FILE)
    if not os.path.exists(path):
        return
    with open(path) as f:
        raw = json.load(f)
    have = raw.get("model", {})
    want = json.loads(json.dumps(dataclasses.asdict(config)))  # Tuples as JSON has them.
    differs = [
        f"{key} {have[key]} here, {want[key]} now"
        for key in ("num_factors", "layers")
        if key in have and have[key] != want[key]
    ]
    if raw.get("dataset_fingerprint") != meta.fingerprint:
        differs.append("it was trained on other prepared data")
    if differs:
        raise ValueError(
            f"{model_dir} already holds another model ({'; '.join(differs)}); train into a new "
            "--model-dir, or delete this one first. Nothing in it was changed."
        )


def read_model_config(model_dir: str) -> tuple[NeuMFConfig, int, int]:
    """``(config, num_users, num_items)`` of a trained model folder."""
    path = os.path.join(model_dir, MODEL_CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found; is {model_dir} a training output folder?")
    with open(path) as f:
        raw = json.load(f)
    model = dict(raw["model"])
    model["layers"] = tuple(model["layers"])
    return NeuMFConfig(**model), raw["num_users"], raw["num_items"]


def make_eval_fn(
    model: NeuMF, strategy: tf.distribute.Strategy, items_per_user: int, dtype: tf.DType
):
    """A ``tf.function`` running ``n`` eval steps; returns summed (hits, ndcg, users)."""

    def step_fn(features):
        scores = model.score(features["user_id"], features["item_id"], dtype)
        return metrics.ranking_sums(scores, features["duplicate_mask"], items_per_user)

    @tf.function
    def eval_loop(iterator, n):
        hits = tf.constant(0, tf.int32)
        ndcg = tf.constant(0.0, tf.float32)
        users = tf.constant(0, tf.int32)
        for _ in tf.range(n):
            h, d, u = strategy.run(step_fn, args=(next(iterator),))
            hits += strategy.reduce("SUM", h, axis=None)
            ndcg += strategy.reduce("SUM", d, axis=None)
            users += strategy.reduce("SUM", u, axis=None)
        return hits, ndcg, users

    return eval_loop


def run_eval(
    model: NeuMF,
    strategy: tf.distribute.Strategy,
    meta: DatasetMetadata,
    data_dir: str,
    dtype: tf.DType = tf.float32,
    eval_fn=None,
) -> metrics.RankingMetrics:
    """HR@10/NDCG@10 of ``model`` over the whole eval set, summed exactly across replicas."""
    k = input_pipeline.eval_items_per_user(meta)
    eval_fn = eval_fn or make_eval_fn(model, strategy, k, dtype)
    dist = input_pipeline.distribute(
        strategy, input_pipeline.eval_dataset_fn(meta, data_dir, strategy.num_replicas_in_sync)
    )
    with input_pipeline.naming_damaged_files(meta.eval_file_paths(data_dir)):
        hits, ndcg, users = eval_fn(iter(dist), tf.constant(meta.eval_steps))
    return metrics.RankingMetrics(int(hits), float(ndcg), int(users))


class _Trainer:
    """Holds the state of one run; ``train`` below is the entry point."""

    def __init__(self, config: TrainConfig, strategy: tf.distribute.Strategy):
        self.config = config
        self.strategy = strategy
        self.meta = read_metadata(config.data_dir)
        self.layout = input_pipeline.train_layout(
            self.meta, config.model.batch_size, strategy.num_replicas_in_sync
        )
        input_pipeline.check_eval_layout(self.meta, strategy.num_replicas_in_sync)
        input_pipeline.check_files(self.meta, config.data_dir, config.model.epochs)
        self.dtype = compute_dtype(config.precision, strategy)
        dense = config.dense_gradients
        if dense is None:
            # Dense (exact Adam, fused kernel) is fastest on accelerators and for small tables;
            # on CPU, tables much larger than a batch are cheaper to update row by row.
            table = (self.meta.num_users + self.meta.num_items) * config.model.embedding_dim
            dense = _on_accelerator(strategy) or table <= DENSE_TABLE_LIMIT
        self.dense = dense
        self.jit = bool(
            config.jit_compile and dense and not isinstance(strategy, tf.distribute.TPUStrategy)
        )
        self.is_chief = _is_chief(strategy)
        self.history: list[EpochResult] = []
        os.makedirs(config.model_dir, exist_ok=True)

        with strategy.scope():
            self.model = build_model(config.model, self.meta, config.seed)
            self.variables = [
                self.model.user_embedding,
                self.model.item_embedding,
                *self.model.dense_variables(),
            ]
            m = config.model
            self.optimizer = Adam(self.variables, m.learning_rate, m.beta1, m.beta2, m.epsilon)
            self.loss_scale = DynamicLossScale() if self.dtype == tf.float16 else None
            self.step = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        parts = dict(model=self.model, optimizer=self.optimizer, step=self.step)
        if self.loss_scale is not None:
            parts["loss_scale"] = self.loss_scale
        self.checkpoint = tf.train.Checkpoint(**parts)
        self.ckpt_dir = os.path.join(config.model_dir, CHECKPOINT_SUBDIR)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.ckpt_dir, max_to_keep=config.keep_checkpoints
        )
        if self.is_chief:
            self.write_manager = self.manager
        else:
            # Non-chief workers take part in saving but write to a scratch folder.
            scratch = os.path.join(config.model_dir, f".worker_tmp_{_worker_tag(strategy)}")
            self.write_manager = tf.train.CheckpointManager(self.checkpoint, scratch, max_to_keep=1)
        self.preemption = None
        self._partial = (0.0, 0, 0.0)  # The running epoch's (loss sum, steps, seconds) so far.
        if is_multi_worker_or_tpu(strategy):
            # Saves a checkpoint and exits cleanly when the platform announces a preemption;
            # it also restores the latest checkpoint on creation. It saves through _save, as every
            # other checkpoint here: named by step, with the history and the running epoch's sums
            # (its own save would name it by save count, without them).
            self.preemption = tf.distribute.experimental.PreemptionCheckpointHandler(
                strategy.cluster_resolver,
                self.manager,
                termination_config=tf.distribute.experimental.TerminationConfig(
                    save_fn=lambda: self._save(self._partial)
                ),
            )
        self.train_loop = self._make_train_loop()
        self.eval_fn = make_eval_fn(
            self.model, strategy, input_pipeline.eval_items_per_user(self.meta), self.dtype
        )
        summaries = config.summaries_dir or os.path.join(config.model_dir, "summaries")
        self.writer = (
            tf.summary.create_file_writer(summaries)
            if self.is_chief
            else tf.summary.create_noop_writer()
        )

    # -- the step -----------------------------------------------------------------------------

    def _make_train_loop(self):
        strategy, model, variables = self.strategy, self.model, self.variables
        optimizer, loss_scale, dense = self.optimizer, self.loss_scale, self.dense
        global_batch = float(self.layout.global_batch)
        dtype = self.dtype

        def apply(distribution, grads):
            if loss_scale is None:
                optimizer.apply(distribution, grads, variables)
                return
            inv = 1.0 / loss_scale.scale
            grads = [
                g * inv
                if not isinstance(g, tf.IndexedSlices)
                else tf.IndexedSlices(g.values * inv, g.indices, g.dense_shape)
                for g in grads
            ]
            finite = tf.reduce_all(
                [
                    tf.reduce_all(
                        tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g)
                    )
                    for g in grads
                ]
            )

            def do_apply():
                optimizer.apply(distribution, grads, variables)

            tf.cond(finite, do_apply, lambda: None)
            loss_scale.update(finite)

        def loss_and_grads(features):
            with tf.GradientTape() as tape:
                logits = model.score(features["user_id"], features["item_id"], dtype)
                labels = tf.cast(features["labels"], tf.float32)
                weights = tf.cast(features["valid_point_mask"], tf.float32)
                per_row = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
                # Normalized by the global batch, so summing replicas gives the batch mean.
                loss = tf.reduce_sum(per_row * weights) / global_batch
                scaled = loss * loss_scale.scale if loss_scale is not None else loss
            grads = tape.gradient(scaled, variables)
            if dense:
                grads = [tf.convert_to_tensor(g) for g in grads]
            return loss, grads

        if self.jit:
            # XLA fuses the forward and backward pass (dense gradients only: XLA has no
            # IndexedSlices). Replica-context collectives stay outside the compiled function.
            loss_and_grads = tf.function(loss_and_grads, jit_compile=True)

        def step_fn(features):
            loss, grads = loss_and_grads(features)
            ctx = tf.distribute.get_replica_context()
            if strategy.num_replicas_in_sync > 1:
                grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            ctx.merge_call(apply, args=(grads,))
            return loss

        @tf.function
        def train_loop(iterator, n):
            total = tf.constant(0.0, tf.float32)
            for _ in tf.range(n):
                per_replica = strategy.run(step_fn, args=(next(iterator),))
                total += strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
                self.step.assign_add(1)
            return total

        return train_loop

    def _current_step(self) -> int:
        return int(self.step.numpy())

    # -- checkpoints and history --------------------------------------------------------------

    def _history_path(self, step: int) -> str:
        return os.path.join(self.ckpt_dir, f"history-{step}.json")

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
            with open(self._history_path(step), "w") as f:
                json.dump(
                    {
                        "epochs": [dataclasses.asdict(e) for e in self.history],
                        "partial": list(partial),
                    },
                    f,
                )
        self.write_manager.save(checkpoint_number=step)
        if not self.is_chief:
            shutil.rmtree(self.write_manager.directory, ignore_errors=True)
        elif self.is_chief:
            kept = {int(p.rsplit("-", 1)[1]) for p in self.manager.checkpoints}
            for path in glob.glob(os.path.join(self.ckpt_dir, "history-*.json")):
                if int(path.rsplit("-", 1)[1][:-5]) not in kept:
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

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> TrainResult:
        cfg, layout = self.config, self.layout
        check_model_folder(cfg.model_dir, cfg.model, self.meta)
        partial = self._restore()
        if self.is_chief:  # Only once the folder's checkpoint, if any, was restored into it.
            write_model_config(cfg.model_dir, cfg.model, self.meta)
        history = self.history
        spe = layout.steps_per_epoch
        stopped = bool(
            cfg.early_stop
            and cfg.model.hr_threshold is not None
            and history
            and history[-1].hr_at_10 >= cfg.model.hr_threshold
        )
        log.info(
            "training: %d replicas, global batch %d (%d per replica), %d steps per epoch, "
            "%d epochs, compute dtype %s, %s embedding updates",
            layout.num_replicas,
            layout.global_batch,
            layout.per_replica_batch,
            spe,
            cfg.model.epochs,
            self.dtype.name,
            "dense" if self.dense else "sparse-row",
        )
        with self.writer.as_default():
            while not stopped and self._current_step() < cfg.model.epochs * spe:
                epoch = self._current_step() // spe
                result = self._run_epoch(epoch, self._current_step() % spe, partial)
                partial = (0.0, 0, 0.0)
                history.append(result)
                tf.summary.scalar("eval/hr_at_10", result.hr_at_10, step=result.step)
                tf.summary.scalar("eval/ndcg_at_10", result.ndcg_at_10, step=result.step)
                self._save()
                log.info(
                    "epoch %d done: loss %.4f HR@10 %.4f NDCG@10 %.4f (%d users)",
                    epoch + 1,
                    result.loss,
                    result.hr_at_10,
                    result.ndcg_at_10,
                    result.eval_users,
                )
                threshold = cfg.model.hr_threshold
                if cfg.early_stop and threshold is not None and result.hr_at_10 >= threshold:
                    log.info(
                        "HR@10 %.4f reached the target %.4f: stopping", result.hr_at_10, threshold
                    )
                    stopped = True
            self.writer.flush()
        return TrainResult(
            epochs=history,
            global_step=self._current_step(),
            steps_per_epoch=spe,
            stopped_early=stopped,
            num_replicas=layout.num_replicas,
            strategy=type(self.strategy).__name__,
            is_chief=self.is_chief,
        )

    def _steps(
        self, iterator, epoch: int, start: int, partial: tuple[float, int, float]
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
            log.info(
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
        with input_pipeline.naming_damaged_files(files):
            loss_sum, trained, seconds = self._steps(iter(dist), epoch, start, partial)
        metrics_ = run_eval(
            self.model, self.strategy, self.meta, cfg.data_dir, self.dtype, self.eval_fn
        )
        return EpochResult(
            epoch=epoch + 1,
            step=self._current_step(),
            loss=loss_sum / trained if trained else float("nan"),
            hr_at_10=metrics_.hr,
            ndcg_at_10=metrics_.ndcg,
            examples_per_sec=trained * layout.global_batch / seconds if seconds else 0.0,
            eval_users=metrics_.users,
        )


def summary_metrics(result: TrainResult) -> dict[str, float]:
    """The headline numbers of a run (the last epoch), as a Metrics artifact records them."""
    last = result.last
    if last is None:
        return {"epochs": 0}
    return {
        "hr_at_10": last.hr_at_10,
        "ndcg_at_10": last.ndcg_at_10,
        "loss": last.loss,
        "examples_per_sec": last.examples_per_sec,
        "epochs": len(result.epochs),
        "best_hr_at_10": result.best.hr_at_10,
        "global_step": result.global_step,
    }


def config_for(
    data_dir: str,
    model_dir: str,
    preset: str,
    epochs: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    hr_threshold: float | None = None,
    **options: Any,
) -> TrainConfig:
    """A ``TrainConfig`` from a preset; the batch defaults to the data's pre-batch size.

    ``None`` keeps the preset's value (for ``batch_size``: the data's pre-batch size); every
    value given is checked first (``check_options``), before the data is read. ``hr_threshold``
    replaces the preset's early-stop target (0 or less turns early stopping off).
    """
    from training_core.model import get_preset

    check_options(
        preset,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        hr_threshold=hr_threshold,
        **{k: v for k, v in options.items() if k in _OPTION_RULES},
    )
    meta = read_metadata(data_dir)
    model = get_preset(
        preset,
        epochs=epochs,
        batch_size=meta.train_prebatch_size if batch_size is None else batch_size,
        learning_rate=learning_rate,
    )
    if hr_threshold is not None:
        model = dataclasses.replace(model, hr_threshold=hr_threshold if hr_threshold > 0 else None)
    return TrainConfig(data_dir=data_dir, model_dir=model_dir, model=model, **options)


def train(config: TrainConfig, strategy: tf.distribute.Strategy) -> TrainResult:
    """Trains (or resumes) and evaluates; returns the per-epoch history.

    Raises:
        NonFiniteLossError: the loss became NaN/Inf (the last good checkpoint is kept).
        publish.FolderBusyError: another train run is writing to ``model_dir``.
        ValueError: the data, the batch and the strategy do not fit together.
    """
    if not _is_chief(strategy):  # The chief holds the folder for the whole cluster.
        return _Trainer(config, strategy).run()
    with publish.hold(config.model_dir, "train", wait=False):
        return _Trainer(config, strategy).run()
