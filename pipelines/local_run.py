"""Runs the whole pipeline on this machine with kfp.local (no cloud, no containers).

kfp.local prints everything: each task's inputs as JSON, every line its process writes, every
output's metadata. ``run_local`` shows what a person needs instead (``StepDisplay``): a line as
each step starts and ends, the steps' progress (``training_core.common.console`` events, drawn as a
bar on a terminal and as a line every few seconds elsewhere) and, when a step fails, its error. Each
step's whole output is kept in ``<pipeline_root>/logs/<step>.log``, and each step's time is taken
(``StepClock``) for the run's report. With ``verbose``, kfp.local and the libraries print as they
always do.

kfp.local has no hook for this: its own messages are records on the root logger, and it prints
each step's output with ``print``. So a filter on the root logger reads the records (kfp 2.13's
"Executing task 'NAME'" and "Task 'NAME' finished with status S") and stdout is redirected to
the display for the run; ``tests/test_run_local.py`` counts the lines of a whole run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from pipelines.local_conditions import conditions_enabled
from pipelines.run_report import StepTime
from training_core.common import console

# kfp.local's own messages (after its ANSI colours are taken out).
_STARTED = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# kfp.local warns for every task whose image name lacks "python": ours run in this environment
# on purpose (use_venv=False), which is what the warning asks about.
_IMAGE_WARNING = "You may be attemping to run a task that uses custom or non-Python base image"
_INDENT = " " * 4  # kfp.local indents each line a step prints.
# Lines of a failing step shown when it printed no traceback.
ERROR_TAIL_LINES = 40


class LocalRunFailed(RuntimeError):
    """A step of a local run failed (its error, printed above, says why)."""


@dataclasses.dataclass(frozen=True)
class LocalRunResult:
    """Where a local run put things, and what it measured."""

    pipeline_root: str
    outputs: dict[str, str]  # Pipeline output name -> artifact path.
    artifacts: dict[str, dict[str, str]]  # Task -> artifact name -> path, every step's outputs.
    metrics: dict[str, Any]
    seconds: float
    decision: dict[str, Any]  # compare_models' decision (blessed, both models' metrics, reason).
    logs: str  # Folder of every step's whole output ("" when verbose: kfp.local printed it).
    steps: tuple[StepTime, ...] = ()  # Every step in order: done, failed or skipped, its time.


def steps_of(pipeline_func) -> dict[str, str]:
    """Task name -> display name of each step that runs a process (the importer does not).

    Steps inside ``dsl.If`` branches are included (after the steps before them): a local run
    runs or skips them as their conditions say (``pipelines/local_conditions.py``).
    """
    spec = pipeline_func.pipeline_spec
    executors = spec.deployment_spec["executors"]
    steps = {}

    def walk(dag) -> None:
        for name, task in dag.tasks.items():
            component = spec.components[task.component_ref.name]
            if component.WhichOneof("implementation") == "dag":
                walk(component.dag)
            elif "container" in executors[component.executor_label]:
                steps[name] = task.task_info.name

    walk(spec.root.dag)
    return steps


def run_local(
    pipeline_root: str,
    arguments: dict[str, Any],
    pipeline_func=None,
    verbose: bool = False,
) -> LocalRunResult:
    """Runs the pipeline with kfp.local's subprocess runner in this Python environment.

    Args:
        pipeline_root: folder for every task's outputs (and ``logs/``).
        arguments: pipeline parameter values (``data_uri`` at least).
        pipeline_func: the local pipeline (default: ``build_pipeline`` of the local profile).
        verbose: print everything kfp.local and the libraries print, instead of the display.

    Raises:
        LocalRunFailed: a step failed; its error was printed to stderr.
    """
    from kfp import local

    from pipelines.pipeline import LOCAL_PROFILE, build_pipeline
    from pipelines.profiles import BUILTIN

    os.makedirs(pipeline_root, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=pipeline_root,
        raise_on_error=True,
    )
    pipeline_func = pipeline_func or build_pipeline(BUILTIN[LOCAL_PROFILE], local=True)
    logs = "" if verbose else os.path.join(pipeline_root, "logs")
    steps = steps_of(pipeline_func)
    clock = StepClock()
    t0 = time.perf_counter()
    if verbose:
        with (
            _child_environment({console.VERBOSE_ENV: "1"}),
            clock.timing(),
            conditions_enabled(),
        ):
            task = _run(pipeline_func, arguments, pipeline_root, None)
    else:
        display = StepDisplay(steps, logs)
        child_env = {console.PROGRESS_ENV: console.PROGRESS_EVENTS}
        with (
            _child_environment(child_env),
            clock.timing(),  # Before the display's filter, which keeps the records from others.
            display.capturing(),
            conditions_enabled(on_skip=display.skipped),
        ):
            task = _run(pipeline_func, arguments, pipeline_root, display)
    seconds = time.perf_counter() - t0
    outputs = {name: artifact.path for name, artifact in task.outputs.items()}
    metrics = dict(task.outputs["metrics"].metadata)
    decision = dict(task.outputs["decision"].metadata) if "decision" in task.outputs else {}
    artifacts = _artifacts(outputs["exported_model"])
    return LocalRunResult(
        pipeline_root, outputs, artifacts, metrics, seconds, decision, logs, clock.steps(steps)
    )


def _run(pipeline_func, arguments: dict[str, Any], root: str, display: StepDisplay | None):
    try:
        return pipeline_func(**arguments)
    except RuntimeError as e:  # kfp.local's "... finished with status FAILURE ...".
        failed = display.failed() if display is not None else None
        if failed is None:
            where = "its own message is in its log above"
        else:
            where = f"its error is above, its whole log in {failed}"
        message = _ANSI.sub("", str(e)).rstrip(".")
        raise LocalRunFailed(f"{message}; {where}; the run's outputs are under {root}") from None


def _artifacts(exported_model: str) -> dict[str, dict[str, str]]:
    """Task -> artifact name -> path, read from each task's ``executor_output.json``."""
    # kfp.local lays a run out as <root>/<pipeline>-<time>/<task>/, each task with the
    # executor_output.json that lists its output artifacts (metrics have metadata, no file).
    run_dir = os.path.dirname(os.path.dirname(exported_model))
    artifacts: dict[str, dict[str, str]] = {}
    for step in sorted(os.listdir(run_dir)):
        record = os.path.join(run_dir, step, "executor_output.json")
        if os.path.exists(record):
            with open(record) as f:
                listed = json.load(f).get("artifacts", {})
            artifacts[step] = {
                name: entry["artifacts"][0]["uri"] for name, entry in sorted(listed.items())
            }
    return artifacts


