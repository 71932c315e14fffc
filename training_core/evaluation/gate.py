"""Champion/challenger: bless a new model only if it is not worse than the one serving.

Both models are compared as they serve: two exported SavedModels (``training_core.serving.export``),
each asked through its own ``score`` signature with **raw** ids, on the same held-out set of the
new run's data (1 held-out positive and its sampled negatives per user, mapped back to raw ids
with that run's vocabularies). So a champion trained on last month's data, with its own id
vocabulary, is ranked on this month's users and items by exactly the rule that ranks the
challenger (``metrics.ranking_sums``: ties count against the positive). An id the champion
never saw gets score 0 from it (``known`` False), as it would in serving.

The split that decides is the data's selection split (``DatasetMetadata.selection_split``):
validation where the data has one, else test. Both models are also scored on the test split,
for the report only: a choice made on the test split would make its number a selected, not a
measured, one (docs/after-training.md).

Before scoring, the champion must be a model of the same data: its catalogue (the items its
export knows, ``item_raw_ids``) and the new data's item vocabulary must each hold at least
``MIN_SHARED_ITEMS`` of the other's items (``Catalogue``), and it must know at least
``MIN_KNOWN_USERS`` of the deciding split's users. Weekly data (a few new users and items)
passes both; a model of another dataset fails with a ``ValueError`` naming both models and the
way out (a registry model per dataset), and the step fails: it never blesses.

The rule: blessed when there is no champion, or when ``challenger - champion >= -tolerance`` on
the chosen metric (HR@10 by default). ``Decision`` carries both models' metrics on each scored
split, the catalogue overlap and the reason, and the baselines' on the same candidates
(popularity and EASE, ``baselines``: reported beside the models, never deciding).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import numpy as np

from training_core.common import report_kit
from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION, read_metadata, read_vocab

log = logging.getLogger(__name__)

# What compare can decide on: the ranking metrics every export is measured by here.
METRICS = ("hr_at_10", "ndcg_at_10")
DEFAULT_METRIC = "hr_at_10"
DEFAULT_TOLERANCE = 0.0  # Absolute: the challenger may not be worse at all.
# A champion that knows fewer of the eval users than this share is a model of other data.
MIN_KNOWN_USERS = 0.5
# Same catalogue: the champion knows at least this share of the new data's items, and at least
# this share of the champion's items are in the new data. Weekly data (a few new or dropped
# items) is far above it; with integer ids, ml-100k (1682 items) and ml-1m (3706) overlap as
# ids, but under half of ml-1m's items are ml-100k's.
MIN_SHARED_ITEMS = 0.5
SIGNATURE = "score"
# The pipeline parameter that names the registry model (the model line, one per dataset:
# training_core/serving/model_line.py), and so the champion.
REGISTRY_MODEL_PARAM = "model_display_name"
_USERS_PER_CALL = 256  # Eval users scored per signature call.


@dataclasses.dataclass(frozen=True)
class Scores:
    """One model's ranking metrics on one split, asked through its ``score`` signature."""

    export_dir: str
    hr_at_10: float
    ndcg_at_10: float
    users: int
    known_users: float  # Share of the evaluated users the model knows.
    known_items: float  # Of the known users' counted candidate rows, the share it knows.
    split: str = SPLIT_TEST  # The held-out split scored (metadata.SPLITS).

    def metric(self, name: str) -> float:
        """The value of one of ``METRICS``."""
        return float(getattr(self, name))


@dataclasses.dataclass(frozen=True)
class BaselineScores:
    """A baseline's (``baselines``) ranking metrics on one split of the new run's data."""

    name: str  # popularity, ease
    split: str
    hr_at_10: float
    ndcg_at_10: float
    detail: str = ""  # How it was fitted (EASE: its lambda, chosen on validation).

    def metric(self, name: str) -> float:
        """The value of one of ``METRICS``."""
        return float(getattr(self, name))


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """How the champion's items and the new data's items overlap (raw ids)."""

    data_items: int  # Items in the new run's data (its item vocabulary).
    champion_items: int  # Items the champion's export knows.
    shared: int

    @property
    def champion_knows(self) -> float:
        """Share of the new data's items the champion knows."""
        return self.shared / self.data_items if self.data_items else 0.0

    @property
    def champion_in_data(self) -> float:
        """Share of the champion's items that are in the new data."""
        return self.shared / self.champion_items if self.champion_items else 0.0

    @property
    def same(self) -> bool:
        """Whether both shares reach ``MIN_SHARED_ITEMS``: a model of the same catalogue."""
        return min(self.champion_knows, self.champion_in_data) >= MIN_SHARED_ITEMS


