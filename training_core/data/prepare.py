"""Raw interactions to pre-batched NCF TFRecords, on one machine.

Steps: read (``io``: integer or string ids, and which rows are positives), clean and index in
memory (duplicates, minimum ratings, contiguous ids in ascending raw-id order; rows that are no
positive kept aside as seen-only pairs, which no negative draw picks), split by time (each
user's last interaction the test item, the one before it the validation item: ``sampling``; a
refit trains on every interaction beside the same splits), take the global decisions
(``plan``), then per shard of users and per epoch draw training negatives and the held-out
splits' candidates and write pre-batched records, and each shard's seen-only pairs
(``shards``). Shards run in worker processes that die with this one; the output is
byte-identical for any number of workers. The folder is held by one writer and a run builds in a
private folder, published in one step (``dataset_folder``): an interrupted or failed run never
looks complete and never harms the dataset that was there. ``prepare_beam`` is the other engine,
over the same ``plan`` and ``shards``; ``run`` picks one by the runner's name.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator

import numpy as np

from training_core.common import atomic_writes, console, faults
from training_core.data import dataset_folder, sampling, shards
from training_core.data import io as rio
from training_core.data.config import RUNNER_LOCAL, PrepareConfig, check_runner
from training_core.data.ids import ID_INT64
from training_core.data.metadata import (
    ITEM_VOCAB,
    SPLIT_TEST,
    SPLIT_VALIDATION,
    USER_VOCAB,
    DatasetMetadata,
    ShardFile,
    epoch_dir,
    vocab_text,
)
from training_core.data.plan import (
    Estimate,
    Plan,
    build_metadata,
    build_name,
    estimate,
    make_plan,
    nothing_left,
    read_options,
)
from training_core.data.prep_result import PrepareResult, dataset_bytes

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class IndexedData:
    """Clean interactions with contiguous ids, grouped by user in time order."""

    user_vocab: np.ndarray  # Raw id of each user index (int64, or an object array of str).
    item_vocab: np.ndarray  # Raw id of each item index, likewise.
    offsets: np.ndarray  # Per user index, into items.
    items: np.ndarray  # Item indices, each user's oldest first, the test item last.
    stats: dict[str, int]
    # Each user's seen-only items (rows that are no positive: ``sampling.Shard.seen_items``),
    # ascending, as CSR over the users; None when the data has none.
    seen_offsets: np.ndarray | None = None
    seen_items: np.ndarray | None = None
    user_id_type: str = ID_INT64  # ids.ID_KINDS, as the reader found them.
    item_id_type: str = ID_INT64
    # Per seen-only item, how many of the user's positives came before it (``Shard.seen_before``).
    seen_before: np.ndarray | None = None

    @property
    def num_users(self) -> int:
        """Users kept."""
        return len(self.user_vocab)

    @property
    def num_items(self) -> int:
        """Items kept."""
        return len(self.item_vocab)

    @property
    def num_seen_only(self) -> int:
        """Seen-only (user, item) pairs kept."""
        return 0 if self.seen_items is None else len(self.seen_items)


def index_interactions(data: rio.Interactions, min_ratings: int) -> IndexedData:
    """Cleans and indexes raw interactions; each decision is logged and counted.

    - A user who rated an item several times keeps the latest interaction (ties: the later row);
      whether that row is a positive decides whether the pair is one (``data.positive``).
    - Only positives count from here on: users with fewer than ``min_ratings`` distinct positive
      items are dropped, as the reference does.
    - Users left with a single positive are dropped: leave-one-out leaves them nothing to train.
    - Ids are remapped to ``0..n-1`` in ascending raw-id order (vocab files keep the raw ids),
      over the positives of the users kept.
    - Users who interacted with every item (positives and seen-only pairs together) are dropped:
      no negative exists for them.
    - The seen-only pairs of the users kept, on items kept, are kept beside the positives.
    """
    n = len(data)
    stats = {"rows_read": n}
    ts = data.timestamps
    # Work in pairs on two threads: NumPy's passes and sorts (and pandas' hashing) release the
    # GIL. The grouping order, by (user, time) with ties in file order, is taken over every row
    # while the check for repeated pairs runs; every later step only drops rows, which keeps
    # the order of the rest, so the grouping order of the rows kept is this order restricted
    # to them.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        item_codes = pool.submit(_factorize, data.items)
        user_vocab, users = _factorize(data.users)
        item_vocab, items = item_codes.result()
        grouping = pool.submit(_stable_order, users, ts)
        kept = _latest_of_each_pair(users, items, ts, len(item_vocab))
        order = grouping.result()
    stats["duplicate_pairs_dropped"] = 0 if kept is None else int(n - kept.sum())
    if stats["duplicate_pairs_dropped"]:
        log.warning(
            "%d repeated (user, item) rows dropped; the latest of each pair is kept",
            stats["duplicate_pairs_dropped"],
        )
    seen_rows = None  # The rows kept that are seen-only pairs; None: there is no rule.
    if data.positive is not None:
        seen_rows = ~data.positive if kept is None else kept & ~data.positive
        kept = data.positive if kept is None else kept & data.positive
        stats.update(data.rule_counts)
        stats["seen_only_pairs"] = 0  # Those kept: set below.
        if seen_rows.any():
            log.info(
                "%d (user, item) pairs are seen only (%s): never positives nor negatives",
                int(seen_rows.sum()),
                ", ".join(f"{k} {v} rows" for k, v in sorted(data.rule_counts.items())),
            )

    # ``kept`` stays None while every row is kept (most tables): no pass filters the rows then.
    def rows_kept(values: np.ndarray) -> np.ndarray:
        return values if kept is None else values[kept]

    counts = np.bincount(rows_kept(users), minlength=len(user_vocab))
    threshold = max(min_ratings, 2)
    good_user = counts >= threshold
    few = int(((counts > 0) & (counts < min_ratings)).sum())
    single = int(((counts > 0) & (counts < 2) & (counts >= min_ratings)).sum())
    stats["users_below_min_ratings"] = few
    stats["single_interaction_users"] = single
    if few:
        log.info("%d users with fewer than %d ratings dropped (--min-ratings)", few, min_ratings)
    if single:
        log.warning(
            "%d users with a single interaction dropped: leave-one-out leaves them no "
            "training data",
            single,
        )

    # Items are indexed over the users kept; users with every item are then dropped too.
    seen_users = seen_items = seen_at = None
    if seen_rows is not None and seen_rows.any():
        seen_at = np.flatnonzero(seen_rows)
        seen_users, seen_items = users[seen_at], items[seen_at]
    while True:
        if not good_user.all():
            kept = good_user[users] if kept is None else kept & good_user[users]
            counts = np.bincount(rows_kept(users), minlength=len(user_vocab))
        present = np.zeros(len(item_vocab), dtype=bool)
        present[rows_kept(items)] = True
        num_items = int(present.sum())
        seen = counts
        if seen_users is not None:
            on_kept = good_user[seen_users] & present[seen_items]
            seen_users, seen_items = seen_users[on_kept], seen_items[on_kept]
            seen_at = seen_at[on_kept]
            seen = counts + np.bincount(seen_users, minlength=len(user_vocab))
        full = (seen >= num_items) & (counts > 0)
        if not full.any():
            break
        stats["users_with_every_item"] = stats.get("users_with_every_item", 0) + int(full.sum())
        log.warning(
            "%d users interacted with every item and were dropped: no negatives exist",
            int(full.sum()),
        )
        good_user &= ~full
    seen_before = None
    if kept is not None:
        if not kept.any():
            raise nothing_left(stats, min_ratings)
        if seen_at is not None:
            seen_before = _positives_before(order, kept, seen_at, users, counts)
        order = order[kept[order]]
    user_present = counts > 0
    stats["rows_kept"] = int(len(order))
    counts = counts[user_present]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    grouped_items = items[order]
    item_index = None
    if num_items < len(item_vocab):
        item_index = np.cumsum(present) - 1
        grouped_items = item_index[grouped_items]
    seen_offsets = None
    if seen_users is not None:
        user_index = np.cumsum(user_present) - 1
        seen_offsets, seen_items, seen_before = _seen_only_sets(
            user_index[seen_users],
            seen_items if item_index is None else item_index[seen_items],
            seen_before,
            int(user_present.sum()),
            num_items,
        )
        stats["seen_only_pairs"] = int(len(seen_items))
    return IndexedData(
        user_vocab[user_present],
        item_vocab[present],
        offsets,
        grouped_items,
        stats,
        seen_offsets,
        seen_items,
        data.user_id_type,
        data.item_id_type,
        seen_before,
    )


def _positives_before(
    order: np.ndarray, positive: np.ndarray, rows: np.ndarray, users: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """For each of ``rows``, how many positive rows of its user come before it in ``order``.

    ``order`` groups the rows by user in time order (ties in file order); ``positive`` marks
    the positive rows kept; ``counts`` is each user's number of them.
    """
    along = positive[order].astype(np.int64)
    before = np.cumsum(along)
    before -= along  # Positives strictly before each place in the order.
    place = np.empty(len(order), np.int64)
    place[order] = np.arange(len(order), dtype=np.int64)
    earlier_users = np.cumsum(counts) - counts
    return before[place[rows]] - earlier_users[users[rows]]


def _seen_only_sets(
    users: np.ndarray, items: np.ndarray, before: np.ndarray, num_users: int, num_items: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seen-only pairs as CSR over ``num_users`` users, each user's items ascending.

    ``before`` (``IndexedData.seen_before``) is carried along in the same order.
    """
    pairs = users * num_items + items
    by_pair = np.argsort(pairs, kind="stable")
    offsets = np.zeros(num_users + 1, np.int64)
    np.cumsum(np.bincount(users, minlength=num_users), out=offsets[1:])
    return offsets, pairs[by_pair] % num_items, before[by_pair]


