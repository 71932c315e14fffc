"""The emulator's gRPC side: Vertex AI's JobService on a private Unix socket, running jobs here.

Part of the one Vertex AI emulator (``vertex_emulator.emulator`` says what it emulates and what
not, and where each of the service's rules lives). It serves ``CreateCustomJob``,
``GetCustomJob`` and ``CancelCustomJob`` of ``google.cloud.aiplatform.v1.JobService``, and the
same three for ``HyperparameterTuningJob`` (``tuning`` runs a tuning job's trials), with the
aiplatform proto-plus types' own (de)serializers, so the launcher's real ``JobServiceClient``
talks to it unchanged apart from its channel. The stand-in listens on a Unix socket in a new
folder only this user can open (mode 0700), never on a TCP port: it runs whatever command a job
names, so no other user of this machine (and nothing off it) may reach it. A request is checked
as the service checks it (``custom_job.service_problems``, and ``tuning_jobs.tuning_problems`` for a
tuning job) and refused with ``INVALID_ARGUMENT`` if it fails; an accepted job runs its worker
pools here, one local process per replica (``replicas``).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable

from pipelines.run_plan import custom_job
from vertex_emulator import replica_network, tuning_jobs
from vertex_emulator.replicas import ReplicaEnv, Replicas
from vertex_emulator.verify_report import JobRecord

SERVICE = "google.cloud.aiplatform.v1.JobService"
_ENDPOINT = re.compile(r"(?P<region>[a-z0-9-]+?)-aiplatform\.googleapis\.com(?::\d+)?")


class JobServiceStandIn:
    """The stand-in server; ``jobs`` and ``rejections`` record what it received.

    ``replicas`` runs the jobs it accepts (``Replicas``, which takes the arguments below but
    ``project_number``).

    Args:
        work_dir: folder for the replicas' scratch folders and logs.
        replica_env: the environment of a replica process, given a name for its write log; the
            stand-in adds what Vertex AI sets (``CLUSTER_SPEC``, ``AIP_*``, the pool's ``env``).
        project_number: the project number job names carry (Vertex names resources with it).
        allow_missing_accelerator_env: the variable that lets training go on without the
            accelerator the pool asked for; set for replicas when this machine has none.
        timeout_s: the longest a job may run here before it is stopped and failed.
        local_path: the local folder behind a ``gs://`` URI (``AIP_*`` folders).
        replica_guard: what keeps other users off the replicas' ports
            (``replica_network.choose``; None: chosen when the first job runs, its library, if
            one is needed, built in ``work_dir``).
    """

    def __init__(
        self,
        work_dir: str,
        replica_env: ReplicaEnv,
        project_number: str,
        allow_missing_accelerator_env: str,
        timeout_s: float = 1800.0,
        local_path: Callable[[str], str] | None = None,
        replica_guard: replica_network.Guard | None = None,
    ) -> None:
        self.project_number = project_number
        self.replicas = Replicas(
            work_dir,
            replica_env,
            allow_missing_accelerator_env,
            timeout_s,
            local_path,
            replica_guard,
        )
        self.jobs: dict[str, JobRecord] = {}
        self.rejections: list[str] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1000)
        self._fail_next: list[str] = []
        self._threads: list[threading.Thread] = []
        self._server = None
        self._socket_dir = ""
        self.address = ""

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> str:
        """Starts serving on a Unix socket in a new private folder; returns ``unix:PATH``.

        The folder is made in the system's temporary folder (``TMPDIR``), not in ``work_dir``:
        a socket path is limited to 107 bytes and ``work_dir`` may be long or shared.
        """
        import grpc
        from google.cloud.aiplatform_v1 import types
        from google.protobuf import empty_pb2

        handlers = {
            "CreateCustomJob": grpc.unary_unary_rpc_method_handler(
                self._create,
                request_deserializer=types.CreateCustomJobRequest.deserialize,
                response_serializer=types.CustomJob.serialize,
            ),
            "GetCustomJob": grpc.unary_unary_rpc_method_handler(
                self._get,
                request_deserializer=types.GetCustomJobRequest.deserialize,
                response_serializer=types.CustomJob.serialize,
            ),
            "CancelCustomJob": grpc.unary_unary_rpc_method_handler(
                self._cancel,
                request_deserializer=types.CancelCustomJobRequest.deserialize,
                response_serializer=empty_pb2.Empty.SerializeToString,
            ),
            "CreateHyperparameterTuningJob": grpc.unary_unary_rpc_method_handler(
                self._create_tuning,
                request_deserializer=types.CreateHyperparameterTuningJobRequest.deserialize,
                response_serializer=types.HyperparameterTuningJob.serialize,
            ),
            "GetHyperparameterTuningJob": grpc.unary_unary_rpc_method_handler(
                self._get_tuning,
                request_deserializer=types.GetHyperparameterTuningJobRequest.deserialize,
                response_serializer=types.HyperparameterTuningJob.serialize,
            ),
            "CancelHyperparameterTuningJob": grpc.unary_unary_rpc_method_handler(
                self._cancel,
                request_deserializer=types.CancelHyperparameterTuningJobRequest.deserialize,
                response_serializer=empty_pb2.Empty.SerializeToString,
            ),
        }
        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self._socket_dir = tempfile.mkdtemp(prefix="ncf-verify-jobs-")  # Mode 0700.
        address = f"unix:{os.path.join(self._socket_dir, 'job-service.sock')}"
        server.add_insecure_port(address)
        server.start()
        self._server = server
        self.address = address
        return self.address

    def stop(self) -> None:
        """Stops every replica still running and the server."""
        self.replicas.kill_all()
        for thread in self._threads:
            thread.join(timeout=30)
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None
        if self._socket_dir:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = ""

    def __enter__(self) -> JobServiceStandIn:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def fail_next_job(self, message: str) -> None:
        """Makes the next created job fail with ``message`` without running (a preemption)."""
        self._fail_next.append(message)

    def replica_guard(self) -> replica_network.Guard:
        """The guard the replicas run under (chosen now if it was not given)."""
        return self.replicas.guard()

    def created_since(self, count: int) -> list[JobRecord]:
        """Jobs created after the first ``count``."""
        with self._lock:
            return list(self.jobs.values())[count:]

    # --- RPCs ------------------------------------------------------------------------------

    def _create(self, request, context):
        import grpc
        from google.cloud.aiplatform_v1 import types

        metadata = dict(context.invocation_metadata())
        endpoint = metadata.get("x-ncf-verify-endpoint", "")
        match = _ENDPOINT.fullmatch(endpoint)
        problems = custom_job.service_problems(request, match["region"] if match else None)
        if problems:
            message = "; ".join(problems)
            self.rejections.append(message)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        location = request.parent.split("/")[3]
        name = f"projects/{self.project_number}/locations/{location}/customJobs/{next(self._ids)}"
        job = types.CustomJob(request.custom_job)
        record = JobRecord(name=name, endpoint=endpoint, request=request)
        with self._lock:
            self.jobs[name] = record
        if self._fail_next:
            self.replicas.finish(record, "JOB_STATE_FAILED", self._fail_next.pop(0))
        else:
            record.state = "JOB_STATE_RUNNING"
            thread = threading.Thread(target=self._run, args=(record,), daemon=True)
            self._threads.append(thread)
            thread.start()
        return self._job(name, job)

    def _get(self, request, context):
        import grpc
        from google.cloud.aiplatform_v1 import types

        record = self.jobs.get(request.name)
        if record is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"CustomJob {request.name} not found")
        return self._job(request.name, types.CustomJob(record.request.custom_job))

    def _cancel(self, request, context):
        import grpc
        from google.protobuf import empty_pb2

        record = self.jobs.get(request.name)
        if record is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.name} not found")
        self.replicas.finish(
            record, "JOB_STATE_CANCELLED", "cancelled"
        )  # Stops a tuning job's loop.
        self.replicas.kill(request.name)
        for trial_job, _ in record.trials:
            self.replicas.kill(trial_job.name)
            self.replicas.finish(trial_job, "JOB_STATE_CANCELLED", "cancelled")
        return empty_pb2.Empty()

    # --- tuning jobs --------------------------------------------------------------------------

    def _create_tuning(self, request, context):
        import grpc
        from google.cloud.aiplatform_v1 import types

        metadata = dict(context.invocation_metadata())
        endpoint = metadata.get("x-ncf-verify-endpoint", "")
        match = _ENDPOINT.fullmatch(endpoint)
        job = request.hyperparameter_tuning_job
        as_custom_job = types.CreateCustomJobRequest(
            parent=request.parent,
            custom_job=types.CustomJob(display_name=job.display_name, job_spec=job.trial_job_spec),
        )
        problems = custom_job.service_problems(as_custom_job, match["region"] if match else None)
        problems += tuning_jobs.tuning_problems(job)
        if problems:
            message = "; ".join(problems)
            self.rejections.append(message)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        location = request.parent.split("/")[3]
        name = (
            f"projects/{self.project_number}/locations/{location}/"
            f"hyperparameterTuningJobs/{next(self._ids)}"
        )
        record = JobRecord(name=name, endpoint=endpoint, request=request, state="JOB_STATE_RUNNING")
        record.notes.append(
            f"{job.max_trial_count} trials run one after another here ({job.parallel_trial_count} "
            "at a time on Vertex AI), values drawn at random with a fixed seed (Vertex AI's "
            "algorithm decides there)"
        )
        with self._lock:
            self.jobs[name] = record
        thread = threading.Thread(target=self._run_tuning, args=(record,), daemon=True)
        self._threads.append(thread)
        thread.start()
        return self._tuning_job(name)

    def _get_tuning(self, request, context):
        import grpc

        if request.name not in self.jobs:
            context.abort(
                grpc.StatusCode.NOT_FOUND, f"HyperparameterTuningJob {request.name} not found"
            )
        return self._tuning_job(request.name)

    def _tuning_job(self, name: str):
        from google.cloud.aiplatform_v1 import types
        from google.rpc import status_pb2

        record = self.jobs[name]
        job = types.HyperparameterTuningJob(record.request.hyperparameter_tuning_job)
        job.name = name
        job.state = types.JobState[record.state]
        if record.error:
            job.error = status_pb2.Status(code=3, message=record.error)
        job.trials = [trial for _, trial in record.trials]
        return job

    def _run_tuning(self, record: JobRecord) -> None:
        try:
            tuning_jobs.run_trials(record, self.replicas)
        except Exception as e:  # A failure of the stand-in itself fails the job, visibly.
            self.replicas.finish(record, "JOB_STATE_FAILED", f"verify could not run the job: {e!r}")

    def _job(self, name: str, job):
        from google.cloud.aiplatform_v1 import types
        from google.rpc import status_pb2

        record = self.jobs[name]
        job.name = name
        job.state = types.JobState[record.state]
        if record.error:
            job.error = status_pb2.Status(code=3, message=record.error)
        return job

    def _run(self, record: JobRecord) -> None:
        try:
            self.replicas.run(record)
        except Exception as e:  # A failure of the stand-in itself fails the job, visibly.
            self.replicas.finish(record, "JOB_STATE_FAILED", f"verify could not run the job: {e!r}")
