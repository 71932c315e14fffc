"""A compiled pipeline's run as Vertex AI plans it, offline: each task's command and its request.

What Vertex AI Pipelines does with a compiled template before anything runs, built here with no
process started and no network call: the DAG in dependency order and its conditions
(``template``), the executor input each task gets (``executor_io``), every placeholder resolved
(``placeholders``), and each custom-job request built as GCPC's launcher builds it and checked as
the client library and the service check it (``custom_job``). ``RunPlan`` walks a run;
``custom_job_requests`` is what ``submit`` checks before sending (its dry run shows them).

It builds on ``pipelines.compiled`` (the template and its typed parameters) and imports neither
``submit`` nor the emulator: ``vertex_emulator`` extends ``RunPlan`` to run the tasks locally.
"""

from __future__ import annotations

from pipelines.run_plan.custom_job import RequestError
from pipelines.run_plan.plan import (
    DEFAULT_PIPELINE_ROOT,
    DEFAULT_PROJECT,
    DEFAULT_REGION,
    PlanError,
    RunPlan,
    custom_job_requests,
)

__all__ = [
    "DEFAULT_PIPELINE_ROOT",
    "DEFAULT_PROJECT",
    "DEFAULT_REGION",
    "PlanError",
    "RequestError",
    "RunPlan",
    "custom_job_requests",
]
