"""Evaluation: HR@10/NDCG@10 over a prepared dataset's held-out splits, sampled and full-catalog.

``run_eval`` (with the ``tf.function`` ``make_eval_fn`` builds) scores a model in memory against
each user's sampled negatives (the eval records); ``full_catalog.FullCatalogEval`` ranks the same
held-out items against every item the user did not train on. The training loop calls both after
every epoch (on the split choices are made on: ``DatasetMetadata.selection_split``) and score
the test split once at the end. ``evaluate`` does the same for a trained model folder (its latest
checkpoint, or one named) on the test split and, where the dataset has one, the validation split,
and ranks the baselines beside it the same way: popularity, and EASE with its lambda chosen on
the validation split (``baselines``). Only the model's weights are
restored, so a checkpoint written under any strategy (mirrored, multi-worker, TPU) evaluates
under any other, one device included.
"""

from __future__ import annotations

import dataclasses
import logging

import tensorflow as tf

from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION, DatasetMetadata, read_metadata
from training_core.evaluation import baselines, full_catalog, metrics
from training_core.evaluation.eval_config import EvalOptions
from training_core.training import input_pipeline
from training_core.training.model import NeuMF
from training_core.training.model_dir import read_model_config, resolve_checkpoint

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SplitResult:
    """One held-out split's numbers, with the names ``EvalResult`` gives the test split's."""

    hr_at_10: float
    ndcg_at_10: float
    eval_users: int
    full_catalog_hr_at_10: float
    full_catalog_ndcg_at_10: float
    full_catalog_recall_at_10: float
    full_catalog_users: int
    full_catalog_capped: bool
    popularity_hr_at_10: float
    popularity_ndcg_at_10: float
    popularity_full_catalog_hr_at_10: float
    popularity_full_catalog_ndcg_at_10: float
    beats_popularity: bool
    # EASE (``baselines.Ease``), None where the catalogue is too large for it
    # (``baselines.ease_skipped``).
    ease_hr_at_10: float | None
    ease_ndcg_at_10: float | None
    ease_full_catalog_hr_at_10: float | None
    ease_full_catalog_ndcg_at_10: float | None
    ease_lambda: float | None
    beats_ease: bool | None


@dataclasses.dataclass(frozen=True)
class EvalResult(SplitResult):
    """HR@10/NDCG@10 of one checkpoint: over sampled negatives, and over the full catalog.

    The unprefixed numbers are the test split's (each user's last interaction): the reported
    result. ``validation`` holds the same numbers for the validation split (each user's
    second-to-last), where the dataset has one, else ``None``; ``metrics()`` gives both, the
    validation ones prefixed ``validation_``.

    The ``full_catalog_*`` metrics rank the held-out item against every item the user did not
    train on, for ``full_catalog_users`` users: all of them, or a fixed-seed sample of that many
    when ``full_catalog_capped``. Recall@10 equals HR@10 (one held-out item per user).

    ``popularity_*``: the popularity baseline (``baselines.Popularity``: items ranked by their
    training count, whoever the user) ranked by the same code against the same candidates and
    users; ``beats_popularity`` says whether the model's sampled HR@10 is above the baseline's.
    A model that does not beat it has learned nothing personal. ``ease_*``: EASE, a closed-form
    item-item model over the same training positives, its lambda chosen on the validation split
    (``ease_lambda``), ranked the same way; ``beats_ease`` likewise. None (and absent from
    ``metrics()``) where the catalogue is too large for EASE.
    """

    checkpoint: str
    step: int
    validation: SplitResult | None = None

    def to_dict(self) -> dict:
        """JSON-ready (``validation`` nested, or ``None``)."""
        return dataclasses.asdict(self)

    def metrics(self) -> dict[str, float | int | bool]:
        """The numbers, flat: the test split's as named, ``validation_*`` where there is one."""
        skip = ("checkpoint", "validation")
        out = {k: v for k, v in self.to_dict().items() if k not in skip and v is not None}
        if self.validation is not None:
            out.update(
                {
                    f"{SPLIT_VALIDATION}_{k}": v
                    for k, v in dataclasses.asdict(self.validation).items()
                    if v is not None
                }
            )
        return out


def make_eval_fn(
    model: NeuMF, strategy: tf.distribute.Strategy, items_per_user: int, dtype: tf.DType
):
    """A ``tf.function`` running ``n`` eval steps; returns summed (hits, ndcg, users).

    A batch holds whole users, each user's ``items_per_user`` rows together, so it is scored as
    users x their candidates (``score_candidates``: each item's share of the first layer once
    per batch, each user's once per user) rather than pair by pair: the same scores up to float
    rounding, at about half the arithmetic of NeuMF's MLP.
    """
    return metrics.summing_loop(strategy, eval_step_fn(model, items_per_user, dtype))


