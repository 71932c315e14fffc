"""The parts of a compiled pipeline (KFP IR) that an execution needs: DAGs, executors, conditions.

Pure functions over the IR as a dict, as ``yaml.safe_load`` reads it. The template's parameters
and its conditions are read by ``pipelines.compiled``, the one home this module builds on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pipelines.compiled import TemplateError

CUSTOM_JOB_LAUNCHER = "google_cloud_pipeline_components.container.v1.custom_job.launcher"
TUNING_JOB_LAUNCHER = (
    "google_cloud_pipeline_components.container.v1.hyperparameter_tuning_job.launcher"
)
# Tasks whose launcher creates a Vertex AI job (run against the JobService stand-in).
JOB_KINDS = ("custom_job", "tuning_job")


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of a DAG, with what it runs.

    Attributes:
        name: the task's key in its DAG.
        display_name: ``taskInfo.name``.
        spec: the task's IR (inputs, dependentTasks, triggerPolicy, ...).
        component_name: the component it runs (``comp-...``).
        component: that component's IR.
        executor: the executor's IR (``container`` or ``importer``); ``None`` for a sub-DAG.
    """

    name: str
    display_name: str
    spec: Mapping[str, Any]
    component_name: str
    component: Mapping[str, Any]
    executor: Mapping[str, Any] | None

    @property
    def kind(self) -> str:
        """``importer``, ``custom_job``, ``tuning_job``, ``container`` or ``dag``."""
        if self.executor is None:
            return "dag"
        if "importer" in self.executor:
            return "importer"
        if "container" not in self.executor:
            raise TemplateError(f"task {self.name!r}: unsupported executor {sorted(self.executor)}")
        container = self.executor["container"]
        if TUNING_JOB_LAUNCHER in [str(c) for c in container.get("command") or []]:
            return "tuning_job"
        return "custom_job" if is_custom_job_launcher(container) else "container"

    @property
    def condition(self) -> str | None:
        """The ``triggerPolicy`` condition (a CEL expression), if any."""
        return (self.spec.get("triggerPolicy") or {}).get("condition") or None


def is_custom_job_launcher(container: Mapping[str, Any]) -> bool:
    """Whether a container launches a Vertex AI custom job with GCPC's launcher arguments.

    GCPC's own launcher module, or any launcher taking its arguments (``--type CustomJob
    --payload ... --gcp_resources ...``), such as one that wraps it.
    """
    args = [str(a) for a in container.get("args") or []]
    command = [str(c) for c in container.get("command") or []]
    if CUSTOM_JOB_LAUNCHER in command:
        return True
    pairs = dict(zip(args[:-1], args[1:], strict=True))
    return pairs.get("--type") == "CustomJob" and "--payload" in args and "--gcp_resources" in args


def dag_tasks(spec: Mapping[str, Any], component: Mapping[str, Any]) -> list[Task]:
    """The tasks of a DAG component in an order that respects their dependencies.

    Raises:
        TemplateError: a cycle, an unknown component, or a loop (ParallelFor) verify cannot run.
    """
    tasks = (component.get("dag") or {}).get("tasks") or {}
    executors = (spec.get("deploymentSpec") or {}).get("executors") or {}
    out: dict[str, Task] = {}
    for name, task_spec in tasks.items():
        if "iteratorPolicy" in task_spec or "parameterIterator" in task_spec:
            raise TemplateError(f"task {name!r} is a loop (ParallelFor); verify cannot run loops")
        comp_name = task_spec["componentRef"]["name"]
        comp = (spec.get("components") or {}).get(comp_name)
        if comp is None:
            raise TemplateError(f"task {name!r} refers to unknown component {comp_name!r}")
        executor = executors.get(comp["executorLabel"]) if "executorLabel" in comp else None
        if "executorLabel" in comp and executor is None:
            raise TemplateError(f"task {name!r}: no executor {comp['executorLabel']!r}")
        display = (task_spec.get("taskInfo") or {}).get("name", name)
        out[name] = Task(name, display, task_spec, comp_name, comp, executor)
    return [out[n] for n in _topological(out)]


def _topological(tasks: Mapping[str, Task]) -> list[str]:
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise TemplateError(f"tasks depend on each other in a cycle: {' -> '.join(path)}")
        state[name] = 1
        for dep in sorted(upstream(tasks[name].spec)):
            if dep in tasks:
                visit(dep, (*path, dep))
        state[name] = 2
        order.append(name)

    for name in sorted(tasks):
        visit(name, (name,))
    return order


def upstream(task_spec: Mapping[str, Any]) -> set[str]:
    """Tasks this one waits for: ``dependentTasks`` and the producers of its inputs."""
    deps = set(task_spec.get("dependentTasks") or ())
    inputs = task_spec.get("inputs") or {}
    for kind in ("parameters", "artifacts"):
        for binding in (inputs.get(kind) or {}).values():
            for key in ("taskOutputParameter", "taskOutputArtifact"):
                if key in binding:
                    deps.add(binding[key]["producerTask"])
    return deps
