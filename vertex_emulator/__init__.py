"""Verify a compiled pipeline on this machine, at the executor level, as Vertex AI would run it.

``verify(template)`` runs every task's exact command from the compiled spec, with the executor
input Vertex AI's launcher builds, chained task to task on a small sample; custom-job tasks run
GCPC's launcher against a local JobService stand-in that starts the worker pools as local
replicas. ``custom_job_requests(template, ...)`` builds and checks every custom-job request
offline (what ``submit`` checks before sending); it, and the reading of a template it shares with
``Verification`` (``template``, ``placeholders``, ``executor_io``, ``custom_job``), live in
``pipelines.run_plan``, which this package builds on. See docs/verify.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipelines.run_plan import custom_job_requests
from pipelines.run_plan.custom_job import RequestError
from pipelines.run_plan.parameters import FAST_PARAMETERS
from pipelines.run_plan.task_records import BUILT, FAILED, PLANNED, SKIPPED, SUCCEEDED
from vertex_emulator.run import (
    DEFAULT_PIPELINE_ROOT,
    DEFAULT_PROJECT,
    DEFAULT_REGION,
    Verification,
    VerifyError,
)
from vertex_emulator.verify_report import (
    JobRecord,
    ProcessRecord,
    TaskRecord,
    VerifyReport,
    format_report,
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
