"""``ncf-pipelines submit``: a compiled pipeline to Vertex AI Pipelines, as a run or a schedule."""

from __future__ import annotations

import argparse
import logging

from pipelines.commands._shared import (
    UserError,
    add_param_option,
    example_epilog,
    project_and_region,
)
from pipelines.placeholder_values import default_service_account_warning, warn_about_images


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "submit",
        help="submit a compiled pipeline to Vertex AI Pipelines (a run or a schedule)",
        description=(
            "Submit a compiled pipeline (from `ncf-pipelines compile`) to Vertex AI Pipelines "
            "with the google-cloud-aiplatform client, or create a schedule for it. Parameters "
            "are checked against the pipeline and converted to their declared types before "
            "anything is sent. When the pipeline takes data_fingerprint, it is computed from "
            "the content behind data_uri so that cached steps rerun when the data changes. "
            "Credentials are Application Default Credentials (gcloud auth "
            "application-default login); --project and --region default to "
            "GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_REGION."
        ),
        epilog=example_epilog(
            "ncf-pipelines submit --template pipeline.yaml --project my-project "
            "--region us-central1 --pipeline-root gs://my-bucket/root "
            "--service-account runner@my-project.iam.gserviceaccount.com "
            "--param data_uri=gs://my-bucket/ml-1m/ --param epochs=5 --label team=recs",
            "ncf-pipelines submit --template pipeline.yaml --project my-project "
            "--region us-central1 --pipeline-root gs://my-bucket/root "
            '--param data_uri=gs://my-bucket/ml-1m/ --schedule "0 3 * * *"',
            "ncf-pipelines submit --template pipeline.yaml --project my-project "
            "--region us-central1 --pipeline-root gs://my-bucket/root "
            "--param data_uri=gs://my-bucket/ml-1m/ --dry-run",
            "ncf-pipelines submit --template "
            "https://us-central1-kfp.pkg.dev/my-project/ncf/ncf-pipeline/latest-cpu "
            "--project my-project --region us-central1 --pipeline-root gs://my-bucket/root "
            "--param data_uri=gs://my-bucket/ml-1m/",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--template",
        required=True,
        help="compiled pipeline YAML, or a template in Artifact Registry: "
        "https://LOCATION-kfp.pkg.dev/PROJECT/REPOSITORY/PACKAGE/TAG (see `templates list`)",
    )
    p.add_argument("--project", help="Google Cloud project id (default: $GOOGLE_CLOUD_PROJECT)")
    p.add_argument("--region", help="Vertex AI region (default: $GOOGLE_CLOUD_REGION)")
    p.add_argument("--pipeline-root", required=True, help="gs:// folder for the run's artifacts")
    p.add_argument(
        "--service-account",
        help="service account the run executes as (default: the Compute Engine default account, "
        "usually an Editor: submit warns; docs/submit.md lists the roles a dedicated one needs)",
    )
    p.add_argument(
        "--network", help="VPC to peer with: projects/PROJECT_NUMBER/global/networks/NAME"
    )
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Vertex AI label (repeatable; lowercase letters, digits, _ and -)",
    )
    add_param_option(p)
    p.add_argument(
        "--cache",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--no-cache: caching off for every task; --cache: as compiled (steps with outside "
        "effects stay uncached). Default: as compiled for a run, off for a schedule",
    )
    p.add_argument("--experiment", help="Vertex AI Experiment to add the run to")
    p.add_argument("--display-name", help="display name (default: the pipeline's name)")
    p.add_argument(
        "--schedule",
        metavar="CRON",
        help='create a schedule instead of one run, e.g. "0 3 * * *" or '
        '"TZ=Europe/Paris 0 3 * * *"',
    )
    p.add_argument("--schedule-name", help="schedule display name (default: NAME-schedule)")
    p.add_argument(
        "--max-concurrent-runs",
        type=int,
        default=1,
        help="runs a schedule may have going at once (default 1)",
    )
    p.add_argument(
        "--api-endpoint",
        help="Vertex AI endpoint other than the regional default (e.g. a private endpoint); "
        "https, or plain http only to this machine (127.0.0.1, ::1, localhost: a stand-in), "
        "since every request carries your access token",
    )
    p.add_argument(
        "--registry-endpoint",
        help="where Artifact Registry requests go instead of Google's hosts (a stand-in, "
        "http://127.0.0.1:PORT); for a --template URL only",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be sent, as JSON, and send nothing",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validates, computes the data fingerprint, and submits (or prints, with --dry-run)."""
    import dataclasses
    import json

    from pipelines.submit import dry_run, registry_template, request, run_values, service, vertex

    project, region = project_and_region(args)
    problem = request.region_problem(region, "--region" if args.region else "GOOGLE_CLOUD_REGION")
    if problem:
        raise UserError(problem)

    config = request.SubmitConfig(
        template_path=args.template,
        project=project,
        region=region,
        pipeline_root=args.pipeline_root,
        service_account=args.service_account,
        network=args.network,
        labels=request.parse_assignments(args.label, "--label"),
        enable_caching=args.cache,
        experiment=args.experiment,
        parameter_values=request.parse_assignments(args.param, "--param"),
        display_name=args.display_name,
        schedule_cron=args.schedule,
        schedule_name=args.schedule_name,
        max_concurrent_runs=args.max_concurrent_runs,
        api_endpoint=args.api_endpoint,
        registry_endpoint=args.registry_endpoint,
    )
    warning = default_service_account_warning(config.service_account)
    if warning:
        logging.getLogger("ncf-pipelines").warning("%s", warning)
    try:
        # A registry template is downloaded first (with ADC, even for --dry-run); every check
        # below reads that copy.
        with registry_template.fetched_template(config) as config:
            warn_about_images(config.template_path)  # The placeholder repository; the tpu image.
            if args.dry_run:
                config = run_values.with_data_fingerprint(config, offline=True)
                print(json.dumps(dry_run.describe(config), indent=2))
                return 0
            # Input errors, and custom-job requests the service would refuse, surface before
            # credentials or any request (but the registry's).
            dry_run.custom_jobs(config, run_values.prepare(config)[1])
            config = dataclasses.replace(config, credentials=service.default_credentials())
            config = run_values.with_data_fingerprint(config)
            result = vertex.submit(config)
    except service.SubmitError as e:
        raise UserError(str(e)) from e
    if result.kind == "schedule":
        print(f"Created schedule {result.resource_name}")
    else:
        print(f"Submitted pipeline job {result.resource_name}")
    if result.console_url:
        print(f"Console: {result.console_url}")
    return 0
