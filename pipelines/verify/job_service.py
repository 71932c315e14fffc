"""The emulator's gRPC side: Vertex AI's JobService on a private Unix socket, running jobs here.

Part of the one Vertex AI emulator (``pipelines.verify.emulator`` says what it emulates and what
not, and where each of the service's rules lives). It serves ``CreateCustomJob``,
``GetCustomJob`` and ``CancelCustomJob`` of ``google.cloud.aiplatform.v1.JobService``, and the
same three for ``HyperparameterTuningJob`` (a tuning job runs its trials one after another, each
as a custom job of its trial spec with the trial's values appended as ``--NAME=VALUE``, sampled
from the study spec with a fixed seed; each trial's metric is read from the file
``cloudml-hypertune`` writes, its best measurement kept), with the aiplatform proto-plus types'
own (de)serializers, so the launcher's real ``JobServiceClient`` talks to it unchanged apart from
its channel. The stand-in listens on a Unix socket in a new folder only this user can open (mode
0700), never on a TCP port: it runs whatever command a job names, so no other user of this
machine (and nothing off it) may reach it. A request is checked as the service checks it
(``custom_job.service_problems``, and ``tuning_problems`` for a tuning job) and refused with
``INVALID_ARGUMENT`` if it fails; an accepted job runs each worker pool's container ``command +
args`` as one local process per replica, with the ``CLUSTER_SPEC`` Vertex AI gives each
(``workerpoolN`` names, loopback addresses on free ports) and the ``AIP_*`` variables it sets;
a job's replicas share a network namespace of their own where this machine allows one, so no
other user reaches their TensorFlow servers (``replica_network`` says which guard holds where).
The job is ``RUNNING`` until every replica has exited, then ``SUCCEEDED``, or ``FAILED`` with the
failing replica's last lines of output. The container image is not pulled: this Python
environment stands in for it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable

from pipelines.run_plan import custom_job
from pipelines.verify import replica_network
from pipelines.verify.report import JobRecord, ProcessRecord, tail

SERVICE = "google.cloud.aiplatform.v1.JobService"
_ENDPOINT = re.compile(r"(?P<region>[a-z0-9-]+?)-aiplatform\.googleapis\.com(?::\d+)?")
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# How long the other replicas may go on after one failed (Vertex AI then tears the job down).
_GRACE_SECONDS = 10.0
# In a replica's log when its gRPC server could not bind the port CLUSTER_SPEC gave it: the ports
# are chosen before any replica starts (every replica must know them all), so where the replicas
# share this machine's loopback (no namespace) another process can take one in between. Vertex AI
# gives each replica its own host; here the job is started again on fresh ports, at most this
# many times in all.
ADDRESS_IN_USE = "Address already in use"
_PORT_ATTEMPTS = 3

ReplicaEnv = Callable[[str, str], dict[str, str]]  # (write log, the container's image) -> env


def tuning_problems(job) -> list[str]:
    """What Vertex AI's CreateHyperparameterTuningJob would reject beyond the trial spec."""
    problems = []
    if job.max_trial_count < 1:
        problems.append("max_trial_count must be at least 1")
    if job.parallel_trial_count < 1:
        problems.append("parallel_trial_count must be at least 1")
    if not job.study_spec.metrics:
        problems.append("study_spec.metrics is required")
    if not job.study_spec.parameters:
        problems.append("study_spec.parameters is required")
    for p in job.study_spec.parameters:
        kinds = [
            k
            for k in ("double_value_spec", "integer_value_spec", "categorical_value_spec",
                      "discrete_value_spec")
            if p._pb.HasField(k)
        ]  # fmt: skip
        if len(kinds) != 1:
            problems.append(f"parameter {p.parameter_id!r} needs exactly one value spec")
    return problems


def sample_trial(study, rng) -> dict:
    """A trial's values from the study spec's parameters (uniform, log-uniform on LOG scale)."""
    import math

    from google.cloud.aiplatform_v1 import types

    log = types.StudySpec.ParameterSpec.ScaleType.UNIT_LOG_SCALE
    values = {}
    for p in study.parameters:
        if p._pb.HasField("double_value_spec"):
            lo, hi = p.double_value_spec.min_value, p.double_value_spec.max_value
            if p.scale_type == log:
                values[p.parameter_id] = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            else:
                values[p.parameter_id] = rng.uniform(lo, hi)
        elif p._pb.HasField("integer_value_spec"):
            values[p.parameter_id] = rng.randint(
                p.integer_value_spec.min_value, p.integer_value_spec.max_value
            )
        elif p._pb.HasField("discrete_value_spec"):
            value = rng.choice(list(p.discrete_value_spec.values))
            values[p.parameter_id] = int(value) if float(value).is_integer() else value
        else:
            values[p.parameter_id] = rng.choice(list(p.categorical_value_spec.values))
    return values


