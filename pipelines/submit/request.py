"""What a submission asks for (``SubmitConfig``), and the checks of its fields made offline.

Project, region, pipeline root, service account, network, experiment, schedule, labels and
endpoints are held to Vertex AI's rules before any request, each refusal naming the field, the
value and the form expected. ``parse_assignments`` reads the ``NAME=VALUE`` options of the CLI.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pipelines import placeholder_values
from pipelines import vertex_names as names
from pipelines.submit.endpoints import API_ENDPOINT, REGISTRY_ENDPOINT, api_endpoint_problem

# The regions Vertex AI runs in (docs: "Vertex AI locations"; the same list as
# google-cloud-aiplatform's own SUPPORTED_REGIONS, less "global", which runs no pipelines).
VERTEX_AI_REGIONS = frozenset(
    {
        *("us-central1", "us-east1", "us-east4", "us-east5", "us-east7", "us-south1"),
        *("us-west1", "us-west2", "us-west3", "us-west4", "us-west8"),
        *("northamerica-northeast1", "northamerica-northeast2"),
        *("southamerica-east1", "southamerica-west1"),
        *("europe-west1", "europe-west2", "europe-west3", "europe-west4", "europe-west6"),
        *("europe-west8", "europe-west9", "europe-west12", "europe-central2"),
        *("europe-north1", "europe-north2", "europe-southwest1"),
        *("asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3"),
        *("asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2"),
        *("australia-southeast1", "australia-southeast2"),
        *("me-central1", "me-central2", "me-west1", "africa-south1"),
    }
)


@dataclasses.dataclass(frozen=True)
class SubmitConfig:
    """Everything a submission needs; built once by the CLI (or a caller) and passed down.

    Attributes:
        template_path: a compiled pipeline (KFP IR YAML, from ``ncf-pipelines compile``); a
            registry URL until ``registry_template.fetched_template`` replaces it with the
            local copy.
        project: Google Cloud project id.
        region: Vertex AI region, e.g. ``us-central1``.
        pipeline_root: ``gs://`` folder for the run's artifacts.
        service_account: the run's service account (default: the Compute Engine default one).
        network: VPC to peer with, ``projects/NUMBER/global/networks/NAME``.
        labels: Vertex AI labels for the run.
        enable_caching: ``None`` or ``True`` keep the compiled per-task settings (the steps
            with outside effects and the tuning trials' folder are compiled uncached, and the
            SDK's ``enable_caching=True`` would turn them on: ``caching.job_caching``); ``False``
            turns caching off for every task.
        experiment: Vertex AI Experiment to associate the run with (runs only).
        parameter_values: pipeline parameters; strings are converted to the declared types.
        display_name: run (or schedule) display name (default: the pipeline's name).
        schedule_cron: when set, create a schedule with this cron instead of one run.
        schedule_name: display name of the schedule (default: display name + ``-schedule``).
        max_concurrent_runs: runs a schedule may have going at once.
        api_endpoint: Vertex AI endpoint other than the regional default (a private endpoint,
            or ``http://127.0.0.1:PORT`` for the test stand-in). Plain ``http://`` only to
            loopback (``endpoints.api_endpoint_problem``): every request carries a bearer token.
        credentials: ``google.auth`` credentials; ``None`` means Application Default
            Credentials. Never printed or logged.
        template_uri: the Artifact Registry URL ``template_path`` was downloaded from
            (``registry_template.fetched_template`` sets it); the job records it as its
            ``template_uri``.
        registry_endpoint: where Artifact Registry requests go instead of the kfp.pkg.dev host
            and artifactregistry.googleapis.com (``http://127.0.0.1:PORT``: the test stand-in);
            plain http only to loopback, as ``api_endpoint``.
    """

    template_path: str
    project: str
    region: str
    pipeline_root: str
    service_account: str | None = None
    network: str | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    enable_caching: bool | None = None
    experiment: str | None = None
    parameter_values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    display_name: str | None = None
    schedule_cron: str | None = None
    schedule_name: str | None = None
    max_concurrent_runs: int = 1
    api_endpoint: str | None = None
    credentials: Any = dataclasses.field(default=None, repr=False, compare=False)
    template_uri: str | None = None
    registry_endpoint: str | None = None


def parse_assignments(items: Sequence[str], what: str = "--param") -> dict[str, str]:
    """``["a=1", "b=x=y"]`` to ``{"a": "1", "b": "x=y"}``.

    Raises:
        ValueError: an item without ``=`` or with an empty name, or a name given twice.
    """
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{what} {item!r}: expected NAME=VALUE")
        if name in out:
            raise ValueError(f"{what} {name!r} given twice")
        out[name] = value
    return out


def validate_labels(labels: Mapping[str, str]) -> None:
    """Checks labels against Vertex AI's rules.

    At most 64 labels; keys start with a lowercase letter; keys and values are at most 63
    lowercase letters, digits, ``_`` or ``-``.

    Raises:
        ValueError: naming the offending label and the rule.
    """
    if len(labels) > names.MAX_LABELS:
        raise ValueError(f"{len(labels)} labels given; Vertex AI allows at most {names.MAX_LABELS}")
    for key, value in labels.items():
        if not isinstance(key, str) or not names.LABEL_KEY.fullmatch(key):
            raise ValueError(
                f"label key {key!r} is invalid: keys are 1-63 characters, start with a lowercase "
                "letter, and use only lowercase letters, digits, '_' and '-'"
            )
        if not isinstance(value, str) or not names.LABEL_VALUE.fullmatch(value):
            raise ValueError(
                f"label {key}={value!r} is invalid: values are at most 63 characters of "
                "lowercase letters, digits, '_' and '-'"
            )


def validate_config(config: SubmitConfig) -> None:
    """Checks every field that can be checked locally.

    Raises:
        ValueError: with the field, the value and the expected form.
    """
    placeholder_values.check_placeholders(
        {
            "project": (config.project, "project"),
            "pipeline root": (config.pipeline_root, "bucket"),
            "service account": (config.service_account, "service account"),
            "network": (config.network, "network"),
        }
    )
    if not names.PROJECT_ID.fullmatch(config.project or ""):
        raise ValueError(
            f"project {config.project!r} is not a project id (6-30 lowercase letters, digits "
            "and '-', starting with a letter)"
        )
    problem = region_problem(config.region, "region")
    if problem:
        raise ValueError(problem)
    if not config.pipeline_root.startswith("gs://"):
        raise ValueError(
            f"pipeline root {config.pipeline_root!r} must be a Cloud Storage folder, "
            "gs://BUCKET/PATH (Vertex AI cannot write anywhere else)"
        )
    bucket = config.pipeline_root[len("gs://") :].split("/", 1)[0]
    if not names.BUCKET.fullmatch(bucket):
        raise ValueError(
            f"pipeline root {config.pipeline_root!r}: {bucket!r} is not a bucket name "
            "(3-63 lowercase letters, digits, '-', '_' and '.')"
        )
    if config.service_account is not None and not names.SERVICE_ACCOUNT.fullmatch(
        config.service_account
    ):
        raise ValueError(
            f"service account {config.service_account!r} is not an email such as "
            "NAME@PROJECT.iam.gserviceaccount.com"
        )
    if config.network is not None and not names.NETWORK.fullmatch(config.network):
        raise ValueError(
            f"network {config.network!r} must be a full name: "
            "projects/PROJECT_NUMBER/global/networks/NAME (the project's number, not its id: "
            "gcloud projects describe PROJECT --format='value(projectNumber)')"
        )
    if config.experiment is not None:
        if not names.EXPERIMENT.fullmatch(config.experiment):
            raise ValueError(
                f"experiment {config.experiment!r}: use 4-128 lowercase letters, digits and '-'"
            )
        if config.schedule_cron:
            raise ValueError("an experiment can be set for a run, not for a schedule")
    if config.schedule_cron is not None:
        cron = re.sub(r"^(CRON_TZ|TZ)=\S+\s+", "", config.schedule_cron.strip())
        if len(cron.split()) != 5:
            raise ValueError(
                f"schedule {config.schedule_cron!r} is not a 5-field cron expression such as "
                "'0 3 * * *' (optionally prefixed with 'TZ=Area/City ')"
            )
    if config.max_concurrent_runs < 1:
        raise ValueError(
            f"max concurrent runs (--max-concurrent-runs) must be >= 1, got "
            f"{config.max_concurrent_runs}"
        )
    if config.display_name is not None and not 0 < len(config.display_name) <= 128:
        raise ValueError("display name must be 1-128 characters")
    for endpoint, what in (
        (config.api_endpoint, API_ENDPOINT),
        (config.registry_endpoint, REGISTRY_ENDPOINT),
    ):
        problem = api_endpoint_problem(endpoint, what)
        if problem:
            raise ValueError(problem)
    validate_labels(config.labels)


def region_problem(region: str | None, what: str = "region") -> str | None:
    """Why ``region`` is not a Vertex AI region (with the nearest one), or None if it is one.

    Args:
        region: the region as given.
        what: where it came from, for the message (``--region``, ``GOOGLE_CLOUD_REGION``).
    """
    if region in VERTEX_AI_REGIONS:
        return None
    regions = sorted(VERTEX_AI_REGIONS)
    close = difflib.get_close_matches(str(region).lower(), regions, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"{what} {region!r} is not a Vertex AI region; {hint}Vertex AI runs in {', '.join(regions)}"
    )
