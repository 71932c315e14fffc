"""Another user of this machine cannot run TensorFlow ops in verify's replicas (issue 53, item 2).

A multi-worker replica runs ``tf.distribute.Server``: unauthenticated gRPC that runs any graph a
client sends, as the user verify runs as. The attack is reproduced harmlessly: a job of two
replicas, started by the JobService stand-in's own launch code, runs a worker server as the real
training does (``TF_CONFIG`` translated from ``CLUSTER_SPEC``) and a chief that writes a file
through it (the control: a replica of the same job still may), then a process running as
``nobody`` asks that worker to write a marker file over ``grpc://127.0.0.1:PORT``. It must not be
written, under the guard this machine gives (a private network namespace here) and under the
fallback (the peer-uid check).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import take_the_next_free_port

import vertex_emulator
from pipelines import pipeline, profiles
from vertex_emulator import job_service, offline, preload, replica_network, shim
from vertex_emulator.verify_report import JobRecord

NOBODY = 65534

# A replica as the real training starts one: TF_CONFIG from CLUSTER_SPEC, the worker's server on
# its CLUSTER_SPEC port; the chief is the job's other replica, a client of that server.
REPLICA = r"""
import json, os, time
import tensorflow as tf
from training_core.training.strategy import tf_config_from_cluster_spec
config = tf_config_from_cluster_spec(json.loads(os.environ["CLUSTER_SPEC"]))
scratch, task = os.environ["SCRATCH"], config["task"]
if task["type"] == "worker":
    server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name="worker",
                                  task_index=task["index"], start=True)
    open(os.path.join(scratch, "serving"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(scratch, "release")) and time.monotonic() < deadline:
        time.sleep(0.1)
else:
    tf.config.experimental_connect_to_host("grpc://" + config["cluster"]["worker"][0],
                                           job_name="worker")
    with tf.device("/job:worker/task:0/device:CPU:0"):
        tf.io.write_file(os.path.join(scratch, "from-the-chief"), "a replica of the job")
"""

# The intruder: imports TensorFlow (this interpreter lives in root's home), becomes `nobody`,
# then asks the worker to write the marker. Prints WROTE, REFUSED or NO ANSWER (TensorFlow
# retries a refused connection for ever), unless TensorFlow's client aborts on a reset one.
INTRUDER = r"""
import os, sys, threading, time
import tensorflow as tf
port, marker, user = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.setgroups([]); os.setgid(user); os.setuid(user)
assert os.getuid() == user and os.geteuid() == user
def give_up():
    time.sleep(10)
    print("NO ANSWER", flush=True)
    os._exit(0)
threading.Thread(target=give_up, daemon=True).start()
print("CONNECTING", flush=True)
try:
    tf.config.experimental_connect_to_host(f"grpc://127.0.0.1:{port}", job_name="worker")
    with tf.device("/job:worker/task:0/device:CPU:0"):
        tf.io.write_file(marker, "written for another user")
    print("WROTE", flush=True)
except Exception as e:
    print("REFUSED", type(e).__name__, flush=True)
"""


def _replica_env(tmp_path):
    """A replica's environment as a Verification gives it (offline guard included)."""
    gcs = tmp_path / "gcs"
    (gcs / "b").mkdir(parents=True, exist_ok=True)
    shim_dir = shim.write_shim(str(tmp_path / "shim"))
    guard = offline.prepare(str(tmp_path / "shim"), str(tmp_path / "home"))
    return lambda log, image="": shim.process_env(
        dict(os.environ), shim_dir, str(gcs), write_log=log, offline_guard=guard
    )


def _record(command: list[str], replicas: tuple[int, ...], env=()) -> JobRecord:
    from google.cloud.aiplatform_v1 import types

    pools = [
        {
            "machine_spec": {"machine_type": "n1-standard-4"},
            "replica_count": n,
            "container_spec": {"image_uri": "img", "command": command, "env": list(env)},
        }
        for n in replicas
    ]
    request = types.CreateCustomJobRequest(
        parent="projects/p/locations/us-central1",
        custom_job={"display_name": "probe", "job_spec": {"worker_pool_specs": pools}},
    )
    return JobRecord(
        name="projects/1/locations/us-central1/customJobs/1",
        endpoint="",
        request=request,
        state="JOB_STATE_RUNNING",
    )


def _wait_for(path, thread: threading.Thread, record: JobRecord, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if not thread.is_alive() or time.monotonic() > deadline:
            logs = "\n".join(open(r.stdout_path).read()[-2000:] for r in record.replicas)
            raise AssertionError(f"{path.name} never appeared ({record.state}): {logs}")
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
@pytest.mark.parametrize("guard", ["chosen here", "peer-uid"])
def test_another_user_cannot_run_graph_ops_on_a_replica(tmp_path, guard):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    if guard == "chosen here":  # What verify picks on this machine (a namespace, where it can).
        options = {}
    else:
        library = preload.build(replica_network.PEER_UID_SOURCE, "peer", str(tmp_path / "lib"))
        if library is None:
            pytest.skip("no C compiler here: the peer-uid library cannot be built")
        options = {"replica_guard": replica_network.Guard(replica_network.PEER_UID, library)}
    standin = job_service.JobServiceStandIn(
        str(tmp_path / "jobs"), _replica_env(tmp_path), "1", "A", **options
    )
    if standin.replica_guard().refusal(2):
        pytest.skip("no guard can be set up here, so such a job is refused (tested below)")
    record = _record(
        ["python3", "-c", REPLICA], (1, 1), [{"name": "SCRATCH", "value": str(scratch)}]
    )
    # How a created job runs its replicas (no gRPC to the stand-in needed here).
    job = threading.Thread(target=standin.replicas.run, args=(record,), daemon=True)
    job.start()
    try:
        _wait_for(scratch / "serving", job, record)
        _wait_for(scratch / "from-the-chief", job, record)  # The job's own replicas connect.
        worker = next(r for r in record.replicas if r.name == "workerpool1-0")
        port = json.loads(worker.env["CLUSTER_SPEC"])["cluster"]["workerpool1"][0].split(":")[1]
        marker = scratch / "intruder-was-here"
        intruder = subprocess.run(
            [sys.executable, "-c", INTRUDER, port, str(marker), str(NOBODY)],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        (scratch / "release").touch()
        job.join(timeout=60)
        standin.stop()
    said = intruder.stdout.splitlines()
    assert said[:1] == ["CONNECTING"], intruder.stdout + intruder.stderr[-3000:]
    assert not marker.exists(), f"another user wrote through the replica: {said}"
    assert "WROTE" not in said  # REFUSED, NO ANSWER, or TensorFlow's client aborted on a reset.
    assert record.state == "JOB_STATE_SUCCEEDED", record.error


# What a replica sees: its network namespace (one per run of a job, shared by the job's
# replicas; the kernel may reuse a freed one's number), loopback up, and your own ids.
NAMESPACE_PROBE = r"""
import json, os, socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))  # Loopback is up in the namespace.
t = json.loads(os.environ["CLUSTER_SPEC"])["task"]
json.dump({"net": os.readlink("/proc/self/ns/net"), "ids": [os.getuid(), os.getgid()]},
          open(os.path.join(os.environ["SCRATCH"], f"{t['type']}-{t['index']}.json"), "w"))
"""


def test_a_jobs_replicas_share_a_network_namespace_of_their_own(tmp_path):
    guard = replica_network.choose(str(tmp_path / "lib"))
    if guard.kind != replica_network.NAMESPACE:
        pytest.skip(f"no network namespace on this machine: {guard.no_namespace}")
    standin = job_service.JobServiceStandIn(
        str(tmp_path / "jobs"), _replica_env(tmp_path), "1", "A", replica_guard=guard
    )
    seen = []
    for job in ("first", "second"):
        (tmp_path / job).mkdir()
        record = _record(
            ["python3", "-c", NAMESPACE_PROBE],
            (1, 2),
            [{"name": "SCRATCH", "value": str(tmp_path / job)}],
        )
        standin.replicas.run(record)
        assert record.state == "JOB_STATE_SUCCEEDED", record.error
        seen.append([json.loads(p.read_text()) for p in sorted((tmp_path / job).iterdir())])
    for replicas in seen:
        assert len(replicas) == 3 and len({r["net"] for r in replicas}) == 1
        assert all(r["ids"] == [os.getuid(), os.getgid()] for r in replicas)
    assert os.readlink("/proc/self/ns/net") not in {seen[0][0]["net"], seen[1][0]["net"]}


def test_in_a_namespace_no_process_of_this_machine_can_take_a_replicas_port(tmp_path, monkeypatch):
    guard = replica_network.choose(str(tmp_path / "lib"))
    if guard.kind != replica_network.NAMESPACE:
        pytest.skip(f"no network namespace on this machine: {guard.no_namespace}")
    taken = take_the_next_free_port(monkeypatch)
    bind = (
        "import json, os, socket; s = json.loads(os.environ['CLUSTER_SPEC']);"
        "host, port = s['cluster']['workerpool0'][0].split(':');"
        "socket.socket().bind((host, int(port)))"
    )
    standin = job_service.JobServiceStandIn(
        str(tmp_path / "jobs"), _replica_env(tmp_path), "1", "A", replica_guard=guard
    )
    record = _record(["python3", "-c", bind], (1,))
    with taken:
        standin.replicas.run(record)
    assert record.state == "JOB_STATE_SUCCEEDED", record.error
    assert not record.notes  # Bound at the first attempt: nothing to start again.


def test_where_no_namespace_can_be_made_the_peer_check_and_then_the_refusal_hold(
    tmp_path, monkeypatch
):
    refused = tmp_path / "netns.py"  # What the helper says where user namespaces are off.
    refused.write_text(
        "print('error: [Errno 1] unshare: Operation not permitted'); raise SystemExit(1)\n"
    )
    monkeypatch.setattr(replica_network, "HELPER", str(refused))
    fallback = replica_network.choose(str(tmp_path / "lib"))
    if preload.compiler() is None:
        assert fallback.kind == replica_network.NONE
    else:
        assert fallback.kind == replica_network.PEER_UID and os.path.exists(fallback.library)
        assert "another user's socket" in replica_network.describe(fallback)
    assert fallback.no_namespace == "[Errno 1] unshare: Operation not permitted"
    bare = replica_network.choose(str(tmp_path / "lib"), cc=str(tmp_path / "no-cc"))
    assert (bare.kind, bare.allow_unguarded) == (replica_network.NONE, False)
    assert "Operation not permitted" in replica_network.describe(bare)


def test_without_any_guard_a_job_of_several_replicas_runs_only_when_allowed(tmp_path):
    unguarded = replica_network.Guard(replica_network.NONE, no_namespace="user namespaces off")
    outcomes = []
    for guard, replicas in (
        (unguarded, (1, 1)),
        (unguarded, (1,)),  # One replica: no peer to serve, nothing to refuse.
        (dataclasses.replace(unguarded, allow_unguarded=True), (1, 1)),
    ):
        standin = job_service.JobServiceStandIn(
            str(tmp_path / f"jobs-{len(outcomes)}"),
            _replica_env(tmp_path),
            "1",
            "A",
            replica_guard=guard,
        )
        record = _record(["python3", "-c", "pass"], replicas)
        standin.replicas.run(record)
        outcomes.append((record.state, record.error, len(record.replicas)))
    refused, single, allowed = outcomes
    assert refused[0] == "JOB_STATE_FAILED" and refused[2] == 0  # Nothing was started.
    assert "2 replicas" in refused[1] and "user namespaces off" in refused[1]
    assert "--allow-unguarded-replicas" in refused[1]
    assert single[0] == allowed[0] == "JOB_STATE_SUCCEEDED"
    assert "UNGUARDED" in replica_network.describe(unguarded)
    assert "run anyway" in replica_network.describe(guard)


def test_the_report_says_which_guard_keeps_other_users_off_the_replicas(tmp_path):
    template = pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(tmp_path / "cpu.yaml"))
    with vertex_emulator.Verification(template, work_dir=str(tmp_path / "run")) as verification:
        notes = verification.report().notes
        guard = verification.job_service.replica_guard()
    (line,) = [n for n in notes if n.startswith("replicas")]
    if guard.kind == "namespace":
        assert "private network namespace" in line
    else:
        assert guard.no_namespace in line