def read_measurements(path: str, metric_ids: list[str]) -> list:
    """The measurements a trial reported (cloudml-hypertune's file: one JSON object a line)."""
    from google.cloud.aiplatform_v1 import types

    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            metrics = [
                types.Measurement.Metric(metric_id=m, value=float(row[m]))
                for m in metric_ids
                if m in row
            ]
            if metrics:
                out.append(
                    types.Measurement(step_count=int(row.get("global_step", 0)), metrics=metrics)
                )
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expand_env(value: str, env: dict[str, str]) -> str:
    """``$(VAR)`` expanded as Vertex AI documents for ``EnvVar.value`` (``$$`` escapes it)."""
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


def shared_writes(replicas: list[ProcessRecord]) -> list[tuple[str, list[str]]]:
    """``gs://`` objects more than one replica opened for writing, with their names."""
    writers: dict[str, list[str]] = {}
    for replica in replicas:
        for uri in replica.writes():
            writers.setdefault(uri, []).append(replica.name)
    return sorted((uri, names) for uri, names in writers.items() if len(names) > 1)


def accelerator_here(accelerator_type: str) -> bool:
    """Whether this machine has that kind of accelerator at all (GPU or TPU device nodes)."""
    if accelerator_type.startswith("TPU"):
        return os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")
    return os.path.exists("/dev/nvidia0")


