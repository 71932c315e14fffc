"""Placeholders in a compiled pipeline, resolved the way Vertex AI Pipelines resolves them.

Three kinds, in the order Vertex applies them:

1. Run-level placeholders (``{{$.pipeline_job_name}}``, google-cloud-pipeline-components'
   ``{{$.pipeline_google_cloud_project_id}}``, ``{{$.pipeline_service_account}}``, ...) inside
   input parameter values, such as the custom-job wrapper's defaults: ``resolve_parameter_values``.
2. Executor-input placeholders in a container's command and arguments: ``{{$}}``,
   ``{{$.inputs.parameters['x']}}``, ``{{$.outputs.artifacts['m'].path}}``, ...; the ``Concat`` and
   ``IfPresent`` structures go through kfp's own local-run resolver first: ``resolve_command``.
3. ``json_escape[N]`` on any of them: the value's text escaped N times as the inside of a JSON
   string, so that the executor input fits in a JSON payload (``{{$.json_escape[1]}}`` is what
   google-cloud-pipeline-components' custom-job wrapper puts in ``worker_pool_specs``). A
   placeholder inside a parameter value (the wrapper's ``worker_pool_specs`` holds
   ``{{$.json_escape[1]}}``) is resolved in the value's JSON text when that value is substituted.

Parameters are substituted as Vertex does: strings as they are, everything else as JSON; a
parameter with no value becomes ``null``. Artifact ``.path`` is the ``/gcs/`` path of its
``gs://`` URI (the Cloud Storage FUSE mount every Vertex container has).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

GCS_MOUNT = "/gcs/"
_PLACEHOLDER = re.compile(r"\{\{\$(?:\.(?P<expr>[^{}]*?))?\}\}")
_JSON_ESCAPE = re.compile(r"(?:^|\.)json_escape\[(?P<level>\d+)\]$")
_IO = re.compile(
    r"^(?P<io>inputs|outputs)\.(?P<kind>parameters|artifacts)\[(?P<q>['\"])(?P<name>.+?)(?P=q)\]"
    r"(?:\.(?P<attr>[A-Za-z_]+))?$"
)


class PlaceholderError(ValueError):
    """A placeholder that Vertex AI would not resolve (or that verify does not know)."""


class GcsPathError(ValueError):
    """A ``gs://`` URI or ``/gcs/`` path that would lead out of verify's ``/gcs/`` stand-in."""


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What Vertex AI knows about a pipeline run when it resolves placeholders.

    Attributes:
        project: the project id the run is submitted to.
        region: the region of the run (its Vertex AI endpoint).
        pipeline_root: the run's ``gs://`` pipeline root.
        pipeline_name: ``pipelineInfo.name`` of the template.
        job_id: the pipeline job's id.
        service_account: the run's service account (``None``: the default compute one).
        network: the VPC the run is peered with (``None``: none).
    """

    project: str
    region: str
    pipeline_root: str
    pipeline_name: str
    job_id: str
    service_account: str | None = None
    network: str | None = None

    @property
    def project_number(self) -> str:
        """A stand-in project number (Vertex names resources and run folders with it)."""
        digest = hashlib.sha256(self.project.encode()).hexdigest()
        return str(100_000_000_000 + int(digest[:12], 16) % 900_000_000_000)

    @property
    def effective_service_account(self) -> str:
        """The run's service account; Vertex falls back to the default compute account.

        That account is named after the project's number, which nothing offline knows: it is
        shown as ``PROJECT_NUMBER-compute@...``, never with the stand-in number above.
        """
        from pipelines.placeholder_values import DEFAULT_COMPUTE_SERVICE_ACCOUNT

        return self.service_account or DEFAULT_COMPUTE_SERVICE_ACCOUNT

    @property
    def job_resource_name(self) -> str:
        """The pipeline job's resource name."""
        return f"projects/{self.project_number}/locations/{self.region}/pipelineJobs/{self.job_id}"

    def task_id(self, task: str) -> str:
        """A stable task id (a retry of the same task keeps it, as on Vertex)."""
        digest = hashlib.sha256(f"{self.job_id}/{task}".encode()).hexdigest()
        return str(int(digest[:15], 16))

    def task_root(self, task: str) -> str:
        """Where Vertex puts a task's outputs: ``ROOT/PROJECT_NUMBER/JOB_ID/TASK_TASKID``."""
        root = self.pipeline_root.rstrip("/")
        return f"{root}/{self.project_number}/{self.job_id}/{task}_{self.task_id(task)}"

    def run_level(self, task: str) -> dict[str, str]:
        """Run-level placeholders and their values for one task."""
        from google_cloud_pipeline_components import _placeholders as gcpc
        from kfp import dsl

        return {
            dsl.PIPELINE_JOB_NAME_PLACEHOLDER: self.job_id,
            dsl.PIPELINE_JOB_RESOURCE_NAME_PLACEHOLDER: self.job_resource_name,
            dsl.PIPELINE_JOB_ID_PLACEHOLDER: self.task_id(""),
            dsl.PIPELINE_TASK_NAME_PLACEHOLDER: task,
            dsl.PIPELINE_TASK_ID_PLACEHOLDER: self.task_id(task),
            dsl.PIPELINE_ROOT_PLACEHOLDER: self.pipeline_root,
            dsl.PIPELINE_JOB_CREATE_TIME_UTC_PLACEHOLDER: "2024-01-01T00:00:00Z",
            dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER: "2024-01-01T00:00:00Z",
            gcpc.PROJECT_ID_PLACEHOLDER: self.project,
            gcpc.LOCATION_PLACEHOLDER: self.region,
            gcpc.SERVICE_ACCOUNT_PLACEHOLDER: self.effective_service_account,
            gcpc.NETWORK_PLACEHOLDER: self.network or "",
            gcpc.PERSISTENT_RESOURCE_ID_PLACEHOLDER: "",
            gcpc.ENCRYPTION_SPEC_KMS_KEY_NAME_PLACEHOLDER: "",
        }


