"""``ncf-pipelines compile``: the pipeline for one hardware profile, as KFP IR YAML."""

from __future__ import annotations

import argparse
import os

from pipelines.cli import add_param_option, example_epilog


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "compile",
        help="compile the pipeline for a hardware profile to a YAML file",
        description=(
            "Check the profile (preflight) and compile validate -> prepare -> train -> evaluate -> "
            "export (-> register) into a KFP pipeline YAML that Vertex AI Pipelines runs. Plain "
            "steps run the CPU image, training the image of the profile's accelerator family "
            "(GPU or TPU); `ncf-pipelines verify FILE` then runs the compiled tasks locally."
        ),
        epilog=example_epilog(
            "ncf-pipelines compile --profile gpu-a100 --output pipeline.yaml",
            "ncf-pipelines compile --profile tpu-v3-8 --image us-docker.pkg.dev/P/repo/ncf:1 "
            "--output tpu.yaml",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--profile", default="cpu", help="hardware profile (see `profiles`)")
    p.add_argument("--profiles-file", help="YAML file with custom profiles")
    p.add_argument("--output", required=True, help="YAML file to write")
    p.add_argument(
        "--image-repository",
        help="repository of the ncf-pipelines images (default: NCF_PIPELINES_IMAGE_REPOSITORY, "
        "else components/_image.py's); each step gets the tag of its accelerator family",
    )
    p.add_argument(
        "--image",
        help="one container image for every step (default: NCF_PIPELINES_IMAGE, else the "
        "repository's tags per accelerator family)",
    )
    add_param_option(
        p,
        "compiled default of a pipeline parameter (repeatable); checked like submit's: the "
        "preset name, value ranges, batch sizes against the profile's replicas",
    )
    p.add_argument(
        "--train-batch-size",
        type=int,
        help="short for --param train_batch_size=N (the pipeline's global training batch)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compiles and says where."""
    from pipelines import pipeline, placeholder_values, profiles, submit

    image = args.image or os.environ.get("NCF_PIPELINES_IMAGE")
    repository = args.image_repository or os.environ.get("NCF_PIPELINES_IMAGE_REPOSITORY")
    placeholder_values.check_placeholders(
        {
            "--image-repository": (repository, "image repository"),
            "--image": (image, "image"),
        }
    )
    profile = profiles.get_profile(args.profile, args.profiles_file)
    defaults: dict[str, object] = dict(submit.parse_assignments(args.param, "--param"))
    if args.train_batch_size is not None:
        defaults["train_batch_size"] = args.train_batch_size
    submit.check_parameter_values(defaults)  # Before compiling: preset names, value ranges.
    path = pipeline.compile_pipeline(
        profile, args.output, image=image, image_repository=repository, defaults=defaults
    )
    images = pipeline.Images.for_profile(profile, repository, image)
    t = profile.train
    acc = f", {t.accelerator_count} x {t.accelerator_type}" if t.accelerator_type else ""
    print(
        f"compiled profile {profile.name} ({t.replica_count} x {t.machine_type}{acc}, "
        f"strategy {profile.strategy}) to {path}\n  images: steps {images.cpu}, "
        f"training {images.train}"
    )
    placeholder_values.warn_about_images(path)
    return 0
