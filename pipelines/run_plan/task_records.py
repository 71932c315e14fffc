"""What a planned (or verified) run found for each task: its status and what was built for it."""

from __future__ import annotations

import dataclasses
from typing import Any

SUCCEEDED = "succeeded"
FAILED = "failed"
SKIPPED = "skipped"
BUILT = "built"  # Requests only: the custom-job request was built and checked, nothing ran.
PLANNED = "planned"  # Requests only: a plain task's command was resolved, nothing ran.


@dataclasses.dataclass
class TaskRecord:
    """One task of the pipeline and what verify did with it.

    Attributes:
        name: the task's key in the DAG.
        display_name: its display name.
        kind: ``importer``, ``container``, ``custom_job`` or ``dag``.
        status: ``succeeded``, ``failed``, ``skipped`` or ``built``.
        reason: why it was skipped, or what failed.
        process: the process that ran it (a plain task's command, a custom job's launcher).
        requests: custom-job requests built for it (a launcher's payload, built offline).
        jobs: custom jobs the launcher created (run mode).
        artifacts: output artifacts (name to the runtime artifact: uri, metadata).
        parameters: output parameters.
        command: the command line with every placeholder resolved.
        earlier: failed attempts before this one (retries under the task's ``retryPolicy``).
    """

    name: str
    display_name: str
    kind: str
    status: str = SUCCEEDED
    reason: str = ""
    process: Any = None  # verify's ProcessRecord, when the task ran.
    requests: list[Any] = dataclasses.field(default_factory=list)
    jobs: list[Any] = dataclasses.field(default_factory=list)  # verify's JobRecords.
    artifacts: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    command: list[str] = dataclasses.field(default_factory=list)
    earlier: list[TaskRecord] = dataclasses.field(default_factory=list)
