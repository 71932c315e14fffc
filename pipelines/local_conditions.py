"""``dsl.If`` under kfp.local: a compiled pipeline's conditions, evaluated as Vertex AI does.

kfp.local (kfp 2.13) refuses any task with a ``triggerPolicy`` condition ("'dsl.Condition' is not
supported by local pipeline execution", kubeflow/pipelines#11793), so a pipeline with a gate could
not run locally as it runs in the cloud. ``conditions_enabled()`` lets it: while the block runs,
kfp.local's per-task check accepts a condition on a sub-DAG task (the form ``dsl.If`` compiles to)
and remembers it; kfp.local then calls ``run_dag`` for that sub-DAG with the task's resolved
inputs, and the wrapper evaluates the condition on them with the evaluator of the CEL subset the
KFP compiler emits, the one verify uses too (``pipelines.compiled.evaluate_condition``). A false
condition skips the branch: no task in it runs and it has no outputs, as on Vertex AI. Loops
(``ParallelFor``) and exit handlers stay refused by kfp.local's own check.

Both patched names are module attributes of ``kfp.local.dag_orchestrator``, looked up at each call
(the recursion for nested sub-DAGs included); they are restored when the block ends.
``tests/test_run_local.py`` runs the pipeline's gate both ways through this.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

_state = threading.local()


def skipped_branches() -> list[tuple[str, str]]:
    """``(condition, reason)`` of each branch skipped in the current block, in order."""
    return list(getattr(_state, "skipped", []))


@contextlib.contextmanager
def conditions_enabled(
    on_skip: Callable[[str, list[str]], None] | None = None,
) -> Iterator[None]:
    """kfp.local runs ``dsl.If`` branches whose condition holds and skips the others.

    Args:
        on_skip: called for each skipped branch with the branch's name (``dsl.If``'s ``name``)
            and the tasks it holds, nested branches' included, that run a process.
    """
    from kfp.local import dag_orchestrator

    from pipelines.compiled import evaluate_condition

    original_check = dag_orchestrator.validate_task_spec_not_loop_or_condition
    original_run_dag = dag_orchestrator.run_dag

    def check(task_spec) -> None:
        condition = task_spec.trigger_policy.condition
        if condition and not task_spec.HasField("iterator"):
            # kfp.local calls run_dag for this task next: hand the condition to it.
            _state.pending = condition
            _state.branch = task_spec.task_info.name
            return
        _state.pending = ""
        original_check(task_spec=task_spec)

    def run_dag(*args, **kwargs):
        condition = getattr(_state, "pending", "")
        _state.pending = ""
        if condition:
            arguments = kwargs["dag_arguments"]
            if not evaluate_condition(condition, arguments):
                shown = {k: v for k, v in arguments.items() if k in condition}
                _state.skipped.append((condition, f"false for {shown}"))
                log.debug("skipped a branch: %s is false (%s)", condition, shown)
                if on_skip is not None:
                    spec = kwargs["dag_component_spec"]
                    on_skip(_state.branch, _process_tasks(spec, kwargs["components"]))
                return {}, _success()
        return original_run_dag(*args, **kwargs)

    _state.pending, _state.branch, _state.skipped = "", "", []
    dag_orchestrator.validate_task_spec_not_loop_or_condition = check
    dag_orchestrator.run_dag = run_dag
    try:
        yield
    finally:
        dag_orchestrator.validate_task_spec_not_loop_or_condition = original_check
        dag_orchestrator.run_dag = original_run_dag


def _process_tasks(dag_component_spec, components) -> list[str]:
    """The tasks of a sub-DAG, nested ones included, that run a process (by task name)."""
    out = []
    for name, task in dag_component_spec.dag.tasks.items():
        component = components[task.component_ref.name]
        if component.WhichOneof("implementation") == "dag":
            out += _process_tasks(component, components)
        else:
            out.append(name)
    return out


def _success():
    from kfp.local import status

    return status.Status.SUCCESS
