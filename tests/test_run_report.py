"""The run report page (pipelines/run_report.py, docs/run-report.md).

Built from small recorded runs written here from known values (a kfp.local run folder: each
task's ``executor_output.json``, the prepared data's ``metadata.json``, the training history), so
that what the page must show is known exactly; older and partial runs must render too. The tests
with "chromium" in their names render pages in headless Chromium (Debian's ``chromium``): ``make
test`` leaves them out by name and ``make report-check`` runs them, on a real run-local report
as well (``NCF_RUN_REPORT``); without Chromium they fail, they never skip.
"""

from __future__ import annotations

import html.parser
import json
import logging
import os
import re
import shutil
import subprocess

import pytest

from components.run_report import report_run
from pipelines import run_folder, run_readings, run_report
from pipelines.local_run import LocalRunResult, StepClock
from pipelines.run_report import NOT_IN_RUN, RunFacts, StepTime, UserSample

RUN_REPORT_ENV = "NCF_RUN_REPORT"  # make report-check: the report a real run-local wrote.
# The recorded run's values: each distinct, so that a value in the wrong cell is caught.
HISTORY = [
    {"epoch": 1, "step": 10, "loss": 0.5, "hr_at_10": 0.3, "ndcg_at_10": 0.15,
     "examples_per_sec": 1000.0, "eval_users": 50, "full_catalog_hr_at_10": 0.2,
     "full_catalog_ndcg_at_10": 0.1},
    {"epoch": 2, "step": 20, "loss": 0.4, "hr_at_10": 0.5123, "ndcg_at_10": 0.25,
     "examples_per_sec": 1100.0, "eval_users": 50, "full_catalog_hr_at_10": 0.3,
     "full_catalog_ndcg_at_10": 0.12},
    {"epoch": 3, "step": 30, "loss": 0.35, "hr_at_10": 0.45, "ndcg_at_10": 0.22,
     "examples_per_sec": 1200.0, "eval_users": 50, "full_catalog_hr_at_10": 0.28,
     "full_catalog_ndcg_at_10": 0.11},
]  # fmt: skip
# Patience kept epoch 2 (the best), not the last: training's metrics are epoch 2's.
TRAINING = {"validation_hr_at_10": 0.5123, "validation_ndcg_at_10": 0.25, "loss": 0.4,
            "best_validation_hr_at_10": 0.5123, "test_hr_at_10": 0.4567, "epochs": 3,
            "global_step": 30, "examples_per_sec": 1100.0}  # fmt: skip
METRICS = {
    "hr_at_10": 0.4567, "ndcg_at_10": 0.2345, "full_catalog_hr_at_10": 0.3456,
    "full_catalog_ndcg_at_10": 0.1234, "popularity_hr_at_10": 0.1111,
    "popularity_ndcg_at_10": 0.0555, "popularity_full_catalog_hr_at_10": 0.0777,
    "validation_hr_at_10": 0.5123, "validation_ndcg_at_10": 0.25,
    "validation_popularity_hr_at_10": 0.1222, "beats_popularity": 1,
    "ease_hr_at_10": 0.1999, "validation_ease_hr_at_10": 0.2333, "ease_lambda": 100.0,
}  # fmt: skip
DECISION = {
    "blessed": 1.0, "tolerance": 0.0, "decided_on_validation": 1.0,
    "challenger_validation_hr_at_10": 0.5123, "champion_validation_hr_at_10": 0.4999,
    "challenger_test_hr_at_10": 0.4567, "champion_test_hr_at_10": 0.4444,
    "reason": "challenger hr_at_10 0.5123 >= champion 0.4999 - 0.0000 (validation split)",
    "split": "validation",
}  # fmt: skip
VALIDATION = {"num_examples": 98371, "num_anomalies": 0, "anomaly_kinds": [], "passed": True,
              "schema_source": "inferred", "drift_checked": False,
              "not_checked": ["rating: values not range-checked"]}  # fmt: skip
