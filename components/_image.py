"""The container images components run in: one repository, one tag per accelerator family.

Every tag is derived here from the package version and the variant, and nowhere else: the
Dockerfile's stages are named after ``VARIANTS``, ``make image`` asks this module for the tags
(``python -m components._image``), and the compiler asks ``image_for`` which image a step needs.

- ``cpu``: every step that runs on CPU machines (validate, prepare, evaluate, export; CPU training).
- ``gpu``: training on NVIDIA GPUs (TensorFlow with its CUDA libraries).
- ``tpu``: training on Cloud TPU VMs (TensorFlow with ``libtpu``).

Pipelines compile with these tags unless ``--image-repository`` (or
``NCF_PIPELINES_IMAGE_REPOSITORY``, read by the CLI) names another repository, or ``--image``
names one image for every step.
"""

from __future__ import annotations

import argparse
import importlib.metadata

IMAGE_REPOSITORY = "us-docker.pkg.dev/ncf-pipelines/images/ncf-pipelines"
VARIANTS = ("cpu", "gpu", "tpu")
# Set by each Dockerfile stage, so a running step can say which image it is in.
VARIANT_ENV = "NCF_PIPELINES_IMAGE_VARIANT"


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
