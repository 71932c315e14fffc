"""``ncf-pipelines verify``: run a compiled pipeline here, task by task, as Vertex AI would."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

import vertex_emulator
from pipelines.commands._shared import UserError, add_param_option, example_epilog


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "verify",
        help="run a compiled pipeline locally as Vertex AI would (no cloud calls)",
        description=(
            "Check a compiled pipeline at the executor level, on this machine and without any "
            "cloud call. Every plain task runs the exact command and arguments from the "
            "template, with the executor input Vertex AI builds (gs:// artifacts read and "
            "written through a local folder that stands in for the /gcs/ mount), chained task "
            "to task on a small sample. Every custom-job task runs "
            "google-cloud-pipeline-components' launcher against a local JobService stand-in "
            "(gRPC on a private Unix socket) that checks the CreateCustomJob request and starts "
            "each worker pool's replicas as local processes with the CLUSTER_SPEC Vertex AI "
            "gives them. "
            "Unless --param says otherwise, training is kept small (preset tiny, 1 epoch). "
            "--requests-only builds and checks the custom-job requests without running "
            "anything. TEMPLATE may be a template in Artifact Registry "
            "(https://LOCATION-kfp.pkg.dev/...): it is downloaded first, the one request "
            "verify makes. Exits 0 when everything passed, 1 otherwise. See docs/verify.md."
        ),
        epilog=example_epilog(
            "ncf-pipelines compile --profile gpu-a100-2workers --output pipeline.yaml",
            "ncf-pipelines verify pipeline.yaml",
            "ncf-pipelines verify pipeline.yaml --data ml-1m/ --param epochs=2 "
            "--work-dir out/verify",
            "ncf-pipelines verify pipeline.yaml --requests-only --project my-proj "
            "--region europe-west4 --service-account runner@my-proj.iam.gserviceaccount.com",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "template",
        metavar="TEMPLATE",
        help="compiled pipeline YAML, or REPOSITORY_URL/PACKAGE/TAG in Artifact Registry",
    )
    p.add_argument(
        "--registry-endpoint",
        help="where Artifact Registry requests go instead of Google's hosts (a stand-in, "
        "http://127.0.0.1:PORT); for a TEMPLATE URL only",
    )
    p.add_argument("--data", help="local ratings file or folder behind data_uri (default: sample)")
    add_param_option(p)
    p.add_argument("--work-dir", help="folder for the /gcs/ stand-in and logs (default: temp)")
    p.add_argument(
        "--project", default=vertex_emulator.DEFAULT_PROJECT, help="project the run stands for"
    )
    p.add_argument(
        "--region",
        default=vertex_emulator.DEFAULT_REGION,
        help="Vertex AI region the run stands for",
    )
    p.add_argument("--service-account", help="service account the run would execute as")
    p.add_argument("--network", help="VPC the run would peer with")
    p.add_argument(
        "--pipeline-root",
        default=vertex_emulator.DEFAULT_PIPELINE_ROOT,
        help="gs:// pipeline root the run stands for",
    )
    p.add_argument(
        "--requests-only",
        action="store_true",
        help="only build and check every custom-job request (nothing runs)",
    )
    p.add_argument(
        "--cache-dir",
        help="reuse outputs of identical task executions kept here (as Vertex AI's cache)",
    )
    p.add_argument(
        "--retries",
        action="store_true",
        help="retry a failed task as its retry policy allows, as Vertex AI does (default: stop "
        "at the first failure)",
    )
    p.add_argument(
        "--no-gcsfuse",
        dest="gcsfuse",
        action="store_false",
        help="let the /gcs/ stand-in rename folders and hard-link files as a local disk does "
        "(default: it refuses them as Cloud Storage FUSE does on Vertex AI)",
    )
    p.add_argument(
        "--allow-unguarded-replicas",
        action="store_true",
        help="run custom jobs of several replicas even where verify can keep no other user of "
        "this machine off their TensorFlow servers (no network namespace, no C compiler): any "
        "local user could then run TensorFlow ops as you through their loopback ports "
        "(default: such jobs fail; see docs/verify.md)",
    )
    p.add_argument(
        "--image-python",
        action="append",
        default=[],
        metavar="VARIANT=PYTHON",
        help="run the steps of one image variant (a custom job's replicas) with another Python "
        "environment, e.g. tpu=.venv-tpu/bin/python (make test-tpu-env builds it from the tpu "
        "image's lock); repeatable (default: every step runs in this environment)",
    )
    p.add_argument(
        "--task-timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="stop a task (or custom job) that runs longer (default 1800)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Verifies and prints what ran."""
    from pipelines.submit.request import region_problem

    problem = region_problem(args.region, "--region")
    if problem:
        raise UserError(problem)
    from pipelines.placeholder_values import check_placeholders

    check_placeholders(  # As submit and compile refuse them (docs/submit.md).
        {
            "--project": (args.project, "project"),
            "--service-account": (args.service_account, "service account"),
            "--network": (args.network, "network"),
            "--pipeline-root": (args.pipeline_root, "bucket"),
        }
    )
    with _local_template(args) as template:
        return _verify(args, template)


@contextlib.contextmanager
def _local_template(args: argparse.Namespace) -> Iterator[str]:
    """The template to verify, as a local file.

    A registry URL is downloaded (with Application Default Credentials) into a folder kept while
    verify runs.
    """
    from pipelines import template_registry
    from pipelines.submit.endpoints import REGISTRY_ENDPOINT, api_endpoint_problem
    from pipelines.submit.service import SubmitError, default_credentials

    if not template_registry.is_registry_url(args.template):
        yield args.template
        return
    ref = template_registry.parse_template(args.template)
    problem = api_endpoint_problem(args.registry_endpoint, REGISTRY_ENDPOINT)
    if problem:
        raise UserError(problem)
    with tempfile.TemporaryDirectory(prefix="ncf-template-") as folder:
        try:
            got = template_registry.download(
                ref,
                os.path.join(folder, f"{ref.package}.yaml"),
                credentials=default_credentials(),
                endpoint=args.registry_endpoint,
            )
        except (template_registry.TemplateRegistryError, SubmitError) as e:
            raise UserError(str(e)) from e
        print(f"verifying {ref.url} ({got.version})", file=sys.stderr, flush=True)
        yield got.path


def _verify(args: argparse.Namespace, template: str) -> int:
    from pipelines.submit.request import parse_assignments

    try:
        report = vertex_emulator.verify(
            template,
            data_path=args.data,
            parameter_values=parse_assignments(args.param),
            work_dir=args.work_dir,
            project=args.project,
            region=args.region,
            service_account=args.service_account,
            network=args.network,
            run_tasks=not args.requests_only,
            pipeline_root=args.pipeline_root,
            cache_dir=args.cache_dir,
            retries=args.retries,
            gcsfuse=args.gcsfuse,
            allow_unguarded_replicas=args.allow_unguarded_replicas,
            image_pythons=dict(_assignment(a) for a in args.image_python),
            task_timeout_s=args.task_timeout,
            echo=lambda line: print(f"  {line}", file=sys.stderr, flush=True),
        )
    except vertex_emulator.VerifyError as e:
        raise UserError(str(e)) from e
    print(vertex_emulator.format_report(report))
    return 0 if report.ok else 1


def _assignment(text: str) -> tuple[str, str]:
    """``VARIANT=PYTHON`` of ``--image-python``."""
    variant, sep, python = text.partition("=")
    if not sep or not variant or not python:
        raise UserError(
            f"--image-python {text!r}: write VARIANT=PYTHON, e.g. tpu=.venv-tpu/bin/python"
        )
    return variant, python