DATASET = {"num_users": 50, "num_items": 70, "num_train_positives": 900,
           "num_validation_users": 48, "num_eval_users": 50, "eval_negatives": 99,
           "num_epochs": 3}  # fmt: skip
STEPS = (
    StepTime("validate-data", "Validate raw data (TFDV gate)", "done", 23.1),
    StepTime("prepare-data", "Prepare pre-batched TFRecords", "done", 5.3),
    StepTime("train-model", "Train NeuMF (cpu)", "done", 36.4),
    StepTime("evaluate-model", "Evaluate HR@10 / NDCG@10", "done", 24.8),
    StepTime("export-model", "Export serving SavedModel", "done", 14.8),
    StepTime("compare-models", "Compare with the champion", "done", 14.2),
    StepTime("register-model", "Register in the local Model Registry", "done", 0.2),
    StepTime("recommend", "Recommend for every user (batch)", "skipped"),
)
SAMPLES = (UserSample(7, (1, 2, 3), (40, 41, 42)), UserSample(9, tuple(range(100, 130)), (5, 6)))


RUN = {  # Task -> output -> metadata, of a whole blessed run.
    "validate-data": {"anomalies": VALIDATION},
    "prepare-data": {"examples": {"num_users": 50}},
    "train-model": {"model": {"preset": "quick"}, "metrics": TRAINING},
    "evaluate-model": {"metrics": METRICS},
    "export-model": {"exported_model": {"top_k": 10}},
    "compare-models": {"decision": DECISION},
    "register-model": {"vertex_model": {"resourceName": "local:/r/ncf", "versionId": "2"}},
}


def record_run(root, tasks: dict = RUN, history=HISTORY, dataset=DATASET) -> str:
    """A kfp.local run folder under ``root`` holding ``tasks`` (task -> {output: metadata})."""
    run_dir = root / "ncf-pipeline-2026-01-01-00-00-00-000000"
    for task, outputs in tasks.items():
        (run_dir / task).mkdir(parents=True)
        listed = {}
        for name, metadata in outputs.items():
            uri = str(run_dir / task / name)
            listed[name] = {"artifacts": [{"name": name, "uri": uri, "metadata": metadata}]}
        (run_dir / task / "executor_output.json").write_text(json.dumps({"artifacts": listed}))
    examples = run_dir / "prepare-data" / "examples"
    if examples.parent.exists() and dataset is not None:
        examples.mkdir()
        (examples / "metadata.json").write_text(json.dumps(dataset))
    checkpoints = run_dir / "train-model" / "model" / "checkpoints"
    if checkpoints.parent.parent.exists() and history is not None:
        checkpoints.mkdir(parents=True)
        for n in range(1, len(history) + 1):  # One file per checkpoint; the newest holds all.
            record = {"epochs": history[:n], "partial": [0.0, 0, 0.0]}
            (checkpoints / f"history-{n * 10}.json").write_text(json.dumps(record))
    return str(run_dir)


class _Page(html.parser.HTMLParser):
    """The page's tables (rows of cell texts), charts (data-chart) and tags."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.charts: dict[str, list[dict]] = {}
        self.tags: list[str] = []
        self._chart: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "svg":
            self._chart = attrs.get("data-chart")
            self.charts[self._chart] = []
        elif self._chart is not None:
            self.charts[self._chart].append({"tag": tag, **attrs})

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "svg":
            self._chart = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def table(self, first_header: str) -> list[list[str]]:
        """The rows below the header of the first table whose first header cell is this."""
        return next(t[1:] for t in self.tables if t and t[0] and t[0][0] == first_header)

    def facts(self) -> dict[str, str]:
        """Every two-column fact table's rows, as label -> value."""
        return {r[0]: r[1] for t in self.tables for r in t[1:] if len(r) == 2}


