"""verify keeps what it runs to this host and to this user (issue 35, items 2, 3, 4 and 8).

The JobService stand-in runs whatever command a job names, so it listens on a Unix socket in a
folder only this user can open; the processes verify starts cannot connect off this host or
listen beyond loopback, whatever code opens the socket (``ctypes``, a child process, TensorFlow's
own gRPC server); they see an empty private ``HOME`` and no credential variables; and a
``gs://`` URI that would lead out of the ``/gcs/`` stand-in folder is refused. Each check runs a
process the way verify starts one (``shim.process_env``, or a ``Verification``'s own), and the
network checks run the same process without the guard as a control.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys

import pytest

import vertex_emulator
from pipelines import pipeline, profiles
from pipelines.run_plan import placeholders
from vertex_emulator import job_service, offline, preload, shim
from vertex_emulator.verify_report import JobRecord

NOBODY = 65534


def _guard(tmp_path) -> offline.Guard:
    guard = offline.prepare(str(tmp_path / "lib"), str(tmp_path / "home"))
    if guard.library is None:
        pytest.skip("no C compiler here: the LD_PRELOAD guard cannot be built")
    return guard


def _env(tmp_path, guard: offline.Guard | None, base: dict[str, str] | None = None):
    gcs = tmp_path / "gcs"
    (gcs / "b").mkdir(parents=True, exist_ok=True)
    shim_dir = shim.write_shim(str(tmp_path / "shim"))
    guarded = {"offline_guard": guard} if guard else {}
    return shim.process_env(base or dict(os.environ), shim_dir, str(gcs), **guarded)


def _run(code: str, env, *args: str, timeout: float = 120) -> dict:
    done = subprocess.run(
        ["python3", "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout.splitlines()[-1]), "stderr": done.stderr}


def _this_hosts_address() -> str:
    """A non-loopback address of this machine (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("this machine has no non-loopback IPv4 address to aim at")
        return s.getsockname()[0]


# --- item 2: the JobService stand-in -------------------------------------------------------


def test_job_service_listens_on_a_unix_socket_in_a_private_folder(tmp_path):
    with job_service.JobServiceStandIn(str(tmp_path / "jobs"), dict, "1", "A") as standin:
        assert standin.address.startswith("unix:"), standin.address
        path = standin.address[len("unix:") :]
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert not os.path.exists(os.path.dirname(path))  # Removed when the stand-in stops.


# Another user tries to have the stand-in run a command; prints what became of it. Started as
# root (this interpreter lives in root's home), it becomes that user before it connects.
OTHER_USER_CLIENT = """
import os, sys, grpc
from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
from google.cloud.aiplatform_v1.services.job_service.transports.grpc import JobServiceGrpcTransport
address, marker, user = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.setgroups([]); os.setgid(user); os.setuid(user)
client = JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address)))
pool = {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
        "container_spec": {"image_uri": "img", "command": ["touch", marker]}}
try:
    job = client.create_custom_job(parent="projects/p/locations/us-central1", timeout=20,
        custom_job={"display_name": "intruder", "job_spec": {"worker_pool_specs": [pool]}})
    print("CREATED", job.name)
except Exception as e:
    print("REFUSED", type(e).__name__, e)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_another_user_cannot_have_the_job_service_run_a_command(tmp_path):
    marker = tmp_path / "ran"
    env = _env(tmp_path, None)
    with job_service.JobServiceStandIn(
        str(tmp_path / "jobs"), lambda log, image: env, "1", "A"
    ) as s:
        done = subprocess.run(
            [sys.executable, "-c", OTHER_USER_CLIENT, s.address, str(marker), str(NOBODY)],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=120,
        )
        jobs = dict(s.jobs)
    assert done.stdout.startswith("REFUSED"), done.stdout + done.stderr
    assert "Permission denied" in done.stdout, done.stdout
    assert not jobs and not marker.exists()


# --- items 3 and 4: the offline guard ------------------------------------------------------

# Connects with libc through ctypes (past Python's socket module), then from a child process
# that is not Python at all (bash's /dev/tcp calls libc's connect).
CONNECT = """
import ctypes, errno, json, socket, struct, subprocess, sys
host, port = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
fd = socket.socket(socket.AF_INET, socket.SOCK_STREAM).detach()
address = struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton(host))
rc = libc.connect(fd, address, len(address))
child = subprocess.run(["bash", "-c", f"exec 3<>/dev/tcp/{host}/{port}"], capture_output=True)
print(json.dumps({"ctypes": "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()],
                  "child": child.returncode}))