class JobServiceStandIn:
    """The stand-in server; ``jobs`` and ``rejections`` record what it received.

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
        self.work_dir = work_dir
        self.replica_env = replica_env
        self.project_number = project_number
        self.allow_env = allow_missing_accelerator_env
        self.timeout_s = timeout_s
        self.local_path = local_path
        self._replica_guard = replica_guard
        self.jobs: dict[str, JobRecord] = {}
        self.rejections: list[str] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1000)
        self._fail_next: list[str] = []
        self._threads: list[threading.Thread] = []
        self._processes: dict[str, list[subprocess.Popen]] = {}
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
        for name in list(self._processes):
            self._kill(name)
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
        with self._lock:
            if self._replica_guard is None:
                self._replica_guard = replica_network.choose(os.path.join(self.work_dir, "lib"))
            return self._replica_guard

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
            self._finish(record, "JOB_STATE_FAILED", self._fail_next.pop(0))
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
        self._finish(record, "JOB_STATE_CANCELLED", "cancelled")  # Stops a tuning job's loop.
        self._kill(request.name)
        for trial_job, _ in record.trials:
            self._kill(trial_job.name)
            self._finish(trial_job, "JOB_STATE_CANCELLED", "cancelled")
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
        problems += tuning_problems(job)
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
            self._run_trials(record)
        except Exception as e:  # A failure of the stand-in itself fails the job, visibly.
            self._finish(record, "JOB_STATE_FAILED", f"verify could not run the job: {e!r}")

    def _run_trials(self, record: JobRecord) -> None:
        import random

        from google.cloud.aiplatform_v1 import types

        job = record.request.hyperparameter_tuning_job
        study = job.study_spec
        metric_ids = [m.metric_id for m in study.metrics]
        base = job.trial_job_spec.base_output_directory.output_uri_prefix.rstrip("/")
        best_only = study.measurement_selection_type != (
            types.StudySpec.MeasurementSelectionType.LAST_MEASUREMENT
        )
        failed = 0
        for number in range(1, job.max_trial_count + 1):
            if record.state != "JOB_STATE_RUNNING":
                return  # Cancelled.
            trial_id = str(number)
            values = sample_trial(study, random.Random(number))
            spec = types.CustomJobSpec(job.trial_job_spec)
            if base:
                spec.base_output_directory.output_uri_prefix = f"{base}/{trial_id}"
            for pool in spec.worker_pool_specs:
                pool.container_spec.args.extend(f"--{k}={v}" for k, v in values.items())
            trial_name = f"{record.name}-trial-{trial_id}"
            metric_file = os.path.join(self.work_dir, f"{trial_name.rsplit('/', 1)[-1]}.metrics")
            trial_job = JobRecord(
                name=trial_name,
                endpoint=record.endpoint,
                request=types.CreateCustomJobRequest(
                    parent=record.request.parent,
                    custom_job=types.CustomJob(display_name=trial_name, job_spec=spec),
                ),
                state="JOB_STATE_RUNNING",
                extra_env={"CLOUD_ML_HP_METRIC_FILE": metric_file, "CLOUD_ML_TRIAL_ID": trial_id},
            )
            trial = types.Trial(
                id=trial_id,
                state=types.Trial.State.ACTIVE,
                parameters=[
                    types.Trial.Parameter(parameter_id=k, value=v) for k, v in values.items()
                ],
            )
            record.trials.append((trial_job, trial))
            self._run_replicas(trial_job)
            measurements = read_measurements(metric_file, metric_ids)
            if trial_job.state == "JOB_STATE_SUCCEEDED" and measurements:
                chosen = measurements[-1]
                if best_only:
                    chosen = max(measurements, key=lambda m: m.metrics[0].value)
                trial.measurements = measurements
                trial.final_measurement = chosen
                trial.state = types.Trial.State.SUCCEEDED
            else:
                failed += 1
                trial.state = types.Trial.State.INFEASIBLE  # Trial.State has no FAILED.
                trial.infeasible_reason = trial_job.error or "no metric was reported"
        if failed == job.max_trial_count:
            self._finish(record, "JOB_STATE_FAILED", "every trial failed; see their logs")
        else:
            self._finish(record, "JOB_STATE_SUCCEEDED")

    def _job(self, name: str, job):
        from google.cloud.aiplatform_v1 import types
        from google.rpc import status_pb2

        record = self.jobs[name]
        job.name = name
        job.state = types.JobState[record.state]
        if record.error:
            job.error = status_pb2.Status(code=3, message=record.error)
        return job

    # --- running a job ---------------------------------------------------------------------

    def _finish(self, record: JobRecord, state: str, error: str = "") -> None:
        with self._lock:
            if record.state not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"):
                record.state, record.error = state, error

    def _run(self, record: JobRecord) -> None:
        try:
            self._run_replicas(record)
        except Exception as e:  # A failure of the stand-in itself fails the job, visibly.
            self._finish(record, "JOB_STATE_FAILED", f"verify could not run the job: {e!r}")

    def _run_replicas(self, record: JobRecord) -> None:
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            outcome = self._start_replicas(record, attempt)
            if outcome is None:
                return
            state, error, lost_port = outcome
            if lost_port and attempt < _PORT_ATTEMPTS and record.state == "JOB_STATE_RUNNING":
                record.notes.append(
                    f"attempt {attempt}: a replica's port was taken by another process before it "
                    "bound it (only possible here, where replicas share one host); started again "
                    "on fresh ports"
                )
                record.replicas.clear()
                continue
            self._finish(record, state, error)
            return

    def _start_replicas(self, record: JobRecord, attempt: int) -> tuple[str, str, bool] | None:
        """Runs every replica once.

        Returns ``None`` if the job ended already (a bad pool), else ``(state, error, lost_port)``.
        """
        spec = record.request.custom_job.job_spec
        pools = list(spec.worker_pool_specs)
        ports = {
            (i, r): free_port() for i, pool in enumerate(pools) for r in range(pool.replica_count)
        }
        cluster = {
            f"workerpool{i}": [f"127.0.0.1:{ports[(i, r)]}" for r in range(pool.replica_count)]
            for i, pool in enumerate(pools)
            if pool.replica_count
        }
        job_dir = os.path.join(self.work_dir, record.name.rsplit("/", 1)[-1])
        if attempt > 1:
            job_dir = os.path.join(job_dir, f"attempt-{attempt}")
        for i, pool in enumerate(pools):
            if pool.replica_count and not pool.container_spec.command:
                self._finish(
                    record,
                    "JOB_STATE_FAILED",
                    f"workerpool{i}: verify runs container_spec.command (+args); this pool has "
                    "none, so its image's entrypoint would run, which verify cannot know",
                )
                return None
        refusal = self.replica_guard().refusal(sum(pool.replica_count for pool in pools))
        if refusal:
            self._finish(record, "JOB_STATE_FAILED", refusal)
            return None
        processes: list[tuple[ProcessRecord, subprocess.Popen]] = []
        try:
            with replica_network.JobNetwork(self.replica_guard()) as network:
                self._start_pools(record, pools, cluster, job_dir, network, processes)
        except BaseException:  # No replica of a job that could not start all of them runs on.
            self._processes[record.name] = [p for _, p in processes]
            self._kill(record.name)
            raise
        self._processes[record.name] = [p for _, p in processes]
        return self._wait(record, processes)

    def _start_pools(
        self,
        record: JobRecord,
        pools: list,
        cluster: dict,
        job_dir: str,
        network: replica_network.JobNetwork,
        processes: list[tuple[ProcessRecord, subprocess.Popen]],
    ) -> None:
        """Starts every pool's replicas on ``network``, appending each to ``processes``."""
        spec = record.request.custom_job.job_spec
        for i, pool in enumerate(pools):
            container = pool.container_spec
            accelerator = pool.machine_spec.accelerator_type.name
            missing = pool.machine_spec.accelerator_count and not accelerator_here(accelerator)
            if missing:
                record.notes.append(
                    f"workerpool{i} asks for {pool.machine_spec.accelerator_count} x {accelerator}"
                    f", which this machine lacks: its replicas ran with {self.allow_env}=1 "
                    "(training on the CPU)"
                )
            for r in range(pool.replica_count):
                name = f"workerpool{i}-{r}"
                vertex_env = self._vertex_env(spec, cluster, i, r)
                vertex_env.update(record.extra_env)
                if missing:
                    vertex_env[self.allow_env] = "1"
                scratch = os.path.join(job_dir, name)
                os.makedirs(scratch, exist_ok=True)
                env = self.replica_env(os.path.join(scratch, "gcs-writes.txt"), container.image_uri)
                for var in container.env:
                    vertex_env[var.name] = expand_env(var.value, {**env, **vertex_env})
                env.update(vertex_env)
                command = list(container.command) + list(container.args)
                rec = ProcessRecord(
                    name=name,
                    command=command,
                    env=vertex_env,
                    stdout_path=os.path.join(scratch, "output.log"),
                    write_log=os.path.join(scratch, "gcs-writes.txt"),
                )
                rec.save_command(scratch)
                with open(rec.stdout_path, "w") as log:
                    proc = network.popen(
                        command,
                        env,
                        cwd=scratch,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                record.replicas.append(rec)
                processes.append((rec, proc))

    def _vertex_env(self, spec, cluster: dict, pool: int, index: int) -> dict[str, str]:
        env = {
            "CLUSTER_SPEC": json.dumps(
                {
                    "cluster": cluster,
                    "task": {"type": f"workerpool{pool}", "index": index},
                    "environment": "cloud",
                }
            )
        }
        prefix = spec.base_output_directory.output_uri_prefix.rstrip("/")
        if prefix:
            # gs:// folders as Vertex AI gives them, except that TensorFlow's own gs:// file
            # system cannot reach the stand-in: here they are the stand-in's local folders.
            local = self.local_path or (lambda uri: uri)
            env["AIP_MODEL_DIR"] = local(f"{prefix}/model/")
            env["AIP_CHECKPOINT_DIR"] = local(f"{prefix}/checkpoints/")
            env["AIP_TENSORBOARD_LOG_DIR"] = local(f"{prefix}/logs/")
        return env

    def _wait(
        self, record: JobRecord, processes: list[tuple[ProcessRecord, subprocess.Popen]]
    ) -> tuple[str, str, bool]:
        """Waits for every replica; the job's outcome ``(state, error, lost_port)``."""
        start = time.monotonic()
        failed_at = None
        first_failure = None
        while True:
            running = False
            for rec, proc in processes:
                code = proc.poll()
                if code is None:
                    running = True
                    continue
                if rec.returncode is None:
                    rec.returncode, rec.seconds = code, time.monotonic() - start
                    if code != 0 and first_failure is None:
                        first_failure, failed_at = rec, time.monotonic()
            if not running:
                break
            now = time.monotonic()
            if failed_at is not None and now - failed_at > _GRACE_SECONDS:
                self._kill(record.name)
            if now - start > self.timeout_s:
                self._kill(record.name)
                self._finish(record, "JOB_STATE_FAILED", f"timed out after {self.timeout_s:.0f}s")
            time.sleep(0.2)
        self._processes.pop(record.name, None)
        shared = shared_writes([rec for rec, _ in processes])
        if shared:
            listed = "; ".join(f"{uri} ({', '.join(names)})" for uri, names in shared[:5])
            record.notes.append(
                f"{len(shared)} object(s) written by more than one replica (Cloud Storage FUSE "
                f"keeps one writer's copy): {listed}"
            )
        if first_failure is not None:
            output = tail(first_failure.stdout_path, 15)
            last = [line.strip() for line in output.splitlines() if line.strip()][-1:]
            lost_port = any(
                rec.returncode and ADDRESS_IN_USE in tail(rec.stdout_path, 200)
                for rec, _ in processes
            )
            return (
                "JOB_STATE_FAILED",
                f"The replica {first_failure.name} exited with a non-zero status of "
                f"{first_failure.returncode}: {''.join(last)}\n{output}",
                lost_port,
            )
        if any(rec.returncode != 0 for rec, _ in processes):
            return "JOB_STATE_FAILED", "a replica was stopped", False
        return "JOB_STATE_SUCCEEDED", "", False

    def _kill(self, name: str) -> None:
        for proc in self._processes.get(name, []):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
