"""One HTML page that tells what a pipeline run did, built from the run's own artifacts.

The page (docs/run-report.md) shows the data (the validation gate's verdict, the counts, drift),
the training curve with the chosen epoch, the model's metrics beside the champion's and the
popularity baseline's, the gate's decision and why, what was registered and deployed, a few
users' histories with their recommendations, and each step's time. It is one self-contained file:
no script, font or stylesheet from anywhere, every picture an inline SVG drawn here, so that it
opens from the Vertex AI console's artifact view and from a local folder alike.

Every value comes from an artifact and is read tolerantly (``_first``): a field a run does not
hold (an older run, another split layout, a step that did not run) shows as ``NOT_IN_RUN``
instead of failing the page. ``RunFacts`` is what the page is drawn from; ``facts_from_local_run``
collects it from a kfp.local run folder (``ncf-pipelines run-local``), ``components/run_report.py``
from its input artifacts on Vertex AI. ``sample_users`` is the one part that needs TensorFlow.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import html
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

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
# The artifacts a local run's steps write that the page reads: role -> (task, output name).
LOCAL_ARTIFACTS = {
    "validation": ("validate-data", "anomalies"),
    "examples": ("prepare-data", "examples"),
    "model": ("train-model", "model"),
    "training": ("train-model", "metrics"),
    "metrics": ("evaluate-model", "metrics"),
    "exported_model": ("export-model", "exported_model"),
    "decision": ("compare-models", "decision"),
    "registered": ("register-model", "vertex_model"),
    "deployed": ("deploy-model", "endpoint"),
    "recommendations": ("recommend", "recommendations"),
}
# Roles of the model that serves: a refit's steps where the run refit (local_run.served_task).
SERVED_ROLES = ("exported_model", "registered", "deployed", "recommendations")
_HISTORY_FILE = re.compile(r"history-(\d+)\.json$")  # training_core.training.model_dir's.


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


# --- collecting a run's facts -----------------------------------------------------------------


def served_task(tasks: Iterable[str], task: str) -> str:
    """The task of ``task``'s step for the model that serves: its refit's where one ran.

    A component used twice in one pipeline gets the task name ``TASK-2`` the second time: the
    refit's export, registration and recommendations (pipelines/pipeline.py, ``_refit``) are
    those of the model a refit run serves; without a refit, ``task`` itself.
    """
    refit = f"{task}-2"
    return refit if refit in tasks else task


def local_artifacts(run_dir: str) -> dict[str, Artifact]:
    """Role -> artifact of a kfp.local run folder, from each task's ``executor_output.json``."""
    found: dict[str, Artifact] = {}
    tasks = os.listdir(run_dir) if os.path.isdir(run_dir) else []
    for role, (task, name) in LOCAL_ARTIFACTS.items():
        if role in SERVED_ROLES:
            task = served_task(tasks, task)
        record = os.path.join(run_dir, task, "executor_output.json")
        try:
            with open(record) as f:
                entry = json.load(f)["artifacts"][name]["artifacts"][0]
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
        found[role] = Artifact(entry.get("uri", ""), dict(entry.get("metadata") or {}))
    return found


def facts_from_local_run(
    run_dir: str,
    steps: Sequence[StepTime] = (),
    samples: Sequence[UserSample] = (),
    registration: str = "",
    samples_note: str = "",
) -> RunFacts:
    """The facts of a kfp.local run folder (``<pipeline_root>/<pipeline>-<time>/``)."""
    return RunFacts(
        title=os.path.basename(os.path.normpath(run_dir)),
        artifacts=local_artifacts(run_dir),
        steps=tuple(steps),
        samples=tuple(samples),
        registration=registration,
        where=run_dir,
        samples_note=samples_note,
    )


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
    blessed = _first(decision, "blessed")
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