def _latest_of_each_pair(
    users: np.ndarray, items: np.ndarray, ts: np.ndarray, num_items: int
) -> np.ndarray | None:
    """The rows to keep when a user rated an item more than once, or None when none did.

    Of each repeated (user, item) pair the latest row is kept (ties: the later row in the
    file). One sort tells that no pair repeats, which is the case for most tables.
    """
    pair = users * num_items + items
    # Timsort finds the runs of a file grouped by user (as MovieLens writes them) and takes a
    # fraction of quicksort's time there; on a shuffled file quicksort is the faster.
    sorted_pair = np.sort(pair, kind="stable" if _mostly_ascending(pair) else "quicksort")
    if len(pair) < 2 or not (sorted_pair[1:] == sorted_pair[:-1]).any():
        return None
    del sorted_pair
    order = np.lexsort((ts, items, users))  # Stable: equal keys stay in file order.
    pair = pair[order]
    last_of_pair = np.ones(len(pair), dtype=bool)
    last_of_pair[:-1] = pair[1:] != pair[:-1]
    kept = np.zeros(len(pair), dtype=bool)
    kept[order[last_of_pair]] = True
    return kept


def _mostly_ascending(values: np.ndarray) -> bool:
    """Whether most neighbours are in order: a stable sort (timsort) finds long runs then."""
    return len(values) > 1 and np.count_nonzero(values[1:] >= values[:-1]) >= 0.75 * len(values)


