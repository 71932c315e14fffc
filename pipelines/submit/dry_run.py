"""What a submission would send, built offline (``--dry-run``): the run and each custom job.

``custom_jobs`` builds every custom-job request as Vertex AI would and checks it; ``vertex.submit``
runs it too, so a request the service would refuse is found before the run is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines import placeholder_values
from pipelines.submit.caching import job_caching, scheduled_caching
from pipelines.submit.request import SubmitConfig
from pipelines.submit.run_values import prepare


def custom_jobs(config: SubmitConfig, values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every custom-job request the run would create, built offline and checked, by task.

    Built as Vertex AI and the launcher build them (``pipelines.run_plan``, which verify builds
    on: placeholders filled with this submission's project, region, service account and network;
    GCPC's own payload steps; the aiplatform ``CreateCustomJobRequest``), so a request the
    service would refuse is found before the run is sent, not after the pipeline queue.

    Raises:
        ValueError: a request that would be refused, naming the task and the field.
    """
    from pipelines import run_plan

    try:
        requests = run_plan.custom_job_requests(
            config.template_path,
            values,
            project=config.project,
            region=config.region,
            service_account=config.service_account,
            network=config.network,
            pipeline_root=config.pipeline_root,
        )
    except run_plan.RequestError as e:
        raise ValueError(f"{config.template_path} would fail on Vertex AI: {e}") from None
    out = {}
    for task, request in requests.items():
        spec = request.custom_job.job_spec
        out[task] = {
            "parent": request.parent,
            "service_account": spec.service_account,
            "network": spec.network or None,
            "worker_pools": [
                f"{p.replica_count} x {p.machine_spec.machine_type}"
                + (
                    f" + {p.machine_spec.accelerator_count} x "
                    f"{p.machine_spec.accelerator_type.name}"
                    if p.machine_spec.accelerator_count
                    else ""
                )
                + f" ({p.container_spec.image_uri})"
                for p in spec.worker_pool_specs
            ],
        }
    return out


def describe(config: SubmitConfig) -> dict[str, Any]:
    """What ``vertex.submit`` would send, as a JSON-able dict; makes no network call.

    Raises:
        ValueError, FileNotFoundError: the same input errors ``vertex.submit`` raises.
    """
    config = scheduled_caching(config)
    template, values = prepare(config)
    display_name = config.display_name or template.pipeline_name
    jobs = custom_jobs(config, values)
    out: dict[str, Any] = {
        "action": "create schedule" if config.schedule_cron else "create pipeline job",
        "project": config.project,
        "region": config.region,
        "api_endpoint": config.api_endpoint or f"https://{config.region}-aiplatform.googleapis.com",
        "template": config.template_uri or config.template_path,
        "pipeline_name": template.pipeline_name,
        "display_name": display_name,
        "pipeline_root": config.pipeline_root,
        "parameter_values": values,
        "labels": dict(config.labels),
        "service_account": config.service_account
        or "(the project's Compute Engine default account, "
        f"{placeholder_values.DEFAULT_COMPUTE_SERVICE_ACCOUNT})",
        "network": config.network,
        "enable_caching": (
            "(as compiled)" if job_caching(config) is None else config.enable_caching
        ),
        "experiment": config.experiment,
        # Where, as whom and on which network each training custom job runs.
        "custom_jobs": jobs,
        "credentials": (
            "Application Default Credentials"
            if config.credentials is None
            else type(config.credentials).__name__
        ),
    }
    if config.template_uri:
        from pipelines import template_registry

        out["template_uri"] = config.template_uri
        out["template_version"] = template_registry.file_version(config.template_path)
    if config.schedule_cron:
        out["schedule"] = {
            "cron": config.schedule_cron,
            "display_name": config.schedule_name or f"{display_name}-schedule",
            "max_concurrent_run_count": config.max_concurrent_runs,
        }
    return out