def _page(run_dir: str, **changes) -> tuple[str, _Page]:
    facts = run_folder.facts_from_local_run(run_dir, steps=STEPS, samples=SAMPLES)
    text = run_report.render(RunFacts(**{**vars(facts), **changes}))
    return text, _Page(text)


def test_page_shows_the_runs_values_where_they_belong(tmp_path):
    text, page = _page(record_run(tmp_path))
    metrics = {(r[0], r[1]): r[2:] for r in page.table("split")}
    # model, champion, popularity, EASE: each split's own numbers.
    assert metrics[("validation", "HR@10")] == ["0.5123", "0.4999", "0.1222", "0.2333"]
    assert metrics[("test", "HR@10")] == ["0.4567", "0.4444", "0.1111", "0.1999"]
    assert metrics[("test", "NDCG@10, full catalog")] == ["0.1234", *[NOT_IN_RUN] * 3]
    assert metrics[("validation", "NDCG@10")] == ["0.2500", *[NOT_IN_RUN] * 3]
    facts = page.facts()
    assert facts["Validation (TFDV)"] == "passed" and facts["Rows checked"] == "98371"
    assert facts["Not checked"] == "rating: values not range-checked"
    assert facts["users"] == "50" and facts["validation users (one held-out item each)"] == "48"
    assert facts["Decided on the split"] == "validation"
    assert facts["Registered model"] == "local:/r/ncf" and facts["Version"] == "2"
    assert "blessed</span>: challenger hr_at_10 0.5123 &gt;= champion 0.4999" in text
    assert "— blessed</h1>" in text
    # Every step, in order, with what became of it.
    steps = page.table("step")
    assert [r[0] for r in steps] == [s.task for s in STEPS]
    assert steps[2][2:] == ["done", "36.4 s"] and steps[-1][2:] == ["skipped", ""]
    samples = page.table("user")
    assert samples[0] == ["7", "3 items: 1, 2, 3", "40, 41, 42"]
    assert samples[1][1].startswith("30 items: 100, 101,") and samples[1][1].endswith("15 more")


def test_page_marks_the_epoch_the_model_keeps_not_the_last(tmp_path):
    text, page = _page(record_run(tmp_path))
    assert "the model keeps <b>epoch 2</b> of 3" in text
    hr = page.charts["training-hr"]
    mark = next(e for e in hr if e["tag"] == "line" and e.get("class") == "mark")
    dots = [e for e in hr if e["tag"] == "circle"]
    assert len(dots) == 6  # Sampled and full-catalog HR@10, 3 epochs each.
    assert mark["x1"] == dots[1]["cx"] != dots[2]["cx"]  # At epoch 2's dot.
    # Without patience the model is the last epoch's: training's metrics are epoch 3's.
    last = {**TRAINING, "validation_hr_at_10": 0.45, "loss": 0.35}
    assert run_readings.chosen_epoch(HISTORY, last) == 3
    assert run_readings.chosen_epoch([], TRAINING) is None


def test_page_is_one_file_that_needs_nothing_else(tmp_path):
    text, page = _page(record_run(tmp_path))
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert not re.search(r"\b(src|href)=|url\(|@import", text)
    assert set(re.findall(r"https?://[^\s\"']+", text)) == {"http://www.w3.org/2000/svg"}
    # The pictures: drawn here, each with a size.
    assert {
        "data-counts", "data-splits", "training-loss", "training-hr", "training-ndcg",
        "metrics-validation-hr_at_10", "metrics-test-hr_at_10", "step-times",
    } <= set(page.charts)  # fmt: skip
    for chart in re.findall(r"<svg [^>]*>", text):
        assert re.search(r'width="[1-9]\d*" height="[1-9]\d*"', chart), chart


