"""``ncf-pipelines rollout``: the state of a canary on an endpoint; promote it or roll it back."""

from __future__ import annotations

import argparse

from pipelines.commands._shared import example_epilog, project_and_region

ACTIONS = ("status", "promote", "rollback")


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "rollout",
        help="show, promote or roll back a canary deployment on a Vertex AI endpoint",
        description=(
            "A deploying profile with rollout canary serves a new version beside the default "
            "one. status: what serves, read from the endpoint and the registry. promote: all "
            "the model's traffic to the canary, the old version undeployed, the registry's "
            "default alias moved to the canary. rollback: all the traffic back to the default "
            "version, the canary undeployed, the registry untouched. Each step is read back "
            "from the service, so an interrupted promote or rollback is finished by running it "
            "again (docs/rollouts.md). Other models on the endpoint keep their traffic. "
            "--project and --region default to GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_REGION."
        ),
        epilog=example_epilog(
            "ncf-pipelines rollout status --project my-project --region us-central1 "
            "--data gs://my-bucket/ratings/",
            "ncf-pipelines rollout promote --project my-project --region us-central1 "
            "--data gs://my-bucket/ratings/ "
            "--endpoint projects/my-project/locations/us-central1/endpoints/123",
            "ncf-pipelines rollout rollback --project my-project --region us-central1 "
            "--model-display-name ncf-ratings --version 7",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=ACTIONS, help="what to do")
    p.add_argument("--project", help="Google Cloud project id (default: $GOOGLE_CLOUD_PROJECT)")
    p.add_argument(
        "--region", "--location", help="Vertex AI region (default: $GOOGLE_CLOUD_REGION)"
    )
    p.add_argument(
        "--endpoint",
        default="",
        help="the endpoint's resource name, or its display name (default: the model's display "
        "name), as the pipeline's endpoint_display_name",
    )
    p.add_argument(
        "--model",
        default="",
        help="the registry model's resource name (default: the model named "
        "--model-display-name that this pipeline registered)",
    )
    p.add_argument(
        "--model-display-name",
        default="",
        help="the registry model's display name: the run's model_display_name, its model line",
    )
    p.add_argument(
        "--data",
        default="",
        help="instead of --model-display-name: the run's data_uri, whose model line (the "
        "pipeline's default model_display_name) is looked up",
    )
    p.add_argument(
        "--version",
        default="",
        help="the canary's version id: promote or rollback only that version, and succeed "
        "without a change when it is already done (a retry)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Reads the rollout's state and prints it; promotes or rolls back when asked."""
    from training_core.serving import deploy, model_line

    project, region = project_and_region(args)
    name = args.model_display_name
    if not name and args.data:
        name = model_line.of_data(args.data).name
    endpoint, model = deploy.open_rollout(project, region, args.endpoint, args.model, name)
    if args.action == "promote":
        state = deploy.promote(endpoint, model, args.version)
    elif args.action == "rollback":
        state = deploy.rollback(endpoint, model, args.version)
    else:
        state = deploy.read_rollout(endpoint, model)
    print(state.describe())
    return 0
