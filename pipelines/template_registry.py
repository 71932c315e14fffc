"""Pipeline templates in Artifact Registry: publish, list and download through kfp's RegistryClient.

Vertex AI starts a run from a template kept in an Artifact Registry repository of format KFP,
``https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY``; one template is
``REPOSITORY_URL/PACKAGE/TAG`` or ``REPOSITORY_URL/PACKAGE/sha256:HEX`` (docs/submit.md,
"Templates in Artifact Registry"). The registry's rules, as this module relies on them: the package
is the pipeline's name (``pipelineInfo.name``: ``ncf-pipeline`` for every profile), the version is
``sha256:`` and the hex SHA-256 of the uploaded file, and a tag names one version of one package
(uploading with a tag another version holds moves it). Our tags say the project version and the
profile (``template_tags``).

Every request is ``kfp.registry.RegistryClient``'s own. Against the real registry the client reads
its Artifact Registry context (upload and download at the kfp.pkg.dev host, the rest at
``artifactregistry.googleapis.com/v1``); given an ``endpoint`` (a stand-in such as
``vertex_emulator/registry_service.py``), the same context is handed to the client with both hosts
replaced: ``https://LOCATION-kfp.pkg.dev`` by ``ENDPOINT/LOCATION-kfp.pkg.dev`` and
``https://artifactregistry.googleapis.com`` by ``ENDPOINT``. Every request carries the caller's
bearer token: callers check a plain-http endpoint first
(``pipelines.submit.endpoints.api_endpoint_problem``). Nothing here reads the environment; the CLI
passes credentials and the endpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

# The forms Vertex AI accepts (google-cloud-aiplatform's _VALID_AR_URL; the registry's paths).
_REPOSITORY = (
    r"https://(?P<location>[a-z0-9-]+)-kfp\.pkg\.dev/(?P<project>[^/\s]+)/(?P<repo>[^/\s]+)"
)
REPOSITORY_URL = re.compile(_REPOSITORY + "/?")
TEMPLATE_URL = re.compile(_REPOSITORY + r"/(?P<package>[^/\s]+)/(?P<ref>[^/\s]+)")
VERSION_PREFIX = "sha256:"
# Our tags: letters, digits, '.', '_' and '-', starting with a letter or digit; never "sha256:".
TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_API = "https://artifactregistry.googleapis.com"


class TemplateRegistryError(Exception):
    """The registry (or the way to it) refused; ``str()`` names the repository and what to check."""


@dataclasses.dataclass(frozen=True)
class Repository:
    """A KFP repository of Artifact Registry."""

    location: str
    project: str
    repository: str

    @property
    def url(self) -> str:
        """``https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY``, the host kfp's client takes."""
        return f"https://{self.location}-kfp.pkg.dev/{self.project}/{self.repository}"

    def template_url(self, package: str, ref: str) -> str:
        """The URL of one template: ``url/PACKAGE/TAG`` or ``url/PACKAGE/sha256:HEX``."""
        return f"{self.url}/{package}/{ref}"


@dataclasses.dataclass(frozen=True)
class TemplateRef:
    """One template in a repository: a package and a tag or a version."""

    repository: Repository
    package: str
    ref: str

    @property
    def url(self) -> str:
        """``REPOSITORY_URL/PACKAGE/REF``."""
        return self.repository.template_url(self.package, self.ref)

    @property
    def is_version(self) -> bool:
        """Whether ``ref`` is a version (``sha256:...``), not a tag."""
        return self.ref.startswith(VERSION_PREFIX)


@dataclasses.dataclass(frozen=True)
class Published:
    """What an upload created: the package, its version and the tags now on it."""

    repository: Repository
    package: str
    version: str
    tags: tuple[str, ...]

    def urls(self) -> list[str]:
        """The template's URL by each tag, then by its version (the one that never moves)."""
        return [self.repository.template_url(self.package, r) for r in (*self.tags, self.version)]


@dataclasses.dataclass(frozen=True)
class Version:
    """One version of a package as the registry lists it."""

    version: str
    create_time: str
    tags: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Downloaded:
    """A template fetched from the registry: the local copy and the version its bytes are."""

    ref: TemplateRef
    path: str
    version: str


def is_registry_url(text: str) -> bool:
    """Whether ``text`` is a kfp.pkg.dev URL (a template or a repository), not a local file."""
    return bool(re.match(r"https://[^/]+-kfp\.pkg\.dev/", text or "", re.IGNORECASE))


def parse_repository(url: str) -> Repository:
    """The repository ``https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY`` names.

    Raises:
        ValueError: another form, with the expected one.
    """
    m = REPOSITORY_URL.fullmatch(url.strip())
    if not m:
        raise ValueError(
            f"{url!r} is not an Artifact Registry KFP repository: expected "
            "https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY"
        )
    return Repository(m["location"], m["project"], m["repo"])