"""


def test_connections_off_this_host_fail_from_ctypes_and_child_processes(tmp_path):
    guard = _guard(tmp_path)
    host = _this_hosts_address()
    with socket.socket() as listener:  # This process has no guard: it listens everywhere.
        listener.bind(("0.0.0.0", 0))
        listener.listen(8)
        port = str(listener.getsockname()[1])
        control = _run(CONNECT, _env(tmp_path, None), host, port)
        guarded = _run(CONNECT, _env(tmp_path, guard), host, port)
        loopback = _run(CONNECT, _env(tmp_path, guard), "127.0.0.1", port)
    assert (control["ctypes"], control["child"]) == ("ok", 0)  # Reachable without the guard.
    assert guarded["ctypes"] == "ENETUNREACH" and guarded["child"] != 0
    assert f"blocked a connection to {host} port {port}" in guarded["stderr"]
    assert (loopback["ctypes"], loopback["child"]) == ("ok", 0)  # This host stays reachable.


BIND = """
import json, socket
bound = socket.socket(); bound.bind(("0.0.0.0", 0)); bound.listen()
unbound = socket.socket(); unbound.listen()
six = socket.socket(socket.AF_INET6); six.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
six.bind(("::", 0)); six.listen()
print(json.dumps({"bind": bound.getsockname()[0], "listen": unbound.getsockname()[0],
                  "dual-stack": six.getsockname()[0]}))
"""


def test_wildcard_binds_become_loopback(tmp_path):
    guard = _guard(tmp_path)
    control = _run(BIND, _env(tmp_path, None))
    guarded = _run(BIND, _env(tmp_path, guard))
    assert (control["bind"], control["listen"], control["dual-stack"]) == (
        "0.0.0.0",
        "0.0.0.0",
        "::",
    )
    assert (guarded["bind"], guarded["listen"]) == ("127.0.0.1", "127.0.0.1")
    assert guarded["dual-stack"] == "::ffff:127.0.0.1"  # IPv4 clients of 127.0.0.1 still reach it.


# A TensorFlow server as a replica starts one (CLUSTER_SPEC says 127.0.0.1), then the address
# the kernel lists for its listening socket, and whether a client of 127.0.0.1 reaches it.
TF_SERVER = """
import json, os, socket
spec = json.loads(os.environ["CLUSTER_SPEC"])
address = spec["cluster"]["workerpool0"][0]
import tensorflow as tf
server = tf.distribute.Server(tf.train.ClusterSpec({"worker": [address]}), job_name="worker",
                              task_index=0, start=True)
port = int(address.rsplit(":", 1)[1])
listening = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for row in open(table).read().splitlines()[1:]:
        local, state = row.split()[1], row.split()[3]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
            listening.append(local.rsplit(":", 1)[0])
