"""Shared fixtures: small real files, prepared datasets, one trained tiny model and its export,
helpers to read them back (docs/testing.md, "Shared fixtures", lists them); whole-pipeline
verifications computed once per run for every xdist worker (``once``, ``verified``; docs/testing.md,
"Running it", on the time they save).

Also the suite's guards against hanging and leftovers (docs/testing.md): tests marked ``slow`` get
a longer timeout than the global one in pyproject.toml, a backstop kills child processes and then
ends the run should a timeout not take effect, and child processes started through
:class:`ChildProcesses` (the ``procs`` fixture) are killed, with their whole process group,
however the test ends.
"""

from __future__ import annotations

import dataclasses
import fcntl
import importlib.util
import json
import os
import pathlib
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import types
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import pytest

from training_core.common.folder_lock import LOCK_FILE
from training_core.data import prepare, records, synthetic
from training_core.data.config import PrepareConfig
from training_core.data.metadata import DatasetMetadata

TINY = dataclasses.replace(synthetic.SHAPES["tiny"], seed=3)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # The repository.
WORKER = os.path.join(ROOT, "tests", "train_worker.py")  # The CLI in a child, CPU devices set.
# The project, bucket, identity and token the tests use with the Vertex AI stand-in (``standin``),
# and the region and network requests name.
PROJECT = "ncf-test-project"
BUCKET = "ncf-bucket"
SA = f"runner@{PROJECT}.iam.gserviceaccount.com"
TOKEN = "secret-token-XYZ"
REGION = "europe-west4"
NETWORK = "projects/123456789012/global/networks/ncf-vpc"
TINY_TOP_K = 5  # Items per user in ``tiny_export``'s ``recommend`` answer.
SERVE_CHECK = os.path.join(ROOT, "tests", "serve_check.py")

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


# Module fixtures that take more than about 10 s to build on the 2-core machine, as
# "test_file.py::fixture": every test that uses one is slow (docs/testing.md), so that
# `make test-fast` never builds them. A new fixture this slow belongs here.
SLOW_FIXTURES = frozenset(
    {
        "test_verify.py::templates",  # Every built-in profile compiled (10-25 s in the suite).
        "test_pipeline_compile.py::compiled_text",  # The same, with a batch size default.
        "test_model_variants.py::trained",  # Three more architectures trained.
        "test_compare.py::models",  # A weak model trained and exported.
        "test_compare.py::other_ids_export",  # Data prepared, a model trained and exported.
        "test_training.py::trained",  # One training per single-host strategy.
    }
)


# The files whose fixtures run whole pipelines or many trainings (minutes each on the 2-core
# machine; docs/testing.md), longest first. They are collected first, and the make targets hand
# files to the xdist workers in collection order (--dist loadfile --no-loadscope-reorder), so
# these start at once and the run does not end on one worker finishing one of them alone.
START_FIRST = (
    "test_documented_commands.py",
    "test_verify.py",
    "test_cache_and_effects.py",
    "test_training.py",
    "test_export.py",
    "test_run_local.py",
)
if _renamed := [n for n in START_FIRST if not (pathlib.Path(__file__).parent / n).is_file()]:
    raise pytest.UsageError(f"tests/conftest.py's START_FIRST names no such file: {_renamed}")