def gcs_path(uri: str) -> str:
    """``gs://b/o`` as the container sees it: ``/gcs/b/o`` (other URIs unchanged)."""
    return GCS_MOUNT + uri[len("gs://") :] if uri.startswith("gs://") else uri


def mount_relative(uri_or_path: str) -> str | None:
    """``BUCKET/OBJECT`` of a ``gs://`` URI or ``/gcs/`` path (``None``: it is neither).

    Raises:
        GcsPathError: it has no bucket (``gs:///x``) or a ``..`` segment; joined to the
            stand-in folder it would name a file outside it (Cloud Storage has no such object).
    """
    path = gcs_path(uri_or_path)
    if not path.startswith(GCS_MOUNT):
        return None
    relative = path[len(GCS_MOUNT) :]
    segments = relative.split("/")
    if not segments[0] or ".." in segments:
        problem = "has no bucket name" if not segments[0] else "has a '..' segment"
        raise GcsPathError(
            f"{uri_or_path!r} {problem}: verify maps gs://BUCKET/OBJECT (and /gcs/BUCKET/OBJECT) "
            "into its /gcs/ stand-in folder and refuses what would lead out of it; write the "
            "URI as gs://BUCKET/PATH without '..'"
        )
    return relative


def json_escape(text: str, level: int) -> str:
    """``text`` escaped ``level`` times as the inside of a JSON string."""
    for _ in range(level):
        text = json.dumps(text)[1:-1]
    return text


