"""Shared fixtures: small real files, prepared datasets, helpers to read them back.

Also the suite's guards against hanging and leftovers (docs/testing.md): tests marked ``slow`` get
a longer timeout than the global one in pyproject.toml, a backstop kills child processes and then
ends the run should a timeout not take effect, and child processes started through
:class:`ChildProcesses` (the ``procs`` fixture) are killed, with their whole process group,
however the test ends.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
import weakref

import numpy as np
import pytest
from vertex_standin import BUCKET, PROJECT, SA, TOKEN, VertexStandIn

from training_core.data import prepare, records, synthetic
from training_core.data.config import PrepareConfig
from training_core.data.metadata import DatasetMetadata
from training_core.publish import LOCK_FILE

TINY = dataclasses.replace(synthetic.SHAPES["tiny"], seed=3)

# --- timeouts -------------------------------------------------------------------------------------

# pyproject.toml sets `timeout` (every test) and `timeout_method = "signal"`; tests marked slow
# get this instead unless they carry their own @pytest.mark.timeout. Both cover setup, call and
# teardown, so a session fixture counts against the first test that uses it.
SLOW_TIMEOUT_S = 900
# The "signal" method raises in the main thread when it is back in Python, which is not enough
# when the test is stuck in C code (a TensorFlow op, a gRPC call) or in a wait on a child that
# never ends (kfp.local's Popen context waits for its task, whatever the exception). So, if the
# test still runs this long after its timeout, a backstop kills every child process of pytest
# (and every group started by ChildProcesses), which ends such waits: the test then fails
# normally. If it still runs at the second mark, the backstop dumps the stacks and ends pytest
# (os._exit, as pytest-timeout's "thread" method does).
BACKSTOP_KILL_S = 10
BACKSTOP_EXIT_S = 60


def pytest_collection_modifyitems(config, items):
    """pytest-timeout has no per-marker setting: give slow tests their own limit here."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))


_BACKSTOP = pytest.StashKey[list[threading.Timer]]()


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_timeout_set_timer(item, settings):
    result = yield
    if settings.method == "signal":
        timers = [
            threading.Timer(settings.timeout + BACKSTOP_KILL_S, _kill_children),
            threading.Timer(settings.timeout + BACKSTOP_EXIT_S, _exit, (item, settings)),
        ]
        for timer in timers:
            timer.name, timer.daemon = f"timeout backstop for {item.nodeid}", True
            timer.start()
        item.stash[_BACKSTOP] = timers
    return result


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_timeout_cancel_timer(item):
    for timer in item.stash.get(_BACKSTOP, []):
        timer.cancel()
    return (yield)


