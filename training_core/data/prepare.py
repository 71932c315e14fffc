"""Raw interactions to pre-batched NCF TFRecords, on one machine.

Steps: read (``io``: integer or string ids, and which rows are positives), clean and index in memory
(``indexing``: duplicates, minimum ratings, contiguous ids in ascending raw-id order; rows that are
no positive kept aside as seen-only pairs, which no negative draw picks), split by time (each user's
last interaction the test item, the one before it the validation item: ``sampling``; a refit trains
on every interaction beside the same splits), take the global decisions (``plan``), then per shard
of users and per epoch draw training negatives and the held-out splits' candidates and write
pre-batched records, and each shard's seen-only pairs (``shards``). Shards run in worker processes
that die with this one (``worker_pool``); the output is byte-identical for any number of workers.
The folder is held by one writer and a run builds in a private folder, published in one step
(``dataset_folder``): an interrupted or failed run never looks complete and never harms the dataset
that was there. ``prepare_beam`` is the other engine, over the same ``plan`` and ``shards``; ``run``
picks one by the runner's name.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import logging
import os
import time
from collections.abc import Iterator

import numpy as np

from training_core.common import atomic_writes, console, faults, output_folders
from training_core.data import dataset_folder, formats, input_files, sampling, shards, worker_pool
from training_core.data import io as rio
from training_core.data.config import RUNNER_LOCAL, PrepareConfig, check_runner
from training_core.data.indexing import IndexedData, index_interactions, make_shard
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
from training_core.data.prep_plan import (
    Estimate,
    Plan,
    build_metadata,
    build_name,
    estimate,
    make_plan,
    read_options,
)
from training_core.data.prep_result import PrepareResult, dataset_bytes

log = logging.getLogger(__name__)


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


def prepare(config: PrepareConfig) -> PrepareResult:
    """Runs data preparation end to end and returns the dataset's metadata.

    A folder that already holds the same dataset (same source content and options) and passes
    its size checks is reused as is, so a re-run or a retried pipeline step costs only the
    source read. A damaged one is prepared again; a different one is kept unless ``overwrite``.
    """
    config.check()
    # Before the input is read: a folder others could plant links in is refused at once.
    output_folders.check_output_folder(config.output_dir, "prepare-data")
    with _reusing_freed_memory():
        return _prepare(config)


def item_vocabulary(config: PrepareConfig) -> np.ndarray:
    """The item vocabulary ``prepare(config)`` would write (raw ids), nothing written.

    The input read and indexed as ``prepare`` reads and indexes it: what ``run-local`` checks a
    champion's catalogue against before any step runs (training_core/evaluation/gate.py).

    Raises:
        read_errors.DataError: input that cannot be read as interactions (as ``prepare`` would).
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

    The numbers are :func:`prep_plan.estimate`'s; raises ``faults.MachineFault``.
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
    files, fmt = formats.resolve_input(config.input_path, config.format)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # hashlib releases the GIL.
        sha256 = pool.submit(input_files.file_sha256, files)
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
            worker_pool.task_results(tasks, workers) as results,
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
