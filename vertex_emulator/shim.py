"""The environment verify gives every process it starts, and the small shim that reads it.

Vertex AI containers see Cloud Storage at ``/gcs/`` and reach Vertex AI's API over the network;
here a local folder and a local JobService stand in. The processes run the compiled command
unchanged; a generated ``sitecustomize.py`` on ``PYTHONPATH`` (which Python imports at start-up)
makes the difference, and only when the variables below are set:

- ``NCF_VERIFY_GCS_DIR``: Python file access to ``/gcs/...`` goes to this folder, and kfp
  artifacts' ``.path`` points into it (so TensorFlow's own file system sees it too).
- ``NCF_VERIFY_WRITE_LOG``: every ``/gcs/`` file the process opens for writing is appended here
  as a ``gs://`` URI (how a report shows which replica wrote what).
- ``NCF_VERIFY_OFFLINE``: Python's name lookups and socket connections to anything but this
  host fail at once, with a message saying why (``vertex_emulator/offline.py`` adds the
  libc-level guard, the private ``HOME`` and the credential scrub that make it hold beyond
  Python).
- ``NCF_VERIFY_GCSFUSE`` (``python``): Python's ``os.rename``/``os.replace`` of a directory under
  the stand-in fail with ``ENOSYS``, a rename across its edge with ``EXDEV`` and ``os.link``
  with ``ENOSYS``, as on the gcsfuse mount; ``preload`` says ``LD_PRELOAD`` does it for every
  caller instead (``vertex_emulator/gcsfuse.py``).
- ``NCF_VERIFY_JOB_SERVICE`` (``unix:PATH``, a socket in a folder only this user can open) and
  ``NCF_VERIFY_POLL_SECONDS``: the custom-job launcher's ``JobServiceClient`` talks gRPC to the
  stand-in over an insecure channel to that socket, sending the endpoint it was built for in
  ``x-ncf-verify-endpoint``, and polls at that interval.

Any ``sitecustomize`` the environment already had is run after this one.
"""

from __future__ import annotations

import os
import sys

from training_core.common.atomic_writes import write_text_atomic
from vertex_emulator import gcsfuse as gcsfuse_emulation
from vertex_emulator import offline

GCS_DIR_ENV = "NCF_VERIFY_GCS_DIR"
WRITE_LOG_ENV = "NCF_VERIFY_WRITE_LOG"
OFFLINE_ENV = "NCF_VERIFY_OFFLINE"
JOB_SERVICE_ENV = "NCF_VERIFY_JOB_SERVICE"
POLL_ENV = "NCF_VERIFY_POLL_SECONDS"
ENDPOINT_HEADER = "x-ncf-verify-endpoint"
# Variables a process must not inherit from the machine verify runs on.
_SCRUB = (
    "TF_CONFIG",
    "CLUSTER_SPEC",
    "PYTHONSTARTUP",
    gcsfuse_emulation.MODE_ENV,
)