def training_history(model_dir: str) -> list[dict[str, Any]]:
    """The per-epoch records of a trained model folder (its newest history file; [] if none)."""
    newest: tuple[int, str] | None = None
    for path in glob.glob(os.path.join(glob.escape(model_dir), "checkpoints", "history-*.json")):
        number = _HISTORY_FILE.search(path)
        if number and (newest is None or int(number[1]) > newest[0]):
            newest = (int(number[1]), path)
    if newest is None:
        return []
    try:
        with open(newest[1]) as f:
            epochs = json.load(f).get("epochs", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [e for e in epochs if isinstance(e, Mapping) and "epoch" in e]


def dataset_counts(examples_dir: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The prepared data's ``metadata.json`` (its counts), over the artifact's metadata."""
    try:
        with open(os.path.join(examples_dir, "metadata.json")) as f:
            return {**metadata, **json.load(f)}
    except (OSError, ValueError, TypeError):
        return dict(metadata)


# --- reading tolerantly ---------------------------------------------------------------------------


def _first(meta: Mapping[str, Any], *keys: str) -> float | None:
    """The first of ``keys`` that ``meta`` holds as a finite number, else None."""
    for key in keys:
        value = meta.get(key)
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, int | float) and math.isfinite(value):
            return float(value)
    return None


def model_score(metrics: Mapping[str, Any], split: str, name: str) -> float | None:
    """The model's ``name`` on ``split`` in evaluate's metrics (unprefixed names are test's)."""
    return _first(metrics, f"{split}_{name}", *([name] if split == "test" else []))


def baseline_score(
    metrics: Mapping[str, Any], split: str, name: str, baseline: str = "popularity"
) -> float | None:
    """A baseline's (popularity, ease) ``name`` on ``split`` in evaluate's metrics."""
    keys = [f"{split}_{baseline}_{name}", f"{baseline}_{split}_{name}"]
    return _first(metrics, *keys, *([f"{baseline}_{name}"] if split == "test" else []))


def popularity_score(metrics: Mapping[str, Any], split: str, name: str) -> float | None:
    """The popularity baseline's ``name`` on ``split`` in evaluate's metrics."""
    return baseline_score(metrics, split, name, "popularity")


def gate_score(decision: Mapping[str, Any], who: str, split: str, name: str) -> float | None:
    """The gate's score of ``who`` (challenger, champion) on ``split`` (older runs: unnamed)."""
    return _first(
        decision, f"{who}_{split}_{name}", *([f"{who}_{name}"] if split == "test" else [])
    )


def chosen_epoch(history: Sequence[Mapping[str, Any]], training: Mapping[str, Any]) -> int | None:
    """The epoch whose weights the model holds: the one training's metrics report, else the last.

    Training's metrics are the kept epoch's (``loop.summary_metrics``): with patience the best
    one, which need not be the last.
    """
    if not history:
        return None
    hr = _first(training, "validation_hr_at_10", "hr_at_10")
    loss = _first(training, "loss")
    for record in history:
        if hr is not None and record.get("hr_at_10") == hr and record.get("loss", loss) == loss:
            return int(record["epoch"])
    return int(history[-1]["epoch"])


# --- drawing ----------------------------------------------------------------------------------

_COLOURS = ("#1a73e8", "#e8710a", "#188038", "#a142f4", "#d93025", "#12b5cb")
_CHART_W, _CHART_H = 440, 240
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 52, 16, 28, 40


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: float | None, digits: int = 4) -> str:
    return NOT_IN_RUN if value is None else f"{value:.{digits}f}"


def _svg_open(chart: str, title: str, width: int, height: int) -> str:
    return (
        f'<svg class="chart" data-chart="{_e(chart)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'aria-label="{_e(title)}"><title>{_e(title)}</title>'
        f'<text x="{width / 2:.0f}" y="16" text-anchor="middle" class="ct">{_e(title)}</text>'
    )


def line_chart(
    chart: str,
    title: str,
    xs: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    mark_x: float | None = None,
    mark_label: str = "",
) -> str:
    """A line per series over ``xs`` (epochs), a dashed line at ``mark_x`` (the chosen epoch)."""
    values = [v for ys in series.values() for v in ys if v is not None]
    if not xs or not values:
        return f'<p class="missing">{_e(title)}: {NOT_IN_RUN}</p>'
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5 * (abs(lo) or 1), hi + 0.5 * (abs(hi) or 1)
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    inner_w, inner_h = _CHART_W - _PAD_L - _PAD_R, _CHART_H - _PAD_T - _PAD_B

    def px(x: float) -> float:
        return _PAD_L + (x - x_lo) / (x_hi - x_lo) * inner_w

    def py(y: float) -> float:
        return _PAD_T + (hi - y) / (hi - lo) * inner_h

    parts = [_svg_open(chart, title, _CHART_W, _CHART_H)]
    base = _CHART_H - _PAD_B
    parts.append(
        f'<line x1="{_PAD_L}" y1="{base}" x2="{_CHART_W - _PAD_R}" y2="{base}" class="axis"/>'
        f'<line x1="{_PAD_L}" y1="{_PAD_T}" x2="{_PAD_L}" y2="{base}" class="axis"/>'
    )
    for y in (lo, (lo + hi) / 2, hi):
        parts.append(
            f'<text x="{_PAD_L - 4}" y="{py(y) + 4:.1f}" text-anchor="end" class="tick">'
            f"{y:.3g}</text>"
        )
    for x in sorted(set(xs)):
        parts.append(
            f'<text x="{px(x):.1f}" y="{base + 14}" text-anchor="middle" class="tick">{x:g}</text>'
        )
    parts.append(
        f'<text x="{_PAD_L + inner_w / 2:.0f}" y="{_CHART_H - 6}" text-anchor="middle" '
        'class="tick">epoch</text>'
    )
    if mark_x is not None:
        right = px(mark_x) > _PAD_L + inner_w / 2  # The label goes on the roomier side.
        parts.append(
            f'<line x1="{px(mark_x):.1f}" y1="{_PAD_T}" x2="{px(mark_x):.1f}" y2="{base}" '
            f'class="mark"><title>{_e(mark_label)}</title></line>'
            f'<text x="{px(mark_x) + (-3 if right else 3):.1f}" y="{base - 6}" '
            f'text-anchor="{"end" if right else "start"}" class="tick">{_e(mark_label)}</text>'
        )
    for n, (name, ys) in enumerate(series.items()):
        colour = _COLOURS[n % len(_COLOURS)]
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for x, y in points:
            parts.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{colour}">'
                f"<title>{_e(name)}, epoch {x:g}: {y:.4f}</title></circle>"
            )
        if len(series) > 1:
            parts.append(
                f'<text x="{_PAD_L + 6}" y="{_PAD_T + 10 + 13 * n}" fill="{colour}" '
                f'class="tick">{_e(name)}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(
    chart: str, title: str, rows: Sequence[tuple[str, float | None]], unit: str = ""
) -> str:
    """Horizontal bars, one per ``(label, value)``; a row without a value says so."""
    known = [v for _, v in rows if v is not None]
    if not known:
        return f'<p class="missing">{_e(title)}: {NOT_IN_RUN}</p>'
    top = max(known) or 1.0
    label_w, value_w, row_h = 190, 90, 22
    width, height = 520, 28 + row_h * len(rows) + 6
    bar_w = width - label_w - value_w
    parts = [_svg_open(chart, title, width, height)]
    for n, (label, value) in enumerate(rows):
        y = 28 + row_h * n
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end" class="tick">'
            f"{_e(label)}</text>"
        )
        if value is None:
            parts.append(f'<text x="{label_w}" y="{y + 15}" class="tick">{NOT_IN_RUN}</text>')
            continue
        w = max(1.0, value / top * bar_w) if value > 0 else 0.0
        colour = _COLOURS[n % len(_COLOURS)]
        text = f"{value:.0f}{unit}" if value >= 100 else f"{value:.4g}{unit}"
        parts.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
            f'fill="{colour}"><title>{_e(label)}: {_e(text)}</title></rect>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 15}" class="tick">{_e(text)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    """An HTML table; cells are HTML already (escape with ``_e``)."""
    attr = f' class="{cls}"' if cls else ""
    top = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{attr}><thead><tr>{top}</tr></thead><tbody>{body}</tbody></table>"


