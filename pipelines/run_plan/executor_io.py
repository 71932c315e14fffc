"""A task's executor input, built as Vertex AI's launcher builds it, and its outputs read back.

``build_executor_input`` goes through kfp's own local-run code
(``kfp.local.executor_input_utils.construct_executor_input``, which fills defaults and casts
integers as the backend does) with the task root under the ``gs://`` pipeline root, then places
``outputFile`` and the output parameter files under ``/gcs/`` as Vertex AI does, and resolves
run-level placeholders in parameter values. ``read_outputs`` reads what the executor wrote back:
the executor output's artifacts (URI and metadata) and parameters, else the parameter files.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from pipelines.run_plan import placeholders, template
from pipelines.run_plan.task_records import TaskRecord

EXECUTOR_OUTPUT = "executor_output.json"


@dataclasses.dataclass
class Scope:
    """What the tasks of one DAG can read: its inputs and the outputs of tasks that ran."""

    parameters: dict[str, Any]
    artifacts: dict[str, dict[str, Any]]
    records: dict[str, TaskRecord] = dataclasses.field(default_factory=dict)


def task_inputs(task: template.Task, scope: Scope) -> tuple[dict[str, Any], dict[str, dict]]:
    """A task's input parameter values and artifacts, from its DAG's inputs and upstream outputs.

    Raises:
        TemplateError: an input binding verify does not support.
    """
    inputs = task.spec.get("inputs") or {}
    params: dict[str, Any] = {}
    for name, binding in (inputs.get("parameters") or {}).items():
        if "componentInputParameter" in binding:
            value = scope.parameters.get(binding["componentInputParameter"])
            if value is None:
                # An optional parameter left unset: the KFP driver leaves it out of the executor
                # input (its ErrResolvedParameterNull case), so the component's default applies.
                continue
            params[name] = value
        elif "runtimeValue" in binding:
            params[name] = binding["runtimeValue"].get("constant")
        elif "taskOutputParameter" in binding:
            ref = binding["taskOutputParameter"]
            producer = scope.records[ref["producerTask"]]
            if ref["outputParameterKey"] in producer.parameters:  # Absent: planned, not run.
                params[name] = producer.parameters[ref["outputParameterKey"]]
        else:
            raise template.TemplateError(
                f"task {task.name!r}: input {name!r} {sorted(binding)} is not supported"
            )
    artifacts: dict[str, dict] = {}
    for name, binding in (inputs.get("artifacts") or {}).items():
        if "taskOutputArtifact" in binding:
            ref = binding["taskOutputArtifact"]
            artifacts[name] = scope.records[ref["producerTask"]].artifacts[ref["outputArtifactKey"]]
        elif "componentInputArtifact" in binding:
            artifacts[name] = scope.artifacts[binding["componentInputArtifact"]]
        else:
            raise template.TemplateError(
                f"task {task.name!r}: artifact {name!r} {sorted(binding)} is not supported"
            )
    return params, artifacts


def build_executor_input(
    task: template.Task,
    params: Mapping[str, Any],
    artifacts: Mapping[str, Mapping[str, Any]],
    ctx: placeholders.RunContext,
) -> dict[str, Any]:
    """The executor input Vertex AI gives ``task`` (as a dict, the JSON the container gets)."""
    from google.protobuf import json_format
    from kfp.local import executor_input_utils
    from kfp.pipeline_spec import pipeline_spec_pb2

    component = json_format.ParseDict(
        task.component, pipeline_spec_pb2.ComponentSpec(), ignore_unknown_fields=True
    )
    arguments = {**params, **{k: _dsl_artifact(v) for k, v in artifacts.items()}}
    root = ctx.task_root(task.name)
    message = executor_input_utils.construct_executor_input(
        component, arguments, root, block_input_artifact=False
    )
    executor_input = executor_input_utils.executor_input_to_dict(message, component)
    outputs = executor_input.setdefault("outputs", {})
    outputs["outputFile"] = placeholders.gcs_path(f"{root}/{EXECUTOR_OUTPUT}")
    for output in (outputs.get("parameters") or {}).values():
        output["outputFile"] = placeholders.gcs_path(output["outputFile"])
    inputs = executor_input.setdefault("inputs", {})
    inputs["parameterValues"] = placeholders.resolve_parameter_values(
        inputs.get("parameterValues") or {}, ctx.run_level(task.name)
    )
    return executor_input


def read_outputs(
    task: template.Task,
    executor_input: Mapping[str, Any],
    local_path: Callable[[str], str] | None,
) -> tuple[dict[str, dict], dict[str, Any]]:
    """Output artifacts and parameters of a task that ran (``local_path``: ``None`` if it did not).

    Artifacts keep the URIs the executor input gave them unless the executor output says
    otherwise, and take the metadata it wrote; parameters come from the executor output, else
    from their output files.
    """
    outputs = executor_input["outputs"]
    produced: dict[str, Any] = {}
    if local_path and os.path.exists(local_path(outputs["outputFile"])):
        with open(local_path(outputs["outputFile"])) as f:
            produced = json.load(f)
    artifacts = {}
    for name, listed in (outputs.get("artifacts") or {}).items():
        artifact = dict(listed["artifacts"][0])
        written = ((produced.get("artifacts") or {}).get(name) or {}).get("artifacts") or []
        if written:
            artifact["uri"] = written[0].get("uri", artifact["uri"])
            artifact["metadata"] = written[0].get("metadata") or {}
        artifacts[name] = artifact
    declared = (task.component.get("outputDefinitions") or {}).get("parameters") or {}
    parameters = dict(produced.get("parameterValues") or {})
    for name, output in (outputs.get("parameters") or {}).items():
        if local_path is None or name in parameters:
            continue
        path = local_path(output["outputFile"])
        if os.path.exists(path):
            with open(path) as f:
                parameters[name] = _parse_parameter(f.read(), declared.get(name, {}))
    return artifacts, parameters


def _dsl_artifact(runtime: Mapping[str, Any]):
    from kfp import dsl

    artifact = dsl.Artifact(
        name=runtime.get("name", ""),
        uri=runtime.get("uri", ""),
        metadata=dict(runtime.get("metadata") or {}),
    )
    schema = runtime.get("type") or {}
    artifact.schema_title = schema.get("schemaTitle", artifact.schema_title)
    artifact.schema_version = schema.get("schemaVersion", artifact.schema_version)
    return artifact


def _parse_parameter(text: str, spec: Mapping[str, Any]) -> Any:
    if spec.get("parameterType", "STRING") == "STRING":
        return text
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
