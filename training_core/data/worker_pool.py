"""Tasks run in forked worker processes that die with this one, a killed worker named by its signal.

Data prep's per-shard files are written by such tasks (``prepare``). Unlike a bare
``multiprocessing.Pool``, a worker the kernel kills (out of memory: SIGKILL) fails the run at
once with ``faults.WorkerKilled`` instead of leaving it waiting forever, and no worker outlives
the run or writes after it failed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
import os
import signal

from training_core.common import faults, process_lifetime


def _call(task: tuple):
    fn, args = task
    return fn(*args)


@contextlib.contextmanager
def task_results(tasks: list[tuple], workers: int):
    """Runs ``(fn, args)`` tasks, yielding an iterator of results in task order.

    A worker's exception reaches this process as itself (an ``OSError`` keeps its errno and the
    file it names, see ``shards``); a worker killed outright (the kernel's out-of-memory killer
    sends SIGKILL) raises ``faults.WorkerKilled`` naming the signal, where a
    ``multiprocessing.Pool`` would wait forever for its task. Worker processes die with this one
    (``_start_worker``) and are killed when the block ends early, so none outlives the
    run or writes after it failed.
    """
    if workers <= 1:
        yield (fn(*args) for fn, args in tasks)
        return
    pool = concurrent.futures.ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_start_worker,
        initargs=(os.getpid(),),
    )
    try:
        yield _results(pool, tasks, workers)
    except BaseException:
        _kill_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _start_worker(parent_pid: int) -> None:
    """A pool worker's start: it dies with the parent, and of SIGTERM.

    The parent's SIGTERM handler (``process_lifetime.terminate_as_exit``: a clean exit) is
    inherited by the fork; in a worker a clean exit waits on the pool's queues, which the pool,
    stopping its workers with SIGTERM after one was killed, would wait on in turn. The parent
    forks workers with SIGTERM blocked, so none gets it before this runs.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    process_lifetime.die_with_parent(parent_pid)


def _results(pool: concurrent.futures.ProcessPoolExecutor, tasks: list[tuple], workers: int):
    try:
        # The first submit forks every worker; SIGTERM stays blocked in them until _start_worker.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            results = pool.map(_call, tasks)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        yield from results
    except concurrent.futures.process.BrokenProcessPool:
        started = _workers(pool)
        pool.shutdown(wait=True)  # It stops and joins the others: every exit status is known.
        raise faults.WorkerKilled("data prep", _killed_by(started), workers) from None


def _workers(pool: concurrent.futures.ProcessPoolExecutor) -> list:
    # The executor's process table: ProcessPoolExecutor has no public way to kill its workers
    # or read their exit codes before Python 3.14 (terminate_workers reads this same table).
    return list((getattr(pool, "_processes", None) or {}).values())


def _killed_by(workers: list) -> int | None:
    """The signal that killed a worker of a broken pool (SIGKILL first), ``None`` if unknown."""
    signals = {-p.exitcode for p in workers if p.exitcode is not None and p.exitcode < 0}
    return signal.SIGKILL if signal.SIGKILL in signals else min(signals, default=None)


def _kill_workers(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Stops every worker now, mid-task: after a failure none may write any more."""
    for process in _workers(pool):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.kill()