# --- the page's sections ----------------------------------------------------------------------


def _data_section(facts: RunFacts) -> str:
    checked = facts.meta("validation")
    parts = ["<h2>Data</h2>"]
    if not checked:
        parts.append(f'<p class="missing">The validation gate: {NOT_IN_RUN}.</p>')
    else:
        passed = checked.get("passed")
        verdict = {True: "passed", False: "FAILED"}.get(passed, NOT_IN_RUN)
        kinds = ", ".join(checked.get("anomaly_kinds") or []) or "none"
        drift = checked.get("drift_checked")
        drift_words = {
            True: "checked against the baseline statistics",
            False: "not checked (no baseline statistics given)",
        }.get(drift, NOT_IN_RUN)
        rows = [
            ("Validation (TFDV)", f'<span class="{"ok" if passed else "bad"}">{verdict}</span>'),
            ("Rows checked", _e(checked.get("num_examples", NOT_IN_RUN))),
            ("Anomalies", f"{_e(checked.get('num_anomalies', NOT_IN_RUN))} (kinds: {_e(kinds)})"),
            ("Schema", _e(checked.get("schema_source", NOT_IN_RUN))),
            ("Drift", _e(drift_words)),
        ]
        rows += [("Not checked", _e(note)) for note in checked.get("not_checked") or []]
        parts.append(_table(("", ""), rows, "facts"))
    examples = facts.artifact("examples")
    if examples is None:
        parts.append(f'<p class="missing">The prepared data: {NOT_IN_RUN}.</p>')
        return "".join(parts)
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
    rows = [(_e(label), _e(counts.get(key, NOT_IN_RUN))) for key, label in names]
    parts.append(_table(("count", "value"), rows, "facts"))
    parts.append(
        bar_chart(
            "data-counts",
            "Users and items",
            [("users", _first(counts, "num_users")), ("items", _first(counts, "num_items"))],
        )
    )
    parts.append(
        bar_chart(
            "data-splits",
            "Interactions per split",
            [
                ("training", _first(counts, "num_train_positives")),
                ("validation", _first(counts, "num_validation_users")),
                ("test", _first(counts, "num_eval_users")),
            ],
        )
    )
    return "".join(parts)


