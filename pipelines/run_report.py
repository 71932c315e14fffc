"""One HTML page that tells what a pipeline run did, built from the run's own artifacts.

The page (docs/run-report.md) shows the data (the validation gate's verdict, the counts, drift),
the training curve with the chosen epoch, the model's metrics beside the champion's and the
popularity baseline's, the gate's decision and why, what was registered and deployed, a few
users' histories with their recommendations, and each step's time. It is one self-contained file:
no script, font or stylesheet from anywhere, every picture an inline SVG, so that it opens from
the Vertex AI console's artifact view and from a local folder alike. It is drawn through the
report kit (``training_core.common.report_kit``, template ``run_report.html.j2``): this module
says what the page shows, the template how.

Every value comes from an artifact and is read tolerantly (``pipelines.run_readings``): a field a
run does not hold (an older run, another split layout, a step that did not run) shows as
``NOT_IN_RUN`` instead of failing the page. ``RunFacts`` is what the page is drawn from;
``pipelines.run_folder.facts_from_local_run`` collects it from a kfp.local run folder
(``ncf-pipelines run-local``), ``components/run_report.py`` from its input artifacts on Vertex
AI. ``sample_users`` is the one part that needs TensorFlow.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pipelines.run_readings import (
    baseline_score,
    chosen_epoch,
    dataset_counts,
    first,
    gate_score,
    model_score,
    popularity_score,
    training_history,
)
from training_core.common import report_kit
from training_core.common.report_kit import Span

NOT_IN_RUN = "not in this run"
REPORT_FILE = "report.html"  # Where run-local writes the page, in its run folder.
SAMPLE_USERS = 3  # Users whose history and recommendations the page shows.
HISTORY_SHOWN = 15  # Items of each sampled user's history listed.
SPLITS = ("validation", "test")  # training_core.data.metadata's SPLIT_VALIDATION, SPLIT_TEST.
# The ranking metrics the page compares, as the artifacts name them (metric, its label).
RANKING = (
    ("hr_at_10", "HR@10"),
    ("ndcg_at_10", "NDCG@10"),
    ("full_catalog_hr_at_10", "HR@10, full catalog"),
    ("full_catalog_ndcg_at_10", "NDCG@10, full catalog"),
)


@dataclasses.dataclass(frozen=True)
class Artifact:
    """What the page reads of one artifact: its local path ("" for none) and its metadata."""

    path: str = ""
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class StepTime:
    """One step of the run: its task name, display name, what became of it and its seconds."""

    task: str
    name: str
    status: str  # "done", "failed" or "skipped".
    seconds: float | None = None


@dataclasses.dataclass(frozen=True)
class UserSample:
    """A user's history (raw item ids, every interaction the data holds) and recommendations."""

    user_id: int | str  # Raw ids, of the data's kinds (integers, or strings as written).
    history: tuple[int | str, ...]
    recommended: tuple[int | str, ...]


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """Everything the page shows; each artifact is None where the run has none.

    Attributes:
        title: the page's heading (the run's name).
        artifacts: role (a key of ``LOCAL_ARTIFACTS``) -> the artifact.
        steps: the run's steps in order, with their times (empty: not measured).
        samples: a few users' histories and recommendations (empty: none drawn).
        registration: a sentence on what was registered where no ``registered`` artifact says it
            ("": the page says it from the decision).
        where: where the run's outputs are (a folder or a pipeline job).
        samples_note: why there are no samples, where drawing them failed ("": not tried).
    """

    title: str
    artifacts: Mapping[str, Artifact]
    steps: Sequence[StepTime] = ()
    samples: Sequence[UserSample] = ()
    registration: str = ""
    where: str = ""
    samples_note: str = ""

    def artifact(self, role: str) -> Artifact | None:
        """The artifact in ``role``, None where the run has none."""
        return self.artifacts.get(role)

    def meta(self, role: str) -> Mapping[str, Any]:
        """The metadata of the artifact in ``role`` ({} where the run has none)."""
        found = self.artifacts.get(role)
        return found.metadata if found is not None else {}


