"""``ncf-pipelines compile``: the pipeline for one hardware profile, as KFP IR YAML."""

from __future__ import annotations

import argparse
import dataclasses
import os

from pipelines.commands._shared import UserError, add_param_option, example_epilog


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "compile",
        help="compile the pipeline for a hardware profile to a YAML file",
        description=(
            "Check the profile (preflight) and compile validate -> prepare -> train -> evaluate -> "
            "export (-> register) into a KFP pipeline YAML that Vertex AI Pipelines runs. Plain "
            "steps run the CPU image, training the image of the profile's accelerator family "
            "(GPU or TPU); `ncf-pipelines verify FILE` then runs the compiled tasks locally. "
            "--publish uploads the template to an Artifact Registry KFP repository, tagged "
            "v<project version>-<profile> and latest-<profile> (docs/submit.md, 'Templates in "
            "Artifact Registry')."
        ),
        epilog=example_epilog(
            "ncf-pipelines compile --profile gpu-a100 --output pipeline.yaml",
            "ncf-pipelines compile --profile tpu-v5e-8 --image us-docker.pkg.dev/P/repo/ncf:1 "
            "--output tpu.yaml",
            "ncf-pipelines compile --profile cpu --output cpu.yaml "
            "--publish https://us-central1-kfp.pkg.dev/my-project/ncf",
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
        "repository's tags per accelerator family); NAME@sha256:DIGEST pins it by content",
    )
    p.add_argument(
        "--image-user",
        choices=("1000:1000", "root"),
        default="1000:1000",
        help="who the steps run as: the images' unprivileged user (default), or root: the root "
        "variant's tags, ...-VARIANT-root, which make push IMAGE_USER=root builds, for a Vertex "
        "AI whose /gcs or tuning metric folder refuses uid 1000 (docs/images.md, 'The root "
        "variant')",
    )
    p.add_argument(
        "--image-digest",
        action="append",
        default=[],
        metavar="VARIANT=sha256:DIGEST",
        help="pin the repository's image of one variant (cpu, gpu, dataflow, tpu) to the digest "
        "its push gave (repeatable): the template names REPOSITORY@sha256:... instead of the "
        "movable tag (docs/images.md, 'Pinning by digest')",
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
    p.add_argument(
        "--publish",
        metavar="REPOSITORY_URL",
        help="also upload the template to this Artifact Registry KFP repository, "
        "https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY (credentials: Application Default "
        "Credentials)",
    )
    p.add_argument(
        "--tag",
        action="append",
        default=[],
        help="a tag for the published template besides v<project version>-<profile> and "
        "latest-<profile> (repeatable; with --publish)",
    )
    p.add_argument(
        "--registry-endpoint",
        help="where Artifact Registry requests go instead of Google's hosts (a stand-in, "
        "http://127.0.0.1:PORT; with --publish)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compiles and says where."""
    from components._image import IMAGE_REPOSITORY, VARIANTS, digest_problem, image_for, pinned
    from pipelines import compiled, pipeline, placeholder_values, placement, profiles
    from pipelines.submit.request import parse_assignments
    from pipelines.submit.run_values import check_parameter_values

    image = args.image or os.environ.get("NCF_PIPELINES_IMAGE")
    repository = args.image_repository or os.environ.get("NCF_PIPELINES_IMAGE_REPOSITORY")
    placeholder_values.check_placeholders(
        {
            "--image-repository": (repository, "image repository"),
            "--image": (image, "image"),
        }
    )
    problem = digest_problem(image or "", "--image")
    if problem:
        raise UserError(problem)
    digests = dict(parse_assignments(args.image_digest, "--image-digest"))
    unknown = sorted(set(digests) - set(VARIANTS))
    if unknown:
        raise UserError(
            f"--image-digest {unknown[0]}=...: no image variant {unknown[0]!r}; the variants "
            f"are {', '.join(VARIANTS)}"
        )
    if digests and image:
        raise UserError(
            "--image-digest pins the repository's images: with --image, give "
            "--image NAME@sha256:DIGEST instead"
        )
    profile = profiles.get_profile(args.profile, args.profiles_file)
    publish = _publishing(args, profile.name)  # Checked before compiling, as the pins below.
    defaults: dict[str, object] = dict(parse_assignments(args.param, "--param"))
    if args.train_batch_size is not None:
        defaults["train_batch_size"] = args.train_batch_size
    check_parameter_values(defaults)  # Before compiling: preset names, value ranges.
    # Checked before compiling, so that a refused pin leaves no unpinned template behind.
    named = dataclasses.astuple(
        placement.Images.for_profile(profile, repository, image, args.image_user)
    )
    pins = {}
    for variant, digest in digests.items():
        tag = image_for(variant, repository or IMAGE_REPOSITORY, args.image_user)
        if tag not in named:
            raise UserError(
                f"--image-digest {variant}=...: profile {profile.name} runs no {variant} image "
                f"(it runs {', '.join(sorted(set(filter(None, named))))})"
            )
        try:
            pins[tag] = pinned(tag, str(digest))
        except ValueError as e:
            raise UserError(f"--image-digest {variant}={digest}: {e}") from None
    path = pipeline.compile_pipeline(
        profile,
        args.output,
        image=image,
        image_repository=repository,
        defaults=defaults,
        image_user=args.image_user,
    )
    if pins:
        with open(path) as f:
            text = f.read()
        text = compiled.pin_images(text, pins)
        with open(path, "w") as f:
            f.write(text)
    images = placement.Images.for_profile(profile, repository, image, args.image_user)
    t = profile.train
    acc = f", {t.accelerator_count} x {t.accelerator_type}" if t.accelerator_type else ""
    steps, train = (pins.get(i, i) for i in (images.cpu, images.train))
    print(
        f"compiled profile {profile.name} ({t.replica_count} x {t.machine_type}{acc}, "
        f"strategy {profile.strategy}) to {path}\n  images: steps {steps}, training {train}"
    )
    placeholder_values.warn_about_images(path)
    if publish:
        from pipelines.commands.templates import publish_template

        publish_template(path, *publish, args.registry_endpoint)
    return 0


def _publishing(args: argparse.Namespace, profile: str) -> tuple | None:
    """(repository, tags) to publish to, or None; refuses a bad URL, tag or endpoint."""
    from components._image import package_version
    from pipelines import template_registry
    from pipelines.submit.endpoints import REGISTRY_ENDPOINT, api_endpoint_problem

    if not args.publish:
        if args.tag or args.registry_endpoint:
            raise UserError("--tag and --registry-endpoint go with --publish REPOSITORY_URL")
        return None
    problem = api_endpoint_problem(args.registry_endpoint, REGISTRY_ENDPOINT)
    if problem:
        raise UserError(problem)
    repository = template_registry.parse_repository(args.publish)
    return repository, template_registry.template_tags(profile, package_version(), args.tag)
