"""A stand-in for Artifact Registry's KFP repositories on 127.0.0.1, for kfp's ``RegistryClient``.

``RegistryStandIn`` answers the requests ``kfp.registry.RegistryClient`` sends to a
``https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY`` host, with each host a path under the
stand-in's ``url`` (``pipelines.template_registry`` builds the client so): the kfp.pkg.dev host
``https://L-kfp.pkg.dev`` is ``URL/L-kfp.pkg.dev``, ``https://artifactregistry.googleapis.com``
is ``URL``. It keeps repositories, packages, versions and tags in memory and records every request.

Endpoints (R = ``projects/P/locations/L/repositories/REPO``):
    POST   /L-kfp.pkg.dev/P/REPO            multipart upload: field ``content`` (the YAML) and
                                            ``tags`` (comma-separated); answers ``PACKAGE/VERSION``
    GET    /L-kfp.pkg.dev/P/REPO/PKG/REF    the file of a tag or a ``sha256:`` version
    GET    /v1/R/packages[/PKG]
    GET    /v1/R/packages/PKG/versions[/VERSION]   (each with its ``relatedTags``)
    GET    /v1/R/packages/PKG/tags[/TAG]
    POST   /v1/R/packages/PKG/tags?tagId=TAG        body: ``{"version": "R/.../versions/V"}``
    PATCH  /v1/R/packages/PKG/tags/TAG?updateMask=version

The registry's rules it keeps: the package is the uploaded pipeline's ``pipelineInfo.name`` (a
file that is not a compiled pipeline is 400 INVALID_ARGUMENT); the version is ``sha256:`` and the
hex SHA-256 of the file's bytes (an upload of the same bytes is the same version); a tag names one
version, and uploading with a tag another version holds moves it; a tag starting ``sha256:`` is
400. Every request must carry ``Authorization: Bearer ACCESS_TOKEN`` (what the client sends from
its credentials), else 401 UNAUTHENTICATED; a repository not created with ``add_repository``, a
package, version or tag it lacks is 404 NOT_FOUND. Errors are the Google JSON error body.

Not emulated: deleting packages, versions or tags; paging of lists (``pageSize``,
``pageToken``); the version's ``metadata`` and ``description`` fields and a package's
``displayName``; the registry's size limits and its exact tag-name rule (any tag not starting
``sha256:`` is taken); IAM (any request with the token is allowed: no reader/writer roles);
repositories of other formats; TLS (plain HTTP on loopback only).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.parser
import email.policy
import hashlib
import http.server
import json
import re
import threading
import urllib.parse
from typing import Any

from vertex_emulator.loopback import LoopbackService

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS"}
_NO_CREDENTIALS = (
    "Request is missing required authentication credential. Expected OAuth 2 access token, "
    "login cookie or other valid authentication credential."
)
_BAD_CREDENTIALS = "Request had invalid authentication credentials."
_REPO = r"projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/repositories/(?P<repo>[^/]+)"
_KFP = r"/(?P<location>[a-z0-9-]+)-kfp\.pkg\.dev/(?P<project>[^/]+)/(?P<repo>[^/]+)"
_PKG = r"/packages/(?P<package>[^/]+)"
VERSION_PREFIX = "sha256:"


@dataclasses.dataclass
class Request:
    """One request as the stand-in received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # Lower-case names.
    raw: bytes


@dataclasses.dataclass
class _Package:
    create_time: str
    update_time: str
    # Version -> (the file, its create time).
    versions: dict[str, tuple[bytes, str]] = dataclasses.field(default_factory=dict)
    tags: dict[str, str] = dataclasses.field(default_factory=dict)  # Tag -> version.