# Ids spread over at most this many values per row (and this many in all) are indexed through
# a table over their range: one pass, several times faster than hashing them.
_DENSE_RANGE_PER_ROW = 8
_DENSE_RANGE_MAX = 1 << 28


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and each value's index among them.

    Ids over a range not much wider than the rows (MovieLens' are) go through a table over the
    range; others through a hash (pandas), faster than ``np.unique(return_inverse=True)``.
    Same result either way. String ids (an object array) go to :func:`_factorize_strings`.
    """
    if values.dtype == object:
        return _factorize_strings(values)
    if len(values):
        lo, hi = int(values.min()), int(values.max())
        span = hi - lo + 1
        if span <= min(_DENSE_RANGE_PER_ROW * len(values) + 1024, _DENSE_RANGE_MAX):
            shifted = values - lo
            present = np.zeros(span, dtype=bool)
            present[shifted] = True
            index = np.cumsum(present, dtype=np.int64)
            index -= 1
            return np.flatnonzero(present) + lo, index[shifted]
    import pandas as pd

    codes, uniques = pd.factorize(values, sort=True)
    return np.asarray(uniques, dtype=np.int64), codes.astype(np.int64, copy=False)


def _factorize_strings(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_factorize` for an object array of ``str``: the vocabulary in Python's str order.

    Arrow's dictionary encoding (a hash in C) then a sort of the distinct values alone: about a
    second for 5M rows of 200k ids, where pandas takes half again as long and ``np.unique`` on
    objects compares Python strings throughout. Arrow sorts strings by their UTF-8 bytes, which
    is Unicode code point order, Python's str order.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pa.array(values, type=pa.string()).dictionary_encode()
    distinct = encoded.dictionary
    order = pc.sort_indices(distinct).to_numpy()
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    vocab = np.asarray(distinct.take(pa.array(order)).to_pylist(), dtype=object)
    return vocab, rank[encoded.indices.to_numpy(zero_copy_only=False)]


def _stable_order(users: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Indices that sort by (user, timestamp), ties in array order.

    One stable sort of a combined int64 key (a lexsort when it could overflow). Timsort takes
    rows grouped by user (as MovieLens writes them) in a few passes; other rows are grouped by
    user first with a radix sort (:func:`_group_by_user`), which costs less than the sort it
    saves.
    """
    if len(ts) == 0:
        return np.zeros(0, dtype=np.int64)
    t_min, t_max = int(ts.min()), int(ts.max())
    span = t_max - t_min + 1
    if (int(users.max()) + 1) * span >= 2**62:
        return np.lexsort((ts, users))
    key = ts - t_min  # In [0, span): the sum below stays under 2**62.
    key += users * span
    if _mostly_ascending(users):
        return np.argsort(key, kind="stable")
    grouped = _group_by_user(users)
    return grouped.take(np.argsort(key.take(grouped), kind="stable"))


def _group_by_user(users: np.ndarray) -> np.ndarray:
    """A stable order by user code (codes ``>= 0``): a radix sort over 16-bit digits.

    NumPy's stable sort of uint16 is a radix sort, so each digit costs one linear pass.
    """
    order = None
    for shift in range(0, max(int(users.max()).bit_length(), 1), 16):
        digit = users if order is None else users.take(order)
        step = np.argsort(((digit >> shift) & 0xFFFF).astype(np.uint16), kind="stable")
        order = step if order is None else order.take(step)
    return order


def make_shard(data: IndexedData, shard: int, num_shards: int) -> sampling.Shard:
    """The users ``u % num_shards == shard`` and their interactions."""
    users = np.arange(shard, data.num_users, num_shards, dtype=np.int64)
    starts, ends = data.offsets[users], data.offsets[users + 1]
    counts = ends - starts
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    idx = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1], dtype=np.int64)
    if data.seen_items is None:
        return sampling.Shard(shard, users, offsets, data.items[idx], data.num_items)
    seen_offsets, seen_items = _rows_of(data.seen_offsets, data.seen_items, users)
    _, seen_before = _rows_of(data.seen_offsets, data.seen_before, users)
    return sampling.Shard(
        shard,
        users,
        offsets,
        data.items[idx],
        data.num_items,
        seen_offsets,
        seen_items,
        seen_before,
    )


