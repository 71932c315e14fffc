"""What a verification ran and found: small records, and the text the CLI prints."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from typing import Any

from pipelines.run_plan.task_records import FAILED, TaskRecord


@dataclasses.dataclass
class ProcessRecord:
    """One local process: a plain task, a launcher, or a custom-job replica.

    Attributes:
        name: the task name, or ``workerpoolN-I`` for a replica.
        command: the command line as run.
        env: the variables verify set for it that Vertex AI sets (or stands in for).
        returncode: its exit status (``None``: still running or killed).
        seconds: how long it ran.
        stdout_path: its standard output.
        stderr_path: its standard error (the replicas' go to ``stdout_path`` too).
        write_log: ``gs://`` objects it opened for writing (Python file access only).
    """

    name: str
    command: list[str]
    env: dict[str, str]
    returncode: int | None = None
    seconds: float = 0.0
    stdout_path: str = ""
    stderr_path: str = ""
    write_log: str = ""

    def writes(self) -> list[str]:
        """The ``gs://`` objects this process opened for writing, in order, once each."""
        if not self.write_log or not os.path.exists(self.write_log):
            return []
        with open(self.write_log) as f:
            return list(dict.fromkeys(line.strip() for line in f if line.strip()))

    def save_command(self, folder: str) -> None:
        """Writes the full command line (argv as JSON) to ``folder/command.json``."""
        with open(os.path.join(folder, "command.json"), "w") as f:
            json.dump(self.command, f, indent=1)

    def stderr_tail(self, lines: int = 25) -> str:
        """The last lines of its standard error."""
        return tail(self.stderr_path or self.stdout_path, lines)


@dataclasses.dataclass
class JobRecord:
    """One custom job the JobService stand-in accepted.

    Attributes:
        name: its resource name.
        endpoint: the API endpoint the client was built for.
        request: the ``CreateCustomJobRequest`` it received.
        state: the ``JobState`` name.
        error: the job's error message, if it failed.
        replicas: the processes it ran, one per replica.
        notes: what verify changed or could not mirror (a missing accelerator, ...).
    """

    name: str
    endpoint: str
    request: Any
    state: str = "JOB_STATE_PENDING"
    error: str = ""
    replicas: list[ProcessRecord] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    # A tuning job's trials (each a job record of its own), and what a trial's replicas get
    # beyond a custom job's variables (the metric file and the trial id).
    trials: list[Any] = dataclasses.field(default_factory=list)
    extra_env: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class VerifyReport:
    """The whole verification.

    Attributes:
        template: the compiled template.
        work_dir: where the local ``/gcs/`` stand-in, logs and scratch folders are.
        parameters: the pipeline parameters the run used.
        overrides: parameters verify set to keep the run small (not given by the user).
        tasks: every task, in the order verify took them.
        notes: what verify stood in for or changed.
        ran: whether tasks were executed (``False``: requests only).
    """

    template: str
    work_dir: str
    parameters: dict[str, Any]
    overrides: dict[str, Any]
    tasks: list[TaskRecord]
    notes: list[str]
    ran: bool

    @property
    def ok(self) -> bool:
        """Whether nothing failed."""
        return all(t.status != FAILED for t in self.tasks)

    def task(self, name: str) -> TaskRecord:
        """The record of one task (by name or display name).

        Raises:
            KeyError: no such task.
        """
        for t in self.tasks:
            if name in (t.name, t.display_name):
                return t
        raise KeyError(f"no task {name!r}; tasks: {', '.join(t.name for t in self.tasks)}")


def tail(path: str, lines: int = 25) -> str:
    """The last ``lines`` lines of a text file ("" if there is none)."""
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:]).rstrip()


def _short(command: list[str], width: int = 160) -> str:
    """A command line for people: scripts and JSON documents shown by size."""
    parts = []
    for c in command:
        if "\n" in c:
            parts.append(f"<{c.count(chr(10)) + 1}-line script>")
        elif len(c) > 60 and c.lstrip()[:1] in "{[":
            parts.append(f"<JSON, {len(c):,} chars>")
        else:
            parts.append(shlex.quote(c if len(c) <= 60 else c[:57] + "..."))
    text = " ".join(parts)
    return text if len(text) <= width else text[: width - 3] + "..."