@dataclasses.dataclass(frozen=True)
class Decision:
    """The gate's verdict, with what it was based on.

    ``challenger`` and ``champion`` are the scores on ``split``, the one that decided;
    ``challenger_test`` and ``champion_test`` the test split's, reported beside them (the same
    objects when ``split`` is test; ``None`` only where a caller built a Decision without them).
    """

    blessed: bool
    reason: str
    metric: str
    tolerance: float
    challenger: Scores
    champion: Scores | None
    split: str = SPLIT_TEST
    challenger_test: Scores | None = None
    champion_test: Scores | None = None
    catalogue: Catalogue | None = None
    baselines: tuple[BaselineScores, ...] = ()

    def by_split(self) -> list[tuple[str, Scores, Scores | None]]:
        """(split, challenger, champion) for each split scored, the deciding one first."""
        out = [(self.split, self.challenger, self.champion)]
        if self.split != SPLIT_TEST and self.challenger_test is not None:
            out.append((SPLIT_TEST, self.challenger_test, self.champion_test))
        return out

    def to_metrics(self) -> dict[str, float]:
        """Flat numbers for a KFP Metrics artifact, named by split (``challenger_test_hr_at_10``).

        ``decided_on_validation`` is 1.0 when the validation split decided, 0.0 when test did.
        """
        out = {
            "blessed": float(self.blessed),
            "tolerance": self.tolerance,
            "decided_on_validation": float(self.split == SPLIT_VALIDATION),
        }
        for split, *scored in self.by_split():
            for who, scores in zip(("challenger", "champion"), scored, strict=True):
                if scores is not None:
                    for name in METRICS:
                        out[f"{who}_{split}_{name}"] = scores.metric(name)
        if self.champion is not None:
            out["champion_known_users"] = self.champion.known_users
            out["champion_known_items"] = self.champion.known_items
        if self.catalogue is not None:
            out["champion_knows_data_items"] = self.catalogue.champion_knows
            out["champion_items_in_data"] = self.catalogue.champion_in_data
        for b in self.baselines:
            for name in METRICS:
                out[f"{b.name}_{b.split}_{name}"] = b.metric(name)
        return out


@dataclasses.dataclass(frozen=True)
class LoadedExport:
    """An exported model, loaded once for every split it is scored on."""

    export_dir: str
    score: Any  # Its ``score`` signature (a concrete function).
    # The raw item ids it knows (the export's ``item_raw_ids``): int64, or an object array of
    # ``str`` for an export of string item ids.
    item_ids: np.ndarray