def _rows_of(
    offsets: np.ndarray, values: np.ndarray, users: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The CSR rows ``users`` of ``(offsets, values)``, as a CSR of their own."""
    starts, ends = offsets[users], offsets[users + 1]
    counts = ends - starts
    out = np.zeros(len(users) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    idx = np.repeat(starts - out[:-1], counts) + np.arange(out[-1], dtype=np.int64)
    return out, values[idx]


# ---------------------------------------------------------------------------------------------
# Per-shard work, run in worker processes. The indexed data reaches forked workers through this
# module global (copy-on-write), not through pickling.
# ---------------------------------------------------------------------------------------------

_WORK: dict = {}


def _write_train_shard(shard_index: int, epoch: int) -> tuple[ShardFile, float]:
    t0 = time.perf_counter()
    w = _WORK
    shard = make_shard(w["data"], shard_index, w["opts"].num_shards)
    opts = w["opts"]
    comp = sampling.train_complement(shard, opts.validation, opts.refit)
    shard_file = shards.write_train_shard(shard, comp, epoch, opts, w["output_dir"])
    return shard_file, time.perf_counter() - t0


def _write_seen_only_shard(shard_index: int) -> tuple[ShardFile, float]:
    t0 = time.perf_counter()
    w = _WORK
    shard = make_shard(w["data"], shard_index, w["opts"].num_shards)
    return shards.write_seen_only_shard(shard, w["opts"], w["output_dir"]), time.perf_counter() - t0


def _write_eval_shard(shard_index: int, split: str) -> tuple[ShardFile, tuple[int, int], float]:
    t0 = time.perf_counter()
    w = _WORK
    shard = make_shard(w["data"], shard_index, w["opts"].num_shards)
    opts = w["opts"]
    shard_file, short = shards.write_eval_shard(
        shard, sampling.split_complement(shard, split), opts, w["output_dir"], split=split
    )
    train_comp = sampling.train_complement(shard, opts.validation, opts.refit)
    short_train = sampling.short_train_users(train_comp, opts.num_neg)
    return shard_file, (short, short_train), time.perf_counter() - t0


@contextlib.contextmanager
def _reusing_freed_memory() -> Iterator[None]:
    """Within the block glibc keeps the memory this process frees and hands it out again.

    By default glibc maps every allocation over 128 KB-32 MB afresh and unmaps it when freed,
    so each large array of the indexing and of every shard is faulted in and zeroed page by
    page by the kernel again: a tenth to a quarter of those steps' time, more with two worker
    processes faulting at once. Worker processes forked in the block inherit the setting and
    end with the run; this process gets glibc's defaults back at the end (dynamic thresholds
    excepted) and returns what it kept (``malloc_trim``). A no-op where the C library is not
    glibc.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt, malloc_trim = libc.mallopt, libc.malloc_trim
    except (AttributeError, OSError):
        yield
        return
    m_trim_threshold, m_mmap_max = -1, -4  # <malloc.h>
    mallopt(m_mmap_max, 0)
    mallopt(m_trim_threshold, 1 << 30)
    try:
        yield
    finally:
        mallopt(m_mmap_max, 65536)  # glibc's defaults.
        mallopt(m_trim_threshold, 128 * 1024)
        malloc_trim(0)