def sample_users(exported_model: str, examples: str, count: int = SAMPLE_USERS) -> list[UserSample]:
    """The first ``count`` users' histories and the exported model's recommendations for them.

    The history is every item the prepared data holds for the user; the recommendations are
    what the export's ``recommend`` signature serves (seen items left out). Imports TensorFlow.
    """
    import tensorflow as tf

    from training_core.data import positives
    from training_core.data.metadata import read_metadata, read_vocab
    from training_core.serving.export import DTYPES

    meta = read_metadata(examples)
    users = read_vocab(os.path.join(examples, meta.user_vocab), meta.user_id_type)[:count]
    items = read_vocab(os.path.join(examples, meta.item_vocab), meta.item_id_type)
    row_splits, seen = positives.seen_items(meta, examples)
    model = tf.saved_model.load(exported_model)
    answer = model.signatures["recommend"](
        user_id=tf.constant(users.tolist(), DTYPES[meta.user_id_type]),
        exclude_seen=tf.constant([True] * len(users)),
    )
    recommended = answer["item_ids"].numpy().reshape(len(users), -1)
    return [
        UserSample(
            _raw(user),
            tuple(_raw(items[i]) for i in seen[row_splits[u] : row_splits[u + 1]]),
            tuple(_raw(i) for i in recommended[u]),
        )
        for u, user in enumerate(users)
    ]