@pytest.hookimpl(tryfirst=True)  # Before `-m` deselects: the marks added here count.
def pytest_collection_modifyitems(config, items):
    """Marks the users of SLOW_FIXTURES slow, gives slow tests their own time limit
    (pytest-timeout has no per-marker setting) and puts START_FIRST's files first."""
    rank = {name: i for i, name in enumerate(START_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # Stable: files stay whole.
    for item in items:
        uses = {f"{item.path.name}::{name}" for name in getattr(item, "fixturenames", ())}
        if uses & SLOW_FIXTURES and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
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


def latest_checkpoint_step(model_dir: str) -> int:
    """The step of ``model_dir``'s newest checkpoint, from its index file (0: none yet)."""
    from training_core.training.model_dir import checkpoint_dir

    index = os.path.join(checkpoint_dir(model_dir), "checkpoint")
    if not os.path.exists(index):
        return 0
    with open(index) as f:
        return int(f.readline().rsplit("-", 1)[1].strip().strip('"'))


def take_the_next_free_port(monkeypatch) -> socket.socket:
    """A listening socket on 127.0.0.1 whose port the JobService stand-in hands out next
    (``replicas.free_port``), as if another process took it; close it when done."""
    from vertex_emulator import replicas

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    chosen = iter([taken.getsockname()[1]])
    real_free_port = replicas.free_port
    monkeypatch.setattr(replicas, "free_port", lambda: next(chosen, None) or real_free_port())
    return taken


def communicate(proc: subprocess.Popen, timeout: float) -> str:
    """``proc.communicate(timeout=...)``'s stdout; past the timeout, kill its group and fail."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        pytest.fail(f"{proc.args!r} still ran after {timeout}s; killed.\n{(out or '')[-4000:]}")
    return out


def serve_check(export_dir, requests: list, work_dir, python: str = sys.executable):
    """``requests`` through tests/serve_check.py in an isolated interpreter.

    ``python -I`` in ``work_dir`` without ``PYTHON*`` variables, as the prebuilt serving container
    runs the SavedModel. Returns ``(its answers, or None where it failed; its stderr)``.
    """
    folder = tempfile.mkdtemp(prefix="serve-check-", dir=work_dir)
    req, out = os.path.join(folder, "requests.json"), os.path.join(folder, "responses.json")
    with open(req, "w") as f:
        json.dump(requests, f)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [python, "-I", SERVE_CHECK, str(export_dir), req, out],
        cwd=work_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode:
        return None, done.stderr
    with open(out) as f:
        return json.load(f), done.stderr


# --- data -----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_interactions():
    return synthetic.generate(TINY)


@pytest.fixture(scope="session")
def tiny_csv(tmp_path_factory, tiny_interactions):
    path = tmp_path_factory.mktemp("raw") / "ratings.csv"
    synthetic.write(tiny_interactions, str(path), "csv")
    return str(path)


# tiny_data's options; other preparations of the tiny ratings change one of them.
# Small prep options for tests that prepare a few hand-written rows (two shards, 10 negatives).
# Both give every training positive once (recency_boost 0): the tests that use them check
# training, serving and prep mechanics, where the default's copies (about 4.6 times the tiny
# data's rows) would only add time; the copies themselves are tested on prepare-data's defaults
# (test_sampling, test_prepare, test_leakage, and every whole-pipeline run).
SMALL_PREPARE = dict(
    min_ratings=0, num_epochs=2, eval_negatives=10, train_batch_size=64, num_shards=2, workers=1,
    recency_boost=0.0,
)  # fmt: skip
TINY_PREPARE = dict(
    min_ratings=0, num_epochs=2, eval_negatives=99, train_batch_size=256, workers=1,
    recency_boost=0.0,
)  # fmt: skip


# The embedded sample as a shop's event table would hold it (issue 40): string ids (a
# customer's UUID-like key, an ISBN-like product code, some ending in X), its own column names,
# ISO-8601 times. The same interactions as the sample, so a pipeline run on it prepares the same
# users and items under other names.
EVENT_COLUMNS = ("customer_id", "product_id", "stars", "event_time")
# Its product codes mix all-digit codes with codes ending in X, as ISBNs do: read as strings.
EVENT_PARAMS = {
    "user_col": "customer_id",
    "item_col": "product_id",
    "time_col": "event_time",
    "id_type": "string",
}


def customer_key(user: int) -> str:
    """The string user id the events sample gives integer user ``user``."""
    return f"c-{user * 2654435761 % 2**32:08x}-{user:05d}"


def product_code(item: int) -> str:
    """The string item id the events sample gives integer item ``item`` (ISBN-like)."""
    return f"08{item:07d}" + "0123456789X"[item % 11]


def write_events_sample(path: str) -> str:
    """Writes the embedded sample as ``EVENT_COLUMNS`` with string ids; returns ``path``."""
    import datetime
    import gzip

    from training_core.data.sample_data import sample_path

    with gzip.open(sample_path(), "rt") as src, open(path, "w", encoding="utf-8") as out:
        next(src)
        out.write(",".join(EVENT_COLUMNS) + "\n")
        for line in src:
            user, item, rating, ts = line.rstrip("\n").split(",")
            when = datetime.datetime.fromtimestamp(int(ts), datetime.UTC)
            out.write(
                f"{customer_key(int(user))},{product_code(int(item))},{rating},"
                f"{when.strftime('%Y-%m-%dT%H:%M:%SZ')}\n"
            )
    return path


def prepare_tiny(tiny_csv: str, out: str, **options) -> str:
    """The tiny ratings prepared into ``out`` with tiny_data's options, ``options`` replaced."""
    prepare.prepare(
        PrepareConfig(input_path=tiny_csv, output_dir=out, **{**TINY_PREPARE, **options})
    )
    return out


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory, tiny_csv):
    """The tiny synthetic ratings, prepared once per session (2 epochs, 99 eval negatives, a
    validation split: prepare-data's default)."""
    return prepare_tiny(tiny_csv, str(tmp_path_factory.mktemp("prepared") / "tiny"))


@pytest.fixture(scope="session")
def tiny_data_without_validation(tmp_path_factory, tiny_csv):
    """``tiny_data`` prepared with ``--no-validation`` (the reference's leave-one-out)."""
    return prepare_tiny(
        tiny_csv, str(tmp_path_factory.mktemp("prepared") / "tiny-loo"), validation=False
    )


# --- a trained tiny model and its export --------------------------------------------------------


class TrainedModel(NamedTuple):
    """A model folder and the history ``loop.train`` returned for it."""

    model_dir: str
    result: Any  # results.TrainResult (TensorFlow is imported only by the fixtures that use it).


class ExportedModel(NamedTuple):
    """A SavedModel folder and what ``export.export`` returned for it."""

    export_dir: str
    result: Any  # export.ExportResult


@pytest.fixture(scope="session")
def tiny_model(tiny_data, tmp_path_factory) -> Iterator[TrainedModel]:
    """The tiny preset trained 2 epochs (steps_per_loop 50) on ``tiny_data``, default strategy.

    Shared by every test that needs "a trained tiny model": read it, never write into it (copy
    the folder first to resume, damage or retrain it); its teardown fails if a test did.
    """
    import tensorflow as tf

    from training_core.training import loop, train_config

    model_dir = str(tmp_path_factory.mktemp("tiny-model") / "model")
    config = train_config.config_for(tiny_data, model_dir, "tiny", epochs=2, steps_per_loop=50)
    trained = TrainedModel(model_dir, loop.train(config, tf.distribute.get_strategy()))
    before = tree_bytes(model_dir)
    yield trained
    assert tree_bytes(model_dir) == before, f"a test wrote into the shared {model_dir}"


@pytest.fixture(scope="session")
def tiny_export(tiny_model, tiny_data, tmp_path_factory) -> Iterator[ExportedModel]:
    """``tiny_model`` exported as a SavedModel with ``top_k=TINY_TOP_K``; read-only as well."""
    from training_core.serving import export

    out = str(tmp_path_factory.mktemp("tiny-export") / "saved")
    config = export.ExportConfig(tiny_model.model_dir, tiny_data, out, top_k=TINY_TOP_K)
    exported = ExportedModel(out, export.export(config))
    before = tree_bytes(out)
    yield exported
    assert tree_bytes(out) == before, f"a test wrote into the shared {out}"


# --- work done once per run, shared by the xdist workers -----------------------------------------

# The suite's costliest work is whole-pipeline runs, each task a process that imports TensorFlow.
# A run several test files read is computed once per `pytest` run, by whichever worker asks
# first, under a file lock in a folder every worker sees; the others wait for it and read the
# result (docs/testing.md, "Running it").


def shared_folder(tmp_path_factory) -> pathlib.Path:
    """A folder every xdist worker of this run sees: the run's base temporary folder (each
    worker's own is a folder below it); without workers, this process's base folder."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    folder.mkdir(exist_ok=True)
    return folder


def once(tmp_path_factory, name: str, compute) -> Any:
    """``compute(folder)``'s result, computed once per run for every worker that asks.

    The first caller computes it in ``folder`` (``shared/NAME/``) holding ``shared/NAME.lock``
    (``fcntl.flock``: released by the kernel if that worker dies) and leaves it pickled beside;
    later callers, in any worker, wait for the lock and unpickle it. Where ``compute`` raised,
    later callers fail with its error instead of computing it again. Callers read the result
    and its folder, never write into them.
    """
    root = shared_folder(tmp_path_factory)
    result, failed = root / f"{name}.pickle", root / f"{name}.failed"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # Released when the file is closed.
        if result.exists():
            return pickle.loads(result.read_bytes())
        if failed.exists():
            pytest.fail(f"{name}, computed for another test, failed:\n{failed.read_text()}")
        folder = root / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        try:
            value = compute(folder)
        except (Exception, pytest.fail.Exception) as e:
            failed.write_text(f"{type(e).__name__}: {e}"[-5000:])
            raise
        partial = root / f"{name}.pickle.partial"
        partial.write_bytes(pickle.dumps(value))
        os.replace(partial, result)
        return value


@pytest.fixture(scope="session")
def verify_cache(tmp_path_factory) -> str:
    """One ``verify`` execution cache (``cache_dir``) for the whole run, every worker's.

    The cache is safe for concurrent verifications (``vertex_emulator/cache.py``): an entry is
    published by renaming a finished folder, the first writer wins, and a reader sees a key only
    once its ``outputs.json`` is in place; two runs that miss the same key both run the task.
    A test that asserts a task ran (not served from the cache) gets its run from ``verified``,
    which every other user of the same template and parameters asks for first.
    """
    folder = shared_folder(tmp_path_factory) / "verify-cache"
    folder.mkdir(exist_ok=True)
    return str(folder)


# The built-in profiles tests/test_verify.py verifies end to end (``verified``), each as
# ``chain_options`` says. gpu-a100x8's training (eight A100 in one machine, mirrored) is
# gpu-a100x8-dataflow's; gpu-a100 is the README's template and gpu-t4 docs/submit.md's, whose
# `verify` commands are then served from these runs' cache (tests/test_documented_commands.py).
FULL_CHAIN = (
    "cpu",
    "gpu-a100x8-dataflow",
    "gpu-t4",
    "gpu-a100",
    "gpu-a100-2workers",
    "tpu-v5e-8",
)
RETRIED = "gpu-t4"  # Its training is preempted once and retried under the task's retryPolicy.
# Verified on the sample as a shop's event table (write_events_sample: string ids, columns
# named with user_col/item_col/time_col, id_type=string), through the Beam data prep.
EVENTS = "gpu-a100x8-dataflow"
# docs/submit.md compiles gpu-t4 with this image repository (--image-repository) and verifies it
# with this service account (the task's resolved parameters, so part of the cache key).
DOCS_REPOSITORY = "us-central1-docker.pkg.dev/my-project/ncf/ncf-pipelines"
DOCS_SERVICE_ACCOUNT = "ncf-runner@my-project.iam.gserviceaccount.com"
DOCS_TEMPLATE = "gpu-t4"
PREEMPTED = "The replica workerpool0-0 was preempted."


def chain_options(name: str) -> dict[str, Any]:
    """How FULL_CHAIN's profile ``name`` is verified: ``verified(name, **chain_options(name))``."""
    return dict(
        preempt_first_job=name == RETRIED,
        events=name == EVENTS,
        image_repository=DOCS_REPOSITORY if name == DOCS_TEMPLATE else "",
        service_account=DOCS_SERVICE_ACCOUNT if name == DOCS_TEMPLATE else "",
    )  # ``verified(..., preempt_first_job=True)``.


# KFP compiles in a process-wide pipeline context: two threads compiling at once fail ("Nested
# pipelines are not allowed"). Verifications may run in threads; their compiles take turns.
_COMPILING = threading.Lock()


@pytest.fixture(scope="session")
def verified(tmp_path_factory, verify_cache):
    """``verified(profile_name, preempt_first_job=False)``: the built-in profile compiled and
    verified end to end on the embedded sample with verify's defaults over ``verify_cache``,
    once per run (``once``); its ``VerifyReport``, whose ``work_dir`` holds the outputs.

    ``preempt_first_job``: the first custom job fails as a preempted one would (``PREEMPTED``)
    and the task is retried under its ``retryPolicy``. ``image_repository``: compiled with that
    ``--image-repository`` (``DOCS_REPOSITORY``); ``service_account``: run as that account.
    ``events``: on the sample as an event
    table (``write_events_sample``, with ``EVENT_PARAMS``) instead. Whoever verifies the same
    template with the same parameters over ``verify_cache`` (the docs' ``verify`` commands) asks
    for this first, so that this run's tasks ran here, not from the cache, and the later one is
    served.
    """

    def run(
        name: str,
        preempt_first_job: bool = False,
        events: bool = False,
        image_repository: str = "",
        service_account: str = "",
    ):
        def compute(folder: pathlib.Path):
            data = {}
            if events:  # The sample as an event table: string ids, its columns named.
                data = dict(
                    data_path=write_events_sample(str(folder / "events.csv")),
                    parameter_values=EVENT_PARAMS,
                )
            import vertex_emulator
            from pipelines import pipeline, profiles

            with _COMPILING:
                path = pipeline.compile_pipeline(
                    profiles.BUILTIN[name],
                    str(folder / f"{name}.yaml"),
                    image_repository=image_repository or None,
                )
            with vertex_emulator.Verification(
                path,
                work_dir=str(folder / "work"),
                cache_dir=verify_cache,
                retries=preempt_first_job,
                service_account=service_account or None,
                **data,
            ) as verification:
                if preempt_first_job:
                    verification.job_service.fail_next_job(PREEMPTED)
                return verification.run()

        suffix = ("-preempted" if preempt_first_job else "") + ("-events" if events else "")
        suffix += f"-{image_repository.replace('/', '_')}" if image_repository else ""
        suffix += f"-{service_account}" if service_account else ""
        return once(tmp_path_factory, f"verified-{name}{suffix}", compute)

    return run


# --- reading back what the code wrote ------------------------------------------------------------


def training_rows(positives_per_user, meta: DatasetMetadata) -> int:
    """Rows of one training epoch for users with these many training positives each, by
    prepare-data's recency rule written out here (the k-th latest positive appears
    1 + round(B e^(-k/S)) times, each copy with num_neg negatives)."""
    import math

    boost = meta.options.get("recency_boost", 0.0)
    scale = meta.options.get("recency_scale", 10.0)
    copies = sum(
        1 + (math.floor(boost * math.exp(-k / scale) + 0.5) if boost > 0 else 0)
        for t in positives_per_user
        for k in range(int(t))
    )
    return copies * (1 + meta.num_neg)


def read_split(root: str, meta: DatasetMetadata, training: bool, epoch: int = 0):
    """All rows of a prepared split, concatenated, via our own decoder (TF is tested separately)."""
    paths = meta.train_file_paths(root, epoch) if training else meta.eval_file_paths(root)
    return read_records(paths, training)


def read_records(paths: list[str], training: bool) -> dict[str, np.ndarray]:
    """All rows of these record files (training or eval layout), concatenated, by feature."""
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

    As prepare-data documents it: a repeated (user, item) keeps its latest row, each user's last
    interaction by time (ties: the later row) is held out for test and, where the dataset has a
    validation split, the second-to-last of a user with three or more for validation; the rest
    are training positives; indices are positions in the ascending raw ids. Returns
    ``(user raw ids, item raw ids, [set of training item indices per user index],
    [held-out item index per user index])``.
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
    dropped = held_out.index
    if meta.has_validation:  # And the validation item: the second-to-last of users with 3+.
        from training_core.data import sampling

        groups = raw.groupby("user_id")
        from_last = groups.cumcount(ascending=False)
        enough = groups["item_id"].transform("size") >= sampling.VALIDATION_MIN_INTERACTIONS
        dropped = dropped.union(raw.index[(from_last == 1) & enough])
    train_rows = raw.drop(index=dropped)
    users = np.sort(raw["user_id"].unique())
    items = np.sort(raw["item_id"].unique())
    u_idx = np.searchsorted(users, train_rows["user_id"].to_numpy())
    i_idx = np.searchsorted(items, train_rows["item_id"].to_numpy())
    seen = [set() for _ in users]
    for u, i in zip(u_idx.tolist(), i_idx.tolist(), strict=True):
        seen[u].add(i)
    held_out = held_out.set_index("user_id").loc[users, "item_id"].to_numpy()
    every = [set() for _ in users]  # Every interaction: what recommend leaves out.
    all_u = np.searchsorted(users, raw["user_id"].to_numpy())
    all_i = np.searchsorted(items, raw["item_id"].to_numpy())
    for u, i in zip(all_u.tolist(), all_i.tolist(), strict=True):
        every[u].add(i)
    return users, items, seen, np.searchsorted(items, held_out).tolist(), every


def checkpoint_values(path: str, model_only: bool = False) -> dict[str, np.ndarray]:
    """Every tensor saved in a checkpoint, by name without ``/.ATTRIBUTES/VARIABLE_VALUE``.

    ``path``: a checkpoint prefix (``.../ckpt-12``) or a folder (its latest checkpoint). The
    object graph is left out; ``model_only`` keeps the model's own variables (``model/...``,
    without optimizer slots), which plain and ``best/`` checkpoints both hold.
    """
    import tensorflow as tf

    reader = tf.train.load_checkpoint(path)
    values = {}
    for name in reader.get_variable_to_shape_map():
        if name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH"):
            continue
        if model_only and (not name.startswith("model/") or "OPTIMIZER_SLOT" in name):
            continue
        values[name.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")] = reader.get_tensor(name)
    return values


# --- the Vertex AI stand-in (the emulator's REST side), with credentials as on a real machine ---


@pytest.fixture
def standin(monkeypatch):
    from google.cloud import resourcemanager
    from google.cloud.aiplatform import initializer

    from vertex_emulator.emulator import RestStandIn

    with RestStandIn(access_token=TOKEN) as s:
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


@pytest.fixture
def vertex(standin, adc, tmp_path, monkeypatch):
    """The stand-in with the SDK pointed at it and /gcs/ mounted at a temporary folder."""
    from google.cloud import aiplatform
    from kfp.dsl.types import artifact_types

    monkeypatch.setattr(artifact_types, "_GCS_LOCAL_MOUNT_PREFIX", f"{tmp_path}/gcs/")
    aiplatform.init(api_endpoint=standin.url, api_transport="rest")
    return standin


# --- inputs built in code -------------------------------------------------------------------------


def submit_config(**changes):
    """A ``SubmitConfig`` that ``validate_config`` passes, with ``changes`` applied."""
    from pipelines.submit.request import SubmitConfig

    good = SubmitConfig(
        template_path="pipeline.yaml",  # Not read by validate_config.
        project=PROJECT,
        region=REGION,
        pipeline_root=f"gs://{BUCKET}/root",
        service_account=SA,
        network=NETWORK,
        labels={"team": "recs"},
        experiment="ncf-experiment",
        display_name="ncf",
        api_endpoint=f"https://{REGION}-aiplatform.googleapis.com",
    )
    return dataclasses.replace(good, **changes)


def random_shard(rng, num_users=40, num_items=60, max_count=50, index=0):
    """A ``sampling.Shard`` of random training items: 2 to ``max_count - 1`` distinct per user."""
    from training_core.data import sampling

    counts = rng.integers(2, max_count, num_users)
    items = [rng.choice(num_items, size=c, replace=False) for c in counts]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return sampling.Shard(
        index,
        np.arange(num_users, dtype=np.int64) * 3 + index,
        offsets,
        np.concatenate(items).astype(np.int64),
        num_items,
    )


# --- modules outside the packages ----------------------------------------------------------------


def load_script(relpath: str) -> types.ModuleType:
    """A module of this repository outside its packages (``tools/``), from its file.

    The tests leave ``sys.path`` alone: the file is loaded by its path and registered in
    ``sys.modules`` under its file name, as ``import`` would (once per process).
    """
    path = os.path.join(ROOT, relpath)
    name = os.path.splitext(os.path.basename(path))[0]
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == path:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
