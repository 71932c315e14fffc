"""``ncf-pipelines compile``: the pipeline for one hardware profile, as KFP IR YAML."""

from __future__ import annotations

import argparse
import os

from pipelines.cli import example_epilog


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "compile",
        help="compile the pipeline for a hardware profile to a YAML file",
        description=(
            "Check the profile (preflight) and compile validate -> prepare -> train -> evaluate -> "
            "export (-> register) into a KFP pipeline YAML that Vertex AI Pipelines runs. Every "
            "component uses one container image (--image, or NCF_PIPELINES_IMAGE)."
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
    p.add_argument("--image", help="container image for every component")
    p.add_argument(
        "--train-batch-size",
        type=int,
        default=1024,
        help="global training batch the run will use, checked against the replicas",
    )
    p.add_argument(
        "--eval-users-per-batch",
        type=int,
        help="eval users per record, if not automatic (checked against replicas)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compiles and says where."""
    from pipelines import pipeline, profiles

    profile = profiles.get_profile(args.profile, args.profiles_file)
    image = args.image or os.environ.get("NCF_PIPELINES_IMAGE")
    path = pipeline.compile_pipeline(
        profile,
        args.output,
        image=image,
        train_batch_size=args.train_batch_size,
        eval_users_per_batch=args.eval_users_per_batch,
    )
    t = profile.train
    acc = f", {t.accelerator_count} x {t.accelerator_type}" if t.accelerator_type else ""
    print(
        f"compiled profile {profile.name} ({t.replica_count} x {t.machine_type}{acc}, "
        f"strategy {profile.strategy}) to {path}"
    )
    return 0