class _Answer(Exception):
    """Ends a request with a Google error."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class RegistryStandIn(LoopbackService):
    """The server; use as a context manager, or call ``start()`` and ``stop()``."""

    def __init__(self, access_token: str = "standin-access-token"):
        self.access_token = access_token
        self.requests: list[Request] = []
        # (project, location, repository) -> package name -> package.
        self.repositories: dict[tuple[str, str, str], dict[str, _Package]] = {}
        self._lock = threading.Lock()

    def handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        """Its requests' handler (``LoopbackService``)."""
        return _Handler

    def add_repository(self, project: str, location: str, repository: str) -> None:
        """Creates an empty KFP repository (``gcloud artifacts repositories create``)."""
        with self._lock:
            self.repositories.setdefault((project, location, repository), {})

    # --- requests ------------------------------------------------------------------------------

    def handle(self, req: Request) -> tuple[int, str, bytes]:
        """Routes one request; returns (status, content type, body)."""
        with self._lock:
            self.requests.append(req)
            try:
                self._authenticate(req)
                for method, pattern, func in self._routes():
                    m = re.fullmatch(pattern, req.path)
                    if m and method == req.method:
                        groups = m.groupdict()
                        key = (groups.pop("project"), groups.pop("location"), groups.pop("repo"))
                        if key not in self.repositories:
                            raise _Answer(404, f"Repository {_name(*key)} not found.")
                        return func(req, key, **groups)
                raise _Answer(404, f"The stand-in has no route for {req.method} {req.path}.")
            except _Answer as e:
                body = {
                    "error": {
                        "code": e.status,
                        "message": e.message,
                        "status": _STATUS.get(e.status, "UNKNOWN"),
                    }
                }
                return e.status, "application/json", json.dumps(body).encode()

    def _authenticate(self, req: Request) -> None:
        scheme, _, token = req.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Answer(401, _NO_CREDENTIALS)
        if token != self.access_token:
            raise _Answer(401, _BAD_CREDENTIALS)

    def _routes(self):
        api = r"/v1/" + _REPO
        return [
            ("POST", _KFP, self._upload),
            ("GET", _KFP + r"/(?P<package>[^/]+)/(?P<ref>[^/]+)", self._download),
            ("GET", api + r"/packages", self._list_packages),
            ("GET", api + _PKG, self._get_package),
            ("GET", api + _PKG + r"/versions", self._list_versions),
            ("GET", api + _PKG + r"/versions/(?P<version>[^/]+)", self._get_version),
            ("GET", api + _PKG + r"/tags", self._list_tags),
            ("GET", api + _PKG + r"/tags/(?P<tag>[^/]+)", self._get_tag),
            ("POST", api + _PKG + r"/tags", self._create_tag),
            ("PATCH", api + _PKG + r"/tags/(?P<tag>[^/]+)", self._update_tag),
        ]

    def _upload(self, req: Request, key: tuple) -> tuple[int, str, bytes]:
        fields = _form_fields(req)
        if "content" not in fields:
            raise _Answer(400, "The upload has no 'content' file.")
        content = fields["content"]
        package = _pipeline_name(content)
        tags = [t.strip() for t in fields.get("tags", b"").decode().split(",") if t.strip()]
        for tag in tags:
            _check_tag(tag)
        version = VERSION_PREFIX + hashlib.sha256(content).hexdigest()
        now = _now()
        found = self.repositories[key].setdefault(package, _Package(now, now))
        found.versions.setdefault(version, (content, now))
        found.update_time = now
        for tag in tags:
            found.tags[tag] = version  # A tag another version held moves here.
        return 200, "text/plain", f"{package}/{version}".encode()

    def _download(self, req: Request, key: tuple, package: str, ref: str) -> tuple[int, str, bytes]:
        found = self._package(key, package)
        version = ref if ref.startswith(VERSION_PREFIX) else found.tags.get(ref)
        if version not in found.versions:
            what = "Version" if ref.startswith(VERSION_PREFIX) else "Tag"
            raise _Answer(404, f"{what} {_name(*key)}/packages/{package}: {ref} not found.")
        return 200, "application/x-yaml", found.versions[version][0]

    def _list_packages(self, req: Request, key: tuple) -> tuple[int, str, bytes]:
        packages = [self._package_json(key, p) for p in sorted(self.repositories[key])]
        return _json({"packages": packages} if packages else {})

    def _get_package(self, req: Request, key: tuple, package: str) -> tuple[int, str, bytes]:
        self._package(key, package)
        return _json(self._package_json(key, package))

    def _list_versions(self, req: Request, key: tuple, package: str) -> tuple[int, str, bytes]:
        found = self._package(key, package)
        versions = [self._version_json(key, package, v) for v in found.versions]
        return _json({"versions": versions} if versions else {})

    def _get_version(
        self, req: Request, key: tuple, package: str, version: str
    ) -> tuple[int, str, bytes]:
        if version not in self._package(key, package).versions:
            raise _Answer(
                404, f"Version {_name(*key)}/packages/{package}/versions/{version} not found."
            )
        return _json(self._version_json(key, package, version))

    def _list_tags(self, req: Request, key: tuple, package: str) -> tuple[int, str, bytes]:
        found = self._package(key, package)
        tags = [_tag_json(key, package, t, v) for t, v in sorted(found.tags.items())]
        return _json({"tags": tags} if tags else {})

    def _get_tag(self, req: Request, key: tuple, package: str, tag: str) -> tuple[int, str, bytes]:
        found = self._package(key, package)
        if tag not in found.tags:
            raise _Answer(404, f"Tag {_name(*key)}/packages/{package}/tags/{tag} not found.")
        return _json(_tag_json(key, package, tag, found.tags[tag]))

    def _create_tag(self, req: Request, key: tuple, package: str) -> tuple[int, str, bytes]:
        tag = (req.query.get("tagId") or [""])[0]
        _check_tag(tag)
        found = self._package(key, package)
        if tag in found.tags:
            raise _Answer(409, f"Tag {tag} already exists.")
        found.tags[tag] = self._tagged_version(req, key, package, found)
        return _json(_tag_json(key, package, tag, found.tags[tag]))

    def _update_tag(
        self, req: Request, key: tuple, package: str, tag: str
    ) -> tuple[int, str, bytes]:
        found = self._package(key, package)
        if tag not in found.tags:
            raise _Answer(404, f"Tag {_name(*key)}/packages/{package}/tags/{tag} not found.")
        found.tags[tag] = self._tagged_version(req, key, package, found)
        return _json(_tag_json(key, package, tag, found.tags[tag]))

    # --- helpers -------------------------------------------------------------------------------

    def _package(self, key: tuple, package: str) -> _Package:
        found = self.repositories[key].get(package)
        if found is None:
            raise _Answer(404, f"Package {_name(*key)}/packages/{package} not found.")
        return found

    def _tagged_version(self, req: Request, key: tuple, package: str, found: _Package) -> str:
        try:
            name = json.loads(req.raw or b"{}").get("version", "")
        except (ValueError, AttributeError):
            raise _Answer(400, "The body is not a Tag in JSON.") from None
        version = str(name).rsplit("/", 1)[-1]
        if not str(name).startswith(f"{_name(*key)}/packages/{package}/versions/"):
            raise _Answer(400, f"Tag.version {name!r} is not a version of this package.")
        if version not in found.versions:
            raise _Answer(404, f"Version {name} not found.")
        return version

    def _package_json(self, key: tuple, package: str) -> dict:
        found = self.repositories[key][package]
        return {
            "name": f"{_name(*key)}/packages/{package}",
            "createTime": found.create_time,
            "updateTime": found.update_time,
        }

    def _version_json(self, key: tuple, package: str, version: str) -> dict:
        found = self.repositories[key][package]
        created = found.versions[version][1]
        tags = [
            _tag_json(key, package, t, v) for t, v in sorted(found.tags.items()) if v == version
        ]
        return {
            "name": f"{_name(*key)}/packages/{package}/versions/{version}",
            "createTime": created,
            "updateTime": created,
            "relatedTags": tags,
        }