def _raw(value) -> int | str:
    """A raw id as Python holds it: an int, or the text of a string id (TensorFlow's bytes)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value if isinstance(value, str) else int(value)


def try_sample_users(
    exported_model: str, examples: str, count: int = SAMPLE_USERS
) -> tuple[list[UserSample], str]:
    """``sample_users``, or none and why: the page is still written when they cannot be drawn."""
    if count <= 0:
        return [], "none asked for"
    try:
        return sample_users(exported_model, examples, count), ""
    except Exception as e:  # noqa: BLE001 (any failure: the rest of the page still stands)
        return [], f"could not be drawn ({type(e).__name__}: {e})"


def pipeline_registration(decision: Mapping[str, Any], register: bool, deploys: bool) -> str:
    """What a Vertex AI run does with the gate's verdict (its register step runs beside this).

    ``register``, ``deploys``: the pipeline's parameter and whether its profile deploys.
    """
    blessed = first(decision, "blessed")
    if blessed is None:
        return ""
    if not blessed:
        return "nothing: the gate refused the challenger, the champion stays"
    if not register:
        return "not registered (the pipeline's register parameter is false)"
    then = (
        "; then deployed to the endpoint (the deploy step)"
        if deploys
        else "; it becomes the default version"
    )
    return (
        "blessed: the register step adds it to the Vertex AI Model Registry as a new version "
        f"(that step's vertex_model artifact names it){then}"
    )


# --- what the page shows (run_report.html.j2 draws it) ---------------------------------------


def _fmt(value: float | None, digits: int = 4) -> str:
    return NOT_IN_RUN if value is None else f"{value:.{digits}f}"


def _bar_chart(chart: str, title: str, rows, unit: str = "") -> report_kit.Chart:
    return report_kit.bar_chart(chart, title, rows, unit, missing=NOT_IN_RUN)


def _data(facts: RunFacts) -> dict[str, Any]:
    """The validation gate's verdict, and the prepared data's counts (None: not in the run)."""
    checked, view = facts.meta("validation"), {}
    view["checked"] = None
    if checked:
        passed = checked.get("passed")
        verdict = {True: "passed", False: "FAILED"}.get(passed, NOT_IN_RUN)
        kinds = ", ".join(checked.get("anomaly_kinds") or []) or "none"
        drift = {
            True: "checked against the baseline statistics",
            False: "not checked (no baseline statistics given)",
        }.get(checked.get("drift_checked"), NOT_IN_RUN)
        view["checked"] = [
            ("Validation (TFDV)", Span(verdict, "ok" if passed else "bad")),
            ("Rows checked", checked.get("num_examples", NOT_IN_RUN)),
            ("Anomalies", f"{checked.get('num_anomalies', NOT_IN_RUN)} (kinds: {kinds})"),
            ("Schema", checked.get("schema_source", NOT_IN_RUN)),
            ("Drift", drift),
            *(("Not checked", note) for note in checked.get("not_checked") or []),
        ]
    examples = facts.artifact("examples")
    view["counts"], view["charts"] = None, []
    if examples is not None:
        counts = dataset_counts(examples.path, examples.metadata)
        names = (
            ("num_users", "users"),
            ("num_items", "items"),
            ("num_train_positives", "training interactions"),
            ("num_validation_users", "validation users (one held-out item each)"),
            ("num_eval_users", "test users (one held-out item each)"),
            ("eval_negatives", "sampled negatives per held-out item"),
            ("num_epochs", "epochs prepared"),
        )
        view["counts"] = [(label, counts.get(key, NOT_IN_RUN)) for key, label in names]
        view["charts"] = [
            _bar_chart(
                "data-counts",
                "Users and items",
                [("users", first(counts, "num_users")), ("items", first(counts, "num_items"))],
            ),
            _bar_chart(
                "data-splits",
                "Interactions per split",
                [
                    ("training", first(counts, "num_train_positives")),
                    ("validation", first(counts, "num_validation_users")),
                    ("test", first(counts, "num_eval_users")),
                ],
            ),
        ]
    return view


def _training(facts: RunFacts) -> dict[str, Any]:
    """The training curve with the epoch the model keeps, and training's facts."""
    model, training = facts.artifact("model"), facts.meta("training")
    history = training_history(model.path) if model is not None else []
    epochs = [float(e["epoch"]) for e in history]
    chosen = chosen_epoch(history, training)
    split = "validation" if first(training, "validation_hr_at_10") is not None else "test"
    mark = f"chosen: epoch {chosen}"

    def column(key: str) -> list[float | None]:
        return [first(e, key) for e in history]

    def curve(chart: str, title: str, series: dict) -> report_kit.Chart:
        return report_kit.line_chart(chart, title, epochs, series, chosen, mark, NOT_IN_RUN)

    both = {"sampled": "", "full catalog": "full_catalog_"}
    charts = [
        curve("training-loss", "Training loss", {"loss": column("loss")}),
        curve(
            "training-hr", f"HR@10 ({split})", {k: column(f"{p}hr_at_10") for k, p in both.items()}
        ),
        curve(
            "training-ndcg",
            f"NDCG@10 ({split})",
            {k: column(f"{p}ndcg_at_10") for k, p in both.items()},
        ),
    ]
    return {
        "epochs": len(history),
        "chosen": chosen,
        "split": split,
        "charts": charts if history else [],
        "facts": [
            ("Preset", facts.meta("model").get("preset", NOT_IN_RUN)),
            ("Epochs trained", training.get("epochs", len(history) or NOT_IN_RUN)),
            ("Global step", training.get("global_step", NOT_IN_RUN)),
            ("Examples per second (chosen epoch)", _fmt(first(training, "examples_per_sec"), 0)),
        ],
    }


def _metrics(facts: RunFacts) -> dict[str, Any] | None:
    """The model beside the champion and the baselines, on each split (None: no evaluation)."""
    metrics, decision = facts.meta("metrics"), facts.meta("decision")
    if not metrics and not decision:
        return None

    def scores(split: str, name: str) -> list[tuple[str, float | None]]:
        found = model_score(metrics, split, name)  # Evaluate's, else the gate's challenger's.
        if found is None:
            found = gate_score(decision, "challenger", split, name)
        return [
            ("model", found),
            ("champion", gate_score(decision, "champion", split, name)),
            ("popularity", popularity_score(metrics, split, name)),
            ("EASE", baseline_score(metrics, split, name, "ease")),
        ]

    rows = [
        (split, label, *(_fmt(v) for _, v in scores(split, name)))
        for split in SPLITS
        for name, label in RANKING
    ]
    charts = [
        _bar_chart(f"metrics-{split}-{name}", f"{label}, {split} split", scores(split, name))
        for split in SPLITS
        for name, label in RANKING[:2]
    ]
    return {"rows": rows, "charts": charts}


