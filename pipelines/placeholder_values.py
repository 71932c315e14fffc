"""Values that stand for the user's own: what counts as a placeholder, and the one message for it.

Two kinds, each recognised here and nowhere else:

- **Placeholder words** in the docs' examples: an upper-case word such as ``MY_PROJECT``,
  ``MY_BUCKET``, ``PROJECT_NUMBER`` or ``REGION``. They are only looked for where Google Cloud
  itself allows no upper case (project ids, bucket names, service-account emails, network names,
  image repositories), so a real value never matches. Every command refuses one with the same
  message (``placeholder_problem``). Example values that could be real (``my-project``,
  ``gs://my-bucket/ncf``) are not placeholders: they pass these checks, and the service is
  the one to say that they do not exist.
- **The placeholder image repository**: ``components._image.IMAGE_REPOSITORY``, which compiled
  templates name unless ``--image-repository`` is given. Nothing is pushed there, so a template
  that names it runs here (``verify``, ``run-local``) but would fail on Vertex AI pulling its
  images; ``compile`` and ``submit`` warn (``placeholder_repository_warning``, logged with
  the other warnings about a template's images by ``warn_about_images``).

The Compute Engine default service account a run falls back to is named with the placeholder
word ``PROJECT_NUMBER`` (``DEFAULT_COMPUTE_SERVICE_ACCOUNT``): its number is the project's, which
nothing offline knows, so a dry run shows the rule instead of inventing a number. ``submit``
warns when a run would execute as it (``default_service_account_warning``): it usually holds the
project's Editor role.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from components._image import IMAGE_REPOSITORY

# An upper-case word of two characters or more (digits and inner '_' allowed), on its own.
_WORD = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_])")

DEFAULT_COMPUTE_SERVICE_ACCOUNT = "PROJECT_NUMBER-compute@developer.gserviceaccount.com"
"""The account a run without ``--service-account`` runs as (Vertex AI's documented default)."""
# That account with the project's number in place of the placeholder word.
_DEFAULT_COMPUTE = re.compile(
    re.escape(DEFAULT_COMPUTE_SERVICE_ACCOUNT).replace("PROJECT_NUMBER", r"[0-9]+")
)

# What replaces each kind of value, for the message.
WHAT_TO_PUT = {
    "project": "your project id (gcloud config get-value project)",
    "bucket": "your bucket's name (gcloud storage buckets list)",
    "service account": "the run's service account email (gcloud iam service-accounts list)",
    "network": "your VPC's full name, projects/PROJECT_NUMBER/global/networks/NAME with the "
    "project number (gcloud projects describe PROJECT --format='value(projectNumber)')",
    "image repository": "your Artifact Registry repository, "
    "REGION-docker.pkg.dev/PROJECT/REPOSITORY/ncf-pipelines (docs/submit.md, step 3)",
    "image": "an image you pushed (make push: docs/submit.md, step 4)",
}


def placeholder_word(value: str | None) -> str | None:
    """The first placeholder word in ``value`` (``MY_PROJECT``), or None."""
    match = _WORD.search(value or "")
    return match.group(0) if match else None


def placeholder_problem(what: str, value: str | None, kind: str) -> str | None:
    """Why ``value`` cannot be used as it is (it holds a placeholder word), or None.

    Args:
        what: where the value came from, for the message (``--project``, ``pipeline root``).
        value: the value as given.
        kind: what it is, a key of ``WHAT_TO_PUT`` (``project``, ``bucket``: a ``gs://`` URI whose
            bucket is looked at, ...).
    """
    # Object names may hold upper case: only a gs:// URI's bucket is looked at.
    word = placeholder_word(bucket_of(value or "") if kind == "bucket" else value)
    if word is None:
        return None
    return f"{what} {value!r} holds the placeholder {word}: replace it with {WHAT_TO_PUT[kind]}"


def check_placeholders(checks: Mapping[str, tuple[str | None, str]]) -> None:
    """``placeholder_problem`` over several values, ``{what: (value, kind)}``.

    Raises:
        ValueError: the first value that holds a placeholder word.
    """
    for what, (value, kind) in checks.items():
        problem = placeholder_problem(what, value, kind)
        if problem:
            raise ValueError(problem)


def default_service_account_warning(service_account: str | None) -> str | None:
    """A warning when a run would execute as the Compute Engine default account, else None.

    That account (no ``--service-account``, or ``NUMBER-compute@developer...`` named) usually
    holds the project-wide Editor role, so every step, and any code a bad input file or model
    could run in one, would act with it. docs/submit.md, "A service account for the pipeline",
    lists the roles a dedicated account needs and creates one.
    """
    if service_account is not None and not _DEFAULT_COMPUTE.fullmatch(service_account):
        return None
    who = (
        service_account or f"the Compute Engine default account, {DEFAULT_COMPUTE_SERVICE_ACCOUNT}"
    )
    return (
        f"the run executes as {who}, which usually holds the project's Editor role: every "
        "step could change anything in the project. Create a service account with only the "
        'roles the pipeline needs and pass --service-account (docs/submit.md, "A service '
        'account for the pipeline")'
    )


def bucket_of(uri: str) -> str:
    """The bucket of a ``gs://`` URI (``""`` for anything else: a local path is no bucket)."""
    return uri[len("gs://") :].split("/", 1)[0] if uri.startswith("gs://") else ""


def placeholder_repository_warning(spec: Mapping[str, Any], path: str) -> str | None:
    """A warning when a compiled template names the placeholder repository, else None.

    Args:
        spec: the compiled pipeline spec.
        path: the template's file, for the message.
    """
    from pipelines import compiled

    images = compiled.images_from(spec, IMAGE_REPOSITORY)
    if not images:
        return None
    return (
        f"{path} runs images from {IMAGE_REPOSITORY}, the placeholder repository of "
        f"components/_image.py that nothing is pushed to ({', '.join(images)}): on Vertex AI "
        "every step would fail pulling its image. Build and push the images to your own "
        "repository (make push PROFILE=... IMAGE_REPOSITORY=REGION-docker.pkg.dev/PROJECT/"
        "REPOSITORY/ncf-pipelines) and compile with --image-repository (the same repository); "
        "docs/submit.md"
    )


def movable_tags_warning(spec: Mapping[str, Any], path: str) -> str | None:
    """A warning when the compiled template names images by tag rather than digest, else None.

    A tag can be pushed again, so a later run (a schedule's, a retry's) could pull different
    code under the same name. Images of the placeholder repository are left to
    ``placeholder_repository_warning``.
    """
    from components._image import is_pinned
    from pipelines import compiled

    movable = [
        i
        for i in compiled.images_named(spec)
        if not is_pinned(i) and not i.startswith(IMAGE_REPOSITORY + ":")
    ]
    if not movable:
        return None
    return (
        f"{path} names images by tag ({', '.join(movable)}): whoever can push to those tags "
        "decides what later runs execute. Pin them by digest: compile with --image-digest "
        "VARIANT=sha256:... for each (the digests make push prints), or --image "
        "NAME@sha256:...; docs/images.md, 'Pinning by digest'"
    )


def warn_about_images(path: str) -> None:
    """Logs what is wrong with the images the template at ``path`` names (compile, submit).

    The placeholder repository (``placeholder_repository_warning``) and images named by movable
    tag (``movable_tags_warning``), from one read of it.
    """
    from pipelines import compiled

    spec = compiled.load_template(path).spec
    warnings = [
        placeholder_repository_warning(spec, path),
        movable_tags_warning(spec, path),
    ]
    for warning in filter(None, warnings):
        logging.getLogger("ncf-pipelines").warning("%s", warning)
