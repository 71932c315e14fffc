"""The emulator's HTTP side: Vertex AI's v1 REST API and Cloud Storage's JSON API on 127.0.0.1.

Part of the one Vertex AI emulator (``vertex_emulator.emulator`` says what it emulates and what
not). ``RestStandIn`` listens on 127.0.0.1 only (a free port) and answers the requests the real
``google-cloud-aiplatform`` and ``google-cloud-storage`` clients send when they are pointed at it
(``api_endpoint="http://127.0.0.1:PORT"`` with the REST transport; ``STORAGE_EMULATOR_HOST`` or
``client_options={"api_endpoint": ...}`` for storage). It keeps resources in memory and records
every request, so a test can assert on what the client library really sent. The tests (submit,
deploy, registry) use it through conftest.py's ``standin`` fixture; ``verify`` does not start it.

This module is the plumbing: the server, the routing, the recorded requests, injected failures
and authentication. Each resource's routes live in a module of their own, each listing its
endpoints: ``rest_pipeline_jobs`` (pipeline jobs, schedules, metadata contexts), ``rest_models``
(the Model Registry), ``rest_endpoints`` (endpoints, deployments, predictions), ``rest_storage``
(bucket listings, the project lookup), on the resources of ``rest_resources``; every body is read
as ``rest_checks`` says (strictly as its v1 message, then by the v1 reference's rules). Here::

    POST      /token (an OAuth token endpoint, for credentials that refresh)

Auth (this module is its one home): every Vertex AI and Resource Manager request (``/v1/``,
``/ui/``, ``/v3/``) must carry ``Authorization: Bearer TOKEN``, TOKEN being ``access_token`` (what
``/token`` hands out) or a JWT (the GAPIC clients sign their own with a service account key; the
signature is not checked), else 401 UNAUTHENTICATED, as the service answers. Cloud Storage
requests are exempt: with ``STORAGE_EMULATOR_HOST`` set, google-cloud-storage is anonymous by
design.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import re
import urllib.parse
from typing import Any

from vertex_emulator.loopback import LoopbackService
from vertex_emulator.rest_checks import Invalid, Request, error_response
from vertex_emulator.rest_endpoints import EndpointRoutes
from vertex_emulator.rest_models import ModelRoutes
from vertex_emulator.rest_pipeline_jobs import PipelineJobRoutes
from vertex_emulator.rest_resources import Route
from vertex_emulator.rest_storage import StorageRoutes

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


@dataclasses.dataclass
class _Failure:
    status: int
    message: str
    path_contains: str
    method: str


class RestStandIn(LoopbackService, PipelineJobRoutes, ModelRoutes, EndpointRoutes, StorageRoutes):
    """The server; use as a context manager, or call ``start()`` and ``stop()``."""

    def __init__(self, access_token: str = "standin-access-token"):
        super().__init__()  # The resources (``RestResources``), empty.
        self.requests: list[Request] = []
        # Requests answered 400 or 401 by the checks, with the reason.
        self.rejected: list[tuple[Request, str]] = []
        self.access_token = access_token
        self._failures: list[_Failure] = []

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
                return error_response(401, refused)
            for i, f in enumerate(self._failures):
                if f.path_contains in req.path and f.method in ("", req.method):
                    del self._failures[i]
                    return error_response(f.status, f.message)
        for method, pattern, func in self._routes():
            m = re.fullmatch(pattern, req.path)
            if m and method == req.method:
                with self._lock:
                    try:
                        return func(req, **m.groupdict())
                    except Invalid as e:
                        self.rejected.append((req, e.message))
                        return error_response(400, e.message, field=e.field, code=e.status)
        return error_response(404, f"The stand-in has no route for {req.method} {req.path}.")

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

    def _routes(self) -> list[Route]:
        return [
            *self._pipeline_job_routes(),
            *self._model_routes(),
            *self._endpoint_routes(),
            *self._operation_routes(),
            *self._storage_routes(),
            ("POST", r"/token", self._token),
        ]

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