def test_an_older_run_without_validation_shows_what_it_has(tmp_path):
    """The names before issue 39: unprefixed (test) metrics, a decision without splits."""
    old_decision = {"blessed": 0.0, "challenger_hr_at_10": 0.40, "champion_hr_at_10": 0.42,
                    "reason": "challenger hr_at_10 0.4000 < champion 0.4200"}  # fmt: skip
    tasks = {
        "train-model": {"model": {}, "metrics": {"hr_at_10": 0.45, "loss": 0.35, "epochs": 3}},
        "evaluate-model": {"metrics": {"hr_at_10": 0.40, "popularity_hr_at_10": 0.1}},
        "compare-models": {"decision": old_decision},
    }
    text, page = _page(record_run(tmp_path, tasks))
    metrics = {(r[0], r[1]): r[2:] for r in page.table("split")}
    assert metrics[("test", "HR@10")] == ["0.4000", "0.4200", "0.1000", NOT_IN_RUN]  # No EASE.
    assert metrics[("validation", "HR@10")] == [NOT_IN_RUN] * 4
    assert "measured after each epoch on the <b>test</b> split" in text.lower()
    assert "the model keeps <b>epoch 3</b> of 3" in text
    facts = page.facts()
    assert facts["Registered"] == "nothing: the gate refused the challenger, the champion stays"
    assert f"The validation gate: {NOT_IN_RUN}" in text
    assert f"The prepared data: {NOT_IN_RUN}" in text


@pytest.mark.parametrize(
    "tasks",
    [
        {},  # A run that failed in its first step.
        {"validate-data": {"anomalies": VALIDATION}},
        # Junk where numbers belong, and no history file.
        {"evaluate-model": {"metrics": {"hr_at_10": "high", "validation_hr_at_10": None}},
         "compare-models": {"decision": {"blessed": "yes", "tolerance": float("nan")}},
         "train-model": {"metrics": {"loss": [1]}}},
    ],
)  # fmt: skip
def test_a_partial_or_odd_run_still_renders(tmp_path, tasks):
    run_dir = record_run(tmp_path, tasks, history=None)
    (tmp_path / "junk").mkdir()
    text, page = _page(run_dir, steps=(), samples=())
    for missing in ("Step times", "Sample recommendations"):
        assert f"{missing}: {NOT_IN_RUN}" in text
    assert f"The training curve: {NOT_IN_RUN}" in text
    assert page.tables  # Still a page, with the tables it can fill.


def test_a_corrupt_history_file_leaves_the_curve_out(tmp_path):
    run_dir = record_run(tmp_path)
    checkpoints = os.path.join(run_dir, "train-model", "model", "checkpoints")
    with open(os.path.join(checkpoints, "history-30.json"), "w") as f:
        f.write("{not json")
    assert run_readings.training_history(os.path.dirname(checkpoints)) == []


def test_users_that_cannot_be_sampled_leave_the_rest_of_the_page(tmp_path):
    samples, why = run_report.try_sample_users(str(tmp_path / "no-export"), str(tmp_path / "no"))
    assert samples == [] and why.startswith("could not be drawn (")
    text, _ = _page(record_run(tmp_path), samples=(), samples_note=why)
    assert f"Sample recommendations: {why}" in html.unescape(text)  # Its quotes escaped.
    assert run_report.try_sample_users("x", "y", 0) == ([], "none asked for")


def test_step_clock_times_the_steps_kfp_local_reports(monkeypatch):
    from kfp.local import logging_utils, status

    clock = StepClock()
    now = iter([100.0, 112.5, 113.0, 114.0])
    monkeypatch.setattr("pipelines.local_run.time.monotonic", lambda: next(now))
    ok = logging_utils.format_status(status.Status.SUCCESS)
    failed = logging_utils.format_status(status.Status.FAILURE)
    with clock.timing(), logging_utils.local_logger_context():
        for name, ended in (("train-model", ok), ("evaluate-model", failed)):
            task = logging_utils.format_task_name(name)
            logging.info(f"Executing task {task}")
            logging.info(f"Task {task} finished with status {ended}")
    # In the order they ran (not the pipeline's listing), the one that did not run last.
    listed = {"evaluate-model": "Evaluate", "recommend": "Recommend", "train-model": "Train"}
    assert clock.steps(listed) == (
        StepTime("train-model", "Train", "done", 12.5),
        StepTime("evaluate-model", "Evaluate", "failed", 1.0),
        StepTime("recommend", "Recommend", "skipped"),
    )


