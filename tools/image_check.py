"""``make image-check``: every Dockerfile stage's install, reproduced where there is no Docker.

1. Builder (on this machine, like the Dockerfile's builder, wheels-<variant> and project stages):
   ``tools/install_locked.sh`` exports each variant's locked set from uv.lock, fills one wheelhouse
   (hash-checked downloads; the sdist-only packages built with this machine's compiler) and builds
   the project wheel. The result is laid out like the builder's ``/stage`` and ``/dist``.
2. A clean root: Debian bookworm (python3 is 3.11, as in ``python:3.11-slim``) made with
   ``debootstrap --variant=minbase`` with only ``python3`` and ``python3-venv``; no compiler (the
   check asserts it). Made once and kept under ``out/image-check/rootfs``.
3. For each variant, a throw-away copy of that root (an overlay) with ``/stage`` and ``/dist``
   bind-mounted read-only where the Dockerfile mounts them; then the Dockerfile's own final
   stage is executed in it, read from the Dockerfile: its ``ENV`` lines (those of the stages it
   derives from too) and its ``RUN`` commands, verbatim, under ``chroot``. The RUN is
   ``install_locked.sh install`` (offline, ``--no-build``) followed by ``tools/verify_image.py``.
   Afterwards ``python3`` on the stage's PATH must be the venv's and print the variant's tag.
   The stage must end as an unprivileged user (its ``USER``, not root): the probes after the
   install run as that user (``chroot --userspec``), as a container of the image would.
4. buildah (installed with apt-get when missing): the Dockerfile itself, every stage, built
   without a daemon (``buildah bud --target VARIANT``). No registry is reachable, so
   ``PYTHON_IMAGE`` is a stand-in for python:3.11-slim made from the clean root (plus
   python3-dev for Python's headers, which python:3.11-slim has too). The image is then probed
   (python3, tag, no compiler, no wheelhouse left) and deleted; its configured user
   (``buildah inspect``, ``config.User``) must not be root, and the probes run as it.

5. Each finished image meets the environment its node gives it, emulated: the gpu image gets a
   stand-in NVIDIA driver (a ``libcuda.so.1`` compiled here, and an ``nvidia-smi``) mounted
   read-only at ``/usr/local/nvidia``, where Vertex AI's GPU nodes mount the host's driver, and
   must load it as mounted (``ctypes`` and TensorFlow's own device listing, which calls its
   ``cuInit``); the same load without the image's ``LD_LIBRARY_PATH`` must fail until
   ``ldconfig`` (run as root: NVIDIA's container toolkit runs it, not the container's user)
   reads the image's ld.so.conf.d entry.
   The dataflow image must have Beam's boot binary as its entrypoint, and that entrypoint run as
   Beam's worker pool (``--worker_pool``) must start the pool's service from the image's Python.
   No registry is reachable, so the Beam SDK image the Dockerfile copies boot from is a stand-in
   (``beam_sdk_standin``: a script doing what Beam's boot does last, nothing of its provisioning).

   The tpu image, on this host without a TPU, must import TensorFlow (its TPU build) at once
   and refuse a v5e-8 training step in one line naming the missing device, as its user
   (``tpu_probe``; tools/verify_image.py checks libtpu and the PJRT variables during the build).

``--engines chroot`` runs 1-3 and 5 only (fast; caches kept), ``--engines buildah`` 2, 4 and 5.

Downloads are kept between runs (the wheelhouse under ``out/image-check/stage/wheels`` and pip's
wheel cache under ``out/image-check/pip-cache``), so a second run downloads nothing.
Needs root (chroot, mount), Python 3.11 with pip, a C++ compiler (build-essential is installed
with apt-get when missing) and ``debootstrap`` (likewise). Timings and sizes are printed and
written to ``out/image-check/report.txt``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INSTALL = REPO / "tools" / "install_locked.sh"
SUITE = "bookworm"  # Debian 12, whose python3 is 3.11 like python:3.11-slim's.
ROOT_PACKAGES = ("python3", "python3-venv")
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where Vertex AI's GPU nodes mount the host's NVIDIA driver into a container.
DRIVER_MOUNT = "/usr/local/nvidia"
# The version the stand-in driver reports (cuDriverGetVersion), so a probe knows it found it.
STUB_DRIVER_VERSION = 12030
# The port Beam's boot gives the worker pool (sdks/python/container/boot.go: --service_port).
WORKER_POOL_PORT = 50000
# The serve image's probe: where the image's own CLI writes a tiny trained export for its server
# (AIP_STORAGE_URI), and how long the server may take to load it and answer its health route.
SERVE_MODEL = "/tmp/serve-model"
SERVE_STARTUP_S = 180


def log(message: str) -> None:
    """One progress line, flushed at once (CI logs)."""
    print(f"[image-check] {message}", flush=True)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Runs a command, echoing it first; raises on failure unless check=False."""
    kwargs.setdefault("check", True)
    log("$ " + shlex.join(cmd))
    return subprocess.run(cmd, **kwargs)


class Timings:
    """Wall-clock seconds and outcome per named step, in order."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float, str]] = []
        self.failed = False

    def measure(self, name: str, func, *args) -> bool:
        """Calls ``func(*args)`` and records how long it took and what it returned (or raised).

        Returns:
            Whether the step succeeded.
        """
        start = time.monotonic()
        try:
            outcome = str(func(*args) or "ok")
        except (Exception, SystemExit) as error:  # noqa: BLE001 - reported, then the run fails
            outcome = f"FAILED: {error}"
            self.failed = True
        self.steps.append((name, time.monotonic() - start, outcome))
        log(f"{name}: {time.monotonic() - start:.0f} s: {outcome}")
        return not outcome.startswith("FAILED")


# ---------------------------------------------------------------------------------------------
# The Dockerfile, read (only what the final stages need).


def dockerfile_stages(path: Path) -> dict[str, dict]:
    """Stages by name: ``{"parent": str, "instructions": [(KEYWORD, text), ...]}``."""
    stages: dict[str, dict] = {}
    current: dict | None = None
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if logical and line.startswith("#"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, rest = logical.partition(" ")
        keyword = keyword.upper()
        logical = ""
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else words[0]
            current = {"parent": words[0], "instructions": []}
            stages[name] = current
        elif current is not None:
            current["instructions"].append((keyword, rest.strip()))
    return stages


def stage_chain(stages: dict[str, dict], name: str) -> list[dict]:
    """The stage and the stages it derives from, base first (external images left out)."""
    chain = []
    while name in stages:
        chain.append(stages[name])
        name = stages[name]["parent"]
    return list(reversed(chain))


def apply_env(env: dict[str, str], text: str) -> None:
    """Applies one ``ENV K=V ...`` instruction to ``env`` ($VAR and ${VAR} expanded)."""
    for item in shlex.split(text):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"Dockerfile: unsupported ENV form {text!r} (use K=V)")
        value = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)
        env[key] = value


def define_arg(args: dict[str, str], text: str, build_args: dict[str, str] | None = None) -> None:
    """Applies one stage's ``ARG NAME[=DEFAULT]`` to ``args`` (a ``--build-arg`` wins)."""
    name, sep, default = text.strip().partition("=")
    given = (build_args or {}).get(name)
    args[name] = given if given is not None else (default if sep else args.get(name, ""))


