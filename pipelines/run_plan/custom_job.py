"""Custom-job requests built as the launcher builds them, and checked as Vertex AI checks them.

``build_request`` takes the ``--payload`` the launcher receives (placeholders already resolved)
and goes through google-cloud-pipeline-components' own steps: ``insert_system_labels_into_payload``,
``json_util.recursive_remove_empty`` and ``create_custom_job_with_client`` (which drops
``max_wait_duration`` unless the strategy is ``FLEX_START``), with a client whose
``create_custom_job`` builds the ``CreateCustomJobRequest`` the way the GAPIC client does. A payload
that the proto rejects (``scheduling.strategy: "mirrored"``) raises ``RequestError`` with the field
path and the values the enum takes. ``service_problems`` adds the checks the service makes that
the proto cannot (used by the JobService stand-in too).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from pipelines import vertex_names as names


class RequestError(ValueError):
    """A custom-job request the client library or the service would reject."""


class _RequestBuilder:
    """Stands in for ``JobServiceClient``: builds the request and returns it (no network)."""

    def __init__(self) -> None:
        self.request = None

    def create_custom_job(self, parent: str, custom_job: Any):
        from google.cloud.aiplatform_v1 import types

        request = types.CreateCustomJobRequest()
        request.parent = parent  # The GAPIC client sets the flattened fields like this.
        request.custom_job = custom_job
        self.request = request
        return request.custom_job


def job_spec_from_payload(payload: str) -> dict[str, Any]:
    """The launcher's ``--payload`` after GCPC's own clean-up steps (the dict it sends).

    Raises:
        RequestError: the payload is not JSON.
    """
    from google_cloud_pipeline_components.container.v1.custom_job import remote_runner
    from google_cloud_pipeline_components.container.v1.gcp_launcher.utils import json_util

    try:
        labelled = remote_runner.insert_system_labels_into_payload(payload)
        return json_util.recursive_remove_empty(json.loads(labelled, strict=False))
    except json.JSONDecodeError as e:
        snippet = payload[max(0, e.pos - 80) : e.pos + 80]
        raise RequestError(
            f"the launcher's --payload is not valid JSON ({e.msg} at {e.pos}: ...{snippet}...); "
            "a placeholder was substituted without the escaping its place needs"
        ) from None


def build_request(project: str, location: str, payload: str):
    """The ``CreateCustomJobRequest`` the launcher would send for ``payload``.

    Raises:
        RequestError: the payload is not JSON, or the proto rejects a field (the message names it).
    """
    from google_cloud_pipeline_components.container.v1.custom_job import remote_runner

    job_spec = job_spec_from_payload(payload)
    parent = f"projects/{project}/locations/{location}"
    builder = _RequestBuilder()
    try:
        remote_runner.create_custom_job_with_client(builder, parent, job_spec)
    except (KeyError, ValueError, TypeError) as e:
        raise RequestError(_explain(job_spec, e)) from None
    return builder.request


def _explain(job_spec: dict[str, Any], error: Exception) -> str:
    """Names the field the proto rejected, with the values an enum takes."""
    from google.cloud.aiplatform_v1 import types
    from google.protobuf import json_format

    try:
        json_format.ParseDict(job_spec, types.CustomJob.pb()())
    except json_format.ParseError as e:
        detail = str(e)
        match = re.search(r"Invalid enum value (\S+) for enum type (\S+) at (\S+?)\.*$", detail)
        if match:
            value, enum_name, field = match.groups()
            pool = types.CustomJob.pb()().DESCRIPTOR.file.pool
            names = [v.name for v in pool.FindEnumTypeByName(enum_name).values]
            field = field.removeprefix("CustomJob.")
            return (
                f"custom job field {field} = {value!r} is not a {enum_name} "
                f"(one of {', '.join(names)}); the client library rejects the request before "
                "sending it, so this step would fail on Vertex AI"
            )
        return f"custom job rejected by the CustomJob proto: {detail}"
    return f"custom job rejected by the client library: {type(error).__name__}: {error}"


def service_problems(request, endpoint_location: str | None = None) -> list[str]:
    """What Vertex AI's CreateCustomJob would reject that the proto accepts.

    Args:
        request: a ``CreateCustomJobRequest``.
        endpoint_location: the region of the endpoint the client called, if known.
    """
    problems = []
    parent = names.PARENT.fullmatch(request.parent)
    if not parent:
        problems.append(f"parent {request.parent!r} is not projects/P/locations/L")
    elif endpoint_location and parent["location"] != endpoint_location:
        problems.append(
            f"parent location {parent['location']!r} differs from the endpoint's region "
            f"{endpoint_location!r}"
        )
    job = request.custom_job
    if not job.display_name:
        problems.append("custom_job.display_name is required")
    spec = job.job_spec
    if not spec.worker_pool_specs:
        problems.append("job_spec.worker_pool_specs is required")
    for i, pool in enumerate(spec.worker_pool_specs):
        where = f"job_spec.worker_pool_specs[{i}]"
        if i == 0 and pool.replica_count != 1:
            problems.append(
                f"{where}.replica_count must be 1 (the primary pool), not {pool.replica_count}"
            )
        if not pool.machine_spec.machine_type and pool.replica_count:
            problems.append(f"{where}.machine_spec.machine_type is required")
        if not pool.container_spec.image_uri and not pool.python_package_spec.executor_image_uri:
            problems.append(f"{where}: a container_spec.image_uri is required")
        machine = pool.machine_spec
        if machine.accelerator_count and not machine.accelerator_type:
            problems.append(f"{where}.machine_spec: accelerator_count without accelerator_type")
    if spec.service_account and not names.SERVICE_ACCOUNT.fullmatch(spec.service_account):
        problems.append(f"job_spec.service_account {spec.service_account!r} is not an email")
    if spec.network and not names.NETWORK.fullmatch(spec.network):
        problems.append(
            f"job_spec.network {spec.network!r} is not projects/NUMBER/global/networks/NAME"
        )
    return problems


def describe(request) -> dict[str, Any]:
    """The request as JSON-ready dict (proto field names), for reports."""
    from google.cloud.aiplatform_v1 import types

    return types.CreateCustomJobRequest.to_dict(request, preserving_proto_field_name=True)


def launcher_flags(command: list[str]) -> dict[str, str]:
    """The launcher's ``--payload``, ``--project``, ``--location`` and ``--gcp_resources``.

    Raises:
        RequestError: one of the first three is missing.
    """
    wanted = ("--payload", "--project", "--location", "--gcp_resources")
    flags: dict[str, str] = {}
    for flag, value in zip(command[:-1], command[1:], strict=True):
        if flag in wanted and flag not in flags:
            flags[flag] = value
    missing = [f for f in wanted[:3] if f not in flags]
    if missing:
        raise RequestError(f"the custom-job launcher's arguments lack {', '.join(missing)}")
    return flags


def job_in_gcp_resources(path: str) -> str:
    """The job a launcher's ``gcp_resources`` file names ("" if none)."""
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        try:
            resources = json.load(f).get("resources") or []
        except json.JSONDecodeError:
            return ""
    uri = resources[0].get("resourceUri", "") if resources else ""
    return uri.split("/v1/", 1)[-1]
