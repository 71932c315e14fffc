"""The REST side's in-memory resources, which every resource's routes share, and their operations.

Part of the REST side of the emulator (``rest_service``): each resource's routes
(``rest_pipeline_jobs``, ``rest_models``, ``rest_endpoints``, ``rest_storage``) are a class on
top of ``RestResources``, and ``RestStandIn`` is all of them. Long-running operations are answered
"not done", so the client polls them as it polls the service's; the first poll finds them done.
"""

from __future__ import annotations

import datetime
import itertools
import threading
from collections.abc import Callable
from typing import Any

from vertex_emulator.rest_checks import Request, error_response

# Every Vertex AI route starts so: ``loc`` is ``projects/P/locations/L``.
LOC = r"/v1/(?P<loc>projects/[^/]+/locations/[^/]+)"
_OPERATION = r"projects/[^/]+/locations/[^/]+/(?:models|endpoints)/[^/:]+/operations/[^/:]+"

# (HTTP method, path pattern with named groups, handler taking the request and the groups).
Route = tuple[str, str, Callable[..., tuple[int, dict]]]


class RestResources:
    """What the REST stand-in keeps, in memory; its routes change it holding ``_lock``."""

    def __init__(self) -> None:
        self.pipeline_jobs: dict[str, dict] = {}
        self.schedules: dict[str, dict] = {}
        self.models: dict[str, dict] = {}  # Model name -> its default version.
        self.model_versions: dict[str, list[dict]] = {}  # Model name -> versions, oldest first.
        self.operations: dict[str, dict] = {}
        self.endpoints: dict[str, dict] = {}  # Endpoint name -> Endpoint (REST JSON).
        # (deployed model as the endpoint lists it, model version, request body) -> the response
        # body (``{"predictions": [...]}``): serves :predict and :rawPredict. None: 400.
        self.predictor: Any = None
        # When set, the next deployment's operation ends with this error (the model server did
        # not become healthy) and nothing is deployed.
        self.deploy_failure: str = ""
        self.contexts: dict[str, dict] = {}
        self.context_children: dict[str, list[str]] = {}
        self.buckets: dict[str, dict[str, dict]] = {}
        self.bucket_projects: dict[str, str] = {}
        self.list_page_size = 1000
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._generations = itertools.count(1_700_000_000_000_001)

    def _operation_routes(self) -> list[Route]:
        # The REST client polls an operation at the first of its HTTP rules, /ui/{name}.
        return [("GET", r"/(?:v1|ui)/(?P<name>" + _OPERATION + ")", self._get_operation)]

    def _get_operation(self, req: Request, name: str) -> tuple[int, dict]:
        if name not in self.operations:
            return error_response(404, f"Operation {name} not found.")
        return 200, self.operations[name]

    def _operation(self, parent: str, kind: str, response: dict | None, error: str = "") -> dict:
        """An operation on ``parent`` that the client's first poll finds done."""
        now = timestamp()
        op = f"{parent}/operations/{next(self._ids)}"
        meta = {
            "@type": f"type.googleapis.com/google.cloud.aiplatform.v1.{kind}OperationMetadata",
            "genericMetadata": {"createTime": now, "updateTime": now},
        }
        done: dict[str, Any] = {"name": op, "metadata": meta, "done": True}
        if error:
            done["error"] = {"code": 9, "message": error}  # FAILED_PRECONDITION.
        else:
            done["response"] = response
        self.operations[op] = done
        return {"name": op, "metadata": meta, "done": False}


def timestamp() -> str:
    """A resource's timestamp, as the service writes one."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
