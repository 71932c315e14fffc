"""How the REST side reads a request: strictly as its v1 message, then by the v1 reference's rules.

Part of the REST side of the emulator (``rest_service``). A body is parsed as the message its
HTTP rule names (unknown fields and wrong types are 400, in the service's words), then checked
against the limits the v1 reference documents: names and ids in the forms of
``pipelines.vertex_names`` (parent, network, service account) or of the limits stated here,
labels, required fields; a pipeline job's (or a schedule's) ``runtimeConfig.parameterValues``
against its spec's ``root.inputDefinitions.parameters``: an unknown name, a value of the wrong
type (``parameterType``) or a missing required parameter is 400 INVALID_ARGUMENT naming the
parameter. A refused request is answered with Google's error body (``error_response``). List
requests' ``filter`` and ``order_by`` are read here too (``list_filter``, ``ordered``).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from pipelines import vertex_names as names

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ALREADY_EXISTS",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}

# Limits stated in the Vertex AI v1 API reference (field documentation of the messages, also in
# google/cloud/aiplatform_v1/types/*.py), and the label rules it links (https://goo.gl/xmQnxf).
_MAX_DISPLAY_NAME = 128  # PipelineJob, Schedule, Model: "up to 128 characters long".
_PIPELINE_JOB_ID = re.compile(r"[a-z0-9-]{1,127}")  # "less than 128 characters ... /[a-z][0-9]-/"
_MODEL_ID = re.compile(r"[a-z_][a-z0-9_-]{0,62}")  # "up to 63 ... [a-z0-9_-]", no 0-9/- first


class Invalid(Exception):
    """A request the service would refuse with 400: INVALID_ARGUMENT, or ``status``."""

    def __init__(self, message: str, field: str = "", status: str = "INVALID_ARGUMENT"):
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status  # FAILED_PRECONDITION: valid, but not in the resource's state.


@dataclasses.dataclass
class Request:
    """One request as the stand-in received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # Lower-case names.
    body: Any  # Parsed JSON, raw text, or None.
    raw: bytes


def error_response(status: int, message: str, field: str = "", code: str = "") -> tuple[int, dict]:
    """A refusal as the service answers it: the HTTP status and Google's error body.

    ``code`` is the google.rpc code's name, where it is not the HTTP status's usual one;
    ``field`` adds a ``BadRequest`` field violation.
    """
    error: dict[str, Any] = {
        "code": status,
        "message": message,
        "status": code or _STATUS_NAMES.get(status, "UNKNOWN"),
    }
    if field:
        error["details"] = [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field, "description": message}],
            }
        ]
    return status, {"error": error}


@functools.cache
def v1_types() -> Any:
    """``google.cloud.aiplatform_v1.types``, imported on first use (it is slow to import)."""
    from google.cloud.aiplatform_v1 import types

    return types


