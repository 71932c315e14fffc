"""Executes a compiled pipeline task by task on this machine, as Vertex AI Pipelines would.

``Verification`` extends ``pipelines.run_plan.RunPlan``, which walks the root DAG in dependency
order (sub-DAGs of conditions included, when their condition holds). A plain container task
gets the executor input Vertex builds, its command and arguments with every placeholder
resolved, and runs as a subprocess; its executor output feeds the tasks after it. A custom-job
task's launcher runs the same way against the JobService stand-in, which runs the worker pools;
its request is also built offline, so a failure comes with a diagnosis. With
``run_tasks=False`` nothing runs: every custom-job request is built and checked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from pipelines.run_plan import custom_job, placeholders, template
from pipelines.run_plan.executor_io import Scope, read_outputs
from pipelines.run_plan.parameters import DATA_URI
from pipelines.run_plan.plan import (
    DEFAULT_PIPELINE_ROOT,
    DEFAULT_PROJECT,
    DEFAULT_REGION,
    RunPlan,
)
from pipelines.run_plan.plan import PlanError as VerifyError
from vertex_emulator import cache, offline, replica_network, shim, verify_report
from vertex_emulator import gcsfuse as gcsfuse_emulation
from vertex_emulator.data_staging import stage
from vertex_emulator.verify_report import FAILED, ProcessRecord, TaskRecord


class Verification(RunPlan):
    """One verification of a compiled template; use as a context manager.

    A ``RunPlan`` (its walk, conditions, executor inputs and requests) whose tasks run here.

    Args:
        template_path: the compiled pipeline (IR YAML or JSON).
        work_dir: folder for the ``/gcs/`` stand-in, logs and scratch (default: a new temp dir).
        data_path: local data behind ``data_uri`` (default: the embedded sample).
        parameter_values: pipeline parameters (checked and converted to the declared types).
        project: project id the run stands for.
        region: Vertex AI region the run stands for.
        service_account: the run's service account (``None``: the default compute account).
        network: the VPC the run is peered with.
        pipeline_root: the run's ``gs://`` pipeline root.
        run_tasks: run every task (``False``: build and check custom-job requests only).
        task_timeout_s: the longest one task (or custom job) may take.
        poll_seconds: how often the custom-job launcher polls (Vertex: 20 s).
        cache_dir: reuse outputs of identical executions from earlier verifications here, as
            Vertex AI's execution cache does (``None``: every task runs).
        retries: run a failed task again as its ``retryPolicy`` allows, as Vertex AI does
            (without waiting the backoff); ``False``: stop at the first failure.
        gcsfuse: the ``/gcs/`` stand-in refuses what Cloud Storage FUSE refuses (directory
            renames, hard links; ``vertex_emulator/gcsfuse.py``); ``False``: a plain folder.
        allow_unguarded_replicas: run custom jobs of several replicas even where nothing keeps
            other users of this machine off their TensorFlow servers (no network namespace, no
            C compiler; ``vertex_emulator/replica_network.py``); ``False``: such jobs fail.
        image_pythons: the Python environment that stands in for an image variant's, by variant
            (``{"tpu": ".venv-tpu/bin/python"}``: a custom job's replicas in the tpu image run
            there); every other image is this environment.
        echo: called with a line as each task starts and ends.

    Raises:
        VerifyError: the template, the parameters or the data cannot be used.
    """

    def __init__(
        self,
        template_path: str,
        *,
        work_dir: str | None = None,
        data_path: str | None = None,
        parameter_values: Mapping[str, Any] | None = None,
        project: str = DEFAULT_PROJECT,
        region: str = DEFAULT_REGION,
        service_account: str | None = None,
        network: str | None = None,
        pipeline_root: str = DEFAULT_PIPELINE_ROOT,
        run_tasks: bool = True,
        task_timeout_s: float = 1800.0,
        poll_seconds: float = 0.5,
        cache_dir: str | None = None,
        retries: bool = False,
        gcsfuse: bool = True,
        allow_unguarded_replicas: bool = False,
        image_pythons: Mapping[str, str] | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(
            template_path,
            data_path=data_path,
            parameter_values=parameter_values,
            project=project,
            region=region,
            service_account=service_account,
            network=network,
            pipeline_root=pipeline_root,
            run_tasks=run_tasks,
            echo=echo,
        )
        if work_dir:
            self.work_dir = os.path.abspath(work_dir)
        else:  # Requests only write nothing.
            self.work_dir = tempfile.mkdtemp(prefix="ncf-verify-") if run_tasks else ""
        self.gcs_dir = os.path.join(self.work_dir, "gcs")
        self.shim_dir = os.path.join(self.work_dir, "shim")
        self.task_timeout_s = task_timeout_s
        self.poll_seconds = poll_seconds
        self.cache_dir = os.path.abspath(cache_dir) if cache_dir else None
        self.retries = retries
        self.gcsfuse = gcsfuse
        self.allow_unguarded_replicas = allow_unguarded_replicas
        self.image_pythons = check_image_pythons(image_pythons or {})
        self._gcsfuse: tuple[str, str | None] | None = None
        self._offline: offline.Guard | None = None
        self.data_fingerprint = ""
        self.job_service = None
        self.notes: list[str] = []
        self._attempts: dict[str, int] = {}

    # --- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Verification:
        if self.run_tasks:
            self._start()
        return self

    def __exit__(self, *exc) -> None:
        if self.job_service is not None:
            self.job_service.stop()
            self.job_service = None

    def _start(self) -> None:
        from training_core.training.strategy import ALLOW_MISSING_ACCELERATOR_ENV
        from vertex_emulator.job_service import JobServiceStandIn

        os.makedirs(self.gcs_dir, exist_ok=True)
        shim.write_shim(self.shim_dir)
        if self.gcsfuse:
            self._gcsfuse = gcsfuse_emulation.prepare(self.shim_dir)
        self._offline = offline.prepare(self.shim_dir, os.path.join(self.work_dir, "home"))
        replica_guard = replica_network.choose(self.shim_dir, self.allow_unguarded_replicas)
        try:
            self._env(None)  # A work folder LD_PRELOAD cannot carry fails here, not in a task.
        except ValueError as e:
            raise VerifyError(str(e)) from e
        if self.data_path:
            uri = self.parameters[DATA_URI]
            try:
                local = self.local_path(uri)
            except placeholders.GcsPathError as e:
                raise VerifyError(f"{DATA_URI}: {e}") from e
            stage(self.data_path, uri, local)
            self.data_fingerprint = cache.fingerprint_path(self.data_path)
            self.notes.append(f"data: {self.data_path} staged as {uri}")
        self.job_service = JobServiceStandIn(
            os.path.join(self.work_dir, "custom-jobs"),
            replica_env=lambda write_log, image: self._env(write_log, image=image),
            project_number=self.ctx.project_number,
            allow_missing_accelerator_env=ALLOW_MISSING_ACCELERATOR_ENV,
            timeout_s=self.task_timeout_s,
            local_path=self.local_path,
            replica_guard=replica_guard,
        )
        address = self.job_service.start()
        self.notes += [
            f"Cloud Storage: gs:// objects are files under {self.gcs_dir} (the /gcs/ mount's "
            "stand-in)",
            gcsfuse_emulation.describe(self._gcsfuse[0])
            if self._gcsfuse
            else "gcsfuse rules off: the /gcs/ stand-in renames folders as a local disk does",
            f"Vertex AI JobService: a gRPC stand-in on {address} (a socket only this user can "
            "open)",
            offline.describe(self._offline),
            replica_network.describe(replica_guard),
            images_note(self.image_pythons),
        ]

    def local_path(self, uri_or_path: str) -> str:
        """The stand-in file behind a ``gs://`` URI or ``/gcs/`` path (other paths unchanged).

        Raises:
            placeholders.GcsPathError: the URI has no bucket or a ``..`` segment.
        """
        relative = placeholders.mount_relative(uri_or_path)
        return uri_or_path if relative is None else os.path.join(self.gcs_dir, relative)

    def _env(
        self, write_log: str | None, job_service: bool = False, image: str = ""
    ) -> dict[str, str]:
        from components._image import variant_of

        return shim.process_env(
            dict(os.environ),
            self.shim_dir,
            self.gcs_dir,
            python=self.image_pythons.get(variant_of(image) or "", sys.executable),
            write_log=write_log,
            job_service=self.job_service.address if job_service else None,
            poll_seconds=self.poll_seconds,
            gcsfuse=self._gcsfuse,
            offline_guard=self._offline,
        )

    # --- the DAG ---------------------------------------------------------------------------

    def run(self) -> verify_report.VerifyReport:
        """Runs (or, requests only, builds) every task of the root DAG.

        Raises:
            VerifyError: the root DAG holds something verify cannot run (a loop, a cycle).
        """
        self.walk()
        return self.report()

    def run_task(self, name: str) -> TaskRecord:
        """Runs one task again on the outputs its upstream tasks produced (a retry).

        The task is a root task or one inside a condition whose sub-DAG ran. The first
        attempt's files, ``gcp_resources`` included, are where it left them, as a Vertex AI
        retry of the task finds them. The cache is not consulted.

        Raises:
            KeyError: no such task, or ``run`` has not reached it.
        """
        if self._root is None:
            raise KeyError("call run() first")
        if name not in self._scopes:
            raise KeyError(f"{name}: no such task, or its DAG did not run")
        task, scope = self._scopes[name]
        record = self._run_one(task, scope, use_cache=False)
        scope.records[name] = record
        self.records = [record if r.name == name else r for r in self.records]
        return record

    def report(self) -> verify_report.VerifyReport:
        """What has run so far."""
        return verify_report.VerifyReport(
            template=self.template_path,
            work_dir=self.work_dir,
            parameters=dict(self.parameters),
            overrides=dict(self.overrides),
            tasks=list(self.records),
            notes=list(self.notes),
            ran=self.run_tasks,
        )

    def _run_one(self, task: template.Task, scope: Scope, use_cache: bool = True) -> TaskRecord:
        record = self._attempt(task, scope, use_cache)
        if not self.retries or task.kind not in ("container", *template.JOB_KINDS):
            return record
        limit = int((task.spec.get("retryPolicy") or {}).get("maxRetryCount", 0))
        earlier: list[TaskRecord] = []
        while record.status == FAILED and record.process is not None and len(earlier) < limit:
            earlier.append(record)
            self.echo(f"{task.name}: failed, retry {len(earlier)} of {limit} (retryPolicy)")
            record = self._attempt(task, scope, use_cache=False)
        record.earlier = earlier
        return record

    # --- one executor ----------------------------------------------------------------------

    def _execute(
        self,
        task: template.Task,
        executor_input: Mapping[str, Any],
        command: list[str],
        record: TaskRecord,
        diagnosis: str,
        use_cache: bool,
    ) -> None:
        """Runs one resolved task here (from the cache, or as a process); reads its outputs."""
        key = ""
        if self.cache_dir and use_cache and _caches(task):
            key = cache.key(
                task.executor, executor_input, self.data_fingerprint, self.ctx.pipeline_name
            )
            if self._from_cache(key, record):
                return
        before = len(self.job_service.jobs)
        record.process = self._process(task.name, command, task.kind in template.JOB_KINDS)
        if task.kind in template.JOB_KINDS:
            record.jobs = self._jobs_of(executor_input, before)
        if record.process.returncode != 0:
            record.status, record.reason = FAILED, self._failure(record, diagnosis)
            return
        record.artifacts, record.parameters = read_outputs(task, executor_input, self.local_path)
        if key:
            root = self.ctx.task_root(task.name)
            cache.store(
                self.cache_dir,
                key,
                root,
                self.local_path(root),
                record.artifacts,
                record.parameters,
            )

    def _from_cache(self, key: str, record: TaskRecord) -> bool:
        entry = cache.load(self.cache_dir, key)
        if entry is None:
            return False
        cache.restore(entry, self.local_path(entry.task_root))
        record.artifacts, record.parameters = entry.artifacts, entry.parameters
        record.reason = f"cached: outputs of an identical execution ({entry.task_root})"
        return True

    def _process(self, name: str, command: list[str], job_service: bool) -> ProcessRecord:
        attempt = self._attempts[name] = self._attempts.get(name, 0) + 1
        logs = os.path.join(self.work_dir, "tasks", name, f"attempt-{attempt}")
        os.makedirs(logs, exist_ok=True)
        record = ProcessRecord(
            name=name,
            command=command,
            env={},
            stdout_path=os.path.join(logs, "stdout.log"),
            stderr_path=os.path.join(logs, "stderr.log"),
            write_log=os.path.join(logs, "gcs-writes.txt"),
        )
        record.save_command(logs)
        start = time.monotonic()
        with open(record.stdout_path, "w") as out, open(record.stderr_path, "w") as err:
            proc = subprocess.Popen(
                command,
                env=self._env(record.write_log, job_service),
                cwd=logs,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            try:
                record.returncode = proc.wait(timeout=self.task_timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except BaseException:  # Interrupted: the task runs in its own session, stop it too.
                os.killpg(proc.pid, signal.SIGKILL)
                raise
        record.seconds = time.monotonic() - start
        return record

    def _jobs_of(self, executor_input: Mapping[str, Any], before: int) -> list:
        """Jobs the launcher created, and the one its ``gcp_resources`` names (if it polled)."""
        jobs = self.job_service.created_since(before)
        output = (executor_input["outputs"].get("parameters") or {}).get("gcp_resources")
        if output:
            named = custom_job.job_in_gcp_resources(self.local_path(output["outputFile"]))
            polled = self.job_service.jobs.get(named)
            if polled is not None and polled not in jobs:
                jobs.insert(0, polled)
        return jobs

    def _failure(self, record: TaskRecord, diagnosis: str) -> str:
        """One line: the exit status and the most telling error."""
        process = record.process
        if process.returncode is None:
            return f"timed out after {self.task_timeout_s:.0f}s"
        parts = [f"exit status {process.returncode}"]
        job_errors = [job.error.splitlines()[0] for job in record.jobs if job.error]
        last = [line.strip() for line in process.stderr_tail(40).splitlines() if line.strip()]
        if job_errors:
            parts += job_errors
        elif last:
            parts.append(last[-1])
        if record.kind in template.JOB_KINDS and not record.jobs and self.job_service.rejections:
            parts.append(f"the JobService stand-in refused it: {self.job_service.rejections[-1]}")
        if diagnosis:
            parts.append(f"diagnosis: {diagnosis}")
        return "; ".join(parts)


def _caches(task: template.Task) -> bool:
    return bool((task.spec.get("cachingOptions") or {}).get("enableCache"))


def check_image_pythons(image_pythons: Mapping[str, str]) -> dict[str, str]:
    """``image_pythons`` with absolute paths, each an image variant and a Python that runs.

    Raises:
        VerifyError: an unknown variant, or a path that is not an executable file.
    """
    from components._image import VARIANTS

    checked = {}
    for variant, python in image_pythons.items():
        if variant not in VARIANTS:
            raise VerifyError(
                f"--image-python {variant}=...: no image variant {variant!r} "
                f"({', '.join(VARIANTS)})"
            )
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise VerifyError(
                f"--image-python {variant}={python}: not an executable file (for the tpu image's "
                "set: make test-tpu-env builds .venv-tpu; docs/verify.md)"
            )
        checked[variant] = os.path.abspath(python)
    return checked


def images_note(image_pythons: Mapping[str, str]) -> str:
    """The report's line on which Python environment stood in for which image."""
    others = f"this Python environment ({sys.executable})"
    if not image_pythons:
        return f"container images: every step ran in {others}"
    named = "; ".join(f"the {v} image's steps in {p}" for v, p in sorted(image_pythons.items()))
    return f"container images: {named}; every other step in {others}"