def _name(project: str, location: str, repository: str) -> str:
    return f"projects/{project}/locations/{location}/repositories/{repository}"


def _tag_json(key: tuple, package: str, tag: str, version: str) -> dict:
    base = f"{_name(*key)}/packages/{package}"
    return {"name": f"{base}/tags/{tag}", "version": f"{base}/versions/{version}"}


def _check_tag(tag: str) -> None:
    if not tag or tag.startswith(VERSION_PREFIX):
        raise _Answer(400, f"Invalid tag {tag!r}: a tag cannot be empty or start with sha256:.")


def _pipeline_name(content: bytes) -> str:
    """The package an uploaded file goes to: its ``pipelineInfo.name``."""
    from pipelines import yaml_io

    try:
        doc = yaml_io.load(content)
    except yaml_io.YAMLError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("pipelineSpec"), dict):
        doc = doc["pipelineSpec"]
    name = doc.get("pipelineInfo", {}).get("name") if isinstance(doc, dict) else None
    if not isinstance(name, str) or not name:
        raise _Answer(400, "The file is not a compiled KFP pipeline: no pipelineInfo.name.")
    return name


def _form_fields(req: Request) -> dict[str, bytes]:
    """The fields of a ``multipart/form-data`` body, by name."""
    content_type = req.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data"):
        raise _Answer(400, "An upload is multipart/form-data.")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + req.raw
    )
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            fields[name] = part.get_payload(decode=True) or b""
    return fields


def _json(body: dict) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps(body).encode()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: RegistryStandIn

    def _serve(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        req = Request(
            method=self.command,
            path=urllib.parse.unquote(url.path),
            query=urllib.parse.parse_qs(url.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            raw=self.rfile.read(int(self.headers.get("Content-Length") or 0)),
        )
        status, content_type, data = self.state.handle(req)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # Quiet: tests read state.requests instead.
