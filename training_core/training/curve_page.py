"""A self-contained HTML page plotting loss, HR@10 and NDCG@10 per epoch (inline SVG, no scripts).

Vertex AI shows an HTML artifact as is, so the page needs nothing from the network. The page
names the split the epochs were measured on (validation where the dataset has one) and, apart,
the test split's result for the final model, so that neither passes for the other.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from training_core.data.metadata import SPLIT_TEST

_W, _H, _PAD = 360, 220, 40


def _chart(title: str, xs: Sequence[float], ys: Sequence[float]) -> str:
    if not ys:
        return f"<div><h3>{html.escape(title)}</h3><p>no data</p></div>"
    lo, hi = min(ys), max(ys)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1

    def px(x: float) -> float:
        return _PAD + (x - x_lo) / (x_hi - x_lo) * (_W - 2 * _PAD)

    def py(y: float) -> float:
        return _H - _PAD - (y - lo) / (hi - lo) * (_H - 2 * _PAD)

    points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
    dots = "".join(
        f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3"><title>epoch {x:g}: {y:.4f}</title>'
        "</circle>"
        for x, y in zip(xs, ys, strict=True)
    )
    return (
        f'<div><h3>{html.escape(title)}</h3><svg width="{_W}" height="{_H}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{html.escape(title)}">'
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#888"/>'
        f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#888"/>'
        f'<text x="2" y="{py(hi) + 4:.1f}" font-size="10">{hi:.3f}</text>'
        f'<text x="2" y="{py(lo) + 4:.1f}" font-size="10">{lo:.3f}</text>'
        f'<text x="{_W / 2:.0f}" y="{_H - 8}" font-size="11" text-anchor="middle">epoch</text>'
        f'<polyline fill="none" stroke="#1a73e8" stroke-width="2" points="{points}"/>{dots}'
        "</svg></div>"
    )


def training_plots_html(
    epochs: Sequence[Mapping[str, float]],
    title: str = "NCF training",
    kept_epoch: int | None = None,
    split: str = SPLIT_TEST,
    test: Mapping[str, float] | None = None,
    refit: bool = False,
) -> str:
    """One page with a chart per metric, from per-epoch records (``epoch``, ``loss``, ...).

    ``refit``: a run on a refit dataset, which measures nothing held out: the loss alone.

    ``kept_epoch``: the epoch whose weights the model holds when it is not the last (patience);
    its row is marked and a line above the table says so. ``split``: the split the epochs'
    HR@10 and NDCG@10 were measured on (``TrainResult.selection_split``). ``test``: the test
    split's result for the final model (``TrainResult.to_dict()["test"]``), shown apart when it
    was scored apart (``split`` is not the test split).
    """
    xs = [float(e["epoch"]) for e in epochs]
    if refit:
        return _refit_page(title, xs, epochs)
    charts = "".join(
        _chart(name, xs, [float(e[key]) for e in epochs])
        for name, key in (
            ("Training loss", "loss"),
            (f"{split} HR@10", "hr_at_10"),
            (f"{split} NDCG@10", "ndcg_at_10"),
        )
    )
    bold = " style='font-weight:bold'"
    rows = "".join(
        f"<tr{bold if int(e['epoch']) == kept_epoch else ''}>"
        f"<td>{int(e['epoch'])}</td><td>{e['loss']:.4f}</td><td>{e['hr_at_10']:.4f}</td>"
        f"<td>{e['ndcg_at_10']:.4f}</td><td>{e['examples_per_sec']:.0f}</td></tr>"
        for e in epochs
    )
    notes = (
        f"<p>The model is epoch {kept_epoch}'s weights (the best {html.escape(split)} HR@10; the "
        "epochs after it brought no better one), not the last epoch's.</p>"
        if kept_epoch is not None
        else ""
    )
    if test is not None and split != SPLIT_TEST:
        notes += (
            f"<p>Test split, scored once on the final model: HR@10 {test['hr_at_10']:.4f}, "
            f"NDCG@10 {test['ndcg_at_10']:.4f} over {int(test['eval_users'])} users; full "
            f"catalog HR@10 {test['full_catalog_hr_at_10']:.4f}, NDCG@10 "
            f"{test['full_catalog_ndcg_at_10']:.4f}. The epochs below were measured on the "
            f"{html.escape(split)} split, which chose the model.</p>"
        )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"{_STYLE}</head><body>"
        f"<h2>{html.escape(title)}</h2>{charts}{notes}<table><tr><th>epoch</th><th>loss</th>"
        f"<th>{html.escape(split)} HR@10</th><th>{html.escape(split)} NDCG@10</th>"
        f"<th>examples/s</th></tr>{rows}</table></body></html>\n"
    )


_STYLE = (
    "<style>body{font-family:sans-serif}div{display:inline-block;margin:8px}"
    "td,th{padding:2px 10px;text-align:right}</style>"
)


def _refit_page(title: str, xs: list[float], epochs: Sequence[Mapping[str, float]]) -> str:
    """A refit's page: its loss per epoch, and why nothing else is shown."""
    rows = "".join(
        f"<tr><td>{int(e['epoch'])}</td><td>{e['loss']:.4f}</td>"
        f"<td>{e['examples_per_sec']:.0f}</td></tr>"
        for e in epochs
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"{_STYLE}</head><body><h2>{html.escape(title)}</h2>"
        f"{_chart('Training loss', xs, [float(e['loss']) for e in epochs])}"
        "<p>A refit: every interaction was trained on, the held-out ones too, so nothing was "
        "measured; the evaluated run's numbers are the model's (docs/training.md, Refit).</p>"
        "<table><tr><th>epoch</th><th>loss</th><th>examples/s</th></tr>"
        f"{rows}</table></body></html>\n"
    )


def result_page(result: Mapping, title: str = "NCF training") -> str:
    """The page of a run, from ``TrainResult.to_dict()``: its epochs, kept epoch, splits."""
    return training_plots_html(
        result["epochs"],
        title,
        kept_epoch=result.get("kept_epoch"),
        split=result.get("selection_split", SPLIT_TEST),
        test=result.get("test"),
        refit=bool(result.get("refit")),
    )