def _kill_children() -> None:
    for proc in list(_STARTED):
        kill_group(proc)
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _exit(item, settings) -> None:
    _kill_children()
    import pytest_timeout

    pytest_timeout.timeout_timer(item, settings)  # Dumps the stacks, then os._exit(1).


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` in the parent tree, read from /proc (none without it)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


# --- child processes ------------------------------------------------------------------------------

_STARTED: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()  # For the backstop.


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of a process started by :meth:`ChildProcesses.popen`."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # The leader of its own group: see popen below.
    except (ProcessLookupError, PermissionError):
        pass


class ChildProcesses:
    """Processes a test starts, each in a new session, all killed (whole groups) on exit.

    Use it as the ``procs`` fixture or as a context manager (in wider-scoped fixtures). Killing
    the group, not just the process, also ends what it started (Beam or multiprocessing workers).
    """

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen] = []

    def popen(self, args, **kwargs) -> subprocess.Popen:
        """subprocess.Popen in a new session (so its process group is its own), registered."""
        proc = subprocess.Popen(args, start_new_session=True, **kwargs)
        self._procs.append(proc)
        _STARTED.add(proc)
        return proc

    def kill_all(self) -> None:
        """SIGKILL every registered process group, reap the leaders, close their pipes."""
        for proc in self._procs:
            kill_group(proc)
        for proc in self._procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # Unkillable (D state): nothing more to do here.
                pass
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
            _STARTED.discard(proc)
        self._procs.clear()

    def __enter__(self) -> ChildProcesses:
        return self

    def __exit__(self, *exc) -> None:
        self.kill_all()


@pytest.fixture
def procs():
    """Starts child processes that are killed at teardown, whether the test passed or not."""
    with ChildProcesses() as started:
        yield started


def communicate(proc: subprocess.Popen, timeout: float) -> str:
    """``proc.communicate(timeout=...)``'s stdout; past the timeout, kill its group and fail."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        pytest.fail(f"{proc.args!r} still ran after {timeout}s; killed.\n{(out or '')[-4000:]}")
    return out


# --- data -----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_interactions():
    return synthetic.generate(TINY)


@pytest.fixture(scope="session")
def tiny_csv(tmp_path_factory, tiny_interactions):
    path = tmp_path_factory.mktemp("raw") / "ratings.csv"
    synthetic.write(tiny_interactions, str(path), "csv")
    return str(path)


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory, tiny_csv):
    """The tiny synthetic ratings, prepared once per session (2 epochs, 99 eval negatives)."""
    out = str(tmp_path_factory.mktemp("prepared") / "tiny")
    prepare.prepare(
        PrepareConfig(
            input_path=tiny_csv,
            output_dir=out,
            min_ratings=0,
            num_epochs=2,
            eval_negatives=99,
            train_batch_size=256,
            workers=1,
        )
    )
    return out


def read_split(root: str, meta: DatasetMetadata, training: bool, epoch: int = 0):
    """All rows of a prepared split, concatenated, via our own decoder (TF is tested separately)."""
    paths = meta.train_file_paths(root, epoch) if training else meta.eval_file_paths(root)
    cols: dict[str, list[np.ndarray]] = {n: [] for n in records.feature_names(training)}
    for p in paths:
        for rec in records.read_tfrecord_file(p):
            ex = records.decode_example(rec)
            for n in cols:
                cols[n].append(ex[n])
    return {n: np.concatenate(v) for n, v in cols.items()}


def tree_bytes(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f == LOCK_FILE:  # Who held the folder last, not content.
                continue
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = fh.read()
    return out


def seen_from_raw(csv_path: str, meta):
    """Each user's training items, from the raw CSV alone (pandas), not from the records.

    Leave-one-out as prepare-data documents it: a repeated (user, item) keeps its latest row, each
    user's last interaction by time (ties: the later row) is held out, the rest are training
    positives; indices are positions in the ascending raw ids. Returns
    ``(user raw ids, item raw ids, [set of item indices per user index])``.
    """
    import pandas as pd

    # The shortcuts below hold for this data: no filtering by count (min_ratings 0).
    assert meta.options["min_ratings"] == 0
    raw = pd.read_csv(csv_path, usecols=["user_id", "item_id", "timestamp"])
    raw["row"] = np.arange(len(raw))
    raw = raw.sort_values(["timestamp", "row"], kind="stable")
    raw = raw.drop_duplicates(["user_id", "item_id"], keep="last")
    raw = raw.sort_values(["user_id", "timestamp", "row"], kind="stable")
    per_user = raw.groupby("user_id")["item_id"].nunique()
    # prepare-data drops users left with one interaction or with every item; none here.
    assert per_user.min() >= 2 and per_user.max() < raw["item_id"].nunique()
    held_out = raw.groupby("user_id").tail(1)
    train_rows = raw.drop(index=held_out.index)
    users = np.sort(raw["user_id"].unique())
    items = np.sort(raw["item_id"].unique())
    u_idx = np.searchsorted(users, train_rows["user_id"].to_numpy())
    i_idx = np.searchsorted(items, train_rows["item_id"].to_numpy())
    seen = [set() for _ in users]
    for u, i in zip(u_idx.tolist(), i_idx.tolist(), strict=True):
        seen[u].add(i)
    return users, items, seen


# --- the Vertex AI stand-in (tests/vertex_standin.py), with credentials as on a real machine ---


@pytest.fixture
def standin(monkeypatch):
    from google.cloud import resourcemanager
    from google.cloud.aiplatform import initializer

    with VertexStandIn(access_token=TOKEN) as s:
        s.add_bucket(BUCKET, PROJECT)
        s.put_object(BUCKET, "ml-1m/ratings.dat", b"1::1193::5::978300760\n")
        s.put_object(BUCKET, "ml-1m/movies.dat", b"1::Toy Story (1995)::Animation\n")
        # The SDK checks the pipeline root bucket with google-cloud-storage (which honours
        # STORAGE_EMULATOR_HOST) and its owner with Cloud Resource Manager, whose client takes
        # no endpoint setting: point that client (REST) at the stand-in too.
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", s.url)
        real_projects_client = resourcemanager.ProjectsClient
        monkeypatch.setattr(
            resourcemanager,
            "ProjectsClient",
            lambda credentials=None, **_: real_projects_client(
                credentials=credentials, transport="rest", client_options={"api_endpoint": s.url}
            ),
        )
        # aiplatform.init() is process-wide: give it back as it was.
        saved = dict(vars(initializer.global_config))
        try:
            yield s
        finally:
            vars(initializer.global_config).clear()
            vars(initializer.global_config).update(saved)
    # Whatever a client sent, the stand-in checked it against the service's message types; a
    # request it refused fails the test even where the client swallowed the error. Tests that
    # send bad requests on purpose clear `rejected` after checking it.
    refused = [f"{r.method} {r.path}: {why}" for r, why in s.rejected]
    assert not refused, f"the Vertex AI stand-in refused requests: {refused}"


@pytest.fixture(scope="module")
def private_key_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


@pytest.fixture
def adc(standin, tmp_path, monkeypatch, private_key_pem):
    """Application Default Credentials: a service account key whose token endpoint is the
    stand-in, so google-auth signs a JWT, exchanges it for TOKEN, and the clients send TOKEN."""
    path = tmp_path / "sa-key.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": PROJECT,
                "private_key_id": "0123456789abcdef",
                "private_key": private_key_pem,
                "client_email": SA,
                "client_id": "1234567890",
                "token_uri": f"{standin.url}/token",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    return path
