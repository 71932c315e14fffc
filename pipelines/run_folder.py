"""A kfp.local run folder as the run report reads it: which task's output holds each artifact.

``facts_from_local_run`` collects a run report's ``RunFacts`` from a kfp.local run folder
(``<pipeline_root>/<pipeline>-<time>/``, ``ncf-pipelines run-local``): each task's
``executor_output.json`` names its artifacts and their metadata. On Vertex AI,
``components/run_report.py`` collects them from its input artifacts instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

from pipelines.run_report import Artifact, RunFacts, StepTime, UserSample

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
# Roles of the model that serves: a refit's steps where the run refit (``served_task``).
SERVED_ROLES = ("exported_model", "registered", "deployed", "recommendations")


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