socket.create_connection(("127.0.0.1", port), timeout=10).close()
os.makedirs("/gcs/b", exist_ok=True)
open("/gcs/b/" + spec["task"]["type"] + ".json", "w").write(json.dumps(listening))
"""
ANY_V6, ANY_V4 = "0" * 32, "00000000"
LOOPBACK_V4, LOOPBACK_V4_MAPPED, LOOPBACK_V6 = (
    "0100007F",
    "0000000000000000FFFF00000100007F",
    ("00000000000000000000000001000000"),
)


def _tf_listeners(tmp_path, replica_env) -> list[str]:
    job = {
        "display_name": "tf-server",
        "job_spec": {
            "worker_pool_specs": [
                {
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "replica_count": 1,
                    "container_spec": {"image_uri": "img", "command": ["python3", "-c", TF_SERVER]},
                }
            ]
        },
    }
    from google.cloud.aiplatform_v1 import types

    standin = job_service.JobServiceStandIn(str(tmp_path / "jobs"), replica_env, "1", "A")
    request = types.CreateCustomJobRequest(
        parent="projects/p/locations/us-central1", custom_job=job
    )
    record = JobRecord(
        name="projects/1/locations/us-central1/customJobs/1",
        endpoint="",
        request=request,
        state="JOB_STATE_RUNNING",
    )
    standin.replicas.run(record)  # How a created job runs its replicas (no gRPC needed here).
    (replica,) = record.replicas
    assert record.state == "JOB_STATE_SUCCEEDED", open(replica.stdout_path).read()[-3000:]
    return json.loads((tmp_path / "gcs" / "b" / "workerpool0.json").read_text())


@pytest.mark.slow
def test_a_replicas_tensorflow_server_listens_on_loopback_only(tmp_path):
    """TensorFlow's C++ gRPC server asks for 0.0.0.0 (a dual-stack ::) whatever CLUSTER_SPEC
    says; under the guard the kernel lists it on loopback only (the control: everywhere)."""
    guard = _guard(tmp_path)
    control = _tf_listeners(
        tmp_path / "control", lambda log, image: _env(tmp_path / "control", None)
    )
    guarded = _tf_listeners(
        tmp_path / "guarded", lambda log, image: _env(tmp_path / "guarded", guard)
    )
    assert control and set(control) <= {ANY_V4, ANY_V6}
    assert guarded and set(guarded) <= {LOOPBACK_V4, LOOPBACK_V4_MAPPED, LOOPBACK_V6}


HOME_PROBE = """
import json, os
import google.auth
try:
    google.auth.default()
    found = "credentials"
except google.auth.exceptions.DefaultCredentialsError:
    found = "none"
gcloud = os.environ.get("CLOUDSDK_CONFIG", "")
print(json.dumps({"home": os.path.expanduser("~"), "found": found, "gcloud": gcloud,
                  "gcloud_files": os.listdir(gcloud) if gcloud else None,
                  "variables": sorted(k for k in os.environ if k.startswith(("GOOGLE_", "AWS_")))}))