def _call(task: tuple):
    fn, args = task
    return fn(*args)


@contextlib.contextmanager
def _task_results(tasks: list[tuple], workers: int):
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

    The parent's SIGTERM handler (``atomic_writes.terminate_as_exit``: a clean exit) is inherited by
    the fork; in a worker a clean exit waits on the pool's queues, which the pool, stopping its
    workers with SIGTERM after one was killed, would wait on in turn. The parent forks workers
    with SIGTERM blocked, so none gets it before this runs.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    atomic_writes.die_with_parent(parent_pid)


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


def prepare(config: PrepareConfig) -> PrepareResult:
    """Runs data preparation end to end and returns the dataset's metadata.

    A folder that already holds the same dataset (same source content and options) and passes
    its size checks is reused as is, so a re-run or a retried pipeline step costs only the
    source read. A damaged one is prepared again; a different one is kept unless ``overwrite``.
    """
    config.check()
    # Before the input is read: a folder others could plant links in is refused at once.
    atomic_writes.check_output_folder(config.output_dir, "prepare-data")
    with _reusing_freed_memory():
        return _prepare(config)


def item_vocabulary(config: PrepareConfig) -> np.ndarray:
    """The item vocabulary ``prepare(config)`` would write (raw ids), nothing written.

    The input read and indexed as ``prepare`` reads and indexes it: what ``run-local`` checks a
    champion's catalogue against before any step runs (training_core/evaluation/gate.py).

    Raises:
        io.DataError: input that cannot be read as interactions (as ``prepare`` would).
    """
    data = rio.read_interactions(
        config.input_path, config.format, config.columns, **read_options(config)
    )
    return index_interactions(data, config.min_ratings).item_vocab


def _prepare(config: PrepareConfig) -> PrepareResult:
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    source, indexed = _read_and_index(config, timings)
    plan = make_plan(
        config,
        source.format,
        source.sha256,
        indexed.stats["rows_kept"],
        indexed.num_users,
        indexed.num_items,
        int(sampling.has_validation_item(np.diff(indexed.offsets)).sum()),
    )
    out = config.output_dir
    build = build_name(config, source.sha256)
    counts = np.diff(indexed.offsets)
    trained = (
        counts
        if config.refit
        else counts - 1 - (sampling.has_validation_item(counts) if config.validation else 0)
    )
    size = estimate(
        plan,
        config,
        indexed.stats["rows_kept"],
        indexed.num_users,
        indexed.num_items,
        indexed.num_seen_only,
        sampling.recency_extra_rows(trained, config.recency_boost, config.recency_scale),
    )
    with (
        faults.writing(
            "the prepared dataset", out, size.bytes, "--output", after=NOTHING_PUBLISHED
        ),
        dataset_folder.holding(out),
    ):
        existing = _reusable(out, plan, build, config.overwrite)
        if existing is not None:
            seconds = time.perf_counter() - t0
            return PrepareResult(existing, out, True, seconds, dataset_bytes(existing))
        check_resources(config, plan, size, _worker_count(config, plan))
        with dataset_folder.building(out, build, plan.num_epochs, config.validation) as root:
            meta = _build(config, source, indexed, plan, build, root, timings)
            dataset_folder.publish(out, meta)
    return PrepareResult(meta, out, False, time.perf_counter() - t0, dataset_bytes(meta), timings)