SITECUSTOMIZE = r'''"""Written by `ncf-pipelines verify`; inert unless NCF_VERIFY_* is set."""
import builtins
import importlib.abc
import importlib.machinery
import importlib.util
import io
import os
import socket
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_GCS = os.environ.get("NCF_VERIFY_GCS_DIR")
_LOG = os.environ.get("NCF_VERIFY_WRITE_LOG")
_MOUNT = "/gcs/"


def _local(path):
    if type(path) is not str:
        if not hasattr(path, "__fspath__"):
            return path
        path = os.fspath(path)
        if type(path) is not str:
            return path
    if not path.startswith(_MOUNT):
        return path
    relative = path[len(_MOUNT):]
    if relative.startswith("/") or ".." in relative.split("/"):
        # As the kernel resolves it on Vertex AI: /gcs//b is /gcs/b, /gcs/../etc is /etc.
        path = os.path.normpath(path)
        if path != _MOUNT.rstrip("/") and not path.startswith(_MOUNT):
            return path
        relative = path[len(_MOUNT):]
    return os.path.join(_GCS, relative)


def _log_write(path):
    if not _LOG or type(path) is not str:
        return
    full = os.path.abspath(path)
    if full.startswith(_GCS.rstrip("/") + "/"):
        with _real_open(_LOG, "a") as f:
            f.write("gs://" + full[len(_GCS.rstrip("/")) + 1:] + "\n")


def _wrap(fn, count):
    # Maps the first `count` path arguments, positional or by keyword; defaults stay as they are.
    names = ("path", "name", "src", "dst")

    def wrapper(*args, **kwargs):
        args = tuple(_local(a) if i < count else a for i, a in enumerate(args))
        for key in names:
            if key in kwargs:
                kwargs[key] = _local(kwargs[key])
        return fn(*args, **kwargs)

    wrapper.__wrapped__ = fn
    return wrapper


if _GCS:
    _real_open = builtins.open
    _real_os_open = os.open

    def _open(file, mode="r", *args, **kwargs):
        file = _local(file)
        if any(c in mode for c in "wax+"):
            _log_write(file)
        return _real_open(file, mode, *args, **kwargs)

    def _os_open(path, flags, *args, **kwargs):
        path = _local(path)
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            _log_write(path)
        return _real_os_open(path, flags, *args, **kwargs)

    builtins.open = io.open = _open
    os.open = _os_open
    for _name in ("stat", "lstat", "listdir", "scandir", "makedirs", "mkdir", "remove", "unlink",
                  "rmdir", "access", "chmod", "utime", "truncate"):
        setattr(os, _name, _wrap(getattr(os, _name), 1))
    for _name in ("rename", "replace"):
        setattr(os, _name, _wrap(getattr(os, _name), 2))

if _GCS and os.environ.get("NCF_VERIFY_GCSFUSE") == "python":
    # No LD_PRELOAD library (no C compiler): gcsfuse's answers for Python's os module only.
    import errno

    _ROOTS = {os.path.abspath(_GCS), os.path.realpath(_GCS)}

    def _on_gcs(path):
        if type(path) is not str:
            return False
        full = os.path.abspath(path)
        return any(full == r or full.startswith(r.rstrip("/") + "/") for r in _ROOTS)

    def _gcsfuse_error(code, src, dst):
        return OSError(code, os.strerror(code), src, None, dst)

    def _gcsfuse_rename(fn):
        def wrapper(src, dst, *args, **kwargs):
            src, dst = _local(src), _local(dst)
            inside, outside = _on_gcs(src), _on_gcs(dst)
            if inside != outside:
                raise _gcsfuse_error(errno.EXDEV, src, dst)
            if inside and os.path.isdir(src) and not os.path.islink(src):
                raise _gcsfuse_error(errno.ENOSYS, src, dst)
            return fn(src, dst, *args, **kwargs)

        wrapper.__wrapped__ = fn
        return wrapper

    def _gcsfuse_link(fn):
        def wrapper(src, dst, *args, **kwargs):
            src, dst = _local(src), _local(dst)
            if _on_gcs(src) or _on_gcs(dst):
                code = errno.ENOSYS if _on_gcs(src) == _on_gcs(dst) else errno.EXDEV
                raise _gcsfuse_error(code, src, dst)
            return fn(src, dst, *args, **kwargs)

        wrapper.__wrapped__ = fn
        return wrapper

    os.rename = _gcsfuse_rename(os.rename)
    os.replace = _gcsfuse_rename(os.replace)
    os.link = _gcsfuse_link(os.link)


def _patch_kfp(module):
    # Artifact paths point into the stand-in folder, so C++ file systems (TensorFlow) see it.
    module._GCS_LOCAL_MOUNT_PREFIX = _GCS.rstrip("/") + "/"


def _patch_launcher(module):
    import types

    target = os.environ["NCF_VERIFY_JOB_SERVICE"]
    module._POLLING_INTERVAL_IN_SECONDS = float(os.environ.get("NCF_VERIFY_POLL_SECONDS", "1"))

    def job_service_client(client_options=None, client_info=None, *args, **kwargs):
        import grpc
        from google.api_core import gapic_v1
        from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
        from google.cloud.aiplatform_v1.services.job_service.transports.grpc import (
            JobServiceGrpcTransport,
        )

        endpoint = getattr(client_options, "api_endpoint", None) or ""

        class Details(grpc.ClientCallDetails):
            def __init__(self, d, metadata):
                self.method, self.timeout, self.credentials = d.method, d.timeout, d.credentials
                self.wait_for_ready, self.compression = d.wait_for_ready, d.compression
                self.metadata = metadata

        class Endpoint(grpc.UnaryUnaryClientInterceptor):
            def intercept_unary_unary(self, continuation, details, request):
                metadata = list(details.metadata or []) + [("x-ncf-verify-endpoint", endpoint)]
                return continuation(Details(details, metadata), request)

        channel = grpc.intercept_channel(grpc.insecure_channel(target), Endpoint())
        transport = JobServiceGrpcTransport(channel=channel)
        return JobServiceClient(
            transport=transport, client_info=client_info or gapic_v1.client_info.ClientInfo()
        )

    module.aiplatform = types.SimpleNamespace(
        gapic=types.SimpleNamespace(JobServiceClient=job_service_client)
    )


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, hooks):
        self.hooks = hooks

    def find_spec(self, name, path=None, target=None):
        hook = self.hooks.get(name)
        if hook is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        inner = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                hook(module)

        spec.loader = Loader()
        return spec


_hooks = {}
if _GCS:
    _hooks["kfp.dsl.types.artifact_types"] = _patch_kfp
if os.environ.get("NCF_VERIFY_JOB_SERVICE"):
    _hooks[
        "google_cloud_pipeline_components.container.v1.gcp_launcher.job_remote_runner"
    ] = _patch_launcher
if _hooks:
    sys.meta_path.insert(0, _AfterImport(_hooks))

if os.environ.get("NCF_VERIFY_OFFLINE") == "1":
    _LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "", None, socket.gethostname()}
    _real_getaddrinfo = socket.getaddrinfo
    _real_connect = socket.socket.connect
    _real_connect_ex = socket.socket.connect_ex

    def _refuse(where):
        return OSError(
            f"ncf-pipelines verify runs without network access; blocked a connection to "
            f"{where} (a step that calls a cloud service cannot be verified offline)"
        )

    def _is_local(host):
        return host in _LOCAL_NAMES or str(host).startswith("127.")

    def _getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if not _is_local(name) and not (isinstance(name, str) and name[:1].isdigit()):
            raise socket.gaierror(socket.EAI_NONAME, str(_refuse(name)))
        return _real_getaddrinfo(host, *args, **kwargs)

    def _check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            raise _refuse(address[0])

    def _connect(self, address):
        _check(self, address)
        return _real_connect(self, address)

    def _connect_ex(self, address):
        _check(self, address)
        return _real_connect_ex(self, address)

    socket.getaddrinfo = _getaddrinfo
    socket.socket.connect = _connect
    socket.socket.connect_ex = _connect_ex

# Run the sitecustomize this one shadows, if the environment has one.
_others = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _others)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
'''