@contextlib.contextmanager
def _child_environment(values: Mapping[str, str]) -> Iterator[None]:
    """Sets environment variables for the steps' processes during the run, then restores them."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class StepClock(logging.Filter):
    """Times each step from kfp.local's records (root logger); lets every record through."""

    def __init__(self) -> None:
        super().__init__()
        self._started: dict[str, float] = {}
        self._ended: dict[str, tuple[str, float]] = {}  # Task -> (kfp's status, seconds).

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Reads the records while the block runs."""
        root = logging.getLogger()
        root.addFilter(self)
        try:
            yield
        finally:
            root.removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        """Notes a step's start or end."""
        text = _ANSI.sub("", record.getMessage())
        if started := _STARTED.search(text):
            self._started[started[1]] = time.monotonic()
        elif (finished := _FINISHED.search(text)) and finished[1] in self._started:
            seconds = time.monotonic() - self._started[finished[1]]
            self._ended[finished[1]] = (finished[2], seconds)
        return True

    def steps(self, steps: Mapping[str, str]) -> tuple[StepTime, ...]:
        """Each of ``steps`` (task -> display name): done or failed with its time, else skipped.

        In the order they ran, then the ones that did not run.
        """
        timed = []
        ran = sorted(steps, key=lambda task: self._started.get(task, math.inf))
        for task, name in ((task, steps[task]) for task in ran):
            status, seconds = self._ended.get(task, ("", None))
            if seconds is None:
                timed.append(StepTime(task, name, "skipped"))
            else:
                timed.append(
                    StepTime(task, name, "done" if status == "SUCCESS" else "failed", seconds)
                )
        return tuple(timed)