def message_to_dict(message: Any) -> dict:
    """A proto-plus message as REST JSON (camelCase field names)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(message._pb)


def parse(raw: bytes, message_type: Any, at: str) -> Any:
    """The body parsed strictly as ``message_type``.

    Proto JSON: unknown fields and wrong types are refused with ``Invalid`` ("Invalid JSON
    payload received ...", as the service says).
    """
    from google.protobuf import json_format

    if not raw.strip():
        raise Invalid(f"Invalid JSON payload received. Empty body, expected {at or 'a request'}.")
    try:
        return message_type.from_json(raw, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        reason = str(e).split("\n")[0].split("  Available Fields")[0].rstrip()
        raise Invalid(f"Invalid JSON payload received at {at or 'the request'}: {reason}") from None


def require(present: bool, field: str) -> None:
    """Refuses the request (400) unless the required ``field`` is ``present``."""
    if not present:
        raise Invalid(f"{field} is required.", field)


def check_display_name(value: str, field: str, required: bool) -> None:
    """A display name: at most 128 characters (and not empty when ``required``)."""
    require(bool(value) or not required, field)
    if len(value) > _MAX_DISPLAY_NAME:
        raise Invalid(
            f"{field} must be at most {_MAX_DISPLAY_NAME} characters, got {len(value)}.", field
        )


def _label_chars_ok(text: str) -> bool:
    # "can only contain lowercase letters, numeric characters, underscores and dashes.
    # International characters are allowed."
    return all(c in "_-" or c.isdigit() or (c.isalpha() and not c.isupper()) for c in text)


def check_labels(labels: Any, field: str) -> None:
    """Labels as the v1 reference's label rules allow them."""
    for key, value in labels.items():
        ok_key = 0 < len(key) <= 64 and _label_chars_ok(key) and key[0].isalpha()
        if not ok_key or len(value) > 64 or not _label_chars_ok(value):
            raise Invalid(
                f"{field}: invalid label {key!r}={value!r}: keys (1-64, starting with a letter) "
                "and values (0-64) may only contain lowercase letters, numeric characters, "
                "underscores and dashes.",
                field,
            )


def _check_pipeline_job(job: Any, field: str) -> None:
    """``PipelineJob`` as the v1 reference documents it."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    check_display_name(job.display_name, f"{field}display_name", required=False)
    check_labels(job.labels, f"{field}labels")
    # "template_uri: A template uri from where the pipeline_spec, if empty, will be downloaded."
    has_spec = len(job._pb.pipeline_spec.fields) > 0
    require(has_spec or bool(job.template_uri), f"{field}pipeline_spec")
    if has_spec:
        # The spec travels as a Struct; it is a KFP IR PipelineSpec (schema_version 2.1.0, as
        # RuntimeConfig.parameter_values says). Parsed strictly, like the request itself.
        try:
            json_format.ParseDict(
                json_format.MessageToDict(job._pb.pipeline_spec), pipeline_spec_pb2.PipelineSpec()
            )
        except json_format.ParseError as e:
            reason = str(e).split("\n")[0].split("  Available Fields")[0].rstrip()
            raise Invalid(
                f"{field}pipeline_spec is not a valid PipelineSpec: {reason}",
                f"{field}pipeline_spec",
            ) from None
        _check_parameter_values(job, field)
    # RuntimeConfig.gcs_output_directory: "Required. A path in a Cloud Storage bucket".
    root = job.runtime_config.gcs_output_directory
    require(bool(root), f"{field}runtime_config.gcs_output_directory")
    if not root.startswith("gs://"):
        raise Invalid(
            f"{field}runtime_config.gcs_output_directory must be a Cloud Storage path, got "
            f"{root!r}.",
            f"{field}runtime_config.gcs_output_directory",
        )
    # network: "projects/{project}/global/networks/{network} ... {project} is a project number".
    if job.network and not names.NETWORK.fullmatch(job.network):
        raise Invalid(
            f"{field}network {job.network!r} must be projects/PROJECT_NUMBER/global/networks/NAME.",
            f"{field}network",
        )
    if job.service_account and not names.SERVICE_ACCOUNT.fullmatch(job.service_account):
        raise Invalid(
            f"{field}service_account {job.service_account!r} is not a service account's email.",
            f"{field}service_account",
        )


# PipelineSpec's ParameterType names -> the google.protobuf.Value kinds a value of it may be.
_PARAMETER_KINDS = {
    "STRING": ("string_value",),
    "NUMBER_INTEGER": ("number_value",),
    "NUMBER_DOUBLE": ("number_value",),
    "BOOLEAN": ("bool_value",),
    "LIST": ("list_value",),
    "STRUCT": ("struct_value",),
}


def _check_parameter_values(job: Any, field: str) -> None:
    """``runtime_config.parameter_values`` against the spec's root input definitions.

    Every name one the pipeline takes, every value of its ``parameterType``, every required one
    given.
    """
    from google.protobuf import json_format

    spec = json_format.MessageToDict(job._pb.pipeline_spec)
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    values = job._pb.runtime_config.parameter_values
    at = f"{field}runtime_config.parameter_values"
    for name in sorted(values):
        if name not in declared:
            raise Invalid(
                f"{at}: the pipeline has no input parameter {name!r} (it takes: "
                f"{', '.join(sorted(declared)) or 'none'}).",
                f"{at}[{name}]",
            )
        kind = values[name].WhichOneof("kind")
        wanted = declared[name].get("parameterType", "")
        allowed = _PARAMETER_KINDS.get(wanted)
        whole = kind != "number_value" or float(values[name].number_value).is_integer()
        if allowed and (kind not in allowed or (wanted == "NUMBER_INTEGER" and not whole)):
            shown = json_format.MessageToJson(values[name], indent=None)
            raise Invalid(
                f"{at}: input parameter {name!r} is {wanted}, got {shown} ({kind}).",
                f"{at}[{name}]",
            )
    for name, definition in sorted(declared.items()):
        required = "defaultValue" not in definition and not definition.get("isOptional")
        if required and name not in values:
            raise Invalid(f"{at}: the required input parameter {name!r} is missing.", at)


def check_create_pipeline_job(request: Any, field: str) -> None:
    """``CreatePipelineJobRequest``: parent and pipeline_job required, pipeline_job_id's form."""
    require(bool(names.PARENT.fullmatch(request.parent)), f"{field}parent")
    require(request._pb.HasField("pipeline_job"), f"{field}pipeline_job")
    job_id = request.pipeline_job_id
    if job_id and not _PIPELINE_JOB_ID.fullmatch(job_id):
        raise Invalid(
            f"{field}pipeline_job_id {job_id!r} must be less than 128 characters of [a-z0-9-].",
            f"{field}pipeline_job_id",
        )
    _check_pipeline_job(request.pipeline_job, f"{field}pipeline_job.")


def check_schedule(schedule: Any) -> None:
    """``Schedule``: display_name and max_concurrent_run_count required.

    Then the embedded ``CreatePipelineJobRequest`` with its parent ("CreatePipelineJobRequest.parent
    field is required") and its job.
    """
    check_display_name(schedule.display_name, "schedule.display_name", required=True)
    require(schedule.max_concurrent_run_count > 0, "schedule.max_concurrent_run_count")
    require(
        schedule._pb.HasField("create_pipeline_job_request"),
        "schedule.create_pipeline_job_request",
    )
    check_create_pipeline_job(
        schedule.create_pipeline_job_request, "schedule.create_pipeline_job_request."
    )


def check_upload_model(request: Any) -> None:
    """``UploadModelRequest``: model required, and the model's fields.

    Its display_name required (<= 128), model_id's form, labels, and a container spec's image_uri
    ("Required").
    """
    require(request._pb.HasField("model"), "model")
    model = request.model
    check_display_name(model.display_name, "model.display_name", required=True)
    check_labels(model.labels, "model.labels")
    if request.model_id and not _MODEL_ID.fullmatch(request.model_id):
        raise Invalid(
            f"model_id {request.model_id!r} must be up to 63 characters of [a-z0-9_-], not "
            "starting with a digit or a dash.",
            "model_id",
        )
    if model._pb.HasField("container_spec"):
        require(bool(model.container_spec.image_uri), "model.container_spec.image_uri")


_FILTER_TERM = re.compile(r'\s*(display_name|labels\.[a-z][a-z0-9_-]*)\s*=\s*"([^"]*)"\s*')
_FILTER_JOIN = re.compile(r"(AND|OR)\b")


def list_filter(req: Request) -> Any:
    """A list request's ``filter`` as a test on a resource (REST JSON), else 400.

    The subset of the v1 list filters (AIP-160) the clients here send: ``display_name="..."``
    and ``labels.KEY="..."`` terms joined by ``AND`` and ``OR`` (``OR`` binds tighter, as in
    AIP-160); no parentheses, no escapes (a string ends at the next quote, as the service reads
    it). An injected ``" OR display_name="..."`` therefore widens the filter here as it would
    there.
    """
    clauses: list[list[tuple[str, str]]] = []  # AND of ORs.
    for expression in req.query.get("filter", []):
        rest, ors, joined = expression, [], "AND"
        while True:
            m = _FILTER_TERM.match(rest)
            if not m:
                raise Invalid(
                    'The stand-in understands only display_name="..." and labels.KEY="..." terms '
                    f"joined by AND/OR: {expression!r}",
                    "filter",
                )
            if joined == "AND" and ors:
                clauses.append(ors)
                ors = []
            ors.append((m.group(1), m.group(2)))
            rest = rest[m.end() :]
            if not rest:
                break
            j = _FILTER_JOIN.match(rest)
            if not j:
                raise Invalid(f"The stand-in cannot parse the filter {expression!r}", "filter")
            joined, rest = j.group(1), rest[j.end() :]
        clauses.append(ors)

    def value(resource: dict, field: str) -> str | None:
        if field == "display_name":
            return resource.get("displayName")
        return resource.get("labels", {}).get(field.removeprefix("labels."))

    return lambda r: all(any(value(r, f) == v for f, v in ors) for ors in clauses)


def ordered(req: Request, found: list[dict]) -> list[dict]:
    """``found`` in the list request's ``order_by`` (only ``update_time desc``), else 400."""
    order = req.query.get("orderBy", [""])[0].replace(" ", "")
    if order in ("update_timedesc", "updateTimedesc"):
        return sorted(found, key=lambda m: m["updateTime"], reverse=True)
    if order:
        raise Invalid(f"The stand-in orders only by update_time desc: {order!r}", "order_by")
    return found