def test_report_run_component_writes_the_page_from_its_artifacts(tmp_path):
    from kfp.dsl import HTML, Artifact, Dataset, Metrics, Model

    run_dir = record_run(tmp_path)

    def given(cls, task, name, metadata):
        return cls(uri=os.path.join(run_dir, task, name), metadata=dict(metadata))

    out = HTML(uri=str(tmp_path / "report.html"))
    report_run.python_func(
        anomalies=given(Artifact, "validate-data", "anomalies", VALIDATION),
        examples=given(Dataset, "prepare-data", "examples", {}),
        model=given(Model, "train-model", "model", {"preset": "quick"}),
        training_metrics=given(Metrics, "train-model", "metrics", TRAINING),
        metrics=given(Metrics, "evaluate-model", "metrics", METRICS),
        exported_model=given(Model, "export-model", "exported_model", {}),
        decision=given(Metrics, "compare-models", "decision", DECISION),
        report=out,
        register=True,
        sample_users=0,
        run_name="ncf-pipeline-20260101",
    )
    text = (tmp_path / "report.html").read_text()
    page = _Page(text)
    assert "NCF run report: ncf-pipeline-20260101 — blessed" in text
    assert page.table("split")[0][2:] == ["0.5123", "0.4999", "0.1222", "0.2333"]
    assert page.facts()["Registered"].startswith("blessed: the register step adds it")
    assert "Sample recommendations: none asked for" in text
    assert f"Step times: {NOT_IN_RUN}" in text  # Vertex AI shows them beside the page.


def test_pipeline_registration_says_what_the_run_does_with_the_verdict():
    words = run_report.pipeline_registration
    assert words({}, True, True) == ""
    assert words({"blessed": 0.0}, True, True).startswith("nothing: the gate refused")
    assert "register parameter is false" in words({"blessed": 1.0}, False, False)
    assert words({"blessed": 1.0}, True, True).endswith("then deployed to the endpoint (the "
                                                         "deploy step)")  # fmt: skip
    assert words({"blessed": 1.0}, True, False).endswith("it becomes the default version")


@pytest.mark.slow  # The session's tiny model, trained and exported.
def test_run_local_writes_the_report_with_real_recommendations(tmp_path, tiny_data, tiny_export):
    """run-local's ``write_report`` over a run whose export and data are real (conftest's)."""
    import numpy as np
    import tensorflow as tf

    from pipelines.commands import run_local
    from training_core.data import positives
    from training_core.data.metadata import read_metadata, read_vocab

    refused = {**RUN, "compare-models": {"decision": {**DECISION, "blessed": 0.0}}}
    del refused["register-model"]
    run_dir = record_run(tmp_path, refused)
    exported = os.path.join(run_dir, "export-model", "exported_model")
    os.symlink(tiny_export.export_dir, exported)
    result = LocalRunResult(
        pipeline_root=str(tmp_path),
        outputs={"exported_model": exported, "examples": tiny_data},
        artifacts={},
        metrics=METRICS,
        seconds=1.0,
        decision={"blessed": 0.0},
        logs="",
        steps=STEPS,
    )
    path = run_local.write_report(result, str(tmp_path / "registry"))
    assert path == str(tmp_path / run_report.REPORT_FILE)
    page = _Page(open(path).read())
    shown = page.table("user")
    assert len(shown) == run_report.SAMPLE_USERS
    # What the export serves for the first users, and every item the data holds for them.
    meta = read_metadata(tiny_data)
    users = read_vocab(os.path.join(tiny_data, meta.user_vocab))[: len(shown)]
    items = read_vocab(os.path.join(tiny_data, meta.item_vocab))
    served = (
        tf.saved_model.load(tiny_export.export_dir)
        .signatures["recommend"](
            user_id=tf.constant(users, tf.int64), exclude_seen=tf.constant([True] * len(users))
        )["item_ids"]
        .numpy()
    )
    splits, seen = positives.seen_items(meta, tiny_data)
    for u, row in enumerate(shown):
        held = [int(items[i]) for i in seen[splits[u] : splits[u + 1]]]
        assert row[0] == str(users[u])
        assert row[1].startswith(f"{len(held)} items: " + ", ".join(map(str, held[:3])))
        assert row[2] == ", ".join(str(i) for i in served[u])
        assert not set(held) & set(served[u].tolist())  # Seen items are left out.
    assert np.all(served > 0)
    facts = page.facts()
    assert facts["Registered"] == "nothing registered, the champion stays"  # run-local's words.