def to_json(value: Any) -> str:
    """JSON as Vertex AI writes protobuf values: a whole number has no ``.0`` (``1``, not ``1.0``).

    Numbers in a compiled spec are doubles (``replica_count: 1.0``); the service serializes them
    the way Go's protojson does, which the custom-job proto's integer fields then accept.
    """

    def plain(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
            return int(v)
        if isinstance(v, list):
            return [plain(i) for i in v]
        if isinstance(v, dict):
            return {k: plain(i) for k, i in v.items()}
        return v

    return json.dumps(plain(value))


def as_text(value: Any) -> str:
    """A parameter value as a command-line string: strings as they are, others as JSON."""
    return value if isinstance(value, str) else to_json(value)


def resolve_parameter_values(
    values: Mapping[str, Any], run_level: Mapping[str, str]
) -> dict[str, Any]:
    """Resolves run-level placeholders (and references to sibling parameters) in string values."""

    def resolve(value: Any, params: Mapping[str, Any]) -> Any:
        if isinstance(value, str):
            for placeholder, replacement in run_level.items():
                value = value.replace(placeholder, replacement)
            return _PLACEHOLDER.sub(lambda m: _sibling(m, params), value)
        if isinstance(value, list):
            return [resolve(v, params) for v in value]
        if isinstance(value, dict):
            return {k: resolve(v, params) for k, v in value.items()}
        return value

    first = {k: resolve(v, {}) for k, v in values.items()}
    return {k: resolve(v, first) for k, v in first.items()}


def _sibling(match: re.Match, params: Mapping[str, Any]) -> str:
    # Only f-string references to other parameters; executor placeholders stay for later.
    io = _IO.match(match.group("expr") or "")
    if io and io["io"] == "inputs" and io["kind"] == "parameters" and not io["attr"]:
        if io["name"] in params and isinstance(params[io["name"]], str):
            return params[io["name"]]
    return match.group(0)


def resolve_command(
    command: list[str], executor_input: Mapping[str, Any], run_level: Mapping[str, str]
) -> list[str]:
    """A container's command or arguments with every placeholder resolved.

    Raises:
        PlaceholderError: a placeholder that names nothing Vertex AI knows.
    """
    from kfp.local import placeholder_utils

    inputs = executor_input.get("inputs", {})
    provided = [k for k, v in inputs.get("parameterValues", {}).items() if v is not None]
    provided += [k for k, v in inputs.get("artifacts", {}).items() if v]
    structured = [placeholder_utils.resolve_struct_placeholders(c, provided) for c in command]
    return [
        resolve_string(element, executor_input, run_level)
        for element in placeholder_utils.flatten_list(structured)
    ]


def resolve_string(
    element: str, executor_input: Mapping[str, Any], run_level: Mapping[str, str]
) -> str:
    """One command element with its placeholders resolved (a single pass, as Vertex does)."""
    return _PLACEHOLDER.sub(
        lambda m: _value(m.group("expr") or "", executor_input, run_level, nested=True), element
    )


def _value(
    expr: str, executor_input: Mapping[str, Any], run_level: Mapping[str, str], nested: bool
) -> str:
    level = 0
    escape = _JSON_ESCAPE.search(expr)
    if escape:
        level = int(escape["level"])
        expr = expr[: escape.start()]
    if expr == "":
        text = to_json(executor_input)
    elif "{{$." + expr + "}}" in run_level:
        text = run_level["{{$." + expr + "}}"]
    elif expr in ("outputs.output_file", "outputMetadataUri"):
        text = executor_input["outputs"]["outputFile"]
    else:
        text = _io_value(expr, executor_input)
        if nested:
            # Placeholders inside a parameter value (the wrapper's worker_pool_specs) are
            # resolved in its JSON text; one level only, as the value was compiled.
            text = _PLACEHOLDER.sub(
                lambda m: _value(m.group("expr") or "", executor_input, run_level, False), text
            )
    return json_escape(text, level)


def _io_value(expr: str, executor_input: Mapping[str, Any]) -> str:
    match = _IO.match(expr)
    if not match:
        raise PlaceholderError(f"unknown placeholder {{{{$.{expr}}}}}")
    side = executor_input.get(match["io"], {})
    name, attr = match["name"], match["attr"]
    if match["kind"] == "parameters":
        if match["io"] == "inputs" and attr is None:
            values = side.get("parameterValues", {})
            return as_text(values.get(name))
        if match["io"] == "outputs" and attr == "output_file":
            try:
                return side["parameters"][name]["outputFile"]
            except KeyError:
                raise PlaceholderError(f"no output parameter {name!r}") from None
        raise PlaceholderError(f"unknown placeholder {{{{$.{expr}}}}}")
    artifacts = (side.get("artifacts", {}).get(name) or {}).get("artifacts") or []
    if not artifacts:
        raise PlaceholderError(f"no {match['io'][:-1]} artifact {name!r} for {{{{$.{expr}}}}}")
    artifact = artifacts[0]
    if attr == "uri":
        return artifact.get("uri", "")
    if attr == "path":
        return gcs_path(artifact.get("uri", ""))
    if attr == "metadata":
        return to_json(artifact.get("metadata", {}))
    raise PlaceholderError(f"unknown artifact attribute in {{{{$.{expr}}}}}")