NOTHING_PUBLISHED = (
    "nothing was published: the folder keeps the dataset it held before (if any), and the "
    "partial build was removed"
)


def check_resources(config: PrepareConfig, plan: Plan, size: Estimate, workers: int) -> None:
    """Refuses before writing when the output's disk or the memory cannot hold the plan.

    The numbers are :func:`plan.estimate`'s; raises ``faults.MachineFault``.
    """
    faults.check_room(
        config.output_dir,
        size.bytes,
        "the prepared dataset",
        "--output",
        size.describe(plan.num_epochs),
    )
    faults.check_memory(
        workers * size.worker_memory,
        f"{workers} data prep workers",
        "Run with fewer workers (--workers), or with --runner beam, or on a machine with more "
        "memory, then run the command again.",
        detail=f"{workers} x {faults.size_text(size.worker_memory)} for the largest shard file",
    )


def _worker_count(config: PrepareConfig, plan: Plan) -> int:
    """Worker processes: ``--workers`` (default one per CPU), at most one per file."""
    files = plan.num_shards * (plan.num_epochs + 1 + config.validation)
    return min(config.workers or os.cpu_count() or 1, files)


def run(
    config: PrepareConfig,
    runner: str = RUNNER_LOCAL,
    beam_pipeline_args: tuple[str, ...] | list[str] = (),
) -> PrepareResult:
    """Prepares data on one machine (``local``) or on Apache Beam (``beam``); same output.

    ``prepare_beam`` is imported only for ``beam``: importing Beam alone takes seconds.
    """
    check_runner(runner, beam_pipeline_args)
    if runner == RUNNER_LOCAL:
        return prepare(config)
    from training_core.data import prepare_beam

    return prepare_beam.prepare_beam(config, prepare_beam.BeamConfig(tuple(beam_pipeline_args)))


@dataclasses.dataclass(frozen=True)
class _Source:
    """The input as read: its files, their format and their content hash."""

    files: list[str]
    format: str
    sha256: str


def _read_and_index(config: PrepareConfig, timings: dict) -> tuple[_Source, IndexedData]:
    """Reads the input (``io``) and cleans and indexes it (:func:`index_interactions`)."""
    t0 = time.perf_counter()
    files, fmt = rio.resolve_input(config.input_path, config.format)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # hashlib releases the GIL.
        sha256 = pool.submit(rio.file_sha256, files)
        data = rio.read_interactions(config.input_path, fmt, config.columns, **read_options(config))
        source = _Source(files, fmt, sha256.result())
    timings["read"] = time.perf_counter() - t0
    log.info(
        "read %d interactions from %s (%s) in %.1fs",
        len(data),
        ", ".join(files),
        fmt,
        timings["read"],
    )
    t_index = time.perf_counter()
    indexed = index_interactions(data, config.min_ratings)
    timings["index"] = time.perf_counter() - t_index
    return source, indexed


def _reusable(out: str, plan: Plan, build: str, overwrite: bool) -> DatasetMetadata | None:
    """The dataset ``out`` already holds when it is this one (``dataset_folder.decide``)."""
    existing = dataset_folder.decide(out, (plan.fingerprint,), build, overwrite)
    if existing is not None:
        log.info(
            "%s already holds this dataset (fingerprint %s); reusing it",
            out,
            plan.fingerprint[:12],
        )
    return existing


