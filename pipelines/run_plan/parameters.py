"""The pipeline parameters of a planned run, and the local data behind ``data_uri``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pipelines.compiled import DATA_URI

# A small, quick run unless the user says otherwise (only for parameters the template declares).
# Batch sizes stay as compiled: compile checked them against the profile's replicas.
FAST_PARAMETERS: dict[str, Any] = {
    "preset": "tiny",
    "epochs": 1,
    "eval_negatives": 20,
    "tune_trials": 2,  # A profile with tune: true; trials run one after another here.
    "tune_parallel_trials": 1,
}


def plan_parameters(
    declared: Mapping[str, Any],
    given: Mapping[str, Any],
    data_path: str | None,
    run_tasks: bool,
    bucket: str,
) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """The parameters a verification uses, those verify set itself, and the local data to stage.

    ``data_uri`` names the data as the run sees it: a ``gs://`` URI given by the user stays (the
    local data is staged behind it); a local path given as ``data_uri`` is the data itself;
    otherwise the data gets a URI in the stand-in bucket.

    Args:
        declared: the template's root parameters (``compiled.Parameter`` by name).
        given: values from the user (strings from a command line are fine).
        data_path: local data to stand behind ``data_uri`` (default: the embedded sample).
        run_tasks: whether tasks will run (small-run values are only set then).
        bucket: the stand-in bucket for data that has no ``gs://`` URI.

    Returns:
        ``(values, overrides, data_path)``; ``data_path`` is ``None`` when nothing is staged.

    Raises:
        FileNotFoundError: the local data does not exist.
    """
    from training_core.data.sample_data import sample_path

    given = dict(given)
    overrides = {
        k: v for k, v in FAST_PARAMETERS.items() if run_tasks and k in declared and k not in given
    }
    if DATA_URI in declared:
        uri = str(given.get(DATA_URI, ""))
        if uri and not uri.startswith("gs://"):
            data_path, uri = data_path or uri, ""
        data_path = data_path or sample_path()
        if not os.path.exists(data_path):
            raise FileNotFoundError(f"data {data_path!r} not found")
        if not uri:
            uri = f"gs://{bucket}/data/{os.path.basename(data_path.rstrip('/'))}"
            if os.path.isdir(data_path):
                uri += "/"
            overrides[DATA_URI] = uri
        given[DATA_URI] = uri
    else:
        data_path = None
    defaults = {
        name: p.default
        for name, p in declared.items()
        if p.default is not None and name not in given and name not in overrides
    }
    return {**defaults, **overrides, **given}, overrides, data_path if run_tasks else None
