"""The product's HTML pages: one jinja2 environment over ``report_templates/``, and the charts.

Every page (the run report, the training curves, the gate's decision, the validation report) is
a template in ``report_templates/`` that extends ``base.html.j2`` (the page frame and the one
stylesheet) and draws its tables and charts with the macros of ``parts.html.j2``. A chart's
geometry is computed here (``line_chart``, ``bar_chart``: every coordinate and label as the text
it is written as), so the templates only place it. Autoescape is on: every value from data (ids,
titles, file names, reasons) is escaped where a template writes it; markup comes from the
templates alone, or from ``markupsafe.Markup`` where a caller vouches for it (TFDV's Facets
view). The pages stay self-contained: no script, font or stylesheet from anywhere, every picture
an inline SVG, so that they open from the Vertex AI console's artifact view and a local folder.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2

COLOURS = ("#1a73e8", "#e8710a", "#188038", "#a142f4", "#d93025", "#12b5cb")  # By series.
LINE_W, LINE_H = 440, 240  # A line chart's size.
PAD_L, PAD_R, PAD_T, PAD_B = 52, 16, 28, 40  # Its plot area's margins.
BAR_W, BAR_LABEL_W, BAR_VALUE_W, BAR_ROW_H = 520, 190, 90, 22  # A bar chart's layout.


@functools.cache
def _environment() -> jinja2.Environment:
    # StrictUndefined: a name a page misspells fails its test instead of rendering as blank.
    return jinja2.Environment(
        loader=jinja2.PackageLoader("training_core.common", "report_templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(template: str, **context: Any) -> str:
    """The page ``template`` (a file of ``report_templates/``) filled with ``context``."""
    return _environment().get_template(template).render(**context)


@dataclasses.dataclass(frozen=True)
class Span:
    """A table cell's text in a class of the stylesheet (``ok``, ``bad``)."""

    text: Any
    cls: str


@dataclasses.dataclass(frozen=True)
class Label:
    """A text of a chart: where it stands (``x``, ``y`` as written) and how it is anchored."""

    x: str
    y: str
    text: str
    anchor: str = ""  # "": SVG's (start).
    colour: str = ""  # "": the stylesheet's.


@dataclasses.dataclass(frozen=True)
class Missing:
    """A chart with nothing to draw: the page says so in its place."""

    title: str
    note: str
    kind: str = "missing"


@dataclasses.dataclass(frozen=True)
class Dot:
    """One measured point of a series: its centre and its tooltip."""

    cx: str
    cy: str
    tip: str


@dataclasses.dataclass(frozen=True)
class Series:
    """One line: its colour, its points (``points`` as an SVG polyline's), dots and legend."""

    name: str
    colour: str
    points: str
    dots: tuple[Dot, ...]
    legend: Label | None


@dataclasses.dataclass(frozen=True)
class Mark:
    """A dashed vertical line at one x (the chosen epoch), with its label."""

    x: str
    top: int
    bottom: int
    label: Label


@dataclasses.dataclass(frozen=True)
class LineChart:
    """A line chart's geometry: axes, ticks, an optional mark, the series."""

    chart: str  # Its name on the page (the svg's data-chart).
    title: str
    width: int
    height: int
    axes: tuple[tuple[int, int, int, int], ...]  # x1, y1, x2, y2 of each axis line.
    ticks: tuple[Label, ...]
    mark: Mark | None
    series: tuple[Series, ...]
    kind: str = "line"

    @property
    def title_x(self) -> str:
        """Where the title's centre stands."""
        return f"{self.width / 2:.0f}"


@dataclasses.dataclass(frozen=True)
class Bar:
    """One bar: its row's label, and the bar (None: the row has no value) with its text."""

    label: Label
    missing: Label | None  # The row's "no value" text, where it has none.
    x: int = 0
    y: int = 0
    width: str = "0.0"
    height: int = 0
    colour: str = ""
    tip: str = ""
    value: Label | None = None


@dataclasses.dataclass(frozen=True)
class BarChart:
    """A horizontal bar chart's geometry: one row per bar."""

    chart: str
    title: str
    width: int
    height: int
    bars: tuple[Bar, ...]
    kind: str = "bar"

    @property
    def title_x(self) -> str:
        """Where the title's centre stands."""
        return f"{self.width / 2:.0f}"