def _build(
    config: PrepareConfig,
    source: _Source,
    indexed: IndexedData,
    plan: Plan,
    build: str,
    root: str,
    timings: dict,
) -> DatasetMetadata:
    """Every file of the build folder ``root``; returns the metadata that publishes them."""
    written = _write_shards(indexed, plan, config, root, timings)
    atomic_writes.write_text_atomic(os.path.join(root, USER_VOCAB), vocab_text(indexed.user_vocab))
    atomic_writes.write_text_atomic(os.path.join(root, ITEM_VOCAB), vocab_text(indexed.item_vocab))
    return build_metadata(
        config,
        plan,
        source.files,
        source.format,
        source.sha256,
        indexed.stats,
        indexed.num_users,
        indexed.num_items,
        written.train,
        written.test,
        written.short_users,
        build,
        written.validation,
        written.seen_only,
        (indexed.user_id_type, indexed.item_id_type),
    )


@dataclasses.dataclass(frozen=True)
class _Written:
    """The files :func:`_write_shards` wrote, and the counts of short users."""

    train: dict[str, list[ShardFile]]  # Per epoch.
    test: list[ShardFile]
    validation: list[ShardFile]  # None without ``config.validation``.
    seen_only: list[ShardFile]  # None when the data has no seen-only pairs.
    short_users: tuple[int, int]  # Test rows with repeats, training negatives with repeats.


def _write_shards(
    indexed: IndexedData, plan: Plan, config: PrepareConfig, root: str, timings: dict
) -> _Written:
    """Every shard's eval (and validation) file, per-epoch training files and seen-only file."""
    num_shards = plan.num_shards
    _WORK.clear()
    _WORK.update(data=indexed, output_dir=root, opts=plan.shard_options(config))
    splits = [SPLIT_TEST, *([SPLIT_VALIDATION] if config.validation else [])]
    tasks = [(_write_eval_shard, (s, split)) for split in splits for s in range(num_shards)]
    tasks += [
        (_write_train_shard, (s, e)) for e in range(plan.num_epochs) for s in range(num_shards)
    ]
    if indexed.num_seen_only:
        os.makedirs(os.path.join(root, shards.SEEN_ONLY_DIR), exist_ok=True)
        tasks += [(_write_seen_only_shard, (s,)) for s in range(num_shards)]
    seen_only: list[ShardFile] = []
    workers = _worker_count(config, plan)
    log.info(
        "%d users, %d items, %d shards, %d epochs: writing %d files with %d workers",
        indexed.num_users,
        indexed.num_items,
        num_shards,
        plan.num_epochs,
        len(tasks),
        workers,
    )
    held_out: dict[str, list[ShardFile]] = {split: [] for split in splits}
    train_files: dict[str, list[ShardFile]] = {epoch_dir(e): [] for e in range(plan.num_epochs)}
    short_users = [0, 0]
    written_rows = 0
    task_seconds = {"train": 0.0, "eval": 0.0}
    t_write = time.perf_counter()
    try:
        with (
            _task_results(tasks, workers) as results,
            console.progress("writing records", len(tasks), "files") as bar,
        ):
            for done, ((fn, args), result) in enumerate(zip(tasks, results, strict=True), start=1):
                if fn is _write_eval_shard:
                    shard_file, short, seconds = result
                    held_out[args[1]].append(shard_file)
                    if args[1] == SPLIT_TEST:  # Each split has about the same short users.
                        short_users = [a + b for a, b in zip(short_users, short, strict=True)]
                    task_seconds["eval"] += seconds
                elif fn is _write_seen_only_shard:
                    shard_file, seconds = result
                    seen_only.append(shard_file)
                    task_seconds["eval"] += seconds
                else:
                    shard_file, seconds = result
                    train_files[epoch_dir(args[1])].append(shard_file)
                    task_seconds["train"] += seconds
                written_rows += shard_file.elements
                rate = written_rows / max(time.perf_counter() - t_write, 1e-9)
                bar.update(done, f"{written_rows:,} rows ({rate / 1e6:.2f}M rows/s)")
                log.log(
                    bar.level,
                    "[%d/%d] %s: %d rows, %.1f MB (%.2fM rows/s overall)",
                    done,
                    len(tasks),
                    shard_file.path,
                    shard_file.elements,
                    shard_file.bytes / 1e6,
                    rate / 1e6,
                )
    finally:
        _WORK.clear()
    timings["write"] = time.perf_counter() - t_write
    timings["train_task_seconds"] = task_seconds["train"]
    timings["eval_task_seconds"] = task_seconds["eval"]
    timings["workers"] = workers
    return _Written(
        train_files,
        held_out[SPLIT_TEST],
        held_out.get(SPLIT_VALIDATION, []),
        seen_only,
        (short_users[0], short_users[1]),
    )
