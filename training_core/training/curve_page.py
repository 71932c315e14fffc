"""A self-contained HTML page plotting loss, HR@10 and NDCG@10 per epoch (inline SVG, no scripts).

Vertex AI shows an HTML artifact as is, so the page needs nothing from the network.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

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
) -> str:
    """One page with a chart per metric, from per-epoch records (``epoch``, ``loss``, ...).

    ``kept_epoch``: the epoch whose weights the model holds when it is not the last (patience);
    its row is marked and a line above the table says so.
    """
    xs = [float(e["epoch"]) for e in epochs]
    charts = "".join(
        _chart(name, xs, [float(e[key]) for e in epochs])
        for name, key in (
            ("Training loss", "loss"),
            ("HR@10", "hr_at_10"),
            ("NDCG@10", "ndcg_at_10"),
        )
    )
    bold = " style='font-weight:bold'"
    rows = "".join(
        f"<tr{bold if int(e['epoch']) == kept_epoch else ''}>"
        f"<td>{int(e['epoch'])}</td><td>{e['loss']:.4f}</td><td>{e['hr_at_10']:.4f}</td>"
        f"<td>{e['ndcg_at_10']:.4f}</td><td>{e['examples_per_sec']:.0f}</td></tr>"
        for e in epochs
    )
    kept = (
        f"<p>The model is epoch {kept_epoch}'s weights (the best HR@10; the epochs after it "
        "brought no better one), not the last epoch's.</p>"
        if kept_epoch is not None
        else ""
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif}div{display:inline-block;margin:8px}"
        "td,th{padding:2px 10px;text-align:right}</style></head><body>"
        f"<h2>{html.escape(title)}</h2>{charts}{kept}<table><tr><th>epoch</th><th>loss</th>"
        f"<th>HR@10</th><th>NDCG@10</th><th>examples/s</th></tr>{rows}</table></body></html>\n"
    )
