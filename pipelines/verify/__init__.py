"""Verify a compiled pipeline on this machine, at the executor level, as Vertex AI would run it.

``verify(template)`` runs every task's exact command from the compiled spec, with the executor
input Vertex AI's launcher builds, chained task to task on a small sample; custom-job tasks run
GCPC's launcher against a local JobService stand-in that starts the worker pools as local
replicas. ``custom_job_requests(template, ...)`` builds and checks every custom-job request
offline (what ``submit`` checks before sending). See docs/verify.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.verify.custom_job import RequestError
from pipelines.verify.parameters import FAST_PARAMETERS
from pipelines.verify.report import (
    BUILT,
    FAILED,
    PLANNED,
    SKIPPED,
    SUCCEEDED,
    JobRecord,
    ProcessRecord,
    TaskRecord,
    VerifyReport,
    format_report,
)
from pipelines.verify.run import (
    DEFAULT_PIPELINE_ROOT,
    DEFAULT_PROJECT,
    DEFAULT_REGION,
    Verification,
    VerifyError,
)

__all__ = [
    "BUILT",
    "DEFAULT_PIPELINE_ROOT",
    "DEFAULT_PROJECT",
    "DEFAULT_REGION",
    "FAILED",
    "FAST_PARAMETERS",
    "PLANNED",
    "SKIPPED",
    "SUCCEEDED",
    "JobRecord",
    "ProcessRecord",
    "RequestError",
    "TaskRecord",
    "Verification",
    "VerifyError",
    "VerifyReport",
    "custom_job_requests",
    "format_report",
    "verify",
]


def verify(
    template_path: str,
    *,
    data_path: str | None = None,
    parameter_values: Mapping[str, Any] | None = None,
    work_dir: str | None = None,
    project: str = DEFAULT_PROJECT,
    region: str = DEFAULT_REGION,
    service_account: str | None = None,
    network: str | None = None,
    run_tasks: bool = True,
    **options: Any,
) -> VerifyReport:
    """Verifies a compiled template; see ``Verification`` for the arguments.

    Raises:
        VerifyError: the template, parameters or data cannot be used at all. A task that fails
            is reported in the result (``report.ok`` is ``False``), not raised.
    """
    with Verification(
        template_path,
        data_path=data_path,
        parameter_values=parameter_values,
        work_dir=work_dir,
        project=project,
        region=region,
        service_account=service_account,
        network=network,
        run_tasks=run_tasks,
        **options,
    ) as verification:
        return verification.run()


def custom_job_requests(
    template_path: str,
    parameter_values: Mapping[str, Any] | None = None,
    project: str = DEFAULT_PROJECT,
    region: str = DEFAULT_REGION,
    service_account: str | None = None,
    network: str | None = None,
    pipeline_root: str = DEFAULT_PIPELINE_ROOT,
) -> dict[str, Any]:
    """Every custom-job request the run would send, built offline and checked.

    Returns:
        Task name to its ``google.cloud.aiplatform_v1.types.CreateCustomJobRequest`` (tasks
        behind a false condition are left out).

    Raises:
        VerifyError: the template or parameters cannot be used.
        RequestError: a request the client library or Vertex AI would refuse (the message names
            the task and the field).
    """
    report = verify(
        template_path,
        parameter_values=parameter_values,
        project=project,
        region=region,
        service_account=service_account,
        network=network,
        pipeline_root=pipeline_root,
        run_tasks=False,
    )
    failed = [t for t in report.tasks if t.status == FAILED]
    if failed:
        raise RequestError("; ".join(f"task {t.name}: {t.reason}" for t in failed))
    return {t.name: t.requests[0] for t in report.tasks if t.kind == "custom_job" and t.requests}
