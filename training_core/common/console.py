"""What our processes print: a quiet start-up, and progress a person can follow.

**Quiet start-up.** TensorFlow and the libraries around it print, at every start, what is not
about the user's run: CUDA factory "errors" on machines without a GPU, oneDNN and CPU-instruction
notes, "TensorRT not found" (TensorFlow's C++ log), SavedModel input renaming and checkpoint
timings (absl), Beam's type-hint conversions, and google-api-core's FutureWarning about Python
3.11. ``setup`` turns exactly these off. It must run before TensorFlow is imported (TensorFlow
reads ``TF_CPP_MIN_LOG_LEVEL`` once, when its library loads), so it is the first call of every
entry: the CLI's ``main`` and each component's body (a component runs in a process of its own).
What fails still fails in full: exceptions and their tracebacks, our own warnings, TensorFlow's
Python-side warnings; a TensorFlow error reaches the user as the Python exception that carries
its message. ``-v``/``--verbose`` or ``NCF_VERBOSE=1`` (``VERBOSE_ENV``) leave everything on.
``setup`` also spares the process the garbage collector's passes over everything it imported,
on the way in and at exit (about a second each for a TensorFlow process; docs/benchmarks.md).

**Progress.** ``progress(what, total, unit)`` reports long work (data prep files, training steps):
a bar (rich) when stderr is a terminal; when it is not (Vertex AI logs, CI), the work's own
periodic log lines, at the level ``Progress.level`` gives them; and when ``run-local`` asks for
them (``PROGRESS_ENV``), one-line events on stdout that it parses (``parse_event``) to draw one
display for the whole pipeline, a plain line every ``LINE_INTERVAL_S`` seconds off a terminal.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator

log = logging.getLogger(__name__)

VERBOSE_ENV = "NCF_VERBOSE"
PROGRESS_ENV = "NCF_PROGRESS"
PROGRESS_EVENTS = "events"  # PROGRESS_ENV's value: write events for a parent process to draw.
EVENT_PREFIX = "ncf-progress "
LINE_INTERVAL_S = 10.0  # run-local off a terminal: at most one progress line per this many seconds.
EVENT_INTERVAL_S = 0.25  # Events: at most one per this many seconds (and the last one).

# C++ log level 3: TensorFlow's own log lines are off, its spurious CUDA registration errors
# included (they are ERROR lines, so level 2 would keep them).
_TF_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}
# Loggers whose INFO lines are library chatter; their warnings and errors still show.
_CHATTY_LOGGERS = ("absl", "apache_beam")
# google-api-core (via Beam and TensorFlow) warns on every import that Python 3.11 support will
# end; this project's Python is pinned by TFDV, so the user can do nothing about it.
_PYTHON_VERSION_WARNING = r"You are using a Python version .* which Google will stop supporting"
# google-cloud-aiplatform warns on import that it will drop google-cloud-storage < 3; Apache Beam's
# gcp extra requires < 3 (Beam's version is TFDV's), so here too the user can do nothing about it.
_STORAGE_VERSION_WARNING = r"Support for google-cloud-storage < 3\.0\.0 will be removed"
# Beam also logs through the root logger (logging.info/warning), which a logger level cannot
# quiet: its INFO lines, and RunInference's warning that it cannot read memory usage (it asks
# the resource module, which its in-process workers do not import), are dropped by a filter.
_BEAM_ROOT_NOISE = re.compile(r"Resource module is not available")
GC_THRESHOLD = 20_000  # Allocations between young-generation collections (Python's: 700).
_exit_hook = False


def verbose() -> bool:
    """Whether ``NCF_VERBOSE`` asks for every library's output (read at call time)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def setup(verbose_output: bool | None = None) -> bool:
    """Quiets library start-up output unless verbose; call first, before TensorFlow is imported.

    Args:
        verbose_output: leave everything on; ``None``: as ``NCF_VERBOSE`` says.

    Returns:
        Whether output is verbose.
    """
    loud = verbose() if verbose_output is None else verbose_output
    _start_and_exit_quickly()
    if loud:
        return True
    for name, value in _TF_ENV.items():
        os.environ.setdefault(name, value)  # A value the user set wins.
    import absl.logging  # noqa: F401 (first, so that "absl" is absl's own logger class)

    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    for message in (_PYTHON_VERSION_WARNING, _STORAGE_VERSION_WARNING):
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
    root = logging.getLogger()
    if not any(isinstance(f, _BeamRootChatter) for f in root.filters):
        root.addFilter(_BeamRootChatter())
    return False


class _BeamRootChatter(logging.Filter):
    """Drops Beam's INFO lines and known noise that it logs through the root logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}apache_beam{os.sep}" not in record.pathname:
            return True
        if record.levelno <= logging.INFO:
            return False
        return not _BEAM_ROOT_NOISE.search(str(record.msg))


class _StderrNow(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at each record: a progress bar moves it above itself."""

    @property
    def stream(self):
        """``sys.stderr`` now."""
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def stderr_handler() -> logging.Handler:
    """A logging handler for a command line: stderr, drawn above a progress bar while one runs."""
    return _StderrNow()


