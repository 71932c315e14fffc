"""The emulator's HTTP side: Vertex AI's v1 REST API and Cloud Storage's JSON API on 127.0.0.1.

Part of the one Vertex AI emulator (``pipelines.verify.emulator`` says what it emulates and what
not). ``RestStandIn`` listens on 127.0.0.1 only (a free port) and answers the requests the real
``google-cloud-aiplatform`` and ``google-cloud-storage`` clients send when they are pointed at it
(``api_endpoint="http://127.0.0.1:PORT"`` with the REST transport; ``STORAGE_EMULATOR_HOST`` or
``client_options={"api_endpoint": ...}`` for storage). It keeps resources in memory and records
every request, so a test can assert on what the client library really sent. The tests (submit,
deploy, registry) use it through conftest.py's ``standin`` fixture; ``verify`` does not start it.

Endpoints:
    POST/GET  /v1/projects/P/locations/L/pipelineJobs[/ID]
    POST/GET  /v1/projects/P/locations/L/schedules[/ID]
    POST      /v1/projects/P/locations/L/models:upload (a new model, or a new version of
              ``parent_model``; the "default" alias moves to a version uploaded with it)
    GET       /v1/projects/P/locations/L/models[/ID[@VERSION]] (list: each model's default
              version; ``filter``: display_name="..." and labels.KEY="..." terms joined by
              AND/OR, else 400; ``order_by`` update_time desc)
    POST      /v1/projects/P/locations/L/models/ID@VERSION:mergeVersionAliases
    POST/GET  /v1/projects/P/locations/L/endpoints[/ID] (list: ``filter`` and ``order_by`` as
              for models)
    PATCH     /v1/projects/P/locations/L/endpoints/ID?updateMask=... (``Endpoint.update``:
              display_name, description, labels, traffic_split; a split adds up to 100 over
              deployed models the endpoint has, else 400; answers the Endpoint, no operation)
    POST      /v1/.../endpoints/ID:deployModel, :undeployModel (operations; the traffic rules of
              the v1 reference: a split adds up to 100, a model with traffic is not undeployed:
              400 FAILED_PRECONDITION)
    POST      /v1/.../endpoints/ID:predict, :rawPredict (answered by ``predictor``, a test's
              function that serves the deployed version's artifact the way its container does)

Not emulated for endpoints: the random split of requests by ``trafficSplit`` (every request goes
to the deployed model with the largest share), ``DeployedModel.status`` (replicas, health), the
time a deployment takes, and the prediction metrics Cloud Monitoring keeps per deployed model.
    GET       /v1/projects/P/locations/L/metadataStores/default
    POST/GET  /v1/projects/P/locations/L/metadataStores/default/contexts[/ID]
    POST      /v1/.../contexts/ID:addContextChildren
    GET       /storage/v1/b/BUCKET and /storage/v1/b/BUCKET/o (object listing, paged)
    GET       /v3/projects/ID (Cloud Resource Manager: the SDK checks who owns the root bucket)
    POST      /token (an OAuth token endpoint, for credentials that refresh)

Auth (this module is its one home): every Vertex AI and Resource Manager request (``/v1/``,
``/ui/``, ``/v3/``) must carry ``Authorization: Bearer TOKEN``, TOKEN being ``access_token`` (what
``/token`` hands out) or a JWT (the GAPIC clients sign their own with a service account key; the
signature is not checked), else 401 UNAUTHENTICATED, as the service answers. Cloud Storage
requests are exempt: with ``STORAGE_EMULATOR_HOST`` set, google-cloud-storage is anonymous by
design.

Every body is parsed strictly as the v1 message the HTTP rule names (unknown fields and wrong
types are 400), then checked against the rules the v1 reference documents: names and ids in the
forms of ``pipelines.vertex_names`` (parent, network, service account, context id) or of the
limits stated here, labels, required fields, traffic splits. A pipeline job (or a schedule's) with a
``pipelineSpec`` has its ``runtimeConfig.parameterValues`` checked against
``root.inputDefinitions.parameters``: an unknown name, a value of the wrong type
(``parameterType``) or a missing required parameter is 400 INVALID_ARGUMENT naming the parameter.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import functools
import hashlib
import http.server
import itertools
import json
import re
import struct
import threading
import urllib.parse
from typing import Any

import google_crc32c

from pipelines import vertex_names as names
from pipelines.verify.loopback import LoopbackService

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

_LOC = r"/v1/(?P<loc>projects/[^/]+/locations/[^/]+)"

# Limits stated in the Vertex AI v1 API reference (field documentation of the messages, also in
# google/cloud/aiplatform_v1/types/*.py), and the label rules it links (https://goo.gl/xmQnxf).
_MAX_DISPLAY_NAME = 128  # PipelineJob, Schedule, Model: "up to 128 characters long".
_PIPELINE_JOB_ID = re.compile(r"[a-z0-9-]{1,127}")  # "less than 128 characters ... /[a-z][0-9]-/"
_MODEL_ID = re.compile(r"[a-z_][a-z0-9_-]{0,62}")  # "up to 63 ... [a-z0-9_-]", no 0-9/- first
_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
# Paths that need credentials: Vertex AI (/v1/, operations at /ui/) and Resource Manager (/v3/).
_AUTHENTICATED = re.compile(r"/(?:v1|ui|v3)/")
# The service's words for a request without credentials, and with ones it does not accept.
_NO_CREDENTIALS = (
    "Request is missing required authentication credential. Expected OAuth 2 access token, "
    "login cookie or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)
_BAD_CREDENTIALS = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)
_MODEL_OPERATION = r"projects/[^/]+/locations/[^/]+/(?:models|endpoints)/[^/:]+/operations/[^/:]+"


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


@dataclasses.dataclass
class _Failure:
    status: int
    message: str
    path_contains: str
    method: str


class RestStandIn(LoopbackService):
    """The server; use as a context manager, or call ``start()`` and ``stop()``."""

    def __init__(self, access_token: str = "standin-access-token"):
        self.requests: list[Request] = []
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
        # Requests answered 400 or 401 by the checks, with the reason.
        self.rejected: list[tuple[Request, str]] = []
        self.contexts: dict[str, dict] = {}
        self.context_children: dict[str, list[str]] = {}
        self.buckets: dict[str, dict[str, dict]] = {}
        self.bucket_projects: dict[str, str] = {}
        self.list_page_size = 1000
        self.access_token = access_token
        self._failures: list[_Failure] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._generations = itertools.count(1_700_000_000_000_001)

    # --- control -----------------------------------------------------------------------------

    def handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        """Its requests' handler (``LoopbackService``)."""
        return _Handler

    def fail_next(
        self, status: int, message: str, path_contains: str = "", method: str = ""
    ) -> None:
        """Answers the next matching request with a Google error, before it changes anything.

        It matches when its path contains ``path_contains`` and, if given, its method is
        ``method``.
        """
        with self._lock:
            self._failures.append(_Failure(status, message, path_contains, method))

    def put_object(self, bucket: str, name: str, data: bytes) -> dict:
        """Creates or replaces an object; every write gets a new generation, as in GCS."""
        crc = base64.b64encode(struct.pack(">I", google_crc32c.value(data))).decode()
        obj = {
            "kind": "storage#object",
            "bucket": bucket,
            "name": name,
            "generation": str(next(self._generations)),
            "size": str(len(data)),
            "crc32c": crc,
            "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(),
        }
        with self._lock:
            self.buckets.setdefault(bucket, {})[name] = obj
        return obj

    def add_bucket(self, bucket: str, project: str) -> None:
        """Creates an empty bucket owned by ``project``."""
        with self._lock:
            self.buckets.setdefault(bucket, {})
            self.bucket_projects[bucket] = project

    @staticmethod
    def project_number(project: str) -> str:
        """The made-up, stable project number of a project id."""
        return str(100000000000 + int(hashlib.sha256(project.encode()).hexdigest()[:8], 16))

    def find(self, method: str, pattern: str) -> list[Request]:
        """Recorded requests with this method whose path matches the regular expression."""
        return [r for r in self.requests if r.method == method and re.search(pattern, r.path)]

    # --- request handling --------------------------------------------------------------------

    def handle(self, req: Request) -> tuple[int, dict]:
        """Routes one request; returns (HTTP status, JSON body)."""
        with self._lock:
            self.requests.append(req)
            refused = self._credentials_problem(req)
            if refused:
                self.rejected.append((req, refused))
                return _error(401, refused)
            for i, f in enumerate(self._failures):
                if f.path_contains in req.path and f.method in ("", req.method):
                    del self._failures[i]
                    return _error(f.status, f.message)
        for method, pattern, func in self._routes():
            m = re.fullmatch(pattern, req.path)
            if m and method == req.method:
                with self._lock:
                    try:
                        return func(req, **m.groupdict())
                    except Invalid as e:
                        self.rejected.append((req, e.message))
                        return _error(400, e.message, field=e.field, code=e.status)
        return _error(404, f"The stand-in has no route for {req.method} {req.path}.")

    def _credentials_problem(self, req: Request) -> str:
        """Why the service would answer 401 UNAUTHENTICATED ("" when it would not)."""
        if not _AUTHENTICATED.match(req.path):
            return ""
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _NO_CREDENTIALS
        if token != self.access_token and not _JWT.fullmatch(token):
            return _BAD_CREDENTIALS
        return ""

    def _routes(self):
        return [
            ("POST", _LOC + r"/pipelineJobs", self._create_pipeline_job),
            ("GET", _LOC + r"/pipelineJobs/(?P<id>[^/:]+)", self._get_pipeline_job),
            ("POST", _LOC + r"/schedules", self._create_schedule),
            ("GET", _LOC + r"/schedules/(?P<id>[^/:]+)", self._get_schedule),
            ("POST", _LOC + r"/models:upload", self._upload_model),
            ("GET", _LOC + r"/models", self._list_models),
            ("GET", _LOC + r"/models/(?P<id>[^/:@]+)(?:@(?P<version>[^/:]+))?", self._get_model),
            (
                "POST",
                _LOC + r"/models/(?P<id>[^/:@]+)@(?P<version>[^/:]+):mergeVersionAliases",
                self._merge_version_aliases,
            ),
            ("POST", _LOC + r"/endpoints", self._create_endpoint),
            ("GET", _LOC + r"/endpoints", self._list_endpoints),
            ("GET", _LOC + r"/endpoints/(?P<id>[^/:]+)", self._get_endpoint),
            ("PATCH", _LOC + r"/endpoints/(?P<id>[^/:]+)", self._update_endpoint),
            ("POST", _LOC + r"/endpoints/(?P<id>[^/:]+):deployModel", self._deploy_model),
            ("POST", _LOC + r"/endpoints/(?P<id>[^/:]+):undeployModel", self._undeploy_model),
            ("POST", _LOC + r"/endpoints/(?P<id>[^/:]+):predict", self._predict),
            ("POST", _LOC + r"/endpoints/(?P<id>[^/:]+):rawPredict", self._raw_predict),
            # The REST client polls an operation at the first of its HTTP rules, /ui/{name}.
            ("GET", r"/(?:v1|ui)/(?P<name>" + _MODEL_OPERATION + ")", self._get_operation),
            ("GET", _LOC + r"/metadataStores/(?P<store>[^/:]+)", self._get_metadata_store),
            ("POST", _LOC + r"/metadataStores/default/contexts", self._create_context),
            ("GET", _LOC + r"/metadataStores/default/contexts/(?P<id>[^/:]+)", self._get_context),
            (
                "POST",
                _LOC + r"/metadataStores/default/contexts/(?P<id>[^/:]+):addContextChildren",
                self._add_context_children,
            ),
            ("GET", r"/storage/v1/b/(?P<bucket>[^/]+)", self._get_bucket),
            ("GET", r"/storage/v1/b/(?P<bucket>[^/]+)/o", self._list_objects),
            ("GET", r"/v3/projects/(?P<project>[^/]+)", self._get_project),
            ("POST", r"/token", self._token),
        ]

    def _create_pipeline_job(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/pipelineJobs, body "pipeline_job", ?pipelineJobId=.
        request = _v1().CreatePipelineJobRequest(
            parent=loc,
            pipeline_job=_parse(req.raw, _v1().PipelineJob, "pipeline_job"),
            pipeline_job_id=req.query.get("pipelineJobId", [""])[0],
        )
        _check_create_pipeline_job(request, "")
        job_id = request.pipeline_job_id or f"job-{next(self._ids)}"
        name = f"{loc}/pipelineJobs/{job_id}"
        if name in self.pipeline_jobs:
            return _error(409, f"PipelineJob {name} already exists.")
        job = dict(req.body)
        job.update(name=name, state="PIPELINE_STATE_PENDING", createTime=_now())
        self.pipeline_jobs[name] = job
        # Vertex creates the run's metadata context asynchronously; here it exists at once.
        ctx = f"{loc}/metadataStores/default/contexts/{job_id}"
        self.contexts[ctx] = {
            "name": ctx,
            "displayName": job_id,
            "schemaTitle": "system.PipelineRun",
            "schemaVersion": "0.0.1",
        }
        return 200, job

    def _get_pipeline_job(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/pipelineJobs/{id}"
        job = self.pipeline_jobs.get(name)
        if job is None:
            return _error(404, f"PipelineJob {name} not found.")
        job["state"] = "PIPELINE_STATE_RUNNING"
        job["jobDetail"] = {
            "pipelineRunContext": self.contexts[f"{loc}/metadataStores/default/contexts/{id}"]
        }
        return 200, job

    def _create_schedule(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/schedules, body "schedule".
        _check_schedule(_parse(req.raw, _v1().Schedule, "schedule"))
        name = f"{loc}/schedules/{next(self._ids)}"
        schedule = dict(req.body)
        schedule.update(name=name, state="ACTIVE", createTime=_now())
        self.schedules[name] = schedule
        return 200, schedule

    def _get_schedule(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/schedules/{id}"
        if name not in self.schedules:
            return _error(404, f"Schedule {name} not found.")
        return 200, self.schedules[name]

    def _get_metadata_store(self, req: Request, loc: str, store: str) -> tuple[int, dict]:
        return 200, {"name": f"{loc}/metadataStores/{store}", "createTime": _now()}

    def _create_context(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/contexts, body "context", ?contextId=.
        _parse(req.raw, _v1().Context, "context")
        ctx_id = req.query.get("contextId", [""])[0]
        if ctx_id and not names.EXPERIMENT.fullmatch(ctx_id):
            raise Invalid(
                f"context_id {ctx_id!r} must be 4-128 characters of [a-z0-9-], the first not '-'.",
                "context_id",
            )
        ctx_id = ctx_id or f"context-{next(self._ids)}"
        name = f"{loc}/metadataStores/default/contexts/{ctx_id}"
        if name in self.contexts:
            return _error(409, f"Context {name} already exists.")
        ctx = dict(req.body)
        ctx.update(name=name, createTime=_now())
        self.contexts[name] = ctx
        return 200, ctx

    def _get_context(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/metadataStores/default/contexts/{id}"
        if name not in self.contexts:
            return _error(404, f"Context {name} not found.")
        return 200, self.contexts[name]

    def _add_context_children(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{context}:addContextChildren, body "*".
        request = _parse(req.raw, _v1().AddContextChildrenRequest, "")
        name = f"{loc}/metadataStores/default/contexts/{id}"
        if name not in self.contexts:
            return _error(404, f"Context {name} not found.")
        self.context_children.setdefault(name, []).extend(request.child_contexts)
        return 200, {}

    def _upload_model(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/models:upload, body "*"; answers an Operation.
        request = _parse(req.raw, _v1().UploadModelRequest, "")
        request.parent = loc
        _check_upload_model(request)
        now = _now()
        fields = _message_to_dict(request.model)
        if request.parent_model:
            # A new version of an existing model ("parent_model: ... the resource name of the
            # model into which to upload the version", UploadModelRequest).
            name = request.parent_model
            if name not in self.model_versions:
                return _error(404, f"Model {name} not found.")
            versions = self.model_versions[name]
            version_id = str(len(versions) + 1)
        else:
            model_id = request.model_id or str(next(self._ids))
            name = f"{loc}/models/{model_id}"
            if name in self.models:
                return _error(409, f"Model {name} already exists.")
            versions = self.model_versions.setdefault(name, [])
            version_id = "1"
        aliases = list(fields.pop("versionAliases", []))
        if not versions and "default" not in aliases:
            aliases.append("default")  # A model's first version is its default.
        if "default" in aliases:
            for earlier in versions:
                earlier["versionAliases"] = [a for a in earlier["versionAliases"] if a != "default"]
        if "containerSpec" in fields:
            # A model with a serving container deploys to dedicated machines (the service sets
            # this; the SDK's Endpoint.deploy reads it).
            fields.setdefault("supportedDeploymentResourcesTypes", ["DEDICATED_RESOURCES"])
        version = {
            **fields,
            "name": name,
            "versionId": version_id,
            "versionAliases": aliases,
            "createTime": versions[0]["createTime"] if versions else now,
            "updateTime": now,
            "versionCreateTime": now,
            "versionUpdateTime": now,
        }
        versions.append(version)
        self.models[name] = next(v for v in versions if "default" in v["versionAliases"])
        op = f"{name}/operations/{next(self._ids)}"
        meta = {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelOperationMetadata",
            "genericMetadata": {"createTime": now, "updateTime": now},
        }
        # Answered "not done", so the client polls the operation as it polls the service's;
        # the first poll finds it done (no wait: the client's first poll is immediate).
        self.operations[op] = {
            "name": op,
            "metadata": meta,
            "done": True,
            "response": {
                "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
                "model": name,
                "modelVersionId": version_id,
            },
        }
        return 200, {"name": op, "metadata": meta, "done": False}

    def _list_models(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: GET /v1/{parent}/models; each model once, as its default version.
        wanted = _list_filter(req)
        models = [m for n, m in self.models.items() if n.startswith(f"{loc}/models/") and wanted(m)]
        return 200, {"models": _ordered(req, models)}

    def _get_operation(self, req: Request, name: str) -> tuple[int, dict]:
        if name not in self.operations:
            return _error(404, f"Operation {name} not found.")
        return 200, self.operations[name]

    def _get_model(
        self, req: Request, loc: str, id: str, version: str | None = None
    ) -> tuple[int, dict]:
        name = f"{loc}/models/{id}"
        versions = self.model_versions.get(name, [])
        if version is None:
            found = self.models.get(name)
        else:
            found = next(
                (v for v in versions if version in (v["versionId"], *v["versionAliases"])), None
            )
        if found is None:
            return _error(404, f"Model {name}{'@' + version if version else ''} not found.")
        return 200, found

    # --- versions, endpoints, deployments --------------------------------------------------------

    def _merge_version_aliases(
        self, req: Request, loc: str, id: str, version: str
    ) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{name=.../models/*}:mergeVersionAliases, body "*"; answers the Model.
        request = _parse(req.raw, _v1().MergeVersionAliasesRequest, "")
        name = f"{loc}/models/{id}"
        versions = self.model_versions.get(name, [])
        found = next(
            (v for v in versions if version in (v["versionId"], *v["versionAliases"])), None
        )
        if found is None:
            return _error(404, f"Model {name}@{version} not found.")
        _required(bool(request.version_aliases), "version_aliases")
        for alias in request.version_aliases:
            # "-alias" removes an alias; an alias moves from any other version that has it.
            if alias.startswith("-"):
                found["versionAliases"] = [a for a in found["versionAliases"] if a != alias[1:]]
                continue
            if not re.fullmatch(r"[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]", alias):
                raise Invalid(f"version alias {alias!r} is not [a-z][a-zA-Z0-9-]*[a-z0-9].", "")
            for other in versions:
                other["versionAliases"] = [a for a in other["versionAliases"] if a != alias]
            found["versionAliases"].append(alias)
        if "default" not in (a for v in versions for a in v["versionAliases"]):
            raise Invalid("the default version alias cannot be removed.", "version_aliases")
        found["versionUpdateTime"] = found["updateTime"] = _now()
        self.models[name] = next(v for v in versions if "default" in v["versionAliases"])
        return 200, found

    def _operation(self, parent: str, kind: str, response: dict | None, error: str = "") -> dict:
        """An operation on ``parent`` that the client's first poll finds done."""
        now = _now()
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

    def _create_endpoint(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/endpoints, body "endpoint", ?endpointId=.
        endpoint = _parse(req.raw, _v1().Endpoint, "endpoint")
        _check_display_name(endpoint.display_name, "endpoint.display_name", required=True)
        _check_labels(endpoint.labels, "endpoint.labels")
        name = f"{loc}/endpoints/{req.query.get('endpointId', [''])[0] or next(self._ids)}"
        if name in self.endpoints:
            return _error(409, f"Endpoint {name} already exists.")
        now = _now()
        self.endpoints[name] = {
            **_message_to_dict(endpoint),
            "name": name,
            "createTime": now,
            "updateTime": now,
            "etag": now,
        }
        response = {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.Endpoint"}
        response.update(self.endpoints[name])
        return 200, self._operation(name, "CreateEndpoint", response)

    def _list_endpoints(self, req: Request, loc: str) -> tuple[int, dict]:
        wanted = _list_filter(req)
        found = [
            e for n, e in self.endpoints.items() if n.startswith(f"{loc}/endpoints/") and wanted(e)
        ]
        return 200, {"endpoints": _ordered(req, found)}

    def _get_endpoint(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/endpoints/{id}"
        if name not in self.endpoints:
            return _error(404, f"Endpoint {name} not found.")
        return 200, self.endpoints[name]

    def _update_endpoint(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # HTTP rule: PATCH /v1/{endpoint.name=projects/*/locations/*/endpoints/*}, body
        # "endpoint", ?updateMask= (required). UpdateEndpoint answers the Endpoint itself.
        # Endpoint.traffic_split: "If a DeployedModel's ID is not listed in this map, then it
        # receives no traffic. The traffic percentage values must add up to 100, or map must be
        # empty if the Endpoint is to not accept any traffic at a moment."
        request = _parse(req.raw, _v1().Endpoint, "endpoint")
        name = f"{loc}/endpoints/{id}"
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return _error(404, f"Endpoint {name} not found.")
        paths = [
            re.sub(r"[A-Z]", lambda c: "_" + c.group().lower(), p.strip())
            for mask in req.query.get("updateMask", [])
            for p in mask.split(",")
            if p.strip()
        ]
        _required(bool(paths), "update_mask")
        for path in paths:
            if path not in ("display_name", "description", "labels", "traffic_split"):
                raise Invalid(f"update_mask path {path!r} cannot be updated.", "update_mask")
        fields = _message_to_dict(request)
        if "display_name" in paths:
            _check_display_name(request.display_name, "endpoint.display_name", required=True)
            endpoint["displayName"] = request.display_name
        if "description" in paths:
            endpoint["description"] = request.description
        if "labels" in paths:
            _check_labels(request.labels, "endpoint.labels")
            endpoint["labels"] = fields.get("labels", {})
        if "traffic_split" in paths:
            split = dict(request.traffic_split)
            deployed = sorted(d["id"] for d in endpoint.get("deployedModels", []))
            unknown = sorted(set(split) - set(deployed))
            if unknown:
                raise Invalid(
                    f"endpoint.traffic_split names deployed models {unknown} that endpoint "
                    f"{name} does not have (it has {deployed}).",
                    "endpoint.traffic_split",
                )
            if split and sum(split.values()) != 100:
                raise Invalid(
                    f"endpoint.traffic_split {split} must add up to 100, not "
                    f"{sum(split.values())} (or be empty: no traffic).",
                    "endpoint.traffic_split",
                )
            endpoint["trafficSplit"] = {k: v for k, v in split.items() if v}
        endpoint["updateTime"] = endpoint["etag"] = _now()
        return 200, endpoint

    def _deploy_model(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{endpoint}:deployModel, body "*". DeployModelRequest.traffic_split:
        # "the DeployedModel being deployed ... is referred to as 0 ... values must add up to 100".
        request = _parse(req.raw, _v1().DeployModelRequest, "")
        name = f"{loc}/endpoints/{id}"
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return _error(404, f"Endpoint {name} not found.")
        deployed = request.deployed_model
        _required(bool(deployed.model), "deployed_model.model")
        model_name, _, version = deployed.model.partition("@")
        versions = self.model_versions.get(model_name, [])
        found = next(
            (
                v
                for v in versions
                if (version or "default") in (v["versionId"], *v["versionAliases"])
            ),
            None,
        )
        if found is None:
            return _error(404, f"Model {deployed.model} not found.")
        resources = deployed.dedicated_resources
        _required(
            deployed._pb.HasField("dedicated_resources"), "deployed_model.dedicated_resources"
        )
        _required(
            bool(resources.machine_spec.machine_type),
            "deployed_model.dedicated_resources.machine_spec.machine_type",
        )
        if resources.min_replica_count < 1:
            raise Invalid(
                "deployed_model.dedicated_resources.min_replica_count must be at least 1.",
                "deployed_model.dedicated_resources.min_replica_count",
            )
        split = dict(request.traffic_split)
        current = {d["id"] for d in endpoint.get("deployedModels", [])}
        if split:
            unknown = set(split) - current - {"0"}
            if unknown or sum(split.values()) != 100:
                raise Invalid(
                    f"traffic_split {split} must add up to 100 over the endpoint's deployed "
                    f"models {sorted(current)} and 0 (the one being deployed).",
                    "traffic_split",
                )
        if self.deploy_failure:
            message, self.deploy_failure = self.deploy_failure, ""
            return 200, self._operation(name, "DeployModel", None, error=message)
        new_id = str(next(self._ids) * 1000003)
        record = {
            **_message_to_dict(deployed),
            "id": new_id,
            "model": model_name,
            "modelVersionId": found["versionId"],
            "createTime": _now(),
        }
        endpoint.setdefault("deployedModels", []).append(record)
        if split:
            endpoint["trafficSplit"] = {
                (new_id if k == "0" else k): v for k, v in split.items() if v
            }
        endpoint["updateTime"] = endpoint["etag"] = _now()
        response = {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.DeployModelResponse",
            "deployedModel": record,
        }
        return 200, self._operation(name, "DeployModel", response)

    def _undeploy_model(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # UndeployModelRequest: "A DeployedModel will be successfully undeployed only if it
        # doesn't have any traffic assigned to it when this method executes, or if this field
        # unassigns any traffic to it."
        request = _parse(req.raw, _v1().UndeployModelRequest, "")
        name = f"{loc}/endpoints/{id}"
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return _error(404, f"Endpoint {name} not found.")
        gone = request.deployed_model_id
        models = endpoint.get("deployedModels", [])
        if gone not in {d["id"] for d in models}:
            return _error(404, f"DeployedModel {gone} not found on {name}.")
        split = dict(request.traffic_split) or dict(endpoint.get("trafficSplit", {}))
        remaining = [d for d in models if d["id"] != gone]
        if split.get(gone) and remaining:
            # FAILED_PRECONDITION (400): the request is well formed, the endpoint's state is not.
            raise Invalid(
                f"DeployedModel {gone} still receives {split[gone]}% of the traffic; move it "
                "to the other deployed models first.",
                "traffic_split",
                status="FAILED_PRECONDITION",
            )
        endpoint["deployedModels"] = remaining
        endpoint["trafficSplit"] = {k: v for k, v in split.items() if k != gone and v}
        endpoint["updateTime"] = endpoint["etag"] = _now()
        response = {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.UndeployModelResponse"}
        return 200, self._operation(name, "UndeployModel", response)

    def _serving(self, loc: str, id: str) -> tuple[dict, dict]:
        """The deployed model that takes the request (the highest traffic share) and its version."""
        name = f"{loc}/endpoints/{id}"
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise LookupError(f"Endpoint {name} not found.")
        split = endpoint.get("trafficSplit", {})
        if not split:
            raise Invalid(f"Endpoint {name} has no deployed model receiving traffic.", "")
        chosen = max(split, key=split.get)
        deployed = next(d for d in endpoint["deployedModels"] if d["id"] == chosen)
        version = next(
            v
            for v in self.model_versions[deployed["model"]]
            if v["versionId"] == deployed["modelVersionId"]
        )
        return deployed, version

    def _predict(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{endpoint}:predict, body "*". The container receives
        # {"instances": [...], "parameters": ...}; the response adds the deployed model's ids.
        request = _parse(req.raw, _v1().PredictRequest, "")
        _required(len(request.instances) > 0, "instances")
        try:
            deployed, version = self._serving(loc, id)
        except LookupError as e:
            return _error(404, str(e))
        # PredictRequest.instances are google.protobuf.Value s, whose numbers are doubles: the
        # Python client writes 1 as 1.0. The service hands them to the container as JSON written
        # by protobuf's C++ printer, which writes a whole double without a fraction (1.0 -> 1):
        # how an int64 input of a TensorFlow model gets an integer it accepts.
        body = {"instances": _whole_numbers(req.body["instances"])}
        if "parameters" in req.body:
            body["parameters"] = _whole_numbers(req.body["parameters"])
        answer = self._call_predictor(deployed, version, body)
        if "error" in answer:
            return _error(400, str(answer["error"]))
        return 200, {
            "predictions": answer["predictions"],
            "deployedModelId": deployed["id"],
            "model": deployed["model"],
            "modelVersionId": deployed["modelVersionId"],
            "modelDisplayName": version.get("displayName", ""),
        }

    def _raw_predict(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # The body goes to the container as it is (rawPredict: "HttpBody"); its answer comes back.
        try:
            deployed, version = self._serving(loc, id)
        except LookupError as e:
            return _error(404, str(e))
        if not isinstance(req.body, dict):
            raise Invalid("the stand-in's containers take JSON bodies.", "http_body")
        answer = self._call_predictor(deployed, version, req.body)
        return (400 if "error" in answer else 200), answer

    def _call_predictor(self, deployed: dict, version: dict, body: dict) -> dict:
        if self.predictor is None:
            raise Invalid("The stand-in has no predictor for this test.", "")
        return self.predictor(deployed, version, body)

    def _get_bucket(self, req: Request, bucket: str) -> tuple[int, dict]:
        if bucket not in self.buckets:
            return _error(404, f"The specified bucket does not exist: {bucket}")
        owner = self.project_number(self.bucket_projects.get(bucket, "someone-else"))
        return 200, {
            "kind": "storage#bucket",
            "name": bucket,
            "id": bucket,
            "location": "US",
            "projectNumber": owner,
        }

    def _list_objects(self, req: Request, bucket: str) -> tuple[int, dict]:
        if bucket not in self.buckets:
            return _error(404, f"The specified bucket does not exist: {bucket}")
        prefix = req.query.get("prefix", [""])[0]
        names = sorted(n for n in self.buckets[bucket] if n.startswith(prefix))
        start = int(req.query.get("pageToken", ["0"])[0])
        size = min(self.list_page_size, int(req.query.get("maxResults", ["1000"])[0]))
        page = names[start : start + size]
        body: dict[str, Any] = {
            "kind": "storage#objects",
            "items": [self.buckets[bucket][n] for n in page],
        }
        if start + size < len(names):
            body["nextPageToken"] = str(start + size)
        return 200, body

    def _get_project(self, req: Request, project: str) -> tuple[int, dict]:
        number = self.project_number(project)
        return 200, {"name": f"projects/{number}", "projectId": project, "state": "ACTIVE"}

    def _token(self, req: Request) -> tuple[int, dict]:
        return 200, {"access_token": self.access_token, "expires_in": 3600, "token_type": "Bearer"}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: RestStandIn

    def _serve(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        text = raw.decode("utf-8", "replace")
        body: Any = None
        if raw:
            try:
                body = json.loads(text)
            except ValueError:
                body = text
        req = Request(
            method=self.command,
            path=urllib.parse.unquote(url.path),
            query=urllib.parse.parse_qs(url.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw=raw,
        )
        status, payload = self.state.handle(req)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # Quiet: tests read self.state.requests instead.


def _error(status: int, message: str, field: str = "", code: str = "") -> tuple[int, dict]:
    # code: the google.rpc code's name, where it is not the HTTP status's usual one.
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


# --- request checks ----------------------------------------------------------------------------


@functools.cache
def _v1() -> Any:
    """``google.cloud.aiplatform_v1.types``, imported on first use (it is slow to import)."""
    from google.cloud.aiplatform_v1 import types

    return types


def _message_to_dict(message: Any) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(message._pb)


def _parse(raw: bytes, message_type: Any, at: str) -> Any:
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


def _required(present: bool, field: str) -> None:
    if not present:
        raise Invalid(f"{field} is required.", field)


def _check_display_name(value: str, field: str, required: bool) -> None:
    _required(bool(value) or not required, field)
    if len(value) > _MAX_DISPLAY_NAME:
        raise Invalid(
            f"{field} must be at most {_MAX_DISPLAY_NAME} characters, got {len(value)}.", field
        )


def _label_chars_ok(text: str) -> bool:
    # "can only contain lowercase letters, numeric characters, underscores and dashes.
    # International characters are allowed."
    return all(c in "_-" or c.isdigit() or (c.isalpha() and not c.isupper()) for c in text)


def _check_labels(labels: Any, field: str) -> None:
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

    _check_display_name(job.display_name, f"{field}display_name", required=False)
    _check_labels(job.labels, f"{field}labels")
    # "template_uri: A template uri from where the pipeline_spec, if empty, will be downloaded."
    has_spec = len(job._pb.pipeline_spec.fields) > 0
    _required(has_spec or bool(job.template_uri), f"{field}pipeline_spec")
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
    _required(bool(root), f"{field}runtime_config.gcs_output_directory")
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


def _check_create_pipeline_job(request: Any, field: str) -> None:
    """``CreatePipelineJobRequest``: parent and pipeline_job required, pipeline_job_id's form."""
    _required(bool(names.PARENT.fullmatch(request.parent)), f"{field}parent")
    _required(request._pb.HasField("pipeline_job"), f"{field}pipeline_job")
    job_id = request.pipeline_job_id
    if job_id and not _PIPELINE_JOB_ID.fullmatch(job_id):
        raise Invalid(
            f"{field}pipeline_job_id {job_id!r} must be less than 128 characters of [a-z0-9-].",
            f"{field}pipeline_job_id",
        )
    _check_pipeline_job(request.pipeline_job, f"{field}pipeline_job.")


def _check_schedule(schedule: Any) -> None:
    """``Schedule``: display_name and max_concurrent_run_count required.

    Then the embedded ``CreatePipelineJobRequest`` with its parent ("CreatePipelineJobRequest.parent
    field is required") and its job.
    """
    _check_display_name(schedule.display_name, "schedule.display_name", required=True)
    _required(schedule.max_concurrent_run_count > 0, "schedule.max_concurrent_run_count")
    _required(
        schedule._pb.HasField("create_pipeline_job_request"),
        "schedule.create_pipeline_job_request",
    )
    _check_create_pipeline_job(
        schedule.create_pipeline_job_request, "schedule.create_pipeline_job_request."
    )


def _check_upload_model(request: Any) -> None:
    """``UploadModelRequest``: model required, and the model's fields.

    Its display_name required (<= 128), model_id's form, labels, and a container spec's image_uri
    ("Required").
    """
    _required(request._pb.HasField("model"), "model")
    model = request.model
    _check_display_name(model.display_name, "model.display_name", required=True)
    _check_labels(model.labels, "model.labels")
    if request.model_id and not _MODEL_ID.fullmatch(request.model_id):
        raise Invalid(
            f"model_id {request.model_id!r} must be up to 63 characters of [a-z0-9_-], not "
            "starting with a digit or a dash.",
            "model_id",
        )
    if model._pb.HasField("container_spec"):
        _required(bool(model.container_spec.image_uri), "model.container_spec.image_uri")


def _whole_numbers(value: Any) -> Any:
    """JSON as protobuf's C++ printer writes a Value: whole doubles as integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    return value


_FILTER_TERM = re.compile(r'\s*(display_name|labels\.[a-z][a-z0-9_-]*)\s*=\s*"([^"]*)"\s*')
_FILTER_JOIN = re.compile(r"(AND|OR)\b")


def _list_filter(req: Request) -> Any:
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


def _ordered(req: Request, found: list[dict]) -> list[dict]:
    """``found`` in the list request's ``order_by`` (only ``update_time desc``), else 400."""
    order = req.query.get("orderBy", [""])[0].replace(" ", "")
    if order in ("update_timedesc", "updateTimedesc"):
        return sorted(found, key=lambda m: m["updateTime"], reverse=True)
    if order:
        raise Invalid(f"The stand-in orders only by update_time desc: {order!r}", "order_by")
    return found


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