def check_choice(metric: str, tolerance: float) -> None:
    """Refuses a metric that is not one of ``METRICS`` or a negative or non-finite tolerance."""
    problems = []
    if metric not in METRICS:
        problems.append(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not (np.isfinite(tolerance) and tolerance >= 0):
        problems.append(f"--tolerance must be >= 0 (an absolute {metric} margin), got {tolerance}")
    if problems:
        raise ValueError("; ".join(problems))


def load_export(export_dir: str) -> LoadedExport:
    """Loads an export's ``score`` signature and the item ids it knows.

    Raises:
        ValueError: the folder is not an export with a ``score`` signature taking ``user_id`` and
            ``item_id`` and its items (naming the folder and what it has).
    """
    import tensorflow as tf

    if not os.path.isdir(export_dir) or not tf.saved_model.contains_saved_model(export_dir):
        raise ValueError(f"{export_dir} holds no SavedModel; give an exported model's folder")
    loaded = tf.saved_model.load(export_dir)
    fn = loaded.signatures.get(SIGNATURE)
    inputs = sorted(fn.structured_input_signature[1]) if fn is not None else []
    items = getattr(loaded, "item_raw_ids", None)  # ServingModule's variable.
    if fn is None or inputs != ["item_id", "user_id"] or items is None:
        raise ValueError(
            f"{export_dir} has no {SIGNATURE!r} signature taking user_id and item_id with its "
            f"item ids (it has {', '.join(sorted(loaded.signatures)) or 'no signatures'}); "
            "compare needs models exported by ncf-pipelines export"
        )
    raw = items.numpy()
    if items.dtype == tf.string:
        ids = np.asarray([i.decode("utf-8") for i in raw.tolist()], dtype=object)
    else:
        ids = np.asarray(raw, dtype=np.int64)
    return LoadedExport(export_dir, fn, ids)


def _rechunked(columns, rows: int):
    """``columns``' rows in chunks of ``rows`` rows, the last one shorter.

    ``columns``: dicts of flat arrays, as ``records.read_columns`` yields them.
    """
    pending: dict[str, list] = {}
    held = 0
    for batch in columns:
        for name, values in batch.items():
            pending.setdefault(name, []).append(values)
        held += len(next(iter(batch.values())))
        if held < rows:
            continue
        joined = {name: np.concatenate(parts) for name, parts in pending.items()}
        whole = held - held % rows
        for start in range(0, whole, rows):
            yield {name: values[start : start + rows] for name, values in joined.items()}
        pending = {name: [values[whole:]] for name, values in joined.items()}
        held -= whole
    if held:
        yield {name: np.concatenate(parts) for name, parts in pending.items()}


def score_export(export: str | LoadedExport, data_dir: str, split: str = SPLIT_TEST) -> Scores:
    """HR@10/NDCG@10 of an exported model on ``data_dir``'s split ``split``, through its signature.

    Args:
        export: the export's folder, or the export already loaded (``load_export``).
        data_dir: a prepared dataset.
        split: ``test`` (the eval records) or ``validation`` (metadata.SPLITS).

    Raises:
        ValueError: the folder is not an export (``load_export``); the data has no such split.
    """
    import tensorflow as tf

    from training_core.data import records
    from training_core.evaluation import metrics

    if isinstance(export, str):
        export = load_export(export)
    full = read_metadata(data_dir)
    meta = full.split(split)
    users_raw = read_vocab(os.path.join(data_dir, full.user_vocab), full.user_id_type)
    items_raw = read_vocab(os.path.join(data_dir, full.item_vocab), full.item_id_type)
    per_user = 1 + meta.eval_negatives
    columns = records.read_columns(meta.eval_file_paths(data_dir), meta.eval_prebatch_size, False)
    hits, ndcg, users = 0, 0.0, 0
    known_users = known_rows = counted_rows = 0
    for batch in _rechunked(columns, per_user * _USERS_PER_CALL):
        user_idx = batch[records.USER_ID].reshape(-1)
        item_idx = batch[records.ITEM_ID].reshape(-1)
        mask = batch[records.DUPLICATE_MASK].reshape(-1)
        out = export.score(
            user_id=tf.constant(users_raw[user_idx]), item_id=tf.constant(items_raw[item_idx])
        )
        s, known = out["score"].numpy(), out["known"].numpy()
        h, d, u = metrics.ranking_sums(tf.constant(s), tf.constant(mask), per_user)
        hits, ndcg, users = hits + int(h), ndcg + float(d), users + int(u)
        evaluated = mask.reshape(-1, per_user)[:, -1] == 0
        known = known.reshape(-1, per_user)
        # ``known`` is "user and item known": a user is known when any of the ~1000 candidate
        # rows is (a known user with none of them known would need an almost disjoint catalog,
        # which is the other-id-space case anyway).
        user_known = known.any(axis=1) & evaluated
        rows = (mask.reshape(-1, per_user) == 0) & user_known[:, None]
        known_users += int(user_known.sum())
        counted_rows += int(rows.sum())
        known_rows += int(known[rows].sum())
    if not users:
        raise ValueError(f"{data_dir}'s {split} split has no evaluated user")
    return Scores(
        export_dir=export.export_dir,
        hr_at_10=hits / users,
        ndcg_at_10=ndcg / users,
        users=users,
        known_users=known_users / users,
        known_items=known_rows / counted_rows if counted_rows else 0.0,
        split=split,
    )


def score_baselines(data_dir: str, splits: tuple[str, ...]) -> tuple[BaselineScores, ...]:
    """Popularity and EASE on ``data_dir``'s ``splits``, ranked as ``evaluate`` ranks them.

    Both are fitted on the data's training positives; EASE's lambda on its validation split
    (``evaluate.fit_ease``), and skipped where the catalogue is too large for it.
    """
    import tensorflow as tf

    from training_core.data import positives
    from training_core.evaluation import baselines, evaluate

    meta = read_metadata(data_dir)
    strategy = tf.distribute.get_strategy()
    trained = positives.training_positives(meta, data_dir)
    scorers = [
        (
            "popularity",
            baselines.Popularity(baselines.item_counts(meta, trained[1]), meta.num_users),
        )
    ]
    ease = evaluate.fit_ease(trained, strategy, meta, data_dir)
    if ease is not None:
        scorers.append(("ease", ease))
    out = []
    for split in splits:
        for name, scorer in scorers:
            got = evaluate.run_eval(scorer, strategy, meta.split(split), data_dir)
            detail = f"lambda {scorer.lam:g}" if name == "ease" else ""
            out.append(BaselineScores(name, split, got.hr, got.ndcg, detail))
    return tuple(out)


def catalogue(champion: LoadedExport, data_dir: str) -> Catalogue:
    """How the champion's items and ``data_dir``'s item vocabulary overlap, by raw id."""
    meta = read_metadata(data_dir)
    data_items = read_vocab(os.path.join(data_dir, meta.item_vocab), meta.item_id_type)
    return overlap(champion.item_ids, data_items)


def overlap(champion_items: np.ndarray, data_items: np.ndarray) -> Catalogue:
    """How two item vocabularies (raw ids: int64, or object arrays of ``str``) overlap.

    Ids of two kinds (an integer catalogue against string ids) share no item: the string "42"
    is not the integer 42 to serving, so such a champion is one of another catalogue.
    """
    same_kind = (champion_items.dtype == object) == (data_items.dtype == object)
    shared = np.intersect1d(champion_items, data_items).size if same_kind else 0
    return Catalogue(len(np.unique(data_items)), len(np.unique(champion_items)), int(shared))


def other_catalogue(
    champion_dir: str, data: str, c: Catalogue, challenger_dir: str | None = None
) -> str:
    """Why a champion of another catalogue is refused, and the way out (one message).

    ``data``: where the data's items come from; ``challenger_dir``: the model trained on it,
    ``None`` before training (``run-local``'s preflight).
    """
    trained = f" (the challenger {challenger_dir} was trained on it)" if challenger_dir else ""
    return (
        f"the champion {champion_dir} was trained on another catalogue: it knows "
        f"{c.champion_knows:.0%} of the {c.data_items} items of {data}{trained}, and "
        f"{c.champion_in_data:.0%} of its own {c.champion_items} items are in that data (both "
        f"must be at least {MIN_SHARED_ITEMS:.0%}). A model of one dataset is no champion of "
        f"another: keep one registry model per dataset (the pipeline parameter "
        f"{REGISTRY_MODEL_PARAM}: unset, each data_uri has its own line; or name one, e.g. "
        f"--param {REGISTRY_MODEL_PARAM}=ncf-<dataset>), give this dataset's champion with "
        "champion_uri, or start without a champion (--param register=false compares with none)"
    )


def check_catalogue(
    champion_dir: str, champion_items: np.ndarray, data_items: np.ndarray, data: str
) -> Catalogue:
    """Refuses a champion whose items are another catalogue's than ``data_items``.

    Before training (``run-local``'s preflight, which reads ``champion_items`` from the export
    without TensorFlow): the rule and the message are ``compare``'s.

    Raises:
        ValueError: another catalogue (``other_catalogue``'s message).
    """
    c = overlap(champion_items, data_items)
    if not c.same:
        raise ValueError(other_catalogue(champion_dir, data, c))
    return c


def compare(
    challenger_dir: str,
    data_dir: str,
    champion_dir: str | None = None,
    metric: str = DEFAULT_METRIC,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Decision:
    """Scores the challenger (and the champion, if any) on ``data_dir`` and decides.

    The data's selection split decides (validation where it has one, else test); both models
    are scored on the test split as well, for the report.

    Args:
        challenger_dir: the new run's exported SavedModel.
        data_dir: the new run's prepared dataset (its held-out splits are the held-out sets).
        champion_dir: the serving model's exported SavedModel; ``None``: no champion yet.
        metric: one of ``METRICS``.
        tolerance: how much worse (absolute, on ``metric``) the challenger may be.

    Raises:
        ValueError: a bad metric or tolerance; a folder that is not an export; a champion of
            another catalogue (``MIN_SHARED_ITEMS``) or that knows too few of the eval users to
            be compared (each naming both models).
    """
    check_choice(metric, tolerance)
    split = read_metadata(data_dir).selection_split
    models = {"challenger": load_export(challenger_dir)}
    items = None  # The catalogue overlap, with a champion.
    if champion_dir is not None:
        models["champion"] = load_export(champion_dir)
        items = catalogue(models["champion"], data_dir)
        if not items.same:
            raise ValueError(other_catalogue(champion_dir, data_dir, items, challenger_dir))
    chosen = {who: score_export(model, data_dir, split) for who, model in models.items()}
    champion = chosen.get("champion")
    if champion is not None and champion.known_users < MIN_KNOWN_USERS:
        raise ValueError(
            f"the champion {champion_dir} knows {champion.known_users:.0%} of the {split} users "
            f"of {data_dir} (the challenger {challenger_dir} was trained on it): it was trained "
            "on other ids, so the two cannot be compared on one held-out set. Give the champion "
            "of this model (or none, to bless the challenger as the first)"
        )
    # The test split, for the report: scored once more only where it did not decide.
    tested = {
        who: scores if split == SPLIT_TEST else score_export(models[who], data_dir, SPLIT_TEST)
        for who, scores in chosen.items()
    }
    challenger, test = chosen["challenger"], tested["challenger"]
    scored = score_baselines(data_dir, tuple(dict.fromkeys((split, SPLIT_TEST))))
    if champion is None:
        reason = "no champion: the first model is blessed"
        log.info("blessed: %s", reason)
        return Decision(
            True, reason, metric, tolerance, challenger, None, split, test, baselines=scored
        )
    champion_test = tested["champion"]
    new, old = challenger.metric(metric), champion.metric(metric)
    blessed = new - old >= -tolerance
    verdict = "not worse than" if blessed else "worse than"
    reason = (
        f"on the {split} split, challenger {metric} {new:.4f} is {verdict} the champion's "
        f"{old:.4f} (difference {new - old:+.4f}, tolerance {tolerance:.4f}) on "
        f"{challenger.users} held-out users; the champion knows {champion.known_users:.1%} of "
        f"them and {items.champion_knows:.1%} of the data's items"
    )
    if split != SPLIT_TEST:
        reason += (
            f". On the test split (reported, not deciding): challenger "
            f"{test.metric(metric):.4f}, champion {champion_test.metric(metric):.4f}"
        )
    log.info("%s: %s", "blessed" if blessed else "refused", reason)
    return Decision(
        blessed, reason, metric, tolerance, challenger, champion, split, test, champion_test,
        items, scored,
    )  # fmt: skip


def decision_html(decision: Decision) -> str:
    """A small HTML page: the verdict, the reason and both models' metrics on each split.

    Rendered through the report kit (``training_core.common.report_kit``, ``decision.html.j2``).
    """
    rows = []
    for split, *scored in decision.by_split():
        where = f"{split} ({'decides' if split == decision.split else 'reported'})"
        for who, s in zip(("challenger", "champion"), scored, strict=True):
            cells = None
            if s is not None:
                cells = (f"{s.hr_at_10:.4f}", f"{s.ndcg_at_10:.4f}", f"{s.known_users:.1%}")
                cells += (s.export_dir,)
            rows.append({"who": who, "split": where, "scores": cells})
        for b in decision.baselines:
            if b.split == split:
                cells = (f"{b.hr_at_10:.4f}", f"{b.ndcg_at_10:.4f}", "100.0%")
                cells += (b.detail or "fitted on the training positives",)
                rows.append({"who": f"{b.name} (baseline)", "split": where, "scores": cells})
    return report_kit.render(
        "decision.html.j2",
        blessed=decision.blessed,
        verdict="blessed" if decision.blessed else "not blessed",
        reason=decision.reason,
        rows=rows,
    )


def to_dict(decision: Decision) -> dict[str, Any]:
    """JSON-ready."""
    return dataclasses.asdict(decision)