def _training_section(facts: RunFacts) -> str:
    parts = ["<h2>Training</h2>"]
    model = facts.artifact("model")
    training = facts.meta("training")
    history = training_history(model.path) if model is not None else []
    if not history:
        parts.append(f'<p class="missing">The training curve: {NOT_IN_RUN}.</p>')
    epochs = [float(e["epoch"]) for e in history]
    chosen = chosen_epoch(history, training)
    split = "validation" if _first(training, "validation_hr_at_10") is not None else "test"
    if history:
        mark = f"chosen: epoch {chosen}"
        parts.append(
            f"<p>Measured after each epoch on the <b>{split}</b> split; the model keeps "
            f"<b>epoch {chosen}</b> of {len(history)}.</p>"
        )

        def column(key: str) -> list[float | None]:
            return [_first(e, key) for e in history]

        parts.append('<div class="charts">')
        parts.append(
            line_chart(
                "training-loss", "Training loss", epochs, {"loss": column("loss")}, chosen, mark
            )
        )
        parts.append(
            line_chart(
                "training-hr",
                f"HR@10 ({split})",
                epochs,
                {"sampled": column("hr_at_10"), "full catalog": column("full_catalog_hr_at_10")},
                chosen,
                mark,
            )
        )
        parts.append(
            line_chart(
                "training-ndcg",
                f"NDCG@10 ({split})",
                epochs,
                {
                    "sampled": column("ndcg_at_10"),
                    "full catalog": column("full_catalog_ndcg_at_10"),
                },
                chosen,
                mark,
            )
        )
        parts.append("</div>")
    preset = facts.meta("model").get("preset", NOT_IN_RUN)
    rows = [
        ("Preset", _e(preset)),
        ("Epochs trained", _e(training.get("epochs", len(history) or NOT_IN_RUN))),
        ("Global step", _e(training.get("global_step", NOT_IN_RUN))),
        ("Examples per second (chosen epoch)", _fmt(_first(training, "examples_per_sec"), 0)),
    ]
    parts.append(_table(("", ""), rows, "facts"))
    return "".join(parts)