def _gate(facts: RunFacts) -> dict[str, Any] | None:
    """The gate's verdict, its reason and split (None: no decision in the run)."""
    decision = facts.meta("decision")
    if not decision:
        return None
    blessed = first(decision, "blessed")
    split = decision.get("split")
    if split is None and first(decision, "decided_on_validation") is not None:
        split = "validation" if first(decision, "decided_on_validation") else "test"
    return {
        "verdict": NOT_IN_RUN if blessed is None else ("blessed" if blessed else "refused"),
        "cls": "ok" if blessed else "bad",
        "reason": decision.get("reason", NOT_IN_RUN),
        "facts": [
            ("Decided on the split", split or NOT_IN_RUN),
            ("Tolerance", _fmt(first(decision, "tolerance"))),
        ],
    }


def _registered(facts: RunFacts) -> list[tuple[Any, Any]]:
    """What was registered and deployed, and where the exported model is."""
    registered, deployed = facts.meta("registered"), facts.meta("deployed")
    if registered:
        rows = [
            ("Registered model", registered.get("resourceName", NOT_IN_RUN)),
            ("Version", registered.get("versionId", NOT_IN_RUN)),
            ("Where", facts.artifact("registered").path or NOT_IN_RUN),
        ]
    else:
        rows = [("Registered", facts.registration or _no_registration(facts.meta("decision")))]
    if deployed:
        rows += [(f"Endpoint {key}", value) for key, value in sorted(deployed.items())]
    else:
        rows.append(("Deployed", f"not deployed ({NOT_IN_RUN})"))
    exported = facts.artifact("exported_model")
    rows.append(("Exported model", exported.path if exported else NOT_IN_RUN))
    return rows


def _no_registration(decision: Mapping[str, Any]) -> str:
    if first(decision, "blessed") == 0:
        return "nothing: the gate refused the challenger, the champion stays"
    return f"nothing registered ({NOT_IN_RUN})"


def _samples(facts: RunFacts) -> list[tuple[str, str, str]] | None:
    """Each sampled user: id, history (the first ``HISTORY_SHOWN`` items), recommendations."""
    if not facts.samples:
        return None
    rows = []
    for s in facts.samples:
        shown = ", ".join(str(i) for i in s.history[:HISTORY_SHOWN])
        extra = len(s.history) - HISTORY_SHOWN
        more = f" and {extra} more" if extra > 0 else ""
        history = f"{len(s.history)} items: {shown}{more}"
        rows.append((str(s.user_id), history, ", ".join(str(i) for i in s.recommended)))
    return rows


def _steps(facts: RunFacts) -> dict[str, Any] | None:
    """Each step with what became of it and its time, and a chart of the times."""
    if not facts.steps:
        return None
    rows = [
        (s.task, s.name, s.status, "" if s.seconds is None else f"{s.seconds:.1f} s")
        for s in facts.steps
    ]
    timed = [(s.task, s.seconds) for s in facts.steps if s.seconds is not None]
    total = sum(seconds for _, seconds in timed)
    title = f"Seconds per step ({total:.0f} s in all)"
    return {"rows": rows, "chart": _bar_chart("step-times", title, timed, " s") if timed else None}


def render(facts: RunFacts, now: datetime.datetime | None = None) -> str:
    """The whole page, one self-contained HTML document."""
    now = now or datetime.datetime.now(datetime.UTC)
    blessed = first(facts.meta("decision"), "blessed")
    return report_kit.render(
        "run_report.html.j2",
        not_in_run=NOT_IN_RUN,
        title=facts.title,
        headline={None: "", 1.0: " — blessed", 0.0: " — refused"}.get(blessed, ""),
        where=facts.where,
        built=f"{now:%Y-%m-%d %H:%M}",
        data=_data(facts),
        training=_training(facts),
        metrics=_metrics(facts),
        gate=_gate(facts),
        registered=_registered(facts),
        samples=_samples(facts),
        samples_note=facts.samples_note or NOT_IN_RUN,
        steps=_steps(facts),
    )


def write(facts: RunFacts, path: str) -> str:
    """Writes the page to ``path`` (its folder made if missing); returns ``path``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(facts))
    return path
