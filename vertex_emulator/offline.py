"""verify's offline guard: what keeps the processes it starts on this host and off your credentials.

A step that reaches a cloud service cannot be verified offline, and a step run on your machine
must not act with your identity. Three layers, for every process verify starts (tasks, the
custom-job launcher, replicas) and every process those start:

- :data:`SOURCE` (``offline_preload.c``), compiled with the machine's C compiler and put on
  ``LD_PRELOAD``: libc's ``connect``/``sendto``/``sendmsg``/``sendmmsg`` to an address off this
  host fail with ``ENETUNREACH``; ``bind`` to the wildcard address (``0.0.0.0``, ``::``) and
  ``listen`` on an unbound socket get loopback instead, so a TensorFlow replica's gRPC server
  is not reachable from the network. It holds for gRPC's C core, TensorFlow's and pyarrow's own
  Cloud Storage clients, ``ctypes`` callers and child processes (they inherit ``LD_PRELOAD``).
- An empty private home (mode 0700) as ``HOME``, ``XDG_CONFIG_HOME`` and ``CLOUDSDK_CONFIG``,
  and no ``GOOGLE_*``/``CLOUDSDK_*``/``GCE_*``/``BOTO_*``/``AWS_*`` variables: Google's auth
  libraries and ``gcloud`` find no credentials of yours.
- The Python-level check in the ``sitecustomize`` shim (``vertex_emulator/shim.py``), which
  fails name lookups and socket connects with a message that says why; on a machine without a C
  compiler it is the only network guard, and it covers Python's ``socket`` module only.

docs/verify.md says what none of them covers. This guard makes no network namespace: it must
hold on every machine, and one needs privileges or user namespaces (off on many machines and in
most containers). A custom job's replicas get one where the machine allows it, to keep other
users off their servers (``vertex_emulator/replica_network.py``).
"""

from __future__ import annotations

import dataclasses
import os

from vertex_emulator import preload

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "offline_preload.c")
# Variables that carry credentials or cloud settings; a process verify starts gets none of them.
CREDENTIAL_PREFIXES = ("GOOGLE_", "CLOUDSDK_", "GCE_", "BOTO_", "AWS_")


@dataclasses.dataclass(frozen=True)
class Guard:
    """What :func:`prepare` set up: the preload library (None: no C compiler) and the home."""

    library: str | None
    home: str


def prepare(library_dir: str, home: str, cc: str | None = None) -> Guard:
    """Builds the library into ``library_dir`` and creates the empty private ``home``.

    Raises:
        RuntimeError: the compiler failed (its message is included).
    """
    library = preload.build(SOURCE, "ncf-offline", library_dir, cc)
    os.makedirs(os.path.join(home, ".config", "gcloud"), mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    return Guard(library, home)


def scrub_credentials(env: dict[str, str]) -> None:
    """Removes every variable that names credentials or cloud settings (in place)."""
    for name in [k for k in env if k.startswith(CREDENTIAL_PREFIXES)]:
        del env[name]


def process_env(env: dict[str, str], guard: Guard) -> None:
    """Puts the guard into a process's environment ``env`` (in place)."""
    scrub_credentials(env)
    env["HOME"] = guard.home
    env["XDG_CONFIG_HOME"] = os.path.join(guard.home, ".config")
    env["CLOUDSDK_CONFIG"] = os.path.join(guard.home, ".config", "gcloud")
    if guard.library:
        preload.add(env, guard.library)


def describe(guard: Guard) -> str:
    """One line for the report: how the processes were kept offline."""
    home = f"HOME and CLOUDSDK_CONFIG in {guard.home} (empty, private), no credential variables"
    if guard.library:
        return (
            "offline: an LD_PRELOAD library refuses connections off this host and turns "
            f"wildcard binds into loopback in every process and its children; {home}"
        )
    return f"offline (no C compiler: Python sockets only, listeners not kept on loopback); {home}"
