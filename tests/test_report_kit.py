"""The report kit (training_core/common/report_kit.py): every page escapes what comes from data.

The four pages (run report, training curves, the gate's decision, the validation report) are
rendered here with ids, titles, paths and reasons that hold markup; none of it may reach the page
as markup. The charts' geometry is checked where a page's test cannot see it.
"""

from __future__ import annotations

import dataclasses
import re

import jinja2
import pytest

from training_core.common import report_kit

HOSTILE = '<script>alert("x")</script>&'
ESCAPED = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;"


def _no_markup_from_data(page: str) -> None:
    assert "<script" not in page
    assert ESCAPED in page


def test_every_template_compiles():
    env = report_kit._environment()
    names = env.list_templates()
    assert {"base.html.j2", "parts.html.j2", "run_report.html.j2", "curve_page.html.j2",
            "decision.html.j2", "validation_report.html.j2"} <= set(names)  # fmt: skip
    for name in names:
        env.get_template(name)
    assert env.autoescape is True


def test_a_misspelt_name_fails_instead_of_rendering_blank():
    with pytest.raises(jinja2.UndefinedError):
        report_kit.render("decision.html.j2")


def test_the_curve_page_escapes_its_title():
    from training_core.training import curve_page

    epochs = [{"epoch": 1, "loss": 0.5, "hr_at_10": 0.3, "ndcg_at_10": 0.1,
               "examples_per_sec": 1000.0}]  # fmt: skip
    _no_markup_from_data(curve_page.training_plots_html(epochs, title=HOSTILE))
    _no_markup_from_data(curve_page.training_plots_html(epochs, title=HOSTILE, refit=True))


def test_the_decision_page_escapes_paths_and_reasons():
    from training_core.evaluation import gate

    scores = gate.Scores(f"/models/{HOSTILE}", 0.5, 0.25, 10, 0.9, 0.8, "test")
    baseline = gate.BaselineScores("ease", "test", 0.3, 0.1, HOSTILE)
    decision = gate.Decision(True, HOSTILE, "hr_at_10", 0.0, scores, None, baselines=(baseline,))
    page = gate.decision_html(decision)
    _no_markup_from_data(page)
    assert page.count(ESCAPED) == 3
    assert "<td>0.5000</td><td>0.2500</td><td>90.0%</td>" in page


def test_the_run_report_escapes_every_value(tmp_path):
    from pipelines import run_report

    facts = run_report.RunFacts(
        title=HOSTILE,
        artifacts={
            "decision": run_report.Artifact(metadata={"blessed": 1.0, "reason": HOSTILE}),
            "deployed": run_report.Artifact(metadata={HOSTILE: HOSTILE}),
        },
        steps=(run_report.StepTime(HOSTILE, HOSTILE, "done", 1.0),),
        samples=(run_report.UserSample(HOSTILE, (HOSTILE,), (HOSTILE,)),),
        where=HOSTILE,
    )
    _no_markup_from_data(run_report.render(facts))


def test_the_validation_report_escapes_findings():
    @dataclasses.dataclass
    class Result:  # What the template reads of a ValidationResult.
        passed: bool = False
        checked: tuple = (HOSTILE,)
        not_checked: tuple = ()

    page = report_kit.render(
        "validation_report.html.j2",
        result=Result(),
        verdict="1 ANOMALIES",
        facts={"input": HOSTILE},
        anomalies=[(HOSTILE, "KIND", HOSTILE, HOSTILE)],
        features=None,
        facets="",
    )
    _no_markup_from_data(page)
    assert "nothing: every column of the input has a check" in page


def test_line_chart_marks_the_chosen_epoch_at_its_dots():
    chart = report_kit.line_chart("c", "t", [1, 2, 3], {"a": [0.1, 0.3, None], "b": [1, 2, 3]}, 2)
    assert isinstance(chart, report_kit.LineChart)
    a, b = chart.series
    assert len(a.dots) == 2 and len(b.dots) == 3  # A missing value has no dot.
    assert chart.mark.x == a.dots[1].cx == b.dots[1].cx
    assert a.legend is not None  # Two series: each named.
    page = report_kit.render("decision.html.j2", blessed=1, verdict="v", reason="r", rows=[])
    assert page.startswith("<!DOCTYPE html>")


def test_bar_chart_scales_to_the_largest_and_says_what_is_missing():
    chart = report_kit.bar_chart("c", "t", [("a", 50.0), ("b", None), ("c", 100.0)], missing="-")
    a, b, c = chart.bars
    bar_w = report_kit.BAR_W - report_kit.BAR_LABEL_W - report_kit.BAR_VALUE_W
    assert float(c.width) == bar_w and float(a.width) == bar_w / 2
    assert b.missing.text == "-" and c.value.text == "100"
    assert report_kit.bar_chart("c", "t", [("a", None)]) == report_kit.Missing("t", "no data")
    assert re.fullmatch(r"\d+", chart.title_x)
