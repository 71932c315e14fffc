"""Champion/challenger: bless a new model only if it is not worse than the one serving.

Both models are compared as they serve: two exported SavedModels (``training_core.serving.export``),
each asked through its own ``score`` signature with **raw** ids, on the same held-out set, the
new run's eval split (1 held-out positive and its sampled negatives per user, mapped back to raw
ids with that run's vocabularies). So a champion trained on last month's data, with its own id
vocabulary, is ranked on this month's users and items by exactly the rule that ranks the
challenger (``metrics.ranking_sums``: ties count against the positive). An id the champion
never saw gets score 0 from it (``known`` False), as it would in serving; how many eval users and
candidate items the champion knows is reported, and a champion that knows fewer than
``MIN_KNOWN_USERS`` of the eval users is refused as a model of another id space.

The rule: blessed when there is no champion, or when ``challenger - champion >= -tolerance`` on
the chosen metric (HR@10 by default). ``Decision`` carries both models' metrics and the reason.
"""

from __future__ import annotations

import dataclasses
import html
import logging
import os
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# What compare can decide on: the ranking metrics every export is measured by here.
METRICS = ("hr_at_10", "ndcg_at_10")
DEFAULT_METRIC = "hr_at_10"
DEFAULT_TOLERANCE = 0.0  # Absolute: the challenger may not be worse at all.
# A champion that knows fewer of the eval users than this share is a model of other data.
MIN_KNOWN_USERS = 0.5
SIGNATURE = "score"
_USERS_PER_CALL = 256  # Eval users scored per signature call.


@dataclasses.dataclass(frozen=True)
class Scores:
    """One model's ranking metrics on the eval set, asked through its ``score`` signature."""

    export_dir: str
    hr_at_10: float
    ndcg_at_10: float
    users: int
    known_users: float  # Share of the evaluated users the model knows.
    known_items: float  # Of the known users' counted candidate rows, the share it knows.

    def metric(self, name: str) -> float:
        """The value of one of ``METRICS``."""
        return float(getattr(self, name))


@dataclasses.dataclass(frozen=True)
class Decision:
    """The gate's verdict, with what it was based on."""

    blessed: bool
    reason: str
    metric: str
    tolerance: float
    challenger: Scores
    champion: Scores | None

    def to_metrics(self) -> dict[str, float]:
        """Flat numbers for a KFP Metrics artifact."""
        out = {"blessed": float(self.blessed), "tolerance": self.tolerance}
        for who, scores in (("challenger", self.challenger), ("champion", self.champion)):
            if scores is not None:
                for name in METRICS:
                    out[f"{who}_{name}"] = scores.metric(name)
        if self.champion is not None:
            out["champion_known_users"] = self.champion.known_users
            out["champion_known_items"] = self.champion.known_items
        return out