# --- in a real browser ----------------------------------------------------------------------------

# Measures the page as Chromium laid it out; appended to a copy, never to the report itself.
_MEASURE = """<script>
(() => {
  const size = (e) => { const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  const charts = [...document.querySelectorAll('svg.chart')].map(
      (s) => [s.dataset.chart, ...size(s)]);
  const steps = document.querySelectorAll('table.steps tbody tr').length;
  const out = document.createElement('pre');
  out.id = 'measured';
  out.textContent = JSON.stringify({charts, steps, height: document.body.scrollHeight});
  document.body.appendChild(out);
})();
</script>"""


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "these tests render the report in headless Chromium, which is not installed: "
            "`make report-check` installs Debian's chromium (apt-get install chromium), runs them"
        )
    return found


def _render_in_chromium(report: str, work) -> tuple[dict, object]:
    """Chromium's measurements of the page (``_MEASURE``) and a screenshot of it (PIL image)."""
    from PIL import Image

    chromium = _chromium()
    with open(report, encoding="utf-8") as f:
        text = f.read()
    measured = work / "measured.html"
    measured.write_text(text.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--window-size=1200,6000"]  # fmt: skip
    dom = subprocess.run(
        [*flags, "--dump-dom", measured.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, f"Chromium did not run the page's layout:\n{dom[-2000:]}"
    shot = work / "report.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", f"file://{os.path.abspath(report)}"],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(html.unescape(found[1])), Image.open(shot).convert("RGB")


def _check_rendered(report: str, work, steps: int) -> None:
    measured, image = _render_in_chromium(report, work)
    charts = measured["charts"]
    assert len(charts) >= 5, charts
    flat = [c for c in charts if not (c[1] > 50 and c[2] > 50)]
    assert not flat, f"charts drawn without a size: {flat}"
    assert measured["steps"] == steps
    assert measured["height"] > 1500  # Every section laid out, one below the other.
    # The screenshot is a page, not a blank: dark text and the charts' blue.
    pixels = image.getdata()
    blue = sum(1 for p in pixels if p == (0x1A, 0x73, 0xE8))
    dark = sum(1 for p in pixels if sum(p) < 200)
    assert blue > 2000 and dark > 5000, (blue, dark)


def test_report_renders_in_headless_chromium(tmp_path):
    run_dir = record_run(tmp_path)
    facts = run_folder.facts_from_local_run(run_dir, steps=STEPS, samples=SAMPLES)
    report = run_report.write(facts, str(tmp_path / "report.html"))
    _check_rendered(report, tmp_path, len(STEPS))


def test_run_local_report_renders_in_headless_chromium(tmp_path):
    """The report of a real run-local (``make report-check`` runs one and names it here)."""
    report = os.environ.get(RUN_REPORT_ENV)
    if not report:
        pytest.fail(f"{RUN_REPORT_ENV} names no report: `make report-check` runs run-local first")
    text = open(report, encoding="utf-8").read()
    steps = len(_Page(text).table("step"))
    assert steps >= 8  # validate .. compare, register and recommend: each in the table.
    _check_rendered(report, tmp_path, steps)