def _metrics_section(facts: RunFacts) -> str:
    metrics, decision = facts.meta("metrics"), facts.meta("decision")
    parts = ["<h2>Metrics</h2>"]
    if not metrics and not decision:
        parts.append(f'<p class="missing">The evaluation: {NOT_IN_RUN}.</p>')
        return "".join(parts)
    parts.append(
        "<p>The model against the champion (the registry's serving model, when there is one) "
        "and two baselines: popularity (the most-trained items for everyone) and EASE (a "
        "closed-form item-item model over the same training positives, its lambda chosen on "
        "validation; none where the catalogue is too large for it), on each split. Choices are "
        "made on validation; test is scored once, on the chosen model.</p>"
    )
    rows = []
    for split in SPLITS:
        for name, label in RANKING:
            model = _model(metrics, decision, split, name)
            champion = gate_score(decision, "champion", split, name)
            popularity = popularity_score(metrics, split, name)
            ease = baseline_score(metrics, split, name, "ease")
            rows.append(
                (split, _e(label), _fmt(model), _fmt(champion), _fmt(popularity), _fmt(ease))
            )
    header = ("split", "metric", "model", "champion", "popularity", "EASE")
    parts.append(_table(header, rows, "num"))
    parts.append('<div class="charts">')
    for split in SPLITS:
        for name, label in RANKING[:2]:
            bars = [
                ("model", _model(metrics, decision, split, name)),
                ("champion", gate_score(decision, "champion", split, name)),
                ("popularity", popularity_score(metrics, split, name)),
                ("EASE", baseline_score(metrics, split, name, "ease")),
            ]
            parts.append(bar_chart(f"metrics-{split}-{name}", f"{label}, {split} split", bars))
    parts.append("</div>")
    return "".join(parts)


def _model(
    metrics: Mapping[str, Any], decision: Mapping[str, Any], split: str, name: str
) -> float | None:
    """The model's score: evaluate's, else the gate's score of the challenger."""
    found = model_score(metrics, split, name)
    return found if found is not None else gate_score(decision, "challenger", split, name)


def _gate_section(facts: RunFacts) -> str:
    decision = facts.meta("decision")
    parts = ["<h2>The gate</h2>"]
    if not decision:
        parts.append(f'<p class="missing">The champion/challenger gate: {NOT_IN_RUN}.</p>')
    else:
        blessed = _first(decision, "blessed")
        verdict = NOT_IN_RUN if blessed is None else ("blessed" if blessed else "refused")
        split = decision.get("split")
        if split is None and _first(decision, "decided_on_validation") is not None:
            split = "validation" if _first(decision, "decided_on_validation") else "test"
        cls = "ok" if blessed else "bad"
        parts.append(
            f'<p class="verdict">The challenger was <span class="{cls}">{_e(verdict)}</span>: '
            f"{_e(decision.get('reason', NOT_IN_RUN))}.</p>"
        )
        rows = [
            ("Decided on the split", _e(split or NOT_IN_RUN)),
            ("Tolerance", _fmt(_first(decision, "tolerance"))),
        ]
        parts.append(_table(("", ""), rows, "facts"))
    parts.append("<h2>Registered and deployed</h2>")
    registered, deployed = facts.meta("registered"), facts.meta("deployed")
    rows = []
    if registered:
        rows += [
            ("Registered model", _e(registered.get("resourceName", NOT_IN_RUN))),
            ("Version", _e(registered.get("versionId", NOT_IN_RUN))),
            ("Where", _e(facts.artifact("registered").path or NOT_IN_RUN)),
        ]
    else:
        rows.append(("Registered", _e(facts.registration or _no_registration(decision))))
    if deployed:
        rows += [(_e(f"Endpoint {key}"), _e(value)) for key, value in sorted(deployed.items())]
    else:
        rows.append(("Deployed", f"not deployed ({NOT_IN_RUN})"))
    exported = facts.artifact("exported_model")
    rows.append(("Exported model", _e(exported.path if exported else NOT_IN_RUN)))
    parts.append(_table(("", ""), rows, "facts"))
    return "".join(parts)


