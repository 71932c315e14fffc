"""Talking to Google's services: credentials, and their errors turned into a ``SubmitError``.

The message of a ``SubmitError`` carries the service's own status and words and what to check
(roles, project and region, quota), never a traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pipelines.compiled import DATA_URI
from pipelines.submit.request import SubmitConfig

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class SubmitError(Exception):
    """The service (or the way to it) refused the submission; ``str()`` says what to check."""

    def __init__(self, message: str, *, code: int | None = None, service_message: str = ""):
        super().__init__(message)
        self.code = code
        self.service_message = service_message


def default_credentials() -> Any:
    """Application Default Credentials with the cloud-platform scope.

    Raises:
        SubmitError: none are set up, with the command that sets them up.
    """
    import google.auth
    from google.auth import exceptions as auth_exceptions

    try:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except auth_exceptions.DefaultCredentialsError as e:
        raise SubmitError(
            "no Google Cloud credentials found: run `gcloud auth application-default login`, "
            "or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
        ) from e
    return credentials


@contextlib.contextmanager
def service_errors(config: SubmitConfig, doing: str, service: str = "vertex") -> Iterator[None]:
    """Turns errors from Google APIs and the network into a ``SubmitError`` with advice.

    Args:
        config: the submission, for the names the advice mentions.
        doing: what was being done, e.g. ``"submitting"``.
        service: ``"vertex"`` (Vertex AI) or ``"storage"`` (Cloud Storage), for the advice.
    """
    import requests
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions

    try:
        yield
    except api_exceptions.GoogleAPICallError as e:
        raise _api_error(e, config, doing, service) from e
    except RuntimeError as e:
        # The SDK wraps experiment (metadata) failures in RuntimeError.
        if isinstance(e.__cause__, api_exceptions.GoogleAPICallError):
            raise _api_error(e.__cause__, config, f"{doing} ({e})", service) from e
        raise
    except api_exceptions.RetryError as e:
        raise SubmitError(f"{doing}: gave up after retries: {e.message}") from e
    except auth_exceptions.RefreshError as e:
        raise SubmitError(
            f"{doing}: the credentials could not be refreshed ({e.args[0] if e.args else e}); "
            "run `gcloud auth application-default login` again"
        ) from e
    except auth_exceptions.DefaultCredentialsError as e:
        raise SubmitError(
            "no Google Cloud credentials found: run `gcloud auth application-default login`"
        ) from e
    except requests.exceptions.ConnectionError as e:
        endpoint = (
            "Cloud Storage"
            if service == "storage"
            else config.api_endpoint or f"{config.region}-aiplatform.googleapis.com"
        )
        raise SubmitError(
            f"{doing}: could not connect to {endpoint}; check the network, proxy settings "
            "and --api-endpoint"
        ) from e


def _api_error(e: Any, config: SubmitConfig, doing: str, service: str) -> SubmitError:
    from google.api_core import exceptions as api_exceptions

    sa = config.service_account or "the Compute Engine default service account"
    if isinstance(e, api_exceptions.Unauthorized):
        hint = (
            "the credentials were rejected: run `gcloud auth application-default login`, or "
            "check GOOGLE_APPLICATION_CREDENTIALS"
        )
    elif isinstance(e, api_exceptions.Forbidden) and service == "storage":
        hint = "you need to be able to list objects in that bucket (roles/storage.objectViewer)"
    elif isinstance(e, api_exceptions.NotFound) and service == "storage":
        hint = f"the bucket name in {DATA_URI}"
    elif isinstance(e, api_exceptions.Forbidden):
        hint = (
            f"you need roles/aiplatform.user on project {config.project!r} and permission to act "
            f"as {sa} (roles/iam.serviceAccountUser); that account needs read/write access to "
            f"{config.pipeline_root}; and the Vertex AI API must be enabled"
        )
    elif isinstance(e, api_exceptions.NotFound):
        hint = (
            f"the project id {config.project!r} and region {config.region!r}, and that the "
            "Vertex AI API (aiplatform.googleapis.com) is enabled in the project"
        )
    elif isinstance(e, api_exceptions.BadRequest):
        hint = (
            "the request was rejected as invalid: the parameter, label, network, service "
            "account or pipeline root named in the message"
        )
    elif isinstance(e, api_exceptions.Conflict):
        hint = "a resource with this name already exists: choose another display name or job"
    elif isinstance(e, api_exceptions.TooManyRequests):
        hint = "a quota or rate limit was hit: wait and retry, or ask for more quota"
    else:
        hint = "the service failed: retry later, and check https://status.cloud.google.com"
    status_name, message = _service_words(e)
    who = "Cloud Storage" if service == "storage" else "Vertex AI"
    return SubmitError(
        f"{who} refused {doing} ({e.code} {status_name}): {message}\n  What to check: {hint}",
        code=e.code,
        service_message=message,
    )


def _service_words(e: Any) -> tuple[str, str]:
    """The service's own status name and message (REST: from the JSON error body)."""
    status = getattr(getattr(e, "grpc_status_code", None), "name", "") or type(e).__name__
    message = e.message or str(e)
    response = getattr(e, "response", None)
    if response is not None:
        try:
            error = response.json().get("error", {})
        except (ValueError, AttributeError, TypeError):
            error = {}
        if isinstance(error, dict):
            status = error.get("status") or status
            message = error.get("message") or message
    return status, message
