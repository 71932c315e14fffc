"""Runs the whole pipeline on this machine with kfp.local (no cloud, no containers)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

from pipelines.profiles import BUILTIN


class LocalRunFailed(RuntimeError):
    """A step of a local run failed (its log, printed above, says why)."""


@dataclasses.dataclass(frozen=True)
class LocalRunResult:
    """Where a local run put things, and what it measured."""

    pipeline_root: str
    outputs: dict[str, str]  # Pipeline output name -> artifact path.
    artifacts: dict[str, dict[str, str]]  # Task -> artifact name -> path, every step's outputs.
    metrics: dict[str, Any]
    seconds: float


def run_local(
    pipeline_root: str,
    arguments: dict[str, Any],
) -> LocalRunResult:
    """Runs the pipeline with kfp.local's subprocess runner in this Python environment.

    Args:
        pipeline_root: folder for every task's outputs.
        arguments: pipeline parameter values (``data_uri`` at least).
    """
    from kfp import local

    from pipelines.pipeline import LOCAL_PROFILE, build_pipeline

    os.makedirs(pipeline_root, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=pipeline_root,
        raise_on_error=True,
    )
    pipeline_func = build_pipeline(BUILTIN[LOCAL_PROFILE], local=True)
    t0 = time.perf_counter()
    try:
        task = pipeline_func(**arguments)
    except RuntimeError as e:  # kfp.local's "finished with status FAILURE. Inner task failed".
        raise LocalRunFailed(
            f"{e}. The failing step's own message is in its log above; its outputs are under "
            f"{pipeline_root}."
        ) from None
    seconds = time.perf_counter() - t0
    outputs = {name: artifact.path for name, artifact in task.outputs.items()}
    metrics = dict(task.outputs["metrics"].metadata)
    # kfp.local lays a run out as <root>/<pipeline>-<time>/<task>/, each task with the
    # executor_output.json that lists its output artifacts (metrics have metadata, no file).
    run_dir = os.path.dirname(os.path.dirname(outputs["exported_model"]))
    artifacts: dict[str, dict[str, str]] = {}
    for step in sorted(os.listdir(run_dir)):
        record = os.path.join(run_dir, step, "executor_output.json")
        if os.path.exists(record):
            with open(record) as f:
                listed = json.load(f).get("artifacts", {})
            artifacts[step] = {
                name: entry["artifacts"][0]["uri"] for name, entry in sorted(listed.items())
            }
    return LocalRunResult(pipeline_root, outputs, artifacts, metrics, seconds)