def _no_registration(decision: Mapping[str, Any]) -> str:
    blessed = _first(decision, "blessed")
    if blessed == 0:
        return "nothing: the gate refused the challenger, the champion stays"
    return f"nothing registered ({NOT_IN_RUN})"


def _samples_section(facts: RunFacts) -> str:
    parts = ["<h2>Recommendations for a few users</h2>"]
    if not facts.samples:
        why = facts.samples_note or NOT_IN_RUN
        parts.append(f'<p class="missing">Sample recommendations: {_e(why)}.</p>')
        return "".join(parts)
    parts.append(
        "<p>Each user's history (every item the data holds for them) and the exported model's "
        "top items for them, seen items left out, as it serves them.</p>"
    )
    rows = []
    for s in facts.samples:
        shown = ", ".join(str(i) for i in s.history[:HISTORY_SHOWN])
        more = (
            f" and {len(s.history) - HISTORY_SHOWN} more" if len(s.history) > HISTORY_SHOWN else ""
        )
        rows.append(
            (
                _e(s.user_id),
                f"{len(s.history)} items: {_e(shown)}{_e(more)}",
                _e(", ".join(str(i) for i in s.recommended)),
            )
        )
    parts.append(_table(("user", "history", "recommended"), rows, "samples"))
    return "".join(parts)


def _steps_section(facts: RunFacts) -> str:
    parts = ["<h2>Time per step</h2>"]
    if not facts.steps:
        parts.append(f'<p class="missing">Step times: {NOT_IN_RUN}.</p>')
        return "".join(parts)
    rows = [
        (
            _e(s.task),
            _e(s.name),
            _e(s.status),
            "" if s.seconds is None else f"{s.seconds:.1f} s",
        )
        for s in facts.steps
    ]
    parts.append(_table(("step", "what", "status", "time"), rows, "steps"))
    timed = [(s.task, s.seconds) for s in facts.steps if s.seconds is not None]
    if timed:
        total = sum(seconds for _, seconds in timed)
        parts.append(
            bar_chart("step-times", f"Seconds per step ({total:.0f} s in all)", timed, " s")
        )
    return "".join(parts)


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#202124;
max-width:1100px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:left;font-size:13px;vertical-align:top}table.num td{font-variant-numeric:tabular-nums}
.charts{display:flex;flex-wrap:wrap;gap:12px}.missing{color:#80868b;font-style:italic}
.ok{color:#188038;font-weight:bold}.bad{color:#d93025;font-weight:bold}
svg.chart{background:#fafafa;border:1px solid #eee}.axis{stroke:#888}
.mark{stroke:#d93025;stroke-dasharray:4 3}.tick{font-size:11px;fill:#3c4043}
.ct{font-size:13px;font-weight:bold;fill:#202124}.where{color:#5f6368;font-size:13px}
"""


def render(facts: RunFacts, now: datetime.datetime | None = None) -> str:
    """The whole page, one self-contained HTML document."""
    now = now or datetime.datetime.now(datetime.UTC)
    decision = facts.meta("decision")
    blessed = _first(decision, "blessed")
    headline = {None: "", 1.0: " — blessed", 0.0: " — refused"}.get(blessed, "")
    sections = (
        _data_section,
        _training_section,
        _metrics_section,
        _gate_section,
        _samples_section,
        _steps_section,
    )
    body = "".join(f"<section>{section(facts)}</section>" for section in sections)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>NCF run report: {_e(facts.title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>NCF run report: {_e(facts.title)}{_e(headline)}</h1>"
        f'<p class="where">{_e(facts.where)} · built {now:%Y-%m-%d %H:%M} UTC</p>'
        f"{body}</body></html>"
    )


def write(facts: RunFacts, path: str) -> str:
    """Writes the page to ``path`` (its folder made if missing); returns ``path``."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(facts))
    return path