def parse_template(url: str) -> TemplateRef:
    """The template ``https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY/PACKAGE/TAG`` names.

    Raises:
        ValueError: another form (a repository without package and tag too), with the expected one.
    """
    m = TEMPLATE_URL.fullmatch(url.strip())
    if not m:
        raise ValueError(
            f"{url!r} is not a template in Artifact Registry: expected "
            "https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY/PACKAGE/TAG (or .../sha256:HEX); "
            "`ncf-pipelines templates list --repo https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY` "
            "lists them"
        )
    return TemplateRef(Repository(m["location"], m["project"], m["repo"]), m["package"], m["ref"])


def template_tags(profile: str, project_version: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The tags a published template gets: ``v<version>-<profile>``, ``latest-<profile>``, extra.

    Every profile publishes the one package ``ncf-pipeline``, so the profile is in each tag;
    ``latest-<profile>`` moves to the newest upload, the versioned one names a release.

    Raises:
        ValueError: a tag the registry would not take, or one given twice.
    """
    tags = (f"v{project_version}-{profile}", f"latest-{profile}", *extra)
    for tag in tags:
        if tag.startswith(VERSION_PREFIX) or not TAG.fullmatch(tag):
            raise ValueError(
                f"tag {tag!r}: a tag is 1-128 letters, digits, '.', '_' and '-', starting with a "
                f"letter or digit (a version, {VERSION_PREFIX}..., is not a tag)"
            )
    if len(set(tags)) != len(tags):
        raise ValueError(f"tags given twice: {', '.join(tags)}")
    return tags


def file_version(path: str) -> str:
    """The version the registry gives a file: ``sha256:`` and its content's hex SHA-256."""
    with open(path, "rb") as f:
        return VERSION_PREFIX + hashlib.sha256(f.read()).hexdigest()


# --- the client ----------------------------------------------------------------------------------


def _context(repo: Repository, endpoint: str) -> dict[str, str]:
    """The client's own Artifact Registry context, with both hosts at ``endpoint``.

    The repository's names are filled in; the client fills ``{host}``, ``{package_name}``,
    ``{version}`` and ``{tag}``.
    """
    import kfp.registry

    path = os.path.join(os.path.dirname(kfp.registry.__file__), "context", "kfp_pkg_dev.json")
    with open(path) as f:
        context = json.load(f)
    base = endpoint.rstrip("/")
    names = {"project_id": repo.project, "location": repo.location, "repo_id": repo.repository}
    out = {}
    for key, value in context.items():
        value = value.replace(_API, base)
        for name, given in names.items():
            value = value.replace("{" + name + "}", given)
        out[key] = value
    return out


def _standin_host(repo: Repository, endpoint: str) -> str:
    return f"{endpoint.rstrip('/')}/{repo.location}-kfp.pkg.dev/{repo.project}/{repo.repository}"


def _client(repo: Repository, credentials: Any, endpoint: str | None, scratch: str) -> Any:
    """The kfp ``RegistryClient`` for ``repo``, at ``endpoint`` when given (a stand-in)."""
    import google.auth.transport.requests
    from kfp.registry import RegistryClient

    if not credentials.valid:  # The client refreshes them for the real host only.
        credentials.refresh(google.auth.transport.requests.Request())
    if not endpoint:
        return RegistryClient(host=repo.url, auth=credentials)
    config = os.path.join(scratch, "registry_context.json")
    with open(config, "w") as f:
        json.dump(_context(repo, endpoint), f)
    return RegistryClient(host=_standin_host(repo, endpoint), auth=credentials, config_file=config)


class _Session:
    """A client for one repository, turning the registry's errors into ``TemplateRegistryError``."""

    def __init__(self, repo: Repository, credentials: Any, endpoint: str | None):
        self.repo, self.endpoint = repo, endpoint
        self._scratch = tempfile.TemporaryDirectory(prefix="ncf-registry-")
        try:
            with self.errors("connecting"):
                self.client = _client(repo, credentials, endpoint, self._scratch.name)
        except BaseException:
            self._scratch.cleanup()
            raise

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self._scratch.cleanup()

    def errors(self, doing: str):
        return _errors(self.repo, self.endpoint, doing)

    def tags(self, package: str) -> dict[str, str]:
        """Tag -> version of one package."""
        with self.errors(f"listing the tags of {package}"):
            listed = self.client.list_tags(package)
        return {_last(t["name"]): _last(t.get("version", "")) for t in listed}

    def packages(self) -> list[str]:
        with self.errors("listing the packages"):
            return sorted(_last(p["name"]) for p in self.client.list_packages())


def _last(name: str) -> str:
    return name.rstrip("/").rsplit("/", 1)[-1]


class _Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@contextlib.contextmanager
def _errors(repo: Repository, endpoint: str | None, doing: str) -> Iterator[None]:
    """Turns the client's errors into ``TemplateRegistryError``.

    A 404 becomes ``_Refused``, which each caller says in its own words.
    """
    import requests
    from google.auth import exceptions as auth_exceptions

    where = repo.url + (f" (at {endpoint})" if endpoint else "")
    try:
        yield
    except requests.HTTPError as e:
        status = e.response.status_code if e.response is not None else 0
        message = _service_message(e.response)
        if status == 404:
            raise _Refused(404, message) from e
        if status == 401:
            hint = (
                "the credentials were rejected: run `gcloud auth application-default login`, "
                "or check GOOGLE_APPLICATION_CREDENTIALS"
            )
        elif status == 403:
            hint = (
                "publishing needs roles/artifactregistry.writer on the repository, listing and "
                "downloading roles/artifactregistry.reader"
            )
        else:
            hint = "the request or the repository named in the message"
        raise TemplateRegistryError(
            f"Artifact Registry refused {doing} in {where} ({status}): {message}\n"
            f"  What to check: {hint}"
        ) from e
    except requests.ConnectionError as e:
        raise TemplateRegistryError(
            f"{doing}: could not connect to {where}; check the network, proxy settings and "
            "--registry-endpoint"
        ) from e
    except auth_exceptions.GoogleAuthError as e:
        raise TemplateRegistryError(
            f"{doing} in {where}: no usable Google Cloud credentials ({e}); run "
            "`gcloud auth application-default login`"
        ) from e


def _service_message(response: Any) -> str:
    if response is None:
        return ""
    try:
        error = response.json().get("error", {})
    except (ValueError, AttributeError):
        error = {}
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return (response.text or response.reason or "").strip()[:500]


def _missing_repository(repo: Repository, message: str) -> TemplateRegistryError:
    return TemplateRegistryError(
        f"no Artifact Registry KFP repository {repo.url} ({message}); create it with `gcloud "
        f"artifacts repositories create {repo.repository} --repository-format=KFP "
        f"--location={repo.location} --project={repo.project}`"
    )


# --- what the CLI calls ---------------------------------------------------------------------------


def publish(
    path: str,
    repo: Repository,
    tags: Sequence[str],
    *,
    credentials: Any,
    endpoint: str | None = None,
) -> Published:
    """Uploads a compiled template to ``repo`` with ``tags``.

    Raises:
        TemplateRegistryError: the registry refused, or answered another version than the
            file's SHA-256 (the version rule this module relies on).
    """
    expected = file_version(path)
    with _Session(repo, credentials, endpoint) as s:
        try:
            with s.errors("uploading the template"):
                package, version = s.client.upload_pipeline(path, tags=list(tags))
        except _Refused as e:
            raise _missing_repository(repo, str(e)) from None
    if version != expected:
        raise TemplateRegistryError(
            f"{repo.url} stored {path} as version {version}, not its SHA-256 {expected}"
        )
    return Published(repo, package, version, tuple(tags))


def list_templates(
    repo: Repository, *, credentials: Any, endpoint: str | None = None
) -> dict[str, list[Version]]:
    """Package -> its versions, newest first, each with its tags.

    Raises:
        TemplateRegistryError: the registry refused (a missing repository says how to create it).
    """
    out: dict[str, list[Version]] = {}
    with _Session(repo, credentials, endpoint) as s:
        try:
            for package in s.packages():
                with s.errors(f"listing the versions of {package}"):
                    listed = s.client.list_versions(package)
                tags: dict[str, list[str]] = {}
                for tag, version in s.tags(package).items():
                    tags.setdefault(version, []).append(tag)
                versions = [
                    Version(
                        _last(v["name"]),
                        v.get("createTime", ""),
                        tuple(sorted(tags.get(_last(v["name"]), []))),
                    )
                    for v in listed
                ]
                out[package] = sorted(versions, key=lambda v: v.create_time, reverse=True)
        except _Refused as e:
            raise _missing_repository(repo, str(e)) from None
    return out


def download(
    ref: TemplateRef, dest: str, *, credentials: Any, endpoint: str | None = None
) -> Downloaded:
    """Writes the template ``ref`` names to the file ``dest``.

    Raises:
        TemplateRegistryError: the registry refused; a tag or version the package lacks names the
            repository and the tags it has (a package the repository lacks, its packages).
    """
    with _Session(ref.repository, credentials, endpoint) as s:
        try:
            with s.errors(f"downloading {ref.package}/{ref.ref}"):
                s.client.download_pipeline(
                    ref.package,
                    version=ref.ref if ref.is_version else None,
                    tag=None if ref.is_version else ref.ref,
                    file_name=dest,
                )
        except _Refused:
            raise _not_found(s, ref) from None
    return Downloaded(ref, dest, file_version(dest))


def _not_found(s: _Session, ref: TemplateRef) -> TemplateRegistryError:
    """What the repository has instead of ``ref``."""
    repo = ref.repository.url
    what = "version" if ref.is_version else "tag"
    try:
        tags = s.tags(ref.package)
    except _Refused:
        try:
            packages = s.packages()
        except _Refused as e:
            return _missing_repository(ref.repository, str(e))
        return TemplateRegistryError(
            f"no package {ref.package!r} in {repo}; its packages: "
            f"{', '.join(packages) or '(none: publish one with `ncf-pipelines compile --publish`)'}"
        )
    listed = ", ".join(sorted(tags)) or "(none)"
    return TemplateRegistryError(
        f"no {what} {ref.ref!r} of {ref.package} in {repo}; its tags: {listed} "
        f"(`ncf-pipelines templates list --repo {repo}` lists the versions)"
    )
