"""A self-contained HTML page plotting loss, HR@10 and NDCG@10 per epoch (inline SVG, no scripts).

Vertex AI shows an HTML artifact as is, so the page needs nothing from the network. The page
names the split the epochs were measured on (validation where the dataset has one) and, apart,
the test split's result for the final model, so that neither passes for the other. Rendered
through the report kit (``training_core.common.report_kit``, template ``curve_page.html.j2``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from training_core.common import report_kit
from training_core.data.metadata import SPLIT_TEST


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
    # A refit measured nothing held out (docs/training.md, Refit): its loss alone.
    metrics = [("Training loss", "training-loss", "loss", "loss")]
    if not refit:
        metrics += [
            (f"{split} HR@10", "training-hr", "hr_at_10", f"{split} HR@10"),
            (f"{split} NDCG@10", "training-ndcg", "ndcg_at_10", f"{split} NDCG@10"),
        ]
    charts = [
        report_kit.line_chart(chart, name, xs, {name: [float(e[key]) for e in epochs]})
        for name, chart, key, _ in metrics
    ]
    rows = [
        {
            "kept": not refit and int(e["epoch"]) == kept_epoch,
            "cells": (
                int(e["epoch"]),
                *(f"{e[key]:.4f}" for _, _, key, _ in metrics),
                f"{e['examples_per_sec']:.0f}",
            ),
        }
        for e in epochs
    ]
    scored_apart = None
    if not refit and test is not None and split != SPLIT_TEST:
        scored_apart = {key: f"{test[key]:.4f}" for key in _TEST_SHOWN}
        scored_apart["eval_users"] = int(test["eval_users"])
    return report_kit.render(
        "curve_page.html.j2",
        title=title,
        charts=charts,
        refit=refit,
        kept_epoch=None if refit else kept_epoch,
        split=split,
        test=scored_apart,
        head=("epoch", *(head for *_, head in metrics), "examples/s"),
        rows=rows,
    )


_TEST_SHOWN = ("hr_at_10", "ndcg_at_10", "full_catalog_hr_at_10", "full_catalog_ndcg_at_10")


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
