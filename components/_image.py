"""The container images components run in: one repository, one tag per accelerator family.

Every tag is derived here from the package version and the variant, and nowhere else: the
Dockerfile's stages are named after ``VARIANTS``, ``make image`` asks this module for the tags
(``python -m components._image``), and the compiler asks ``image_for`` which image a step needs.

- ``cpu``: every step that runs on CPU machines (validate, prepare, evaluate, export; CPU training).
- ``gpu``: training on NVIDIA GPUs (TensorFlow with its CUDA libraries).
- ``tpu``: training on Cloud TPU VMs (TensorFlow with ``libtpu``). Cannot be built yet
  (``UNBUILDABLE``): compile and submit say so (``unbuildable_images``).
- ``dataflow``: Dataflow's workers for the Beam steps (the cpu set with Beam's boot entrypoint,
  ``BEAM_BOOT``); ``with_worker_image`` adds it to a Dataflow job's options.

Pipelines compile with these tags unless ``--image-repository`` (or
``NCF_PIPELINES_IMAGE_REPOSITORY``, read by the CLI) names another repository, or ``--image``
names one image for every step.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from collections.abc import Sequence

IMAGE_REPOSITORY = "us-docker.pkg.dev/ncf-pipelines/images/ncf-pipelines"
VARIANTS = ("cpu", "gpu", "dataflow", "tpu")  # tpu last: its stage stops (UNBUILDABLE)
# Set by each Dockerfile stage, so a running step can say which image it is in.
VARIANT_ENV = "NCF_PIPELINES_IMAGE_VARIANT"
# The Dataflow worker image's entrypoint: Beam's boot binary, which Dataflow runs to start the
# SDK worker (its ENTRYPOINT in the Dockerfile's dataflow stage; make image-check compares).
BEAM_BOOT = "/opt/apache/beam/boot"
# Variants whose image cannot be built yet, and why (docs/images.md).
UNBUILDABLE = {
    "tpu": (
        "the tpu image cannot be built yet: tensorflow-tpu 2.16 needs libtpu==2.16.0rc0, which "
        "is not on PyPI (only on Google's libtpu-tf-releases index), so uv.lock cannot hold it "
        "and the Dockerfile's tpu stage stops. A TPU run needs an image you built with libtpu "
        "(--image); see docs/images.md, 'TPU'"
    ),
}


def package_version() -> str:
    """The installed ncf-pipelines version (the image tag's first part)."""
    return importlib.metadata.version("ncf-pipelines")


def image_for(variant: str = "cpu", repository: str = IMAGE_REPOSITORY) -> str:
    """The image tag for one accelerator family, e.g. ``REPO:0.1.0-gpu``.

    Raises:
        ValueError: an unknown variant.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown image variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    return f"{repository}:{package_version()}-{variant}"


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
    runner = [a.split("=", 1)[1] for a in args if a.startswith("--runner=")]
    runner += [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--runner"]
    named = any(
        a.split("=", 1)[0] in ("--sdk_container_image", "--worker_harness_container_image")
        for a in args
    )
    if image and not named and any("dataflow" in r.lower() for r in runner):
        args.append(f"--sdk_container_image={image}")
    return args


def unbuildable_images(text: str) -> list[str]:
    """Warnings for the images of ``UNBUILDABLE`` variants that ``text`` (a template) names.

    An image is one of ours by its tag, ``VERSION-VARIANT``, in whatever repository.
    """
    warnings = []
    for variant, reason in UNBUILDABLE.items():
        found = sorted(set(re.findall(rf"[\w.-]+(?:/[\w.-]+)*:[\w.]+-{variant}\b", text)))
        if found:
            warnings.append(f"{', '.join(found)}: {reason}")
    return warnings


def main(argv: list[str] | None = None) -> None:
    """Prints the tag of one variant (or of all), for ``make image``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, help="one variant (default: all)")
    parser.add_argument("--repository", default=IMAGE_REPOSITORY)
    args = parser.parse_args(argv)
    for variant in [args.variant] if args.variant else VARIANTS:
        print(image_for(variant, args.repository))


if __name__ == "__main__":
    main()
