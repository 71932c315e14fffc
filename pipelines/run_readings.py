"""Reading a run's numbers tolerantly: a value a run does not hold, or holds as junk, is None.

The run report (``pipelines/run_report.py``) reads every number from an artifact's metadata or a
file a step wrote, and a run may lack any of them (an older run, another split layout, a step
that did not run): each reader here answers None, or nothing, instead of failing the page.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

_HISTORY_FILE = re.compile(r"history-(\d+)\.json$")  # training_core.training.model_dir's.


def first(meta: Mapping[str, Any], *keys: str) -> float | None:
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
    return first(metrics, f"{split}_{name}", *([name] if split == "test" else []))


def baseline_score(
    metrics: Mapping[str, Any], split: str, name: str, baseline: str = "popularity"
) -> float | None:
    """A baseline's (popularity, ease) ``name`` on ``split`` in evaluate's metrics."""
    keys = [f"{split}_{baseline}_{name}", f"{baseline}_{split}_{name}"]
    return first(metrics, *keys, *([f"{baseline}_{name}"] if split == "test" else []))


def popularity_score(metrics: Mapping[str, Any], split: str, name: str) -> float | None:
    """The popularity baseline's ``name`` on ``split`` in evaluate's metrics."""
    return baseline_score(metrics, split, name, "popularity")


def gate_score(decision: Mapping[str, Any], who: str, split: str, name: str) -> float | None:
    """The gate's score of ``who`` (challenger, champion) on ``split`` (older runs: unnamed)."""
    return first(decision, f"{who}_{split}_{name}", *([f"{who}_{name}"] if split == "test" else []))


def chosen_epoch(history: Sequence[Mapping[str, Any]], training: Mapping[str, Any]) -> int | None:
    """The epoch whose weights the model holds: the one training's metrics report, else the last.

    Training's metrics are the kept epoch's (``results.summary_metrics``): with patience the best
    one, which need not be the last.
    """
    if not history:
        return None
    hr = first(training, "validation_hr_at_10", "hr_at_10")
    loss = first(training, "loss")
    for record in history:
        if hr is not None and record.get("hr_at_10") == hr and record.get("loss", loss) == loss:
            return int(record["epoch"])
    return int(history[-1]["epoch"])


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