def expand_args(text: str, args: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` in a ``USER`` as Docker and buildah expand them (ARGs in scope)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), ""), text.strip())


def stage_user(instructions: list, build_args: dict[str, str] | None = None) -> str | None:
    """A stage's final ``USER``, its ARGs expanded (the root variant: ``IMAGE_USER=root``)."""
    args: dict[str, str] = {}
    user = None
    for keyword, text in instructions:
        if keyword == "ARG":
            define_arg(args, text, build_args)
        elif keyword == "USER":
            user = expand_args(text, args)
    return user


MOUNT = re.compile(r"^--mount=(\S+)\s+")


def split_run(text: str) -> tuple[list[dict[str, str]], str]:
    """A RUN instruction's ``--mount`` options (as dicts) and its shell command."""
    mounts = []
    while match := MOUNT.match(text):
        mounts.append(dict(part.split("=", 1) for part in match.group(1).split(",")))
        text = text[match.end() :]
    return mounts, text


# ---------------------------------------------------------------------------------------------
# What the nodes give an image, emulated: the GPU driver mount, Beam's boot binary.

STUB_DRIVER_C = r"""
/* Stand-in for the NVIDIA driver's libcuda.so.1 (make image-check): no GPU, a known version. */
#include <stdio.h>
#include <stdlib.h>
static void note(const char *what) {
  const char *path = getenv("NCF_STUB_DRIVER_LOG");
  FILE *f = path ? fopen(path, "a") : NULL;
  if (f) { fprintf(f, "%s\n", what); fclose(f); }
}
int cuInit(unsigned int flags) { (void)flags; note("cuInit"); return 100; /* NO_DEVICE */ }
int cuDriverGetVersion(int *version) { note("cuDriverGetVersion"); *version = VERSION; return 0; }
int cuDeviceGetCount(int *count) { note("cuDeviceGetCount"); *count = 0; return 0; }
""".replace("VERSION", str(STUB_DRIVER_VERSION))


def stub_driver(work: Path) -> Path:
    """A folder laid out as the driver folder Vertex AI mounts: lib64/libcuda.so.1, bin/nvidia-smi.

    The library is compiled here (a C compiler is a requirement of the check anyway).
    """
    root = work / "stub-driver"
    shutil.rmtree(root, ignore_errors=True)
    (root / "lib64").mkdir(parents=True)
    (root / "bin").mkdir()
    source = work / "stub-libcuda.c"
    source.write_text(STUB_DRIVER_C)
    run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
         str(root / "lib64" / "libcuda.so.1"), str(source)])  # fmt: skip
    smi = root / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'stand-in nvidia-smi (make image-check)'\n")
    smi.chmod(0o755)
    return root


# Run in the gpu image with the stand-in driver mounted, as the image's user: how python finds
# libcuda.so.1 as the node mounts it, without the image's LD_LIBRARY_PATH before and after
# ldconfig, and whether TensorFlow's own device listing reaches the driver (the stub logs its
# cuInit). ``driver_probes`` splits it where the runtime (root) runs ldconfig.
DRIVER_PROBE = r"""
py='import ctypes, sys
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as error:
    print("missing"); sys.exit(0)
version = ctypes.c_int()
lib.cuDriverGetVersion(ctypes.byref(version))
print("found-%d" % version.value)'
echo "as-mounted $(python3 -c "$py")"
echo "without-ld-library-path $(env -u LD_LIBRARY_PATH python3 -c "$py")"
echo "after-ldconfig $(env -u LD_LIBRARY_PATH python3 -c "$py")"
echo "nvidia-smi $(command -v nvidia-smi)"
rm -f /tmp/ncf-stub-driver.log
NCF_STUB_DRIVER_LOG=/tmp/ncf-stub-driver.log TF_CPP_MIN_LOG_LEVEL=3 python3 -c \
  'import tensorflow as tf; tf.config.list_physical_devices("GPU")' >/dev/null 2>&1
echo "tensorflow $(grep -c cuInit /tmp/ncf-stub-driver.log 2>/dev/null || echo 0)"
"""


def driver_probes() -> list[tuple[str, bool]]:
    """DRIVER_PROBE as ``(script, as_root)`` steps.

    The user's part before ldconfig, ldconfig as root (the container runtime's hook runs it, not
    the image's user), the user's part after.
    """
    before, after = DRIVER_PROBE.split('echo "after-ldconfig', 1)
    # Each step is a shell of its own: the after part needs the probe's python snippet too.
    snippet = before.split('echo "as-mounted', 1)[0]
    return [(before, False), ("ldconfig", True), (snippet + 'echo "after-ldconfig' + after, False)]


def check_driver_probe(output: str) -> str:
    """Checks DRIVER_PROBE's output; returns what it proved."""
    seen = dict(line.split(" ", 1) for line in output.splitlines() if " " in line)
    found = f"found-{STUB_DRIVER_VERSION}"
    expected = {
        "as-mounted": found,  # LD_LIBRARY_PATH: what a Vertex AI GPU container relies on.
        # The negative control: the loader alone does not search the mount (the old image).
        "without-ld-library-path": "missing",
        "after-ldconfig": found,  # The ld.so.conf.d entry, for runtimes that run ldconfig.
        "nvidia-smi": f"{DRIVER_MOUNT}/bin/nvidia-smi",
    }
    wrong = {k: seen.get(k) for k, v in expected.items() if seen.get(k) != v}
    if wrong or not seen.get("tensorflow", "0").strip().isdigit() or seen["tensorflow"] == "0":
        raise SystemExit(
            f"gpu image with the driver mounted at {DRIVER_MOUNT}: expected {expected} and "
            f"TensorFlow calling the driver's cuInit; got {seen}"
        )
    return (
        f"driver at {DRIVER_MOUNT} found as mounted (LD_LIBRARY_PATH) and after ldconfig, not "
        "without them; TensorFlow called its cuInit"
    )


BOOT_STANDIN = r"""#!/bin/sh
# Stand-in for Beam's boot binary (make image-check: no registry, so no Beam SDK image to copy
# it from). It does what boot (sdks/python/container/boot.go) does last: with --worker_pool, run
# the worker pool from `python` on PATH; otherwise check the container contract's flags and run
# the SDK worker. Not emulated: provisioning, artifact retrieval, staged-package installs,
# logging to the runner, and the per-worker venv (which RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1
# turns off; tools/verify_image.py checks that it is set).
case " $* " in
  *" --worker_pool "* | *" --worker_pool=true "*)
    exec python -m apache_beam.runners.worker.worker_pool_main --service_port=PORT \
      --container_executable=/opt/apache/beam/boot ;;
esac
for flag in id logging_endpoint artifact_endpoint provision_endpoint control_endpoint; do
  case " $* " in *" --$flag="*) ;; *) echo "boot: no --$flag provided" >&2; exit 1 ;; esac
done
exec python -m apache_beam.runners.worker.sdk_worker_main
""".replace("PORT", str(WORKER_POOL_PORT))


def beam_sdk_standin(work: Path) -> Path:
    """A root holding what the Dockerfile copies from the Beam SDK image: /opt/apache/beam."""
    root = work / "beam-sdk"
    shutil.rmtree(root, ignore_errors=True)
    beam = root / "opt" / "apache" / "beam"
    beam.mkdir(parents=True)
    (beam / "boot").write_text(BOOT_STANDIN)
    (beam / "boot").chmod(0o755)
    (beam / "STAND-IN").write_text("make image-check's stand-in for the Beam SDK image's files\n")
    return root


def worker_pool_probe(entrypoint: list[str]) -> str:
    """Shell: the entrypoint run as Beam's worker pool; prints "listening" once its port answers."""
    return (
        f"{shlex.join(entrypoint)} --worker_pool >/tmp/worker-pool.log 2>&1 & pid=$!; "
        "python3 -c 'import socket, time\n"
        "for _ in range(240):\n"
        "    try:\n"
        f'        socket.create_connection(("127.0.0.1", {WORKER_POOL_PORT}), 1).close()\n'
        '        print("listening"); break\n'
        "    except OSError:\n"
        "        time.sleep(0.5)\n"
        "else:\n"
        '    print("not listening")\'; '
        "kill $pid 2>/dev/null; wait $pid 2>/dev/null; tail -n 5 /tmp/worker-pool.log; true"
    )


def check_entrypoint(entrypoint: list[str] | None, variant: str) -> None:
    """An entrypoint the image's service runs: dataflow's Beam's boot, serve's CPR's server.

    components/_image.py's ``BEAM_BOOT`` and ``SERVE_ENTRYPOINT``.
    """
    if variant == "serve":
        want = image_constant("SERVE_ENTRYPOINT")
        if entrypoint != want:
            raise SystemExit(f"stage serve: ENTRYPOINT is {entrypoint}, Vertex AI runs {want}")
    if variant != "dataflow":
        return
    boot = image_constant("BEAM_BOOT")
    if entrypoint != [boot]:
        raise SystemExit(f"stage dataflow: ENTRYPOINT is {entrypoint}, Dataflow runs {[boot]}")


def serve_export_script(folder: str) -> str:
    """Shell for the serve image's user: a tiny model trained and exported to FOLDER/export.

    With the image's own CLI, so the SavedModel is the one the pipeline's export step writes.
    """
    q = shlex.quote(folder)
    return (
        f"set -e; rm -rf {q}; mkdir -p {q}; cd {q}; "
        "ncf-pipelines synth --shape tiny --output raw >log 2>&1; "
        "ncf-pipelines prepare-data --input raw --output data --train-epochs 1 "
        "--eval-negatives 50 >>log 2>&1; "
        "ncf-pipelines train --data data --model-dir model --preset tiny --epochs 1 >>log 2>&1; "
        "ncf-pipelines export --model-dir model --data data --output export >>log 2>&1; "
        "echo exported"
    )


def free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1 (the probe's server takes it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_env(port: int) -> dict[str, str]:
    """What the probe gives the serve image beyond its own ENV.

    The model and the port, as Vertex AI sets them (AIP_STORAGE_URI, AIP_HTTP_PORT), and one
    server process (not one per core).
    """
    return {
        "AIP_STORAGE_URI": f"{SERVE_MODEL}/export",
        "AIP_HTTP_PORT": str(port),
        "VERTEX_CPR_WEB_CONCURRENCY": "1",
    }


def _http(url: str, body: dict | None = None) -> tuple[int, object]:
    """``(status, JSON answer)`` of a GET, or of a JSON POST of ``body``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def probe_serve(
    command: list[str], port: int, examples: dict, predict_route: str, health_route: str
) -> str:
    """Starts the serve image's server, asks it over 127.0.0.1, then stops it.

    ``command`` is its entrypoint, run as the image's user. From this host: a health check, one
    ``recommend`` and one ``score`` request (the export's own ``example_requests``, TF Serving's
    row format with ``signature_name``). Raises SystemExit with the server's log on any failure.
    """
    base = f"http://127.0.0.1:{port}"
    log_path = Path(f"/tmp/image-check-serve-{port}.log")
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )

    def fail(why: str) -> SystemExit:
        return SystemExit(f"serve image: {why}\n{log_path.read_text()[-3000:]}")

    try:
        deadline = time.monotonic() + SERVE_STARTUP_S
        while True:
            try:
                if _http(base + health_route)[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise fail(f"the server did not answer GET {health_route} on port {port}")
            time.sleep(0.5)
        shapes = {"recommend": {"item_ids", "scores"}, "score": {"known", "score"}}
        answers = {}
        for name, keys in shapes.items():
            status, body = _http(base + predict_route, examples[name])
            predictions = body.get("predictions") if isinstance(body, dict) else None
            if (
                status != 200
                or not isinstance(predictions, list)
                or len(predictions) != len(examples[name]["instances"])
                or any(not isinstance(p, dict) or set(p) != keys for p in predictions)
            ):
                raise fail(f"{name}: HTTP {status}, {str(body)[:1000]}")
            answers[name] = predictions
        known = [p["known"] for p in answers["score"]]
        if known[-1] is not False or not all(known[:-1]):  # The last example: an unknown user.
            raise fail(f"score: known is {known}, the examples' last user is unknown")
        if _http(base + health_route) != (200, {}):
            raise fail(f"GET {health_route} after the requests did not answer 200 {{}}")
        top = len(answers["recommend"][0]["item_ids"])
        return (
            f"the entrypoint served GET {health_route}, recommend (top {top}) and score on "
            f"POST {predict_route}, 127.0.0.1:{port}"
        )
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        log_path.unlink(missing_ok=True)


def check_user(user: str | None, variant: str) -> str:
    """The image's user (Dockerfile ``USER``, OCI ``config.User``) must not be root.

    Returns:
        the user as configured (``1000:1000``).
    """
    name = (user or "").split(":", 1)[0]
    if name in ("", "0", "root"):
        raise SystemExit(
            f"stage {variant}: runs as {user or 'root (no USER)'}: end the stage with "
            "USER 1000:1000, the unprivileged user the Dockerfile's runtime stage creates"
        )
    return user


def check_worker_pool(output: str) -> str:
    """Checks worker_pool_probe's output."""
    if output.split("\n", 1)[0] != "listening":
        raise SystemExit(f"dataflow image: Beam's worker pool did not start: {output[-2000:]}")
    return f"the entrypoint started Beam's worker pool (port {WORKER_POOL_PORT})"


# ---------------------------------------------------------------------------------------------
# Steps.


def builder(variants: list[str], work: Path) -> str:
    """The builder stages' work, on this machine: /stage (req, wheels, tools, bin/uv) and /dist."""
    stage, dist = work / "stage", work / "dist"
    env = dict(os.environ, PIP_CACHE_DIR=str(work / "pip-cache"), BUILD_PYTHON=sys.executable)
    for variant in variants:
        run([str(INSTALL), "requirements", variant, str(stage / "req")], env=env, cwd=REPO)
        run([str(INSTALL), "wheels", variant, str(stage / "req"), str(stage / "wheels")], env=env)
    run([str(INSTALL), "project", str(dist)], env=env, cwd=REPO)
    shutil.rmtree(stage / "tools", ignore_errors=True)
    (stage / "tools").mkdir(parents=True)
    for name in ("install_locked.sh", "wheelhouse.py", "verify_image.py"):
        shutil.copy2(REPO / "tools" / name, stage / "tools" / name)
    uv = subprocess.run(
        [sys.executable, "-c", "import uv; print(uv.find_uv_bin())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (stage / "bin").mkdir(exist_ok=True)
    shutil.copy2(uv, stage / "bin" / "uv")
    return f"{len(list((stage / 'wheels').glob('*.whl')))} wheels"


def ensure_rootfs(work: Path, mirror: str) -> str:
    """The clean root (made once; remade when its package list changes)."""
    rootfs, stamp = work / "rootfs", f"{SUITE} {' '.join(ROOT_PACKAGES)}\n"
    ready = rootfs / ".ncf-image-check"
    if ready.exists() and ready.read_text() == stamp:
        return "reused"
    if shutil.which("debootstrap") is None:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"])
    tmp = work / "rootfs.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(rootfs, ignore_errors=True)
    run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(ROOT_PACKAGES)}"]
        + [SUITE, str(tmp), mirror],
        stdout=subprocess.DEVNULL,
    )
    shutil.rmtree(tmp / "var" / "cache" / "apt" / "archives", ignore_errors=True)
    (tmp / ".ncf-image-check").write_text(stamp)
    tmp.rename(rootfs)
    return "made"


def mount(stack: ExitStack, args: list[str], target: Path) -> None:
    """Mounts and registers the unmount."""
    run(["mount", *args, str(target)])
    stack.callback(subprocess.run, ["umount", "-l", str(target)], check=False)


def bind_ro(stack: ExitStack, source: Path, target: Path) -> None:
    """A read-only bind mount."""
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    mount(stack, ["--bind", str(source)], target)
    run(["mount", "-o", "remount,bind,ro", str(target)])


def remove_unless_mounted(path: Path) -> None:
    """Deletes ``path`` unless something is still mounted below it."""
    prefix = str(path) + "/"
    with open("/proc/mounts") as mounts:
        busy = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    if busy:
        log(f"not removing {path}: still mounted: {busy}")
    else:
        shutil.rmtree(path, ignore_errors=True)


def variant_root(stack: ExitStack, work: Path, variant: str) -> Path:
    """A throw-away copy of the clean root (overlay; a plain copy where overlay is missing)."""
    base = work / "run" / variant
    if base.exists():
        subprocess.run(
            ["umount", "-R", "-l", str(base / "root")], check=False, stderr=subprocess.DEVNULL
        )
        remove_unless_mounted(base)
    for part in ("upper", "work", "root"):
        (base / part).mkdir(parents=True)
    stack.callback(remove_unless_mounted, base)
    options = f"lowerdir={work / 'rootfs'},upperdir={base / 'upper'},workdir={base / 'work'}"
    try:
        mount(stack, ["-t", "overlay", "overlay", "-o", options], base / "root")
    except subprocess.CalledProcessError:
        log("overlay mount failed; copying the clean root instead")
        (base / "root").rmdir()
        shutil.copytree(work / "rootfs", base / "root", symlinks=True)
    return base / "root"


def chroot(root: Path, env: dict[str, str], command: str, user: str | None = None, **kwargs):
    """``sh -c command`` inside ``root`` with exactly ``env``.

    As ``user`` (a Dockerfile ``USER`` value) when given, with that user's HOME, as Docker would.
    """
    options = []
    if user:
        options = [f"--userspec={user_spec(root, user)}"]
        env = {**env, "HOME": user_home(root, user)}
    pairs = [f"{k}={v}" for k, v in env.items()]
    return run(
        ["chroot", *options, str(root), "/usr/bin/env", "-i", *pairs, "/bin/sh", "-c", command],
        **kwargs,
    )


def _passwd(root: Path, user: str) -> list[str] | None:
    """The root's /etc/passwd entry of a USER value's user part (a name or a uid)."""
    name = user.split(":", 1)[0]
    for line in (root / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if len(fields) >= 7 and name in (fields[0], fields[2]):
            return fields
    return None


def user_spec(root: Path, user: str) -> str:
    """A USER value as chroot's ``--userspec`` (numeric ``UID:GID``; the group from passwd)."""
    entry = _passwd(root, user)
    uid, _, gid = user.partition(":")
    if entry is None and not uid.isdigit():
        raise SystemExit(f"USER {user}: no such user in the image's /etc/passwd")
    return f"{entry[2] if entry else uid}:{gid or (entry[3] if entry else uid)}"


def user_home(root: Path, user: str) -> str:
    """The home folder of a USER value's user, as Docker sets HOME ("/" when it has none)."""
    entry = _passwd(root, user)
    return entry[5] if entry else "/"


def copy_from(root: Path, stages: dict[str, dict], standins: dict[str, Path], text: str) -> None:
    """``COPY --from=STAGE SRC DEST`` into ``root``, from the stand-in for that stage's image."""
    words = shlex.split(text)
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    origin = [f.split("=", 1)[1] for f in flags if f.startswith("--from=")]
    parent = stages.get(origin[0], {}).get("parent") if origin else None
    if len(flags) != 1 or len(paths) != 2 or parent not in standins:
        raise SystemExit(f"image_check.py reproduces only COPY --from=<stand-in stage>: {text!r}")
    source = standins[parent] / paths[0].lstrip("/")
    shutil.copytree(source, root / paths[1].lstrip("/"), symlinks=True, dirs_exist_ok=True)


def check_variant(
    work: Path, variant: str, stages: dict[str, dict], version: str, standins: dict[str, Path]
) -> str:
    """The Dockerfile's final stage ``variant``, executed in a clean root, then its node checks.

    ``standins``: a root for each external image a ``COPY --from`` reads, by the stage's base
    as the Dockerfile writes it (``${BEAM_SDK_IMAGE}``).
    """
    if variant not in stages:
        raise SystemExit(f"Dockerfile has no stage named {variant!r}")
    host_dirs = {"/stage": work / "stage", "/dist": work / "dist"}
    env = {"PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
    entrypoint = None
    user = None  # Docker's default: root, until a USER instruction.
    with ExitStack() as stack:
        root = variant_root(stack, work, variant)
        mount(stack, ["-t", "proc", "proc"], root / "proc")
        # Read-only, as Docker mounts it into a container: TensorFlow's TPU build counts the CPUs
        # there (tcmalloc's NumCPUs) and aborts without it.
        mount(stack, ["-t", "sysfs", "-o", "ro", "sysfs"], root / "sys")
        mount(stack, ["-t", "tmpfs", "tmpfs"], root / "dev" / "shm")
        found = chroot(
            root,
            env,
            "for c in " + " ".join(COMPILERS) + "; do command -v $c; done",
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if found:
            raise SystemExit(f"the clean root has a compiler: {found}")
        status = 0
        for stage in stage_chain(stages, variant):
            args: dict[str, str] = {}  # A stage's ARGs (Docker: in scope until its end).
            for keyword, text in stage["instructions"]:
                if keyword == "ARG":
                    define_arg(args, text)
                elif keyword == "ENV":
                    apply_env(env, text)
                elif keyword == "RUN":
                    mounts, command = split_run(text)
                    with ExitStack() as run_mounts:
                        for spec in mounts:
                            source = host_dirs.get(spec.get("source", ""))
                            if spec.get("type") != "bind" or source is None:
                                raise SystemExit(f"image_check.py does not know mount {spec}")
                            bind_ro(run_mounts, source, root / spec["target"].lstrip("/"))
                        status = chroot(root, env, command, user, check=False).returncode
                    if status:
                        break
                elif keyword == "COPY":
                    copy_from(root, stages, standins, text)
                elif keyword == "ENTRYPOINT":
                    entrypoint = json.loads(text)
                elif keyword == "USER":
                    user = expand_args(text, args)
                elif keyword not in ("LABEL", "WORKDIR", "CMD"):
                    raise SystemExit(f"image_check.py does not reproduce {keyword} ({variant})")
            if status:
                break
        if env.get("NCF_PIPELINES_IMAGE_VARIANT") != variant:
            raise SystemExit(f"stage {variant} does not set NCF_PIPELINES_IMAGE_VARIANT={variant}")
        if status:
            raise SystemExit(f"stage {variant}: RUN failed with exit status {status}")
        check_user(user, variant)
        venv = env.get("VIRTUAL_ENV", "/opt/venv")
        probe = chroot(root, env, probe_script(variant), user, capture_output=True, text=True)
        tag = check_probe(probe.stdout, venv, version, variant)
        size = subprocess.run(
            ["du", "-sh", str(root / venv.lstrip("/"))], capture_output=True, text=True, check=True
        ).stdout.split()[0]
        node = ""
        check_entrypoint(entrypoint, variant)
        if variant == "gpu":
            bind_ro(stack, stub_driver(work), root / DRIVER_MOUNT.lstrip("/"))
            out = "".join(
                chroot(root, env, script, None if as_root else user, capture_output=True,
                       text=True).stdout
                for script, as_root in driver_probes()
            )  # fmt: skip
            node = "; " + check_driver_probe(out)
        elif variant == "dataflow":
            probe = worker_pool_probe(entrypoint)
            out = chroot(root, env, probe, user, capture_output=True, text=True)
            node = "; " + check_worker_pool(out.stdout)
        elif variant == "serve":
            node = "; " + serve_in_root(root, env, user, entrypoint)
        elif variant == "tpu":
            out = chroot(root, env, tpu_probe(), user, capture_output=True, text=True)
            node = "; " + check_tpu_probe(out.stdout + out.stderr)
        return f"ok, {tag}, user {user}, venv {size}{node}"


def tpu_probe() -> str:
    """Shell run in the finished tpu image: verify_image's no-TPU probe, as the image's user."""
    sys.path.insert(0, str(REPO / "tools"))
    from verify_image import NO_TPU_PROBE

    return f"TF_CPP_MIN_LOG_LEVEL=2 timeout 300 python3 -c {shlex.quote(NO_TPU_PROBE)}"


def check_tpu_probe(output: str) -> str:
    """Checks tpu_probe's output; returns what it proved."""
    lines = [line for line in output.splitlines() if line.startswith(("tensorflow ", "refused "))]
    if len(lines) != 2 or not lines[0].endswith("libtpu-off 1") or "no TPU device" not in lines[1]:
        raise SystemExit(f"tpu image without a TPU: no one-line refusal: {output[-2000:]}")
    return f"{lines[0].split(' libtpu')[0]} imports, libtpu kept off, a v5e-8 step refuses"


def serve_in_root(root: Path, env: dict[str, str], user: str | None, entrypoint: list[str]) -> str:
    """The serve stage's probe in the chroot engine (``probe_serve``).

    An export made by the image's CLI, then its entrypoint started as the image's user with the
    image's environment and ``serve_env``.
    """
    chroot(root, env, serve_export_script(SERVE_MODEL), user, capture_output=True, text=True)
    export = root / SERVE_MODEL.lstrip("/") / "export"
    examples = json.loads((export / "serving_metadata.json").read_text())["example_requests"]
    port = free_port()
    server_env = {**env, **serve_env(port)}
    options = []
    if user:
        options = [f"--userspec={user_spec(root, user)}"]
        server_env["HOME"] = user_home(root, user)
    pairs = [f"{k}={v}" for k, v in server_env.items()]
    command = ["chroot", *options, str(root), "/usr/bin/env", "-i", *pairs, *entrypoint]
    log("$ " + shlex.join(command))
    return probe_serve(command, port, examples, env["AIP_PREDICT_ROUTE"], env["AIP_HEALTH_ROUTE"])


def serve_in_buildah(ctr: str, entrypoint: list[str]) -> str:
    """The serve image's probe in the buildah engine, as ``serve_in_root``.

    In the built image's working container; ``buildah run`` shares this host's network under
    chroot isolation.
    """
    buildah_run(ctr, serve_export_script(SERVE_MODEL))
    metadata = buildah_run(ctr, f"cat {SERVE_MODEL}/export/serving_metadata.json").stdout
    routes = buildah_run(ctr, "echo $AIP_PREDICT_ROUTE $AIP_HEALTH_ROUTE").stdout.split()
    port = free_port()
    env = [a for k, v in serve_env(port).items() for a in ("--env", f"{k}={v}")]
    command = ["buildah", "run", "--isolation", "chroot", *env, ctr, "--", *entrypoint]
    log("$ " + shlex.join(command))
    return probe_serve(command, port, json.loads(metadata)["example_requests"], *routes)


def probe_script(variant: str) -> str:
    """Shell run in a finished image: which python3, its tag, any compiler or build leftovers."""
    return (
        f"command -v python3; python3 -m components._image --variant {variant}; "
        f"for c in {' '.join(COMPILERS)}; do command -v $c >/dev/null && echo compiler:$c; done; "
        "for d in /stage/wheels /dist/*.whl; do [ -e $d ] && echo leftover:$d; done; "
        'echo "uid:$(id -u)"; '
        # Where a Vertex AI tuning trial writes its metric (the Dockerfile's runtime stage).
        "[ -w /var/hypertune ] || echo unwritable:/var/hypertune; true"
    )


def check_probe(output: str, venv: str, version: str, variant: str) -> str:
    """Checks probe_script's output; returns the image's tag as the image itself prints it."""
    lines = output.split()
    problems = [
        line for line in lines if line.startswith(("compiler:", "leftover:", "unwritable:"))
    ]
    if problems:
        raise SystemExit(f"stage {variant}: {problems}")
    # The probes ran as the image's user: never root.
    if [line for line in lines if line.startswith("uid:")] in ([], ["uid:0"]):
        raise SystemExit(f"stage {variant}: the probes ran as root ({lines}): no USER?")
    if (
        lines[:1] != [f"{venv}/bin/python3"]
        or not lines[1:2]
        or not lines[1].endswith(f":{version}-{variant}")
    ):
        raise SystemExit(f"stage {variant}: python3 and tag on PATH are {lines}")
    return lines[1]


# ---------------------------------------------------------------------------------------------
# The Dockerfile itself, built with buildah (no daemon) on a stand-in for python:3.11-slim.

BASE_IMAGE = "localhost/ncf-pipelines-check-base:bookworm"
CHECK_IMAGE = "localhost/ncf-pipelines-check"
BEAM_SDK_STANDIN = "localhost/ncf-pipelines-check-beam-sdk:standin"


def ensure_buildah() -> str:
    """Installs buildah from Debian's archive when missing; returns its version."""
    if shutil.which("buildah") is None:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "buildah"])
    return subprocess.run(
        ["buildah", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()


def buildah_base(work: Path) -> str:
    """Builds a stand-in for python:3.11-slim (no registry is reachable here).

    The clean root plus python3-dev (python:3.11-slim ships Python's headers too) and this
    machine's CA bundle, so pip and uv in the builder trust what this machine trusts. No compiler.
    """
    ctr = subprocess.run(
        ["buildah", "from", "scratch"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        mnt = subprocess.run(
            ["buildah", "mount", ctr], capture_output=True, text=True, check=True
        ).stdout.strip()
        run(["cp", "-a", f"{work / 'rootfs'}/.", mnt])
        Path(mnt, ".ncf-image-check").unlink(missing_ok=True)
        bundle = Path("/etc/ssl/certs/ca-certificates.crt")
        if bundle.exists():
            Path(mnt, "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
            shutil.copy2(bundle, Path(mnt, "etc/ssl/certs/ca-certificates.crt"))
        run(["buildah", "umount", ctr], stdout=subprocess.DEVNULL)
        cert = "/etc/ssl/certs/ca-certificates.crt"
        run(
            [
                "buildah",
                "config",
                "--env",
                f"PATH={DEFAULT_PATH}",
                "--env",
                "LANG=C.UTF-8",
                "--env",
                f"SSL_CERT_FILE={cert}",
                "--env",
                f"PIP_CERT={cert}",
                ctr,
            ]
        )
        run(
            [
                "buildah",
                "run",
                "--isolation",
                "chroot",
                ctr,
                "--",
                "sh",
                "-c",
                "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                "--no-install-recommends python3-dev >/dev/null && rm -rf /var/lib/apt/lists/*",
            ]
        )
        run(["buildah", "commit", "--quiet", "--rm", ctr, BASE_IMAGE], stdout=subprocess.DEVNULL)
    except BaseException:
        subprocess.run(["buildah", "rm", ctr], check=False, capture_output=True)
        raise
    return BASE_IMAGE


def buildah_beam_sdk(work: Path) -> str:
    """Builds a stand-in for the Beam SDK image: only the /opt/apache/beam it is copied for."""
    ctr = subprocess.run(
        ["buildah", "from", "scratch"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        mnt = subprocess.run(
            ["buildah", "mount", ctr], capture_output=True, text=True, check=True
        ).stdout.strip()
        run(["cp", "-a", f"{beam_sdk_standin(work)}/.", mnt])
        run(["buildah", "umount", ctr], stdout=subprocess.DEVNULL)
        commit = ["buildah", "commit", "--quiet", "--rm", ctr, BEAM_SDK_STANDIN]
        run(commit, stdout=subprocess.DEVNULL)
    except BaseException:
        subprocess.run(["buildah", "rm", ctr], check=False, capture_output=True)
        raise
    return BEAM_SDK_STANDIN


def buildah_run(ctr: str, script: str, *options: str) -> subprocess.CompletedProcess:
    """``sh -c script`` in a working container, with the image's environment."""
    return subprocess.run(
        ["buildah", "run", "--isolation", "chroot", *options, ctr, "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=True,
    )


def buildah_variant(variant: str, uv_version: str | None, version: str, work: Path) -> str:
    """``buildah bud --target VARIANT`` of the Dockerfile, then the image probed."""
    tag = f"{CHECK_IMAGE}:{variant}"
    # --layers=false: buildah 1.28 (Debian 12) mishandles RUN --mount=from=<stage> when that
    # stage comes from its layer cache (buildah issues 4375 and 4522), so build every stage.
    cmd = [
        "buildah",
        "bud",
        "--isolation",
        "chroot",
        "--pull=never",
        "--layers=false",
        "--force-rm",
        "--build-arg",
        f"PYTHON_IMAGE={BASE_IMAGE}",
        "--build-arg",
        f"BEAM_SDK_IMAGE={BEAM_SDK_STANDIN}",
        "--target",
        variant,
        "--tag",
        tag,
        "--file",
        str(REPO / "Dockerfile"),
    ]
    if uv_version:
        cmd += ["--build-arg", f"UV_VERSION={uv_version}"]
    log("$ " + shlex.join([*cmd, str(REPO)]))
    with subprocess.Popen(
        [*cmd, str(REPO)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        for line in proc.stdout:
            if "is ignored: it is neither a file nor a directory" not in line:
                print(line, end="", flush=True)
    try:
        if proc.returncode:
            raise SystemExit(f"buildah bud --target {variant} failed ({proc.returncode})")
        ctr = subprocess.run(
            ["buildah", "from", "--pull=never", tag], capture_output=True, text=True, check=True
        ).stdout.strip()
        node = ""
        try:
            # The whole record: buildah 1.28's --format templates have no json function.
            inspected = subprocess.run(
                ["buildah", "inspect", "--type", "image", tag],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            config = json.loads(inspected)["OCIv1"]["config"]
            user = check_user(config.get("User"), variant)
            # buildah run runs as the image's user: the probes below run as a container would.
            probe = buildah_run(ctr, probe_script(variant))
            env = buildah_run(ctr, "echo $VIRTUAL_ENV $NCF_PIPELINES_IMAGE_VARIANT").stdout.split()
            entrypoint = config.get("Entrypoint")
            check_entrypoint(entrypoint, variant)
            if variant == "gpu":
                volume = f"{stub_driver(work)}:{DRIVER_MOUNT}:ro"
                out = "".join(
                    buildah_run(ctr, script, "--volume", volume, *(["--user", "0:0"] * as_root))
                    .stdout for script, as_root in driver_probes()
                )  # fmt: skip
                node = "; " + check_driver_probe(out)
            elif variant == "dataflow":
                out = buildah_run(ctr, worker_pool_probe(entrypoint)).stdout
                node = "; " + check_worker_pool(out)
            elif variant == "serve":
                node = "; " + serve_in_buildah(ctr, entrypoint)
            elif variant == "tpu":
                out = buildah_run(ctr, tpu_probe())
                node = "; " + check_tpu_probe(out.stdout + out.stderr)
        finally:
            subprocess.run(["buildah", "rm", ctr], check=False, capture_output=True)
        if env[1:] != [variant]:
            raise SystemExit(f"image {variant}: NCF_PIPELINES_IMAGE_VARIANT is {env[1:]}")
        image_tag = check_probe(probe.stdout, env[0], version, variant)
        size = subprocess.run(
            ["buildah", "images", "--format", "{{.Size}}", tag],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"ok, {image_tag}, user {user}, image {size} (on the stand-in base){node}"
    finally:
        subprocess.run(["buildah", "rmi", "--force", tag], check=False, capture_output=True)
        # Stage images a --layers=false build leaves behind, untagged.
        subprocess.run(["buildah", "rmi", "--prune"], check=False, capture_output=True)


def disk_usage(*paths: Path) -> str:
    """``du -sh`` of the paths that exist."""
    existing = [str(p) for p in paths if p.exists()]
    if not existing:
        return ""
    return subprocess.run(["du", "-sh", *existing], capture_output=True, text=True).stdout


def image_constant(name: str):
    """A constant of ``components/_image.py``, read without importing it (that needs TF & co)."""
    tree = ast.parse((REPO / "components" / "_image.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise SystemExit(f"components/_image.py defines no {name}")


def image_variants() -> tuple[str, ...]:
    """``components/_image.py``'s VARIANTS."""
    return tuple(image_constant("VARIANTS"))


# The Dockerfile's base images (its ARGs): pinned by digest with `make pin-base`.
BASE_ARGS = ("PYTHON_IMAGE", "BEAM_SDK_IMAGE")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def base_images(dockerfile: str) -> dict[str, str]:
    """The Dockerfile's ``ARG NAME=IMAGE`` values of ``BASE_ARGS``."""
    found = {}
    for name in BASE_ARGS:
        match = re.search(rf"^ARG {name}=(\S+)", dockerfile, re.M)
        if match:
            found[name] = match.group(1)
    return found


def unpinned_bases(dockerfile: str) -> list[str]:
    """The base images the Dockerfile names by tag only (``make pin-base`` pins them)."""
    return [image for image in base_images(dockerfile).values() if not DIGEST.search(image)]


def pin_bases(dockerfile: str, digests: dict[str, str]) -> str:
    """The Dockerfile with ``ARG NAME=TAG`` as ``ARG NAME=TAG@sha256:...`` for each of digests.

    A digest already there is replaced. Raises SystemExit on a malformed digest or a NAME the
    Dockerfile has no ARG for.
    """
    for name, digest in digests.items():
        if not DIGEST.fullmatch("@" + digest):
            raise SystemExit(f"{name}: {digest!r} is not sha256: and 64 lowercase hex digits")
        pattern = re.compile(rf"^(ARG {name}=)([^@\s]+)(@\S+)?$", re.M)
        dockerfile, count = pattern.subn(
            lambda m, d=digest: f"{m.group(1)}{m.group(2)}@{d}", dockerfile
        )
        if count != 1:
            raise SystemExit(f"Dockerfile: no single ARG {name}=... to pin")
    return dockerfile


def resolve_digest(image: str) -> str:
    """The digest ``image``'s tag names now, from the registry (``docker pull``, RepoDigests)."""
    tag = image.split("@", 1)[0]
    run(["docker", "pull", "--quiet", tag], stdout=subprocess.DEVNULL)
    ref = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{index .RepoDigests 0}}", tag],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return ref.rsplit("@", 1)[1]


def pin_base(dockerfile: Path) -> int:
    """``make pin-base``: each base image ARG pinned to the digest its tag names now."""
    if shutil.which("docker") is None:
        raise SystemExit("make pin-base needs Docker and the registries (Docker Hub)")
    text = dockerfile.read_text()
    digests = {name: resolve_digest(image) for name, image in base_images(text).items()}
    dockerfile.write_text(pin_bases(text, digests))
    for name, image in base_images(dockerfile.read_text()).items():
        print(f"ARG {name}={image}")
    print("Pinned: commit the Dockerfile (docs/images.md, 'Pinning by digest').")
    return 0


def beam_sdk_image_problem(dockerfile: str, lock: str) -> str | None:
    """Whether the Dockerfile's BEAM_SDK_IMAGE is Beam's SDK image of uv.lock's apache-beam.

    Returns what is wrong, or None. A digest after the tag (``make pin-base``) is allowed.
    """
    arg = re.search(r"^ARG BEAM_SDK_IMAGE=([^@\s]+)", dockerfile, re.M)
    locked = re.search(r'name = "apache-beam"\nversion = "([^"]+)"', lock)
    want = f"apache/beam_python3.11_sdk:{locked.group(1)}" if locked else None
    if not arg or arg.group(1) != want:
        return (
            f"Dockerfile ARG BEAM_SDK_IMAGE is {arg and arg.group(1)}; uv.lock's apache-beam "
            f"needs {want} (Dataflow workers run the launcher's Beam version)"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    """Runs the check; returns the exit status."""
    variants = image_variants()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=variants, default=list(variants))
    parser.add_argument("--work", type=Path, default=REPO / "out" / "image-check")
    parser.add_argument(
        "--mirror", default=os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
    )
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=("chroot", "buildah"),
        default=["chroot", "buildah"],
        help="chroot: each final stage's RUN in a clean root (fast, caches kept); buildah: the "
        "whole Dockerfile built without a daemon, every stage from scratch (slow)",
    )
    parser.add_argument(
        "--uv-version",
        help="the Makefile's UV_VERSION, compared with the "
        "Dockerfile's ARG UV_VERSION and the uv in use",
    )
    parser.add_argument(
        "--pin-base",
        action="store_true",
        help="only pin the Dockerfile's base images to the digests their tags name now "
        "(make pin-base; needs Docker)",
    )
    args = parser.parse_args(argv)
    dockerfile = REPO / "Dockerfile"
    if args.pin_base:
        return pin_base(dockerfile)
    if os.geteuid() != 0:
        raise SystemExit("make image-check needs root (debootstrap, mount, chroot)")
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("make image-check builds cp311 wheels: run it with Python 3.11")
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        raise SystemExit(f"{sys.executable} has no pip (the builder steps run pip wheel)")
    if args.uv_version:
        pinned = re.search(r"^ARG UV_VERSION=(\S+)", dockerfile.read_text(), re.M)
        used = subprocess.run(
            [sys.executable, "-m", "uv", "--version"], capture_output=True, text=True, check=True
        ).stdout.split()[1]
        if not pinned or pinned.group(1) != args.uv_version or used != args.uv_version:
            raise SystemExit(
                f"uv versions differ: Makefile {args.uv_version}, Dockerfile "
                f"{pinned and pinned.group(1)}, in use {used}"
            )
    problem = beam_sdk_image_problem(dockerfile.read_text(), (REPO / "uv.lock").read_text())
    if problem:
        raise SystemExit(problem)
    if shutil.which("g++") is None:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "build-essential"])
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    stages = dockerfile_stages(dockerfile)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    timings = Timings()
    ready = timings.measure("clean root (debootstrap bookworm)", ensure_rootfs, work, args.mirror)
    if ready and "chroot" in args.engines:
        if timings.measure(
            "chroot: builder (export, wheelhouse, project wheel)", builder, args.variants, work
        ):
            for variant in args.variants:
                timings.measure(
                    f"chroot: stage {variant} (install + verify in the clean root)",
                    check_variant,
                    work,
                    variant,
                    stages,
                    version,
                    {"${BEAM_SDK_IMAGE}": beam_sdk_standin(work)},
                )
    if ready and "buildah" in args.engines:
        if (
            timings.measure("buildah: install", ensure_buildah)
            and timings.measure("buildah: stand-in base image", buildah_base, work)
            and timings.measure("buildah: stand-in Beam SDK image", buildah_beam_sdk, work)
        ):
            for variant in args.variants:
                timings.measure(
                    f"buildah: build --target {variant} (every stage)",
                    buildah_variant,
                    variant,
                    args.uv_version,
                    version,
                    work,
                )
    report = ["step | seconds | result", "--- | --- | ---"]
    report += [f"{name} | {seconds:.0f} | {outcome}" for name, seconds, outcome in timings.steps]
    unpinned = unpinned_bases(dockerfile.read_text())
    if unpinned:
        report += [
            "",
            f"note: base images named by tag only: {', '.join(unpinned)} (make pin-base)",
        ]
    report += [
        "",
        "disk:",
        disk_usage(work / "stage" / "wheels", work / "pip-cache", work / "rootfs"),
    ]
    (work / "report.txt").write_text("\n".join(report) + "\n")
    print("\n".join(report), flush=True)
    return 1 if timings.failed else 0


if __name__ == "__main__":
    sys.exit(main())
