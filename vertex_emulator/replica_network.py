"""What keeps other users of this machine off a custom job's replicas under verify.

A multi-worker replica runs TensorFlow's gRPC server (``tf.distribute.Server``), which runs any
graph a client sends, file writes included, as the user verify runs as, and asks for no
credentials. On Vertex AI each replica has a host of its own; here they share this one, and
127.0.0.1 is open to every account on it (the ports are listed in ``/proc/net/tcp``). One guard,
chosen once per verification by :func:`choose`, strongest first:

- ``namespace``: each run of a job gets a network namespace of its own with only a loopback
  interface (``netns.py make``; with a user namespace mapping only your ids, to themselves, when
  verify is not root), and every replica of the job joins it before its command starts
  (``netns.py join``, which then ``exec``s the command, so the stand-in still waits for and
  signals the replica itself). The replicas reach each other on 127.0.0.1 as before; no process
  outside the namespace reaches them, and no other process can take a port before its replica
  binds it.
- ``peer-uid``: where no namespace can be made (user namespaces off, as in most containers, or
  without capabilities, as under Ubuntu's AppArmor restriction), :data:`PEER_UID_SOURCE` on each
  replica's ``LD_PRELOAD`` closes every accepted TCP connection whose client socket is not this
  user's (the owner ``/proc/net/tcp*`` lists) before the server sees it.
- ``none``: neither (no namespace and no C compiler): a job of more than one replica is refused,
  unless the verification was started with ``allow_unguarded`` (``--allow-unguarded-replicas``),
  which accepts that any local user can then run TensorFlow ops as you through their ports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator

from vertex_emulator import preload

NAMESPACE = "namespace"
PEER_UID = "peer-uid"
NONE = "none"
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "netns.py")
PEER_UID_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_uid_preload.c")
ALLOW_OPTION = "--allow-unguarded-replicas"


class NamespaceError(RuntimeError):
    """A network namespace could not be made here (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Guard:
    """The guard in force: its ``kind``, the ``peer-uid`` library, why no namespace.

    ``allow_unguarded``: with kind ``none``, run jobs of several replicas anyway.
    """

    kind: str
    library: str | None = None
    no_namespace: str = ""
    allow_unguarded: bool = False

    def refusal(self, replicas: int) -> str | None:
        """Why a job of ``replicas`` replicas may not run under this guard (None: it may)."""
        if self.kind != NONE or replicas < 2 or self.allow_unguarded:
            return None
        return (
            f"this job has {replicas} replicas, whose TensorFlow servers would listen on "
            "127.0.0.1 with nothing to keep other users of this machine from running graph ops "
            f"as you through them (no network namespace: {self.no_namespace}; no C compiler for "
            f"the peer check); run verify where either works, or pass {ALLOW_OPTION} to accept "
            "that risk"
        )


def choose(library_dir: str, allow_unguarded: bool = False, cc: str | None = None) -> Guard:
    """The strongest guard this machine allows; builds the ``peer-uid`` library if it comes to it.

    Raises:
        RuntimeError: the compiler failed on the library (its message is included).
    """
    try:
        with namespace():
            return Guard(NAMESPACE)
    except NamespaceError as e:
        why = str(e)
    library = preload.build(PEER_UID_SOURCE, "ncf-peer-uid", library_dir, cc)
    if library:
        return Guard(PEER_UID, library=library, no_namespace=why)
    return Guard(NONE, no_namespace=why, allow_unguarded=allow_unguarded)


def describe(guard: Guard) -> str:
    """One line for the report: what keeps other users off the replicas' ports."""
    if guard.kind == NAMESPACE:
        return (
            "replicas: each custom job's replicas share a private network namespace (its own "
            "loopback); no other user of this machine can reach their TensorFlow servers"
        )
    if guard.kind == PEER_UID:
        return (
            f"replicas: no network namespace here ({guard.no_namespace}); they share this "
            "machine's loopback, and an LD_PRELOAD library closes every connection to them from "
            "another user's socket"
        )
    state = (
        f"run anyway ({ALLOW_OPTION}): any user of this machine can run TensorFlow ops as you "
        "through their ports"
        if guard.allow_unguarded
        else f"refused unless {ALLOW_OPTION}"
    )
    return (
        f"replicas UNGUARDED: no network namespace here ({guard.no_namespace}) and no C compiler "
        f"for the peer check; jobs of several replicas {state}"
    )


@contextlib.contextmanager
def namespace() -> Iterator[dict[str, int]]:
    """A new network namespace, as open file descriptors by kind (``user`` first, ``net``).

    They are closed on exit; the namespace lives on while a process is in it.

    Raises:
        NamespaceError: it could not be made here.
    """
    try:
        maker = subprocess.Popen(
            [sys.executable, "-I", "-S", HELPER, "make"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    except OSError as e:
        raise NamespaceError(f"could not start {HELPER}: {e}") from e
    fds: dict[str, int] = {}
    try:
        kinds = (maker.stdout.readline() if maker.stdout else "").strip()
        if not kinds or kinds.startswith("error") or maker.poll() not in (None, 0):
            raise NamespaceError(kinds.removeprefix("error: ") or "the helper failed")
        for kind in kinds.split("+"):
            fds[kind] = os.open(f"/proc/{maker.pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise
    finally:
        maker.communicate()  # Closing its stdin ends it; its namespaces stay open in `fds`.
    try:
        yield fds
    finally:
        for fd in fds.values():
            os.close(fd)


class JobNetwork:
    """The network of one run of a job's replicas under ``guard``; a context manager.

    Raises (on entry):
        NamespaceError: the guard is ``namespace`` and a namespace could not be made now.
    """

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self._stack = contextlib.ExitStack()
        self._fds: dict[str, int] = {}

    def __enter__(self) -> JobNetwork:
        if self.guard.kind == NAMESPACE:
            self._fds = self._stack.enter_context(namespace())
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        self._fds = {}

    def popen(self, command: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
        """Starts one replica on this network (``kwargs`` as ``subprocess.Popen`` takes them)."""
        env = dict(env)
        if self.guard.kind == PEER_UID and self.guard.library:
            preload.add(env, self.guard.library)
        if self._fds:
            joins = [f"{kind}={fd}" for kind, fd in self._fds.items()]
            command = [sys.executable, "-I", "-S", HELPER, "join", *joins, "--", *command]
            kwargs["pass_fds"] = (*kwargs.get("pass_fds", ()), *self._fds.values())
        return subprocess.Popen(command, env=env, **kwargs)