def eval_step_fn(model: NeuMF, items_per_user: int, dtype: tf.DType):
    """One replica's eval step ``step_fn(features) -> (hits, ndcg, users)`` over whole users.

    Under ``TPUStrategy`` XLA compiles it (tests/xla_step.py compiles it the same way on the CPU).
    """

    def step_fn(features):
        users = tf.reshape(features["user_id"], [-1, items_per_user])[:, 0]
        candidates = tf.reshape(features["item_id"], [-1, items_per_user])
        scores = model.score_candidates(users, model.item_side(dtype), candidates, dtype)
        return metrics.ranking_sums(scores, features["duplicate_mask"], items_per_user)

    return step_fn


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


def rank_popularity(
    full_eval: full_catalog.FullCatalogEval,
    strategy: tf.distribute.Strategy,
    meta: DatasetMetadata,
    data_dir: str,
) -> tuple[metrics.RankingMetrics, full_catalog.FullCatalogMetrics]:
    """The popularity baseline's sampled and full-catalog metrics.

    Ranked as ``full_eval``'s model is: the same users, candidates and code; the records it read
    are reused. ``meta``: the view of the split ``full_eval`` ranks (``DatasetMetadata.split``).
    """
    popularity = baselines.Popularity(full_eval.training_item_counts(), meta.num_users)
    return run_eval(popularity, strategy, meta, data_dir), full_eval.for_model(popularity)()


def fit_ease(
    trained: tuple,
    strategy: tf.distribute.Strategy,
    meta: DatasetMetadata,
    data_dir: str,
) -> baselines.Ease | None:
    """EASE over ``trained``, its lambda the best on the validation split.

    ``trained``: every user's training positives as CSR ``(row_splits, items)``
    (``positives.training_positives``). None (with a line saying why) where the catalogue is too
    large for it. A dataset without a validation split gets the first of
    ``baselines.EASE_LAMBDAS``: nothing else to choose on (the test split never chooses).
    """
    skipped = baselines.ease_skipped(meta.num_items)
    if skipped:
        log.info("%s", skipped)
        return None
    splits, items = trained
    choose = None
    if meta.has_validation:
        view = meta.split(SPLIT_VALIDATION)
        traced = {}  # One traced evaluation for every lambda (the weights are a variable).

        def choose(ease: baselines.Ease) -> float:
            if not traced:
                k = input_pipeline.eval_items_per_user(view)
                traced["fn"] = make_eval_fn(ease, strategy, k, tf.float32)
            return run_eval(ease, strategy, view, data_dir, eval_fn=traced["fn"]).hr

    ease, tried = baselines.choose_ease(splits, items, meta.num_items, choose)
    log.info(
        "EASE: lambda %g %s",
        ease.lam,
        "chosen on the validation split (HR@10 "
        + ", ".join(f"{lam:g}: {hr:.4f}" for lam, hr in tried.items())
        + ")"
        if tried
        else "(no validation split to choose on)",
    )
    return ease


def load_model(model_dir: str, strategy: tf.distribute.Strategy, checkpoint: str | None = None):
    """Builds the model of ``model_dir`` under ``strategy`` and restores its weights.

    Returns:
        ``(model, checkpoint path, step)``.
    """
    config, num_users, num_items = read_model_config(model_dir)
    path = resolve_checkpoint(model_dir, checkpoint)
    with strategy.scope():
        model = NeuMF(config, num_users, num_items)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    tf.train.Checkpoint(model=model, step=step).restore(
        path
    ).expect_partial().assert_existing_objects_matched()
    return model, path, int(step.numpy())


def evaluate(
    data_dir: str,
    model_dir: str,
    strategy: tf.distribute.Strategy | None = None,
    checkpoint: str | None = None,
    options: EvalOptions | None = None,
) -> EvalResult:
    """HR@10 and NDCG@10 of a trained model on ``data_dir``'s held-out splits.

    The test split, and the validation split where the dataset has one: sampled and full
    catalog, with the popularity baseline's beside them.
    """
    options = options or EvalOptions()
    strategy = strategy or tf.distribute.get_strategy()
    meta = read_metadata(data_dir)
    model, path, step = load_model(model_dir, strategy, checkpoint)
    if (model.num_users, model.num_items) != (meta.num_users, meta.num_items):
        raise ValueError(
            f"the model has {model.num_users} users and {model.num_items} items but {data_dir} "
            f"has {meta.num_users} and {meta.num_items}; evaluate on the data it was trained on"
        )
    log.info("evaluating %s (step %d)", path, step)
    validation = (
        score_split(model, strategy, meta, data_dir, SPLIT_VALIDATION, options)
        if meta.has_validation
        else None
    )
    test = score_split(model, strategy, meta, data_dir, SPLIT_TEST, options, validation)
    return EvalResult(**dataclasses.asdict(test), checkpoint=path, step=step, validation=validation)


