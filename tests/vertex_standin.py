"""A local stand-in for the Vertex AI v1 REST API and the Cloud Storage JSON API, for tests.

It listens on 127.0.0.1 (a free port) and answers the requests the real
``google-cloud-aiplatform`` and ``google-cloud-storage`` clients send when they are pointed at it
(``api_endpoint="http://127.0.0.1:PORT"`` with the REST transport; ``STORAGE_EMULATOR_HOST`` or
``client_options={"api_endpoint": ...}`` for storage). It implements only what submitting a
pipeline needs, keeps resources in memory, and records every request so tests can assert on what
the client library really sent.

Endpoints:
    POST/GET  /v1/projects/P/locations/L/pipelineJobs[/ID]
    POST/GET  /v1/projects/P/locations/L/schedules[/ID]
    GET       /v1/projects/P/locations/L/metadataStores/default
    POST/GET  /v1/projects/P/locations/L/metadataStores/default/contexts[/ID]
    POST      /v1/.../contexts/ID:addContextChildren
    GET       /storage/v1/b/BUCKET and /storage/v1/b/BUCKET/o (object listing, paged)
    GET       /v3/projects/ID (Cloud Resource Manager: the SDK checks who owns the root bucket)
    POST      /token (an OAuth token endpoint, for credentials that refresh)
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
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


class VertexStandIn:
    """The server; use as a context manager, or call ``start()`` and ``stop()``."""

    def __init__(self, access_token: str = "standin-access-token"):
        self.requests: list[Request] = []
        self.pipeline_jobs: dict[str, dict] = {}
        self.schedules: dict[str, dict] = {}
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
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- control -----------------------------------------------------------------------------

    def start(self) -> VertexStandIn:
        """Starts serving on a free port of 127.0.0.1."""
        standin = self

        class Handler(_Handler):
            server_state = standin

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops serving and closes the socket."""
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> VertexStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self._server, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail_next(self, status: int, message: str, path_contains: str = "") -> None:
        """Answers the next request (whose path contains ``path_contains``) with a Google error."""
        with self._lock:
            self._failures.append(_Failure(status, message, path_contains))

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
            for i, f in enumerate(self._failures):
                if f.path_contains in req.path:
                    del self._failures[i]
                    return _error(f.status, f.message)
        for method, pattern, func in self._routes():
            m = re.fullmatch(pattern, req.path)
            if m and method == req.method:
                with self._lock:
                    return func(req, **m.groupdict())
        return _error(404, f"The stand-in has no route for {req.method} {req.path}.")

    def _routes(self):
        return [
            ("POST", _LOC + r"/pipelineJobs", self._create_pipeline_job),
            ("GET", _LOC + r"/pipelineJobs/(?P<id>[^/:]+)", self._get_pipeline_job),
            ("POST", _LOC + r"/schedules", self._create_schedule),
            ("GET", _LOC + r"/schedules/(?P<id>[^/:]+)", self._get_schedule),
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
        job_id = req.query.get("pipelineJobId", [f"job-{next(self._ids)}"])[0]
        name = f"{loc}/pipelineJobs/{job_id}"
        if name in self.pipeline_jobs:
            return _error(409, f"PipelineJob {name} already exists.")
        job = dict(req.body or {})
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
        name = f"{loc}/schedules/{next(self._ids)}"
        schedule = dict(req.body or {})
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
        ctx_id = req.query.get("contextId", [f"context-{next(self._ids)}"])[0]
        name = f"{loc}/metadataStores/default/contexts/{ctx_id}"
        if name in self.contexts:
            return _error(409, f"Context {name} already exists.")
        ctx = dict(req.body or {})
        ctx.update(name=name, createTime=_now())
        self.contexts[name] = ctx
        return 200, ctx

    def _get_context(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/metadataStores/default/contexts/{id}"
        if name not in self.contexts:
            return _error(404, f"Context {name} not found.")
        return 200, self.contexts[name]

    def _add_context_children(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/metadataStores/default/contexts/{id}"
        if name not in self.contexts:
            return _error(404, f"Context {name} not found.")
        self.context_children.setdefault(name, []).extend((req.body or {}).get("childContexts", []))
        return 200, {}

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
    server_state: VertexStandIn

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
        status, payload = self.server_state.handle(req)
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # Quiet: tests read self.server_state.requests instead.


def _error(status: int, message: str) -> tuple[int, dict]:
    return status, {
        "error": {
            "code": status,
            "message": message,
            "status": _STATUS_NAMES.get(status, "UNKNOWN"),
        }
    }


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