def check_choice(metric: str, tolerance: float) -> None:
    """Refuses a metric that is not one of ``METRICS`` or a negative or non-finite tolerance."""
    problems = []
    if metric not in METRICS:
        problems.append(f"--metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not (np.isfinite(tolerance) and tolerance >= 0):
        problems.append(f"--tolerance must be >= 0 (an absolute {metric} margin), got {tolerance}")
    if problems:
        raise ValueError("; ".join(problems))


def score_export(export_dir: str, data_dir: str) -> Scores:
    """HR@10/NDCG@10 of an exported model on ``data_dir``'s eval split, through its signature.

    Raises:
        ValueError: the folder is not an export with a ``score`` signature taking ``user_id`` and
            ``item_id`` (naming the folder and what it has).
    """
    import tensorflow as tf

    from training_core.data import records
    from training_core.data.metadata import read_metadata, read_vocab
    from training_core.evaluation import metrics

    meta = read_metadata(data_dir)
    score = _score_signature(export_dir)
    users_raw = read_vocab(os.path.join(data_dir, meta.user_vocab))
    items_raw = read_vocab(os.path.join(data_dir, meta.item_vocab))
    per_user = 1 + meta.eval_negatives
    spec = records.feature_spec(meta.eval_prebatch_size, training=False)
    ds = tf.data.TFRecordDataset(meta.eval_file_paths(data_dir))
    ds = ds.map(lambda r: tf.io.parse_single_example(r, spec)).unbatch()
    ds = ds.batch(per_user * _USERS_PER_CALL)
    hits, ndcg, users = 0, 0.0, 0
    known_users = known_rows = counted_rows = 0
    for batch in ds.as_numpy_iterator():
        user_idx = batch[records.USER_ID].reshape(-1)
        item_idx = batch[records.ITEM_ID].reshape(-1)
        mask = batch[records.DUPLICATE_MASK].reshape(-1)
        out = score(
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
        raise ValueError(f"{data_dir}'s eval split has no evaluated user")
    return Scores(
        export_dir=export_dir,
        hr_at_10=hits / users,
        ndcg_at_10=ndcg / users,
        users=users,
        known_users=known_users / users,
        known_items=known_rows / counted_rows if counted_rows else 0.0,
    )


def _score_signature(export_dir: str):
    import tensorflow as tf

    if not os.path.isdir(export_dir) or not tf.saved_model.contains_saved_model(export_dir):
        raise ValueError(f"{export_dir} holds no SavedModel; give an exported model's folder")
    loaded = tf.saved_model.load(export_dir)
    fn = loaded.signatures.get(SIGNATURE)
    inputs = sorted(fn.structured_input_signature[1]) if fn is not None else []
    if fn is None or inputs != ["item_id", "user_id"]:
        raise ValueError(
            f"{export_dir} has no {SIGNATURE!r} signature taking user_id and item_id (it has "
            f"{', '.join(sorted(loaded.signatures)) or 'no signatures'}); compare needs models "
            "exported by ncf-pipelines export"
        )
    return fn


def compare(
    challenger_dir: str,
    data_dir: str,
    champion_dir: str | None = None,
    metric: str = DEFAULT_METRIC,
    tolerance: float = DEFAULT_TOLERANCE,
) -> Decision:
    """Scores the challenger (and the champion, if any) on ``data_dir`` and decides.

    Args:
        challenger_dir: the new run's exported SavedModel.
        data_dir: the new run's prepared dataset (its eval split is the held-out set).
        champion_dir: the serving model's exported SavedModel; ``None``: no champion yet.
        metric: one of ``METRICS``.
        tolerance: how much worse (absolute, on ``metric``) the challenger may be.

    Raises:
        ValueError: a bad metric or tolerance; a folder that is not an export; a champion that
            knows too few of the eval users to be compared (naming both models).
    """
    check_choice(metric, tolerance)
    challenger = score_export(challenger_dir, data_dir)
    if champion_dir is None:
        reason = "no champion: the first model is blessed"
        log.info("blessed: %s", reason)
        return Decision(True, reason, metric, tolerance, challenger, None)
    champion = score_export(champion_dir, data_dir)
    if champion.known_users < MIN_KNOWN_USERS:
        raise ValueError(
            f"the champion {champion_dir} knows {champion.known_users:.0%} of the eval users of "
            f"{data_dir} (the challenger {challenger_dir} was trained on it): it was trained on "
            f"other ids, so the two cannot be compared on one held-out set. Give the champion "
            "of this model (or none, to bless the challenger as the first)"
        )
    new, old = challenger.metric(metric), champion.metric(metric)
    blessed = new - old >= -tolerance
    verdict = "not worse than" if blessed else "worse than"
    reason = (
        f"challenger {metric} {new:.4f} is {verdict} the champion's {old:.4f} "
        f"(difference {new - old:+.4f}, tolerance {tolerance:.4f}) on {challenger.users} "
        f"held-out users; the champion knows {champion.known_users:.1%} of them"
    )
    log.info("%s: %s", "blessed" if blessed else "refused", reason)
    return Decision(blessed, reason, metric, tolerance, challenger, champion)


def decision_html(decision: Decision) -> str:
    """A small HTML page: the verdict, the reason and both models' metrics."""
    rows = []
    for who, s in (("challenger", decision.challenger), ("champion", decision.champion)):
        if s is None:
            rows.append(f"<tr><td>{who}</td><td colspan=4>none</td></tr>")
            continue
        rows.append(
            f"<tr><td>{who}</td><td>{s.hr_at_10:.4f}</td><td>{s.ndcg_at_10:.4f}</td>"
            f"<td>{s.known_users:.1%}</td><td>{html.escape(s.export_dir)}</td></tr>"
        )
    verdict = "blessed" if decision.blessed else "not blessed"
    return (
        "<html><body>"
        f"<h2>Challenger {verdict}</h2><p>{html.escape(decision.reason)}</p>"
        "<table border=1><tr><th></th><th>HR@10</th><th>NDCG@10</th><th>users known</th>"
        "<th>model</th></tr>" + "".join(rows) + "</table></body></html>"
    )


def to_dict(decision: Decision) -> dict[str, Any]:
    """JSON-ready."""
    return dataclasses.asdict(decision)