"""


@pytest.mark.slow
def test_processes_find_none_of_the_users_credentials(tmp_path):
    user_home = tmp_path / "user-home"
    adc = user_home / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    adc.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "c",
                "client_secret": "s",
                "refresh_token": "r",
            }
        )
    )
    base = {
        **os.environ,
        "HOME": str(user_home),
        "GOOGLE_APPLICATION_CREDENTIALS": str(adc),
        "GOOGLE_CLOUD_PROJECT": "someone-elses",
        "AWS_SECRET_ACCESS_KEY": "x",
    }
    control = _run(HOME_PROBE, _env(tmp_path, None, base | {"GOOGLE_APPLICATION_CREDENTIALS": ""}))
    assert control["found"] == "credentials"  # The user's home has them.
    guard = offline.prepare(str(tmp_path / "lib"), str(tmp_path / "home"))
    seen = _run(HOME_PROBE, _env(tmp_path, guard, base))
    assert seen["home"] == guard.home != str(user_home)
    assert stat.S_IMODE(os.stat(guard.home).st_mode) == 0o700
    assert seen["found"] == "none" and seen["gcloud_files"] == [] and seen["variables"] == []
    assert seen["gcloud"].startswith(guard.home + "/")


def test_a_verification_starts_every_process_under_the_guard(tmp_path):
    template = pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(tmp_path / "cpu.yaml"))
    with vertex_emulator.Verification(template, work_dir=str(tmp_path / "run")) as verification:
        env = verification._env(str(tmp_path / "writes.txt"), job_service=True)
        address = verification.job_service.address
        notes = verification.report().notes
    library = env["LD_PRELOAD"].split()
    assert any(os.path.basename(p).startswith("libncf-offline-") for p in library), library
    assert env["HOME"] == str(tmp_path / "run" / "home")
    assert env[shim.JOB_SERVICE_ENV] == address and address.startswith("unix:")
    assert any(note.startswith("offline: an LD_PRELOAD library") for note in notes), notes


def test_a_c_compiler_error_is_reported_with_its_message(tmp_path):
    bad = tmp_path / "bad_preload.c"
    bad.write_text("this is not C\n")
    with pytest.raises(RuntimeError, match="could not build .*bad_preload.c"):
        preload.build(str(bad), "bad", str(tmp_path / "lib"))


def test_a_library_path_ld_preload_would_split_is_refused(tmp_path):
    env: dict[str, str] = {}
    with pytest.raises(ValueError, match=r"LD_PRELOAD cannot carry '/my work/lib.so'.*--work-dir"):
        preload.add(env, "/my work/lib.so")
    assert "LD_PRELOAD" not in env
    template = pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(tmp_path / "cpu.yaml"))
    verification = vertex_emulator.Verification(template, work_dir=str(tmp_path / "my work"))
    with (
        pytest.raises(vertex_emulator.VerifyError, match="a space or ':' in the path"),
        verification,
    ):
        pass


# --- item 8: gs:// URIs that would leave the stand-in ------------------------------------------


@pytest.mark.parametrize(
    ("uri", "problem"),
    [
        ("gs:///etc/passwd", "has no bucket name"),
        ("gs://b/../../outside", "has a '..' segment"),
        ("/gcs/b/x/../../../etc", "has a '..' segment"),
        ("gs://", "has no bucket name"),
    ],
)
def test_uris_that_would_leave_the_stand_in_are_refused(uri, problem):
    with pytest.raises(placeholders.GcsPathError) as e:
        placeholders.mount_relative(uri)
    assert repr(uri) in str(e.value) and problem in str(e.value)


def test_a_verification_refuses_such_uris_with_the_option_named(tmp_path):
    template = pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(tmp_path / "cpu.yaml"))
    with pytest.raises(
        vertex_emulator.VerifyError, match=r"pipeline_root: 'gs:///x' has no bucket name"
    ):
        vertex_emulator.Verification(template, pipeline_root="gs:///x")
    with vertex_emulator.Verification(template, work_dir=str(tmp_path / "run")) as verification:
        assert verification.local_path("gs://b/o") == str(tmp_path / "run" / "gcs" / "b" / "o")
        assert verification.local_path("/tmp/elsewhere") == "/tmp/elsewhere"  # Not a gs:// one.
        with pytest.raises(placeholders.GcsPathError, match="/etc/passwd"):
            verification.local_path("gs:///etc/passwd")
        with pytest.raises(placeholders.GcsPathError, match=r"gs://b/\.\./\.\./x"):
            verification.local_path("gs://b/../../x")


def test_a_process_resolves_gcs_paths_as_the_kernel_does(tmp_path):
    """``/gcs//b/x`` is ``/gcs/b/x`` on the mount, and ``/gcs/../p`` is ``/p``: never a file
    outside the stand-in that the same path would not name on Vertex AI."""
    outside = tmp_path / "outside.txt"
    code = (
        "import json, sys\n"
        "open('/gcs//b/x', 'w').write('in')\n"
        "open('/gcs/..' + sys.argv[1], 'w').write('out')\n"
        "print(json.dumps({}))\n"
    )
    _run(code, _env(tmp_path, None), str(outside))
    assert (tmp_path / "gcs" / "b" / "x").read_text() == "in"
    assert outside.read_text() == "out"