def format_report(report: VerifyReport, verbose: bool = False) -> str:
    """The report as the ``verify`` command prints it."""
    out = [f"verify {report.template}"]
    if report.work_dir:
        out.append(f"  work dir: {report.work_dir}")
    if report.overrides:
        given = ", ".join(f"{k}={json.dumps(v)}" for k, v in report.overrides.items())
        out.append(f"  parameters set by verify (override with --param): {given}")
    for note in report.notes:
        out.append(f"  note: {note}")
    for t in report.tasks:
        out.append(
            f"- {t.name} [{t.kind}] {t.status.upper()}" + (f": {t.reason}" if t.reason else "")
        )
        for n, attempt in enumerate(t.earlier, 1):
            out.append(
                f"    attempt {n} {attempt.status.upper()}: {attempt.reason.splitlines()[0]}"
            )
        if t.command and not t.process:
            out.append(f"    command: {_short(t.command)}")
        if t.process:
            p = t.process
            out.append(f"    ran: {_short(p.command)}  (exit {p.returncode}, {p.seconds:.1f}s)")
            if verbose:
                out.append(f"    logs: {p.stdout_path} {p.stderr_path}")
        for request in t.requests:
            out.extend(f"    {line}" for line in describe_request(request))
        for job in t.jobs:
            out.append(f"    job {job.name}: {job.state}")
            out.extend(f"      | {line}" for line in job.error.splitlines())
            for note in job.notes:
                out.append(f"      note: {note}")
            for r in job.replicas:
                cluster = json.loads(r.env.get("CLUSTER_SPEC", "{}")).get("task", {})
                out.append(
                    f"      replica {r.name} (CLUSTER_SPEC task {cluster.get('type')}:"
                    f"{cluster.get('index')}): exit {r.returncode}, {r.seconds:.1f}s, "
                    f"log {r.stdout_path}"
                )
            for trial_job, trial in job.trials:
                values = ", ".join(f"{p.parameter_id}={p.value}" for p in trial.parameters)
                measured = ", ".join(
                    f"{m.metric_id} {m.value:.4f}" for m in trial.final_measurement.metrics
                )
                out.append(
                    f"      trial {trial.id} {trial.state.name} ({values})"
                    + (f": {measured}" if measured else "")
                )
                out.extend(f"        | {line}" for line in trial_job.error.splitlines()[:3])
                for r in trial_job.replicas:
                    out.append(
                        f"        replica {r.name}: exit {r.returncode}, log {r.stdout_path}"
                    )
        for name, artifact in t.artifacts.items():
            out.append(f"    output {name}: {artifact.get('uri', '')}")
        if t.status == FAILED and t.process and t.process.stderr_tail():
            out.append("    stderr (last lines):")
            out.extend(f"      {line}" for line in t.process.stderr_tail().splitlines())
    verdict = "OK" if report.ok else "FAILED"
    failed = [t.name for t in report.tasks if t.status == FAILED]
    out.append(f"{verdict}" + (f": {', '.join(failed)} failed" if failed else ""))
    return "\n".join(out)


def describe_request(request) -> list[str]:
    """A few lines about one ``CreateCustomJobRequest``."""
    job = request.custom_job
    spec = job.job_spec
    lines = [f"request CreateCustomJob parent={request.parent} display_name={job.display_name!r}"]
    for i, pool in enumerate(spec.worker_pool_specs):
        m = pool.machine_spec
        acc = f", {m.accelerator_count} x {m.accelerator_type.name}" if m.accelerator_count else ""
        topo = f", topology {m.tpu_topology}" if m.tpu_topology else ""
        lines.append(
            f"  workerpool{i}: {pool.replica_count} x {m.machine_type}{acc}{topo}, "
            f"image {pool.container_spec.image_uri}"
        )
    lines.append(
        f"  scheduling.strategy={spec.scheduling.strategy.name} "
        f"service_account={spec.service_account or '(Vertex AI Custom Code Service Agent)'} "
        f"network={spec.network or '(none)'}"
    )
    return lines