def write_shim(directory: str) -> str:
    """Writes ``sitecustomize.py`` into ``directory`` (created) and returns the directory."""
    os.makedirs(directory, exist_ok=True)
    write_text_atomic(os.path.join(directory, "sitecustomize.py"), SITECUSTOMIZE)
    return directory


def process_env(
    base: dict[str, str],
    shim_dir: str,
    gcs_dir: str,
    *,
    write_log: str | None = None,
    job_service: str | None = None,
    poll_seconds: float = 0.5,
    gcsfuse: tuple[str, str | None] | None = None,
    offline_guard: offline.Guard | None = None,
    extra: dict[str, str] | None = None,
    python: str = sys.executable,
) -> dict[str, str]:
    """The environment of one process verify starts.

    ``python3`` resolves to ``python`` (its folder first on ``PATH``: this interpreter, or the
    environment standing in for the task's image, ``--image-python``); the shim and the
    folder this package was imported from come first on ``PYTHONPATH``. ``gcsfuse`` is what
    ``vertex_emulator.gcsfuse.prepare`` chose (None: the stand-in is a plain folder);
    ``offline_guard`` what ``vertex_emulator.offline.prepare`` set up (None: Python's check
    only). Credential variables are never passed on.
    """
    env = {k: v for k, v in base.items() if k not in _SCRUB}
    offline.scrub_credentials(env)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (shim_dir, root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env[GCS_DIR_ENV] = gcs_dir
    env[OFFLINE_ENV] = "1"
    if write_log:
        env[WRITE_LOG_ENV] = write_log
    if job_service:
        env[JOB_SERVICE_ENV] = job_service
        env[POLL_ENV] = str(poll_seconds)
    if gcsfuse is not None:
        gcsfuse_emulation.process_env(env, *gcsfuse)
    if offline_guard is not None:
        offline.process_env(env, offline_guard)
    env.update(extra or {})
    return env