Chart = LineChart | BarChart | Missing


def line_chart(
    chart: str,
    title: str,
    xs: Sequence[float],
    series: Mapping[str, Sequence[float | None]],
    mark_x: float | None = None,
    mark_label: str = "",
    missing: str = "no data",
) -> Chart:
    """A line per series over ``xs`` (epochs), a dashed line at ``mark_x`` (the chosen epoch).

    ``missing``: what the page says in the chart's place when there is nothing to draw.
    """
    values = [v for ys in series.values() for v in ys if v is not None]
    if not xs or not values:
        return Missing(title, missing)
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5 * (abs(lo) or 1), hi + 0.5 * (abs(hi) or 1)
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    inner_w, inner_h = LINE_W - PAD_L - PAD_R, LINE_H - PAD_T - PAD_B

    def px(x: float) -> float:
        return PAD_L + (x - x_lo) / (x_hi - x_lo) * inner_w

    def py(y: float) -> float:
        return PAD_T + (hi - y) / (hi - lo) * inner_h

    base = LINE_H - PAD_B
    ticks = [
        Label(f"{PAD_L - 4}", f"{py(y) + 4:.1f}", f"{y:.3g}", "end")
        for y in (lo, (lo + hi) / 2, hi)
    ]
    ticks += [Label(f"{px(x):.1f}", f"{base + 14}", f"{x:g}", "middle") for x in sorted(set(xs))]
    ticks.append(Label(f"{PAD_L + inner_w / 2:.0f}", f"{LINE_H - 6}", "epoch", "middle"))
    mark = None
    if mark_x is not None:
        right = px(mark_x) > PAD_L + inner_w / 2  # The label goes on the roomier side.
        at = f"{px(mark_x) + (-3 if right else 3):.1f}"
        label = Label(at, f"{base - 6}", mark_label, "end" if right else "start")
        mark = Mark(f"{px(mark_x):.1f}", PAD_T, base, label)
    lines = []
    for n, (name, ys) in enumerate(series.items()):
        colour = COLOURS[n % len(COLOURS)]
        points = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        dots = tuple(
            Dot(f"{px(x):.1f}", f"{py(y):.1f}", f"{name}, epoch {x:g}: {y:.4f}") for x, y in points
        )
        legend = (
            Label(f"{PAD_L + 6}", f"{PAD_T + 10 + 13 * n}", name, colour=colour)
            if len(series) > 1
            else None
        )
        path = " ".join(f"{d.cx},{d.cy}" for d in dots)
        lines.append(Series(name, colour, path, dots, legend))
    axes = ((PAD_L, base, LINE_W - PAD_R, base), (PAD_L, PAD_T, PAD_L, base))
    return LineChart(chart, title, LINE_W, LINE_H, axes, tuple(ticks), mark, tuple(lines))


def bar_chart(
    chart: str,
    title: str,
    rows: Sequence[tuple[str, float | None]],
    unit: str = "",
    missing: str = "no data",
) -> Chart:
    """Horizontal bars, one per ``(label, value)``; a row without a value says ``missing``."""
    known = [v for _, v in rows if v is not None]
    if not known:
        return Missing(title, missing)
    top = max(known) or 1.0
    height = 28 + BAR_ROW_H * len(rows) + 6
    bar_w = BAR_W - BAR_LABEL_W - BAR_VALUE_W
    bars = []
    for n, (label, value) in enumerate(rows):
        y = 28 + BAR_ROW_H * n
        row = Label(f"{BAR_LABEL_W - 6}", f"{y + 15}", label, "end")
        if value is None:
            bars.append(Bar(row, Label(f"{BAR_LABEL_W}", f"{y + 15}", missing)))
            continue
        w = max(1.0, value / top * bar_w) if value > 0 else 0.0
        text = f"{value:.0f}{unit}" if value >= 100 else f"{value:.4g}{unit}"
        bars.append(
            Bar(
                row,
                None,
                x=BAR_LABEL_W,
                y=y + 3,
                width=f"{w:.1f}",
                height=BAR_ROW_H - 6,
                colour=COLOURS[n % len(COLOURS)],
                tip=f"{label}: {text}",
                value=Label(f"{BAR_LABEL_W + w + 4:.1f}", f"{y + 15}", text),
            )
        )
    return BarChart(chart, title, BAR_W, height, tuple(bars))
