"""A custom job's worker pools run here: one local process per replica, as Vertex AI starts them.

Part of the JobService stand-in (``job_service``), which hands every custom job it accepts (and
every trial of a tuning job) to ``Replicas.run``: each worker pool's container ``command + args``
runs as one local process per replica, with the ``CLUSTER_SPEC`` Vertex AI gives each
(``workerpoolN`` names, loopback addresses on free ports) and the ``AIP_*`` variables it sets;
a job's replicas share a network namespace of their own where this machine allows one, so no
other user reaches their TensorFlow servers (``replica_network`` says which guard holds where).
The job is ``RUNNING`` until every replica has exited, then ``SUCCEEDED``, or ``FAILED`` with the
failing replica's last lines of output. The container image is not pulled: this Python
environment stands in for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable

from vertex_emulator import replica_network
from vertex_emulator.verify_report import JobRecord, ProcessRecord, tail

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


class Replicas:
    """Runs custom jobs' replicas here and ends their records; ``JobServiceStandIn`` has one.

    Args:
        work_dir: folder for the replicas' scratch folders and logs.
        replica_env: the environment of a replica process, given a name for its write log; the
            stand-in adds what Vertex AI sets (``CLUSTER_SPEC``, ``AIP_*``, the pool's ``env``).
        allow_missing_accelerator_env: the variable that lets training go on without the
            accelerator the pool asked for; set for replicas when this machine has none.
        timeout_s: the longest a job may run here before it is stopped and failed.
        local_path: the local folder behind a ``gs://`` URI (``AIP_*`` folders).
        guard: what keeps other users off the replicas' ports (``replica_network.choose``;
            None: chosen when the first job runs, its library, if one is needed, built in
            ``work_dir``).
    """

    def __init__(
        self,
        work_dir: str,
        replica_env: ReplicaEnv,
        allow_missing_accelerator_env: str,
        timeout_s: float,
        local_path: Callable[[str], str] | None,
        guard: replica_network.Guard | None,
    ) -> None:
        self.work_dir = work_dir
        self.replica_env = replica_env
        self.allow_env = allow_missing_accelerator_env
        self.timeout_s = timeout_s
        self.local_path = local_path
        self._guard = guard
        self._lock = threading.Lock()
        self._processes: dict[str, list[subprocess.Popen]] = {}

    def guard(self) -> replica_network.Guard:
        """The guard the replicas run under (chosen now if it was not given)."""
        with self._lock:
            if self._guard is None:
                self._guard = replica_network.choose(os.path.join(self.work_dir, "lib"))
            return self._guard

    def finish(self, record: JobRecord, state: str, error: str = "") -> None:
        """Ends a job's record in ``state``, unless it has ended already."""
        with self._lock:
            if record.state not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"):
                record.state, record.error = state, error

    def kill_all(self) -> None:
        """Kills every replica still running."""
        for name in list(self._processes):
            self.kill(name)

    def run(self, record: JobRecord) -> None:
        """Runs the job's replicas until all have exited, and ends its record with the outcome."""
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            outcome = self._start(record, attempt)
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
            self.finish(record, state, error)
            return

    def _start(self, record: JobRecord, attempt: int) -> tuple[str, str, bool] | None:
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
                self.finish(
                    record,
                    "JOB_STATE_FAILED",
                    f"workerpool{i}: verify runs container_spec.command (+args); this pool has "
                    "none, so its image's entrypoint would run, which verify cannot know",
                )
                return None
        refusal = self.guard().refusal(sum(pool.replica_count for pool in pools))
        if refusal:
            self.finish(record, "JOB_STATE_FAILED", refusal)
            return None
        processes: list[tuple[ProcessRecord, subprocess.Popen]] = []
        try:
            with replica_network.JobNetwork(self.guard()) as network:
                self._start_pools(record, pools, cluster, job_dir, network, processes)
        except BaseException:  # No replica of a job that could not start all of them runs on.
            self._processes[record.name] = [p for _, p in processes]
            self.kill(record.name)
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
                self.kill(record.name)
            if now - start > self.timeout_s:
                self.kill(record.name)
                self.finish(record, "JOB_STATE_FAILED", f"timed out after {self.timeout_s:.0f}s")
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

    def kill(self, name: str) -> None:
        """Kills every replica of the job ``name`` still running (its process group)."""
        for proc in self._processes.get(name, []):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
