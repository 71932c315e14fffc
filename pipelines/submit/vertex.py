"""Creating the pipeline job (or the schedule) on Vertex AI through ``aiplatform.PipelineJob``.

Everything is checked first, offline (``run_values.prepare``, ``dry_run.custom_jobs``); then one
job is created, its ID unique even for runs sent in the same second.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from pipelines.submit.caching import job_caching, scheduled_caching
from pipelines.submit.dry_run import custom_jobs
from pipelines.submit.request import SubmitConfig
from pipelines.submit.run_values import prepare
from pipelines.submit.service import default_credentials, service_errors


@dataclasses.dataclass(frozen=True)
class SubmitResult:
    """What was created: a pipeline job, or a schedule."""

    kind: str  # "pipeline_job" or "schedule"
    resource_name: str
    console_url: str
    display_name: str
    parameter_values: Mapping[str, Any]


def new_job_id(pipeline_name: str) -> str:
    """A new run's pipeline job ID: the SDK's own (``NAME-YYYYmmddHHMMSS``) and 4 random hex digits.

    The SDK's ID changes once a second, and Vertex AI refuses a second job of one ID (409
    ALREADY_EXISTS): a script that submits several runs at once would lose all but the first.
    """
    import datetime
    import secrets

    name = re.sub("[^-0-9a-z]+", "-", pipeline_name.lower()).strip("-")
    now = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
    return f"{name}-{now}-{secrets.token_hex(2)}"


def submit(config: SubmitConfig) -> SubmitResult:
    """Creates the pipeline job (or the schedule) on Vertex AI.

    Raises:
        ValueError, FileNotFoundError: bad input, found before any request.
        SubmitError: the service or the network refused; the message says what to check.
    """
    config = scheduled_caching(config)
    template, values = prepare(config)
    custom_jobs(config, values)  # A request the service would refuse stops here, unsent.
    credentials = config.credentials or default_credentials()
    display_name = config.display_name or template.pipeline_name

    with service_errors(config, "creating the schedule" if config.schedule_cron else "submitting"):
        from google.cloud import aiplatform

        # init() is process-wide in the SDK; PipelineJob has no per-call endpoint or transport.
        aiplatform.init(
            project=config.project,
            location=config.region,
            credentials=credentials,
            api_transport="rest",
            **({"api_endpoint": config.api_endpoint} if config.api_endpoint else {}),
        )
        job = aiplatform.PipelineJob(
            display_name=display_name,
            job_id=new_job_id(template.pipeline_name),
            template_path=config.template_path,
            pipeline_root=config.pipeline_root,
            parameter_values=values,
            enable_caching=job_caching(config),
            labels=dict(config.labels) or None,
            project=config.project,
            location=config.region,
            credentials=credentials,
        )
        if config.template_uri:
            # What PipelineJob's constructor records when it downloads a registry URL itself.
            # Built from our copy instead: the job runs the very bytes checked above (a tag can
            # move between two downloads), and the same code reaches a stand-in. The SDK has no
            # public setter, and `gca_resource` refuses until the job is created.
            job._gca_resource.template_uri = config.template_uri
        if config.schedule_cron:
            schedule = job.create_schedule(
                cron=config.schedule_cron,
                display_name=config.schedule_name or f"{display_name}-schedule",
                max_concurrent_run_count=config.max_concurrent_runs,
                service_account=config.service_account,
                network=config.network,
            )
            name = schedule.resource_name
            return SubmitResult("schedule", name, _console_url(name), display_name, values)
        job.submit(
            service_account=config.service_account,
            network=config.network,
            experiment=config.experiment,
        )
        name = job.resource_name
        return SubmitResult("pipeline_job", name, _console_url(name), display_name, values)


def _console_url(resource_name: str) -> str:
    m = re.fullmatch(
        r"projects/([^/]+)/locations/([^/]+)/(pipelineJobs|schedules)/([^/]+)", resource_name
    )
    if not m:
        return ""
    project, location, kind, rid = m.groups()
    page = "runs" if kind == "pipelineJobs" else "schedules"
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{location}/pipelines/"
        f"{page}/{rid}?project={project}"
    )
