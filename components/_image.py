"""The container images components run in: one repository, one tag per accelerator family.

Every tag is derived here from the package version and the variant, and nowhere else: the
Dockerfile's stages are named after ``VARIANTS``, ``make image`` asks this module for the tags
(``python -m components._image``), and the compiler asks ``image_for`` which image a step needs.

- ``cpu``: every step that runs on CPU machines (validate, prepare, evaluate, export; CPU training).
- ``gpu``: training on NVIDIA GPUs (TensorFlow with its CUDA libraries).
- ``tpu``: training on Cloud TPU VMs (TensorFlow's TPU build with ``libtpu``, from a dependency
  set and lock of its own: ``images/tpu``).
- ``dataflow``: Dataflow's workers for the Beam steps (the cpu set with Beam's boot entrypoint,
  ``BEAM_BOOT``); ``with_worker_image`` adds it to a Dataflow job's options.
- ``serve``: a registered model's server on Vertex AI endpoints when the profile's
  ``serving_image`` is ``own`` (the cpu set, fastapi and uvicorn; ``SERVE_ENTRYPOINT``).

Pipelines compile with these tags unless ``--image-repository`` (or
``NCF_PIPELINES_IMAGE_REPOSITORY``, read by the CLI) names another repository, or ``--image``
names one image for every step.

A tag can be pushed again; a digest (``REPO@sha256:...``) names one image's content for good.
``compile --image NAME@sha256:...`` and ``compile --image-digest VARIANT=sha256:...`` write
digests (``digest_problem`` checks the form, ``pinned`` turns a tag into its digest form);
``compile`` and ``submit`` warn about the images a template names only by tag.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from collections.abc import Sequence

IMAGE_REPOSITORY = "us-docker.pkg.dev/ncf-pipelines/images/ncf-pipelines"
VARIANTS = ("cpu", "gpu", "dataflow", "serve", "tpu")
# Set by each Dockerfile stage, so a running step can say which image it is in.
VARIANT_ENV = "NCF_PIPELINES_IMAGE_VARIANT"
# The Dataflow worker image's entrypoint: Beam's boot binary, which Dataflow runs to start the
# SDK worker (its ENTRYPOINT in the Dockerfile's dataflow stage; make image-check compares).
BEAM_BOOT = "/opt/apache/beam/boot"
# The serve image's entrypoint: Vertex AI's Custom Prediction Routines server (uvicorn), which
# loads the predictor its environment names (training_core.serving.prediction_server).
SERVE_ENTRYPOINT = ["python3", "-m", "google.cloud.aiplatform.prediction.model_server"]

# Who the images run as (the Dockerfile's ARG IMAGE_USER): ``ncf``, uid 1000, unless a first run
# on Vertex AI shows /gcs or the tuning metric folder refuses it; then the root variant, built
# with IMAGE_USER=root and tagged ``...-VARIANT-root`` (docs/images.md, "The root variant").
DEFAULT_USER = "1000:1000"
IMAGE_USERS = (DEFAULT_USER, "root")

# A content digest as registries give it (docker push, docker inspect's RepoDigests).
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def digest_problem(image: str, what: str) -> str | None:
    """Why ``image`` is a malformed digest reference (``NAME@...``), or None.

    Args:
        image: an image reference as given; one without ``@`` is a tag reference (fine).
        what: where it came from, for the message (``--image``).
    """
    if "@" not in image:
        return None
    name, _, digest = image.rpartition("@")
    if name and DIGEST.fullmatch(digest):
        return None
    return (
        f"{what} {image!r} is not NAME@sha256:DIGEST with 64 lowercase hex digits: copy the "
        "digest `docker push` printed, or `docker inspect --format '{{index .RepoDigests 0}}' "
        "TAG` (docs/images.md, 'Pinning by digest')"
    )


def pinned(tag: str, digest: str) -> str:
    """``REPO:TAG`` (or ``REPO``) with ``sha256:...`` as ``REPO@sha256:...``.

    Raises:
        ValueError: ``digest`` is not ``sha256:`` and 64 lowercase hex digits.
    """
    if not DIGEST.fullmatch(digest):
        raise ValueError(f"{digest!r} is not sha256: and 64 lowercase hex digits")
    name = tag.rsplit(":", 1)[0] if ":" in tag.rsplit("/", 1)[-1] else tag
    return f"{name}@{digest}"


def is_pinned(image: str) -> bool:
    """Whether ``image`` names its content by digest (``NAME@sha256:...``)."""
    return digest_problem(image, "") is None and "@" in image


def package_version() -> str:
    """The installed ncf-pipelines version (the image tag's first part)."""
    return importlib.metadata.version("ncf-pipelines")


def image_for(
    variant: str = "cpu", repository: str = IMAGE_REPOSITORY, user: str = DEFAULT_USER
) -> str:
    """The image tag for one accelerator family, e.g. ``REPO:0.1.0-gpu``.

    ``user`` ``root``: the root variant (``--build-arg IMAGE_USER=root``), ``REPO:0.1.0-gpu-root``.

    Raises:
        ValueError: an unknown variant or user.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown image variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if user not in IMAGE_USERS:
        raise ValueError(f"unknown image user {user!r}; choose one of {', '.join(IMAGE_USERS)}")
    suffix = "" if user == DEFAULT_USER else f"-{user}"
    return f"{repository}:{package_version()}-{variant}{suffix}"


def variant_of(image: str) -> str | None:
    """The variant of one of our image tags, ``REPO:VERSION-VARIANT`` or its ``-root`` form.

    ``None`` for any other image (and for a digest reference, which names no variant).
    """
    tag = image.rpartition("@")[0] if "@" in image else image
    name = tag.rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    suffix = name.rsplit(":", 1)[1]
    for variant in VARIANTS:
        if suffix.endswith((f"-{variant}", f"-{variant}-root")):
            return variant
    return None


def variant_for_accelerator(accelerator_type: str) -> str:
    """Which image family an accelerator type needs (``""``: CPU)."""
    if not accelerator_type:
        return "cpu"
    return "tpu" if accelerator_type.startswith("TPU_") else "gpu"


DEFAULT_IMAGE = image_for("cpu")
"""The image components are declared with (the CPU one); the compiler swaps in the others."""


def with_worker_image(beam_args: Sequence[str], image: str) -> list[str]:
    """A Beam job's options with ``--sdk_container_image=image`` when the job runs on Dataflow.

    Added only when the runner is Dataflow's (a ``--runner`` naming "dataflow" in any case or
    form, as Beam itself tells it) and the options name no worker image of their own
    (``--sdk_container_image``, or its old name ``--worker_harness_container_image``);
    ``image`` "" adds nothing.
    """
    args = list(beam_args)
    named = names_option(args, "--sdk_container_image", "--worker_harness_container_image")
    if image and not named and runs_on_dataflow(args):
        args.append(f"--sdk_container_image={image}")
    return args


def runs_on_dataflow(beam_args: Sequence[str]) -> bool:
    """Whether a Beam job's options choose Dataflow's runner.

    That is a ``--runner`` (``=value`` or the next word) naming "dataflow" in any case or form,
    as Beam itself tells it.
    """
    args = list(beam_args)
    runner = [a.split("=", 1)[1] for a in args if a.startswith("--runner=")]
    runner += [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--runner"]
    return any("dataflow" in r.lower() for r in runner)


def names_option(beam_args: Sequence[str], *names: str) -> bool:
    """Whether the options set any of ``names`` (``--name=value`` or ``--name value``)."""
    return any(a.split("=", 1)[0] in names for a in beam_args)


def main(argv: list[str] | None = None) -> None:
    """Prints the tag of one variant (or of all), for ``make image``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, help="one variant (default: all)")
    parser.add_argument("--repository", default=IMAGE_REPOSITORY)
    parser.add_argument("--user", default=DEFAULT_USER, choices=IMAGE_USERS, help="IMAGE_USER")
    args = parser.parse_args(argv)
    for variant in [args.variant] if args.variant else VARIANTS:
        print(image_for(variant, args.repository, args.user))


if __name__ == "__main__":
    main()