class StepDisplay:
    """What a person sees of a local run: steps starting and ending, progress, a step's error.

    Args:
        steps: task name -> display name, of the steps that run a process.
        log_dir: where each step's whole output goes (``<task>.log``).
        out, err: the streams to draw on (default: ``sys.stdout``/``sys.stderr`` now).
    """

    def __init__(
        self,
        steps: Mapping[str, str],
        log_dir: str,
        out: TextIO | None = None,
        err: TextIO | None = None,
    ):
        self.steps = dict(steps)
        self.log_dir = log_dir
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.terminal = _is_terminal(self.out)
        self._number = 0
        self._task: str | None = None  # The step running now.
        self._log: TextIO | None = None  # Its log file (or the last step's, until the next).
        self._lines: list[str] = []  # What the step running now printed.
        self._started = 0.0
        self._last_line = 0.0
        self._bar = None  # On a terminal: the live line of the running step (rich).
        self._bar_task = None  # Its rich task, for the step's current piece of work.
        self._bar_what = ""
        self.failed_log: str | None = None  # The failed step's log file, once one failed.

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        """Routes kfp.local's records and prints to this display while the block runs."""
        os.makedirs(self.log_dir, exist_ok=True)
        records = _KfpRecords(self)
        root = logging.getLogger()
        root.addFilter(records)
        if self.terminal:
            self._bar = _step_bar(self.out)
            self._bar.start()
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(_StepOutput(self)):
                warnings.filterwarnings("ignore", message=_IMAGE_WARNING, category=RuntimeWarning)
                yield
        finally:
            root.removeFilter(records)
            if self._bar is not None:
                self._bar.stop()
                self._bar = None
            self._close_log()

    # -- what kfp.local reports ---------------------------------------------------------------

    def started(self, task: str) -> None:
        """A task started (the importer, which runs no process, is not shown)."""
        self._close_log()
        if task not in self.steps:
            return
        self._log = open(os.path.join(self.log_dir, f"{task}.log"), "w")  # noqa: SIM115
        self._number += 1
        self._task, self._lines = task, []
        self._started = self._last_line = time.monotonic()
        self._say(f"{self._prefix()} started: {self.steps[task]}")
        if self._bar is not None:
            self._bar_what = ""
            self._bar_task = self._bar.add_task(self._prefix(), total=None, detail="")

    def finished(self, task: str, status: str) -> None:
        """A task ended with kfp.local's status (``SUCCESS`` or ``FAILURE``)."""
        if task != self._task:
            return
        if status != "SUCCESS":
            self.failed()
            return
        self._end_bar()
        self._say(f"{self._prefix()} done in {time.monotonic() - self._started:.1f}s")
        self._task = None

    def failed(self) -> str | None:
        """Prints the running step's error to stderr once; returns its log file (None: none)."""
        if self._task is None:
            return self.failed_log
        if self._bar is not None:  # The run ends here: the error goes below the last line.
            self._bar.stop()
            self._bar = None
        seconds = time.monotonic() - self._started
        lines = self._lines
        first = next((i for i, s in enumerate(lines) if s.startswith("Traceback (")), None)
        shown = lines[first:] if first is not None else lines[-ERROR_TAIL_LINES:]
        while shown and not shown[-1].strip():
            shown = shown[:-1]
        log_file = os.path.join(self.log_dir, f"{self._task}.log")
        self._say(f"{self._prefix()} FAILED after {seconds:.1f}s:", self.err)
        for line in shown:
            self._say(f"  {line}", self.err, clock=False)
        self._task, self.failed_log = None, log_file
        return log_file

    def skipped(self, branch: str, tasks: list[str]) -> None:
        """A ``dsl.If`` branch named ``branch`` was skipped: its steps will not run."""
        self._close_log()
        for task in tasks:
            if task in self.steps:
                self._number += 1
                self._task = task
                self._say(f"{self._prefix()} skipped: {branch} is false")
                self._task = None

    def output_line(self, line: str) -> None:
        """A line a step's process printed: a progress event, or a line for its log."""
        event = console.parse_event(line)
        if event is None:
            self.log_line(line)
        elif self._task is not None:
            self._progress(event)

    def log_line(self, text: str) -> None:
        """A line for the step's log file (the running step's, else the last one's)."""
        if self._task is not None:
            self._lines.append(text)
        if self._log is not None:
            self._log.write(text + "\n")

    # -- drawing ------------------------------------------------------------------------------

    def _prefix(self) -> str:
        return f"[{self._number}/{len(self.steps)}] {self._task or '':<15}"

    def _progress(self, event: console.Event) -> None:
        if self._bar is not None:
            detail = "  ".join(p for p in (event.count(), event.note) if p)
            if event.what != self._bar_what:  # New work (an epoch, an evaluation): a new bar.
                self._bar.remove_task(self._bar_task)
                self._bar_what = event.what
                self._bar_task = self._bar.add_task(
                    f"{self._prefix()} {event.what}", total=event.total, detail=""
                )
            self._bar.update(self._bar_task, completed=event.done, detail=detail)
            return
        now = time.monotonic()
        if now - self._last_line >= console.LINE_INTERVAL_S:
            self._last_line = now
            self._say(f"{self._prefix()} {event.describe()}")

    def _end_bar(self) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.remove_task(self._bar_task)

    def _say(self, text: str, stream: TextIO | None = None, clock: bool = True) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}" if clock else text
        if self._bar is not None:  # Above the live line.
            self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:  # Not print(): kfp.local replaces it while a step runs, to indent the step's lines.
            stream = stream or self.out
            stream.write(line + "\n")
            stream.flush()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def _step_bar(out: TextIO):
    """The live line of the running step (rich), drawn on ``out``."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=Console(file=out),
        transient=True,
        redirect_stdout=False,  # kfp.local's prints go to the display (capturing).
    )


class _KfpRecords(logging.Filter):
    """Reads kfp.local's records (root logger): starts and ends to the display, all to the log."""

    def __init__(self, display: StepDisplay):
        super().__init__()
        self.display = display

    def filter(self, record: logging.LogRecord) -> bool:
        text = _ANSI.sub("", record.getMessage())
        if started := _STARTED.search(text):
            self.display.started(started[1])
        elif finished := _FINISHED.search(text):
            self.display.finished(finished[1], finished[2])
        for line in text.splitlines():
            self.display.log_line(line)
        return False


class _StepOutput(io.TextIOBase):
    """Stands in for stdout during a run: each whole line goes to ``StepDisplay.output_line``."""

    def __init__(self, display: StepDisplay):
        super().__init__()
        self.display = display
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self.display.output_line(line.removeprefix(_INDENT))
        return len(text)
