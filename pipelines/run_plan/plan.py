"""A run of a compiled pipeline planned task by task as Vertex AI Pipelines plans it; nothing runs.

``RunPlan`` walks the root DAG in dependency order (sub-DAGs of conditions included, when their
condition holds). Each container task gets the executor input Vertex builds and its command and
arguments with every placeholder resolved; each custom-job task's request is built offline and
checked as the client library and the service check it. ``vertex_emulator.Verification``
extends it to run the tasks (``_execute``, retries); the walk is this one.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from pipelines import compiled
from pipelines.run_plan import custom_job, placeholders, template
from pipelines.run_plan.executor_io import Scope, build_executor_input, read_outputs, task_inputs
from pipelines.run_plan.parameters import plan_parameters
from pipelines.run_plan.task_records import BUILT, FAILED, PLANNED, SKIPPED, TaskRecord

DEFAULT_PIPELINE_ROOT = "gs://ncf-verify/pipeline-root"
DEFAULT_PROJECT = "verify-project"
DEFAULT_REGION = "us-central1"


class PlanError(Exception):
    """The run could not be planned (bad template, parameters or data); verify's ``VerifyError``."""


class RunPlan:
    """One run of a compiled template, planned: every task's command and custom-job request.

    Args:
        template_path: the compiled pipeline (IR YAML or JSON).
        data_path: local data behind ``data_uri`` (default: the embedded sample).
        parameter_values: pipeline parameters (checked and converted to the declared types).
        project: project id the run stands for.
        region: Vertex AI region the run stands for.
        service_account: the run's service account (``None``: the default compute account).
        network: the VPC the run is peered with.
        pipeline_root: the run's ``gs://`` pipeline root.
        run_tasks: whether a subclass will run the tasks (the small-run values are set then).
        echo: called with a line as each task starts and ends.

    Raises:
        PlanError: the template, the parameters or the data cannot be used.
    """

    def __init__(
        self,
        template_path: str,
        *,
        data_path: str | None = None,
        parameter_values: Mapping[str, Any] | None = None,
        project: str = DEFAULT_PROJECT,
        region: str = DEFAULT_REGION,
        service_account: str | None = None,
        network: str | None = None,
        pipeline_root: str = DEFAULT_PIPELINE_ROOT,
        run_tasks: bool = False,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        if not pipeline_root.startswith("gs://"):
            raise PlanError(f"pipeline_root must be a gs:// URI, got {pipeline_root!r}")
        try:
            placeholders.mount_relative(pipeline_root)
        except placeholders.GcsPathError as e:
            raise PlanError(f"pipeline_root: {e}") from e
        bucket = pipeline_root[len("gs://") :].split("/", 1)[0]
        try:
            loaded = compiled.load_template(template_path)  # The one read of the file.
            self.spec = loaded.spec
            values, self.overrides, self.data_path = plan_parameters(
                loaded.parameters, parameter_values or {}, data_path, run_tasks, bucket
            )
            self.parameters = compiled.coerce_parameters(loaded, values)
        except (FileNotFoundError, ValueError) as e:
            raise PlanError(str(e)) from e
        self.template_path = template_path
        self.ctx = placeholders.RunContext(
            project=project,
            region=region,
            pipeline_root=pipeline_root.rstrip("/"),
            pipeline_name=loaded.pipeline_name,
            job_id=_job_id(loaded.pipeline_name),
            service_account=service_account,
            network=network,
        )
        self.run_tasks = run_tasks
        self.echo = echo or (lambda line: None)
        self.records: list[TaskRecord] = []
        self._root: Scope | None = None
        self._scopes: dict[str, tuple[template.Task, Scope]] = {}  # For a rerun of one task.

    def walk(self) -> list[TaskRecord]:
        """Plans (a subclass: runs) every task of the root DAG; the records, in order.

        Raises:
            PlanError: the root DAG holds something that cannot be planned (a loop, a cycle).
        """
        self._root = Scope(parameters=dict(self.parameters), artifacts={})
        self.records = []
        self._scopes = {}
        try:
            self._run_dag(self.spec["root"], self._root)
        except template.TemplateError as e:
            raise PlanError(str(e)) from e
        return list(self.records)

    def _run_dag(self, component: Mapping[str, Any], scope: Scope) -> None:
        for task in template.dag_tasks(self.spec, component):
            self._scopes[task.name] = (task, scope)
            blocked = _blocked_by(task, scope)
            if blocked:
                record = TaskRecord(task.name, task.display_name, task.kind, SKIPPED, blocked)
            else:
                self.echo(f"{task.name}: {'running' if self.run_tasks else 'building'}")
                record = self._run_one(task, scope)
                first = (record.reason.splitlines() or [""])[0]
                self.echo(f"{task.name}: {record.status}" + (f" ({first})" if first else ""))
            scope.records[task.name] = record
            self.records.append(record)

    def _run_one(self, task: template.Task, scope: Scope, use_cache: bool = True) -> TaskRecord:
        return self._attempt(task, scope, use_cache)

    def _attempt(self, task: template.Task, scope: Scope, use_cache: bool) -> TaskRecord:
        record = TaskRecord(task.name, task.display_name, task.kind)
        try:
            params, artifacts = task_inputs(task, scope)
            unknown = compiled.condition_parameters(task.condition or "") - params.keys()
            if unknown and not self.run_tasks:
                # Reads an output of a task that was only planned: plan the branch too.
                record.reason = (
                    f"condition {task.condition} reads outputs of tasks not run "
                    f"({', '.join(sorted(unknown))}); its tasks are planned"
                )
                self._run_dag(task.component, Scope(params, artifacts))
            elif unknown:
                record.status = FAILED
                record.reason = f"condition {task.condition} reads {sorted(unknown)}: not set"
            elif task.condition and not compiled.evaluate_condition(task.condition, params):
                record.status = SKIPPED
                record.reason = f"condition {task.condition} is false ({_shown(task, params)})"
            elif task.kind == "dag":
                self._run_dag(task.component, Scope(params, artifacts))
            elif task.kind == "importer":
                record.artifacts = {"artifact": self._import(task, params)}
            else:
                self._run_executor(task, params, artifacts, record, use_cache)
        except (
            template.TemplateError,
            placeholders.PlaceholderError,
            placeholders.GcsPathError,
            custom_job.RequestError,
        ) as e:
            record.status, record.reason = FAILED, str(e)
        return record

    def _import(self, task: template.Task, params: Mapping[str, Any]) -> dict[str, Any]:
        spec = task.executor["importer"]
        source = spec["artifactUri"]
        uri = params[source["runtimeParameter"]] if "runtimeParameter" in source else None
        store = self.ctx.job_resource_name.split("/pipelineJobs/")[0]
        return {
            "name": f"{store}/metadataStores/default/artifacts/{self.ctx.task_id(task.name)}",
            "type": dict(spec["typeSchema"]),
            "uri": uri if uri is not None else source["constant"],
            "metadata": dict(spec.get("metadata") or {}),
        }

    def _run_executor(self, task, params, artifacts, record: TaskRecord, use_cache: bool) -> None:
        executor_input = build_executor_input(task, params, artifacts, self.ctx)
        container = task.executor["container"]
        command = placeholders.resolve_command(
            list(container.get("command") or []) + list(container.get("args") or []),
            executor_input,
            self.ctx.run_level(task.name),
        )
        record.command = command
        diagnosis = self._build_request(command, record) if task.kind == "custom_job" else ""
        if not self.run_tasks:
            if task.kind == "custom_job":
                record.status, record.reason = (FAILED if diagnosis else BUILT), diagnosis
            else:
                record.status, record.reason = PLANNED, "requests only: resolved, not run"
            record.artifacts, record.parameters = read_outputs(task, executor_input, None)
            return
        self._execute(task, executor_input, command, record, diagnosis, use_cache)

    def _execute(
        self,
        task: template.Task,
        executor_input: Mapping[str, Any],
        command: list[str],
        record: TaskRecord,
        diagnosis: str,
        use_cache: bool,
    ) -> None:
        """Runs one resolved task (a subclass's part: a plan runs nothing)."""
        raise NotImplementedError("a RunPlan runs no task; vertex_emulator.Verification does")

    def _build_request(self, command: list[str], record: TaskRecord) -> str:
        """Builds the launcher's request offline; returns what is wrong with it ("" if nothing)."""
        flags = custom_job.launcher_flags(command)
        try:
            request = custom_job.build_request(
                flags["--project"], flags["--location"], flags["--payload"]
            )
        except custom_job.RequestError as e:
            return str(e)
        record.requests.append(request)
        problems = custom_job.service_problems(request, flags["--location"])
        return "Vertex AI would refuse the custom job: " + "; ".join(problems) if problems else ""


def custom_job_requests(
    template_path: str,
    parameter_values: Mapping[str, Any] | None = None,
    project: str = DEFAULT_PROJECT,
    region: str = DEFAULT_REGION,
    service_account: str | None = None,
    network: str | None = None,
    pipeline_root: str = DEFAULT_PIPELINE_ROOT,
) -> dict[str, Any]:
    """Every custom-job request the run would send, built offline and checked.

    Returns:
        Task name to its ``google.cloud.aiplatform_v1.types.CreateCustomJobRequest`` (tasks
        behind a false condition are left out).

    Raises:
        PlanError: the template or parameters cannot be used.
        RequestError: a request the client library or Vertex AI would refuse (the message names
            the task and the field).
    """
    records = RunPlan(
        template_path,
        parameter_values=parameter_values,
        project=project,
        region=region,
        service_account=service_account,
        network=network,
        pipeline_root=pipeline_root,
    ).walk()
    failed = [t for t in records if t.status == FAILED]
    if failed:
        raise custom_job.RequestError("; ".join(f"task {t.name}: {t.reason}" for t in failed))
    return {t.name: t.requests[0] for t in records if t.kind == "custom_job" and t.requests}


def _blocked_by(task: template.Task, scope: Scope) -> str:
    for dep in sorted(template.upstream(task.spec)):
        upstream = scope.records.get(dep)
        if upstream is None or upstream.status == SKIPPED:
            return f"not run: upstream task {dep} did not run"
        if upstream.status == FAILED:
            return f"not run: upstream task {dep} failed"
    return ""


def _shown(task: template.Task, params: Mapping[str, Any]) -> str:
    named = {k: v for k, v in params.items() if k in (task.condition or "")}
    return ", ".join(f"{k.removeprefix('pipelinechannel--')}={v!r}" for k, v in named.items())


def _job_id(pipeline_name: str) -> str:
    """A pipeline job id as Vertex AI makes them (name and time), unique per run."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d%H%M%S")
    return f"{pipeline_name}-{now}-{secrets.token_hex(2)}"