def _start_and_exit_quickly() -> None:
    """Spares a process the garbage collector's full passes while it imports and as it exits.

    Importing TensorFlow, TFDV and Beam creates millions of objects; at Python's default gen-0
    threshold (700) the collector walks all of them several times on the way (about a second),
    and again at exit (another second). A larger gen-0 threshold (``GC_THRESHOLD``) skips those
    passes and costs at most that many young objects kept a little longer; at exit, frozen
    objects are not collected. Objects are still released by reference counting, so files are
    flushed and closed as usual.
    """
    global _exit_hook
    threshold, *older = gc.get_threshold()
    gc.set_threshold(max(threshold, GC_THRESHOLD), *older)
    if not _exit_hook:
        atexit.register(gc.freeze)
        _exit_hook = True


# ---------------------------------------------------------------------------------------------
# Progress
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Event:
    """One progress report of a task: ``done`` of ``total`` (``None``: unknown) ``unit``."""

    what: str
    done: int
    total: int | None
    unit: str = ""
    note: str = ""
    seconds: float = 0.0

    def count(self) -> str:
        """``250/477 steps``; for work of unknown size what was counted, if anything."""
        if self.total:
            return f"{self.done:,}/{self.total:,} {self.unit}".strip()
        return f"{self.done:,} {self.unit}".strip() if self.done else ""

    def describe(self) -> str:
        """``epoch 2/4: 250/477 steps (52%), loss 0.2756, 9s``: a plain progress line."""
        share = f" ({100 * self.done // self.total}%)" if self.total else ""
        parts = [self.count() + share, self.note, f"{self.seconds:.0f}s"]
        return f"{self.what}: " + ", ".join(p for p in parts if p)


def parse_event(line: str) -> Event | None:
    """The event a line written in events mode carries; ``None`` for any other line."""
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        return Event(**json.loads(line[len(EVENT_PREFIX) :]))
    except (ValueError, TypeError):
        return None


class Progress:
    """Reports one task's progress; ``update`` is cheap enough to call on every step.

    ``mode`` (``progress_mode``): ``bar`` draws on stderr, ``events`` writes events for
    run-local, ``lines`` draws nothing: the caller's own log lines are the plain progress lines,
    logged at ``level`` (INFO, and DEBUG while something is drawn, so they do not scroll under a
    bar; ``-v`` shows them again).
    """

    def __init__(self, what: str, total: int | None, unit: str, mode: str):
        self.what, self.total, self.unit, self.mode = what, total, unit, mode
        self._start = self._last = time.monotonic()
        self._done, self._note = 0, ""
        self._bar = None
        if mode == "bar":
            from rich.console import Console
            from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[count]}"),
                TextColumn("{task.fields[note]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._task = self._bar.add_task(what, total=total, count=self._count(), note="")
            self._bar.start()
        elif mode == PROGRESS_EVENTS:
            self._emit()

    @property
    def level(self) -> int:
        """The level for the caller's own progress log lines (see the class docstring)."""
        return logging.INFO if self.mode == "lines" else logging.DEBUG

    def update(self, done: int, note: str = "") -> None:
        """``done`` units so far (not an increment); ``note``: e.g. ``loss 0.2756``."""
        self._done, self._note = done, note
        if self._bar is not None:
            self._bar.update(self._task, completed=done, count=self._count(), note=note)
        elif self.mode == PROGRESS_EVENTS:
            now = time.monotonic()
            if now - self._last >= EVENT_INTERVAL_S:
                self._last = now
                self._emit()

    def close(self) -> None:
        """Ends the report: removes the bar, or sends the last event."""
        if self._bar is not None:
            self._bar.stop()
        elif self.mode == PROGRESS_EVENTS:
            self._emit()

    def _count(self) -> str:
        return Event(self.what, self._done, self.total, self.unit).count()

    def _emit(self) -> None:
        seconds = time.monotonic() - self._start
        event = Event(self.what, self._done, self.total, self.unit, self._note, seconds)
        print(f"{EVENT_PREFIX}{json.dumps(dataclasses.asdict(event))}", flush=True)


def progress_mode() -> str:
    """``events`` when run-local asks for them, ``bar`` on a terminal (stderr), else ``lines``."""
    if os.environ.get(PROGRESS_ENV) == PROGRESS_EVENTS:
        return PROGRESS_EVENTS
    isatty = getattr(sys.stderr, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


@contextlib.contextmanager
def progress(what: str, total: int | None = None, unit: str = "") -> Iterator[Progress]:
    """Reports a task's progress while the block runs (see the module's docstring)."""
    report = Progress(what, total, unit, progress_mode())
    try:
        yield report
    finally:
        report.close()