def score_split(
    model: NeuMF,
    strategy: tf.distribute.Strategy,
    meta: DatasetMetadata,
    data_dir: str,
    split: str,
    options: EvalOptions,
    validation: SplitResult | None = None,
) -> SplitResult:
    """One split's sampled and full-catalog metrics, the baselines' beside them.

    EASE's lambda is ``options.ease_lambda`` where set; else chosen on the validation split when
    this is that split, and taken from ``validation`` (that split's result) when this is the
    test split.
    """
    view = meta.split(split)
    with input_pipeline.naming_damaged_files(view.eval_file_paths(data_dir)):
        result: metrics.RankingMetrics = run_eval(model, strategy, view, data_dir)
    full_eval = full_catalog.FullCatalogEval(
        model, strategy, meta, data_dir, options.full_catalog_users, split=split
    )
    full = full_eval(show_progress=True)
    pop, pop_full = rank_popularity(full_eval, strategy, view, data_dir)
    lam = options.ease_lambda
    if lam is None and validation is not None:
        lam = validation.ease_lambda
    if lam is not None and not baselines.ease_skipped(meta.num_items):
        splits, items = full_eval.training_positives()
        g = baselines.gram(splits, items, meta.num_items)
        ease = baselines.Ease(splits, items, baselines.ease_weights(g, lam), lam)
    else:
        ease = fit_ease(full_eval.training_positives(), strategy, meta, data_dir)
    ease_result = ease_full = None
    if ease is not None:
        ease_result = run_eval(ease, strategy, view, data_dir)
        ease_full = full_eval.for_model(ease)()
        log.info(
            "%s split, EASE (lambda %g): HR@10 %.4f NDCG@10 %.4f (full catalog %.4f / %.4f): "
            "the model %s",
            split,
            ease.lam,
            ease_result.hr,
            ease_result.ndcg,
            ease_full.metrics.hr,
            ease_full.metrics.ndcg,
            f"beats it by {result.hr - ease_result.hr:+.4f} HR@10"
            if result.hr > ease_result.hr
            else f"does not beat it ({result.hr - ease_result.hr:+.4f} HR@10)",
        )
    log.info(
        "%s split: HR@10 %.4f NDCG@10 %.4f over %d users against %d sampled negatives; "
        "full catalog HR@10 %.4f NDCG@10 %.4f over %s (%d scores in %.1fs)",
        split,
        result.hr,
        result.ndcg,
        result.users,
        meta.eval_negatives,
        full.metrics.hr,
        full.metrics.ndcg,
        full.users_text,
        full.scores,
        full.seconds,
    )
    beats = result.hr > pop.hr
    (log.info if beats else log.warning)(
        "%s split, popularity baseline: HR@10 %.4f NDCG@10 %.4f (full catalog %.4f / %.4f): "
        "the model %s",
        split,
        pop.hr,
        pop.ndcg,
        pop_full.metrics.hr,
        pop_full.metrics.ndcg,
        f"beats it by {result.hr - pop.hr:+.4f} HR@10"
        if beats
        else "does NOT beat it: it has learned nothing personal (train longer, check the data)",
    )
    return SplitResult(
        result.hr,
        result.ndcg,
        result.users,
        full_catalog_hr_at_10=full.metrics.hr,
        full_catalog_ndcg_at_10=full.metrics.ndcg,
        full_catalog_recall_at_10=full.metrics.recall,
        full_catalog_users=full.metrics.users,
        full_catalog_capped=full.capped,
        popularity_hr_at_10=pop.hr,
        popularity_ndcg_at_10=pop.ndcg,
        popularity_full_catalog_hr_at_10=pop_full.metrics.hr,
        popularity_full_catalog_ndcg_at_10=pop_full.metrics.ndcg,
        beats_popularity=beats,
        ease_hr_at_10=None if ease is None else ease_result.hr,
        ease_ndcg_at_10=None if ease is None else ease_result.ndcg,
        ease_full_catalog_hr_at_10=None if ease is None else ease_full.metrics.hr,
        ease_full_catalog_ndcg_at_10=None if ease is None else ease_full.metrics.ndcg,
        ease_lambda=None if ease is None else ease.lam,
        beats_ease=None if ease is None else result.hr > ease_result.hr,
    )
