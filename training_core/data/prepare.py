"""Raw interactions to pre-batched NCF TFRecords, on one machine.

Steps: read (``io``), clean and index (duplicates, minimum ratings, contiguous ids), split
leave-one-out by time, then per shard of users and per epoch draw training negatives and eval
candidates (``sampling``) and write pre-batched records (``records``). Shards run in worker
processes that die with this one; the output is byte-identical for any number of workers. The
folder is held by one writer and a run builds in a private folder, published in one step
(``dataset_folder``): an interrupted or failed run never looks complete and never harms the
dataset that was there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterable
from importlib import metadata as importlib_metadata

import numpy as np

from training_core import publish
from training_core.data import dataset_folder, records, sampling
from training_core.data import io as rio
from training_core.data.metadata import (
    FORMAT_VERSION,
    ITEM_VOCAB,
    USER_VOCAB,
    DatasetMetadata,
    ShardFile,
    epoch_dir,
)

log = logging.getLogger(__name__)

DEFAULT_EVAL_USERS_PER_BATCH = 160  # As the reference (160 users x 1000 candidates).
ROWS_PER_AUTO_SHARD = 1_000_000


@dataclasses.dataclass(frozen=True)
class PrepareConfig:
    """Options of one data preparation run."""

    input_path: str
    output_dir: str
    format: str = "auto"
    columns: rio.Columns = rio.Columns()
    min_ratings: int = 20
    num_epochs: int = 1
    num_neg: int = 4
    eval_negatives: int = 999
    eval_sampling: str = sampling.EVAL_DISTINCT
    train_batch_size: int = 1024
    eval_batch_size: int | None = None  # Rows; None picks whole users automatically.
    seed: int = 0
    num_shards: int | None = None  # None: one per million interactions, at least 2.
    workers: int | None = None  # Processes; None: one per CPU core, 1: in this process.
    overwrite: bool = False
    eval_users_multiple: int = 8  # Auto eval records hold a multiple of this many users.

    def problems(self) -> list[tuple[str, str]]:
        """``(field, rule)`` for each value out of range, e.g. ``("num_neg", "must be >= 0")``."""
        rules = [
            ("min_ratings", self.min_ratings >= 0, "must be >= 0 (0 disables the filter)"),
            ("num_epochs", self.num_epochs >= 1, "must be >= 1"),
            ("num_neg", self.num_neg >= 0, "must be >= 0"),
            ("eval_negatives", self.eval_negatives >= 0, "must be >= 0"),
            ("train_batch_size", self.train_batch_size >= 1, "must be >= 1"),
            (
                "eval_batch_size",
                self.eval_batch_size is None or self.eval_batch_size >= 1,
                "must be >= 1 (or auto)",
            ),
            ("num_shards", self.num_shards is None or self.num_shards >= 1, "must be >= 1"),
            ("workers", self.workers is None or self.workers >= 1, "must be >= 1"),
            ("eval_users_multiple", self.eval_users_multiple >= 1, "must be >= 1"),
            (
                "eval_sampling",
                self.eval_sampling in sampling.EVAL_SAMPLINGS,
                f"must be one of {', '.join(sampling.EVAL_SAMPLINGS)}",
            ),
        ]
        return [(field, rule) for field, ok, rule in rules if not ok]

    def check(self) -> None:
        """Rejects impossible option values with a message naming the option and the value."""
        for field, rule in self.problems():
            option = "--" + field.replace("_", "-")
            raise ValueError(f"{option} {rule}, got {getattr(self, field)!r}")


@dataclasses.dataclass(frozen=True)
class IndexedData:
    """Clean interactions with contiguous ids, grouped by user in time order."""

    user_vocab: np.ndarray  # Raw id of each user index.
    item_vocab: np.ndarray  # Raw id of each item index.
    offsets: np.ndarray  # Per user index, into items.
    items: np.ndarray  # Item indices, each user's oldest first, held-out last.
    stats: dict[str, int]

    @property
    def num_users(self) -> int:
        """Users kept."""
        return len(self.user_vocab)

    @property
    def num_items(self) -> int:
        """Items kept."""
        return len(self.item_vocab)


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    """What a run produced (or found already in place)."""

    metadata: DatasetMetadata
    output_dir: str
    reused: bool
    seconds: float
    total_bytes: int
    timings: dict[str, float] = dataclasses.field(default_factory=dict)


def index_interactions(data: rio.Interactions, min_ratings: int) -> IndexedData:
    """Cleans and indexes raw interactions; each decision is logged and counted.

    - A user who rated an item several times keeps the latest interaction (ties: the later row).
    - Users with fewer than ``min_ratings`` distinct items are dropped, as the reference does.
    - Users left with a single interaction are dropped: leave-one-out leaves them nothing to train.
    - Ids are remapped to ``0..n-1`` in ascending raw-id order (vocab files keep the raw ids).
    - Users who interacted with every item are dropped: no negative exists for them.
    """
    n = len(data)
    stats = {"rows_read": n}
    row = np.arange(n, dtype=np.int64)
    user_vocab, users = _factorize(data.users)
    item_vocab, items = _factorize(data.items)
    ts = data.timestamps

    # Keep the latest of repeated (user, item) pairs. Most tables have none: one sort tells.
    pair = users * len(item_vocab) + items
    sorted_pair = np.sort(pair)
    if n > 1 and (sorted_pair[1:] == sorted_pair[:-1]).any():
        order = np.lexsort((ts, items, users))  # Stable: equal keys stay in file order.
        pair = pair[order]
        last_of_pair = np.ones(n, dtype=bool)
        last_of_pair[:-1] = pair[1:] != pair[:-1]
        keep = np.sort(order[last_of_pair])  # Back to file order.
    else:
        keep = row
    del pair, sorted_pair
    stats["duplicate_pairs_dropped"] = int(n - len(keep))
    if stats["duplicate_pairs_dropped"]:
        log.warning(
            "%d repeated (user, item) rows dropped; the latest of each pair is kept",
            stats["duplicate_pairs_dropped"],
        )
    users, items, ts, row = users[keep], items[keep], ts[keep], row[keep]

    counts = np.bincount(users, minlength=len(user_vocab))
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
    while True:
        mask = good_user[users]
        users, items, ts, row = users[mask], items[mask], ts[mask], row[mask]
        present = np.zeros(len(item_vocab), dtype=bool)
        present[items] = True
        num_items = int(present.sum())
        counts = np.bincount(users, minlength=len(user_vocab))
        full = (counts >= num_items) & (counts > 0)
        if not full.any():
            break
        stats["users_with_every_item"] = stats.get("users_with_every_item", 0) + int(full.sum())
        log.warning(
            "%d users interacted with every item and were dropped: no negatives exist",
            int(full.sum()),
        )
        good_user &= ~full
    if len(users) == 0:
        raise nothing_left(stats, min_ratings)
    item_map = np.cumsum(present) - 1
    items = item_map[items]
    item_vocab = item_vocab[present]
    user_present = np.zeros(len(user_vocab), dtype=bool)
    user_present[users] = True
    user_map = np.cumsum(user_present) - 1
    users = user_map[users]
    user_vocab = user_vocab[user_present]

    # Group by user in time order; ties keep file order, so the held-out item is well defined.
    # Rows are in file order here, so a stable sort on (user, time) is that order.
    order = _stable_order(users, ts)
    items = items[order]
    counts = np.bincount(users, minlength=len(user_vocab))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    stats["rows_kept"] = int(len(items))
    return IndexedData(user_vocab, item_vocab, offsets, items.astype(np.int64), stats)


def nothing_left(stats: dict[str, int], min_ratings: int) -> rio.DataError:
    """The error for data that cleaning left empty, naming the rule that emptied it."""
    if stats.get("users_with_every_item"):
        return rio.DataError(
            f"every user left interacted with every item ({stats['users_with_every_item']} "
            "users): no negatives can be drawn, and NCF learns from items a user did not "
            "interact with. Check the input (is the item column right?) or add items."
        )
    return rio.DataError(
        f"no user has at least {max(min_ratings, 2)} interactions; lower --min-ratings (now "
        f"{min_ratings}) or check the input"
    )


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and each value's index among them.

    Hash-based (pandas), so faster than ``np.unique(return_inverse=True)``; same result.
    """
    import pandas as pd

    codes, uniques = pd.factorize(values, sort=True)
    return np.asarray(uniques, dtype=np.int64), codes.astype(np.int64, copy=False)


def _stable_order(users: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """Indices that sort by (user, timestamp), ties in array order.

    One stable sort of a combined int64 key when it cannot overflow; else a lexsort.
    """
    if len(ts) == 0:
        return np.zeros(0, dtype=np.int64)
    t_min, t_max = int(ts.min()), int(ts.max())
    span = t_max - t_min + 1
    if (int(users.max()) + 1) * span < 2**62:
        return np.argsort(users * span + (ts - t_min), kind="stable")
    return np.lexsort((ts, users))


def make_shard(data: IndexedData, shard: int, num_shards: int) -> sampling.Shard:
    """The users ``u % num_shards == shard`` and their interactions."""
    users = np.arange(shard, data.num_users, num_shards, dtype=np.int64)
    starts, ends = data.offsets[users], data.offsets[users + 1]
    counts = ends - starts
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    idx = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1], dtype=np.int64)
    return sampling.Shard(shard, users, offsets, data.items[idx], data.num_items)


def resolve_eval_users_per_batch(
    requested_rows: int | None, eval_negatives: int, max_shard_users: int, multiple: int = 8
) -> int:
    """Users per eval record: whole users only; a size that does not fit is rounded, and said.

    Automatic sizes are a multiple of ``multiple`` (the replica count training will split eval
    records over, or 8), at most the reference's 160 users unless ``multiple`` needs more.
    """
    per_user = 1 + eval_negatives
    if requested_rows is None:
        cap = max(DEFAULT_EVAL_USERS_PER_BATCH // multiple, 1) * multiple
        return min(cap, -(-max_shard_users // multiple) * multiple)
    upb = max(1, round(requested_rows / per_user))
    if upb * per_user != requested_rows:
        log.warning(
            "eval batch size %d does not hold whole users (%d rows each: the positive and %d "
            "negatives); using %d (%d users) instead",
            requested_rows,
            per_user,
            eval_negatives,
            upb * per_user,
            upb,
        )
    return upb


def auto_num_shards(num_rows: int) -> int:
    """One shard per million interactions, at least 2 and at most 256."""
    return int(min(256, max(2, math.ceil(num_rows / ROWS_PER_AUTO_SHARD))))


@dataclasses.dataclass(frozen=True)
class ShardOptions:
    """What one shard's files depend on besides its users; both engines pass the same values."""

    num_shards: int
    num_neg: int
    seed: int
    train_batch_size: int
    eval_negatives: int
    eval_sampling: str
    eval_users_per_batch: int


# Writes framed records to a path (through a temporary name) and returns the bytes written.
RecordWriter = Callable[[str, Iterable[bytes]], int]


def _pad(arr: np.ndarray, total: int, value: int = 0) -> np.ndarray:
    out = np.full(total, value, dtype=np.int64)
    out[: len(arr)] = arr
    return out


def write_train_shard(
    shard: sampling.Shard,
    comp: sampling.Complement,
    epoch: int,
    opts: ShardOptions,
    output_dir: str,
    write: RecordWriter = records.write_tfrecord_file,
) -> ShardFile:
    """One epoch of one shard's training rows, pre-batched and padded, as one TFRecord file."""
    rows = sampling.train_rows(shard, comp, opts.num_neg, opts.seed, epoch)
    n = len(rows.users)
    batch = opts.train_batch_size
    total = max(1, -(-n // batch)) * batch
    columns = records.as_columns(
        [
            _pad(rows.users, total),
            _pad(rows.items, total),
            _pad(np.ones(n, np.int64), total),
            _pad(rows.labels, total),
        ],
        training=True,
    )
    rel = os.path.join("train", epoch_dir(epoch), records.shard_name(shard.index, opts.num_shards))
    size = write(os.path.join(output_dir, rel), records.encode_examples(columns, batch))
    return ShardFile(rel, total // batch, n, size)


def write_eval_shard(
    shard: sampling.Shard,
    comp: sampling.Complement,
    opts: ShardOptions,
    output_dir: str,
    write: RecordWriter = records.write_tfrecord_file,
) -> tuple[ShardFile, int]:
    """One shard's eval candidates as one TFRecord file; also returns its short users."""
    ev = sampling.eval_rows(shard, comp, opts.eval_negatives, opts.seed, opts.eval_sampling)
    upb = opts.eval_users_per_batch
    n_users, width = ev.items.shape
    padded_users = max(1, -(-n_users // upb)) * upb
    users = np.zeros((padded_users, width), np.int64)
    items = np.zeros((padded_users, width), np.int64)
    mask = np.ones((padded_users, width), np.int64)  # Padding users are masked entirely.
    users[:n_users] = ev.users[:, None]
    items[:n_users] = ev.items
    mask[:n_users] = ev.duplicate_mask
    columns = records.as_columns(
        [users.reshape(-1), items.reshape(-1), mask.reshape(-1)], training=False
    )
    rel = os.path.join("eval", records.shard_name(shard.index, opts.num_shards))
    size = write(os.path.join(output_dir, rel), records.encode_examples(columns, upb * width))
    return ShardFile(rel, padded_users // upb, n_users * width, size), ev.short_users


# ---------------------------------------------------------------------------------------------
# Per-shard work, run in worker processes. The indexed data reaches forked workers through this
# module global (copy-on-write), not through pickling.
# ---------------------------------------------------------------------------------------------

_WORK: dict = {}


def _write_train_shard(shard_index: int, epoch: int) -> tuple[ShardFile, float]:
    t0 = time.perf_counter()
    w = _WORK
    shard = make_shard(w["data"], shard_index, w["opts"].num_shards)
    shard_file = write_train_shard(
        shard, sampling.complement(shard), epoch, w["opts"], w["output_dir"]
    )
    return shard_file, time.perf_counter() - t0


def _write_eval_shard(shard_index: int) -> tuple[ShardFile, tuple[int, int], float]:
    t0 = time.perf_counter()
    w = _WORK
    shard = make_shard(w["data"], shard_index, w["opts"].num_shards)
    comp = sampling.complement(shard)
    shard_file, short = write_eval_shard(shard, comp, w["opts"], w["output_dir"])
    short_train = sampling.short_train_users(comp, w["opts"].num_neg)
    return shard_file, (short, short_train), time.perf_counter() - t0


def _call(task: tuple):
    fn, args = task
    return fn(*args)


@contextlib.contextmanager
def _task_results(tasks: list[tuple], workers: int):
    """Runs ``(fn, args)`` tasks, yielding an iterator of results in task order.

    Worker processes die with this one (``publish.die_with_parent``) and are killed when the
    block ends early, so none outlives the run or writes after it failed.
    """
    if workers <= 1:
        yield (fn(*args) for fn, args in tasks)
        return
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(workers, initializer=publish.die_with_parent, initargs=(os.getpid(),))
    try:
        yield pool.imap(_call, tasks)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def _package_version() -> str:
    try:
        return importlib_metadata.version("ncf-pipelines")
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What is decided once the clean data's size is known: shards, eval batch, fingerprint."""

    num_shards: int
    eval_users_per_batch: int
    options: dict
    fingerprint: str

    def shard_options(self, config: PrepareConfig) -> ShardOptions:
        """The per-shard options of this plan."""
        return ShardOptions(
            num_shards=self.num_shards,
            num_neg=config.num_neg,
            seed=config.seed,
            train_batch_size=config.train_batch_size,
            eval_negatives=config.eval_negatives,
            eval_sampling=config.eval_sampling,
            eval_users_per_batch=self.eval_users_per_batch,
        )


def make_plan(
    config: PrepareConfig, fmt: str, source_sha: str, rows_kept: int, num_users: int, num_items: int
) -> Plan:
    """Shards, eval batch, options and fingerprint: a pure function of the clean data's counts.

    Raises:
        ValueError: more eval negatives asked for than the items allow.
    """
    if config.eval_negatives >= num_items:
        raise ValueError(
            f"--eval-negatives {config.eval_negatives} asks for more negatives than the "
            f"{num_items} items allow; use at most {num_items - 1} (the reference uses 999 on "
            "MovieLens)"
        )
    num_shards = config.num_shards or auto_num_shards(rows_kept)
    num_shards = min(num_shards, num_users)
    max_shard_users = -(-num_users // num_shards)
    upb = resolve_eval_users_per_batch(
        config.eval_batch_size, config.eval_negatives, max_shard_users, config.eval_users_multiple
    )
    options = {
        "format": fmt,
        "columns": dataclasses.asdict(config.columns),
        "min_ratings": config.min_ratings,
        "num_epochs": config.num_epochs,
        "num_neg": config.num_neg,
        "eval_negatives": config.eval_negatives,
        "eval_sampling": config.eval_sampling,
        "train_batch_size": config.train_batch_size,
        "eval_users_per_batch": upb,
        "seed": config.seed,
        "num_shards": num_shards,
    }
    fingerprint = hashlib.sha256(
        json.dumps(
            {"v": FORMAT_VERSION, "source": source_sha, "options": options}, sort_keys=True
        ).encode()
    ).hexdigest()
    return Plan(num_shards, upb, options, fingerprint)


def vocab_text(vocab: np.ndarray) -> str:
    """A vocabulary file's content: the raw id of index 0, 1, ... one per line."""
    return "\n".join(map(str, vocab.tolist())) + "\n"


def build_metadata(
    config: PrepareConfig,
    plan: Plan,
    files: list[str],
    fmt: str,
    source_sha: str,
    stats: dict[str, int],
    num_users: int,
    num_items: int,
    train_files: dict[str, list[ShardFile]],
    eval_files: list[ShardFile],
    short_users: tuple[int, int],
    build: str,
) -> DatasetMetadata:
    """``metadata.json`` from the shards' counts; both engines assemble it here.

    Shard paths are relative to ``build`` (the build folder); metadata names them from the
    dataset folder.
    """
    short_eval, short_train = short_users
    if short_eval:
        log.warning(
            "%d users have fewer than %d never-seen items; their eval rows are filled with "
            "repeats marked in duplicate_mask",
            short_eval,
            config.eval_negatives,
        )
    if short_train:
        log.warning(
            "%d users have fewer than %d never-seen items (--num-neg); each of their training "
            "positives gets repeated negatives. Lower --num-neg to avoid it.",
            short_train,
            config.num_neg,
        )
    train_files = {epoch: [_under(build, f) for f in files] for epoch, files in train_files.items()}
    eval_files = [_under(build, f) for f in eval_files]
    first_epoch = train_files[epoch_dir(0)]
    upb = plan.eval_users_per_batch
    return DatasetMetadata(
        format_version=FORMAT_VERSION,
        num_users=num_users,
        num_items=num_items,
        train_prebatch_size=config.train_batch_size,
        eval_prebatch_size=upb * (1 + config.eval_negatives),
        eval_users_per_batch=upb,
        num_epochs=config.num_epochs,
        num_neg=config.num_neg,
        eval_negatives=config.eval_negatives,
        eval_sampling=config.eval_sampling,
        seed=config.seed,
        num_train_positives=stats["rows_kept"] - num_users,
        num_train_elements=sum(f.elements for f in first_epoch),
        train_steps_per_epoch=sum(f.batches for f in first_epoch),
        num_eval_users=num_users,
        num_eval_elements=sum(f.elements for f in eval_files),
        eval_steps=sum(f.batches for f in eval_files),
        num_shards=plan.num_shards,
        train_files=train_files,
        eval_files=eval_files,
        source={
            "path": config.input_path,
            "files": [os.path.basename(f) for f in files],
            "format": fmt,
            "sha256": source_sha,
            **stats,
            "eval_users_with_duplicates": short_eval,
            "train_users_with_repeated_negatives": short_train,
        },
        options=plan.options,
        fingerprint=plan.fingerprint,
        user_vocab=f"{build}/{USER_VOCAB}",
        item_vocab=f"{build}/{ITEM_VOCAB}",
        created_by=f"ncf-pipelines {_package_version()}",
    )


def _under(build: str, f: ShardFile) -> ShardFile:
    return dataclasses.replace(f, path=f"{build}/{f.path}")


def build_options(config: PrepareConfig) -> dict:
    """The options that decide a run's bytes (not where it reads or writes, nor how fast)."""
    skip = {"input_path", "output_dir", "workers", "overwrite"}
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in skip}


def build_name(config: PrepareConfig, source_sha: str) -> str:
    """The build folder this run writes (``dataset_folder.build_name``)."""
    return dataset_folder.build_name(source_sha, build_options(config), _package_version())


@contextlib.contextmanager
def building(out: str, build: str, num_epochs: int):
    """Holds ``out`` and makes the build folder; a run that fails leaves ``out`` as it found it.

    Yields the build folder. Wrap the decision to reuse in :func:`holding` first.
    """
    root = dataset_folder.begin(out, build, num_epochs, epoch_dir)
    try:
        yield root
    except BaseException:
        dataset_folder.discard(out, build)
        raise


@contextlib.contextmanager
def holding(out: str):
    """``out`` held by this run (waiting for another writer), SIGTERM cleaning up on the way out.

    A folder this run created is removed again if the run fails before publishing.
    """
    created = not os.path.exists(out)
    try:
        with publish.terminate_as_exit(), publish.hold(out, "prepare-data", wait=True):
            yield
    except BaseException:
        if created and not dataset_folder.is_published(out):
            shutil.rmtree(out, ignore_errors=True)
        raise


def dataset_bytes(meta: DatasetMetadata) -> int:
    """Bytes of a dataset's TFRecord files."""
    return sum(f.bytes for fs in meta.train_files.values() for f in fs) + sum(
        f.bytes for f in meta.eval_files
    )


def prepare(config: PrepareConfig) -> PrepareResult:
    """Runs data preparation end to end and returns the dataset's metadata.

    A folder that already holds the same dataset (same source content and options) and passes
    its size checks is reused as is, so a re-run or a retried pipeline step costs only the
    source read. A damaged one is prepared again; a different one is kept unless ``overwrite``.
    """
    config.check()
    t0 = time.perf_counter()
    files, fmt = rio.resolve_input(config.input_path, config.format)
    source_sha = rio.file_sha256(files)
    data = rio.read_interactions(config.input_path, fmt, config.columns)
    timings: dict[str, float] = {"read": time.perf_counter() - t0}
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
    del data
    plan = make_plan(
        config, fmt, source_sha, indexed.stats["rows_kept"], indexed.num_users, indexed.num_items
    )
    out = config.output_dir
    build = build_name(config, source_sha)
    with holding(out):
        existing = dataset_folder.decide(out, (plan.fingerprint,), build, config.overwrite)
        if existing is not None:
            log.info(
                "%s already holds this dataset (fingerprint %s); reusing it",
                out,
                plan.fingerprint[:12],
            )
            seconds = time.perf_counter() - t0
            return PrepareResult(existing, out, True, seconds, dataset_bytes(existing))
        with building(out, build, config.num_epochs) as root:
            shards = _write_shards(indexed, plan, config, root, timings)
            publish.write_text_atomic(
                os.path.join(root, USER_VOCAB), vocab_text(indexed.user_vocab)
            )
            publish.write_text_atomic(
                os.path.join(root, ITEM_VOCAB), vocab_text(indexed.item_vocab)
            )
            meta = build_metadata(
                config,
                plan,
                files,
                fmt,
                source_sha,
                indexed.stats,
                indexed.num_users,
                indexed.num_items,
                *shards,
                build,
            )
            dataset_folder.publish(out, meta)
    return PrepareResult(meta, out, False, time.perf_counter() - t0, dataset_bytes(meta), timings)


def _write_shards(
    indexed: IndexedData, plan: Plan, config: PrepareConfig, root: str, timings: dict
) -> tuple[dict[str, list[ShardFile]], list[ShardFile], tuple[int, int]]:
    """Every shard's eval file and per-epoch training files under ``root``, in worker processes.

    Returns the training files per epoch, the eval files and the counts of short users (eval
    rows with repeats, training negatives with repeats).
    """
    num_shards = plan.num_shards
    _WORK.clear()
    _WORK.update(data=indexed, output_dir=root, opts=plan.shard_options(config))
    tasks = [(_write_eval_shard, (s,)) for s in range(num_shards)]
    tasks += [
        (_write_train_shard, (s, e)) for e in range(config.num_epochs) for s in range(num_shards)
    ]
    workers = min(config.workers or os.cpu_count() or 1, len(tasks))
    log.info(
        "%d users, %d items, %d shards, %d epochs: writing %d files with %d workers",
        indexed.num_users,
        indexed.num_items,
        num_shards,
        config.num_epochs,
        len(tasks),
        workers,
    )
    eval_files: list[ShardFile] = []
    train_files: dict[str, list[ShardFile]] = {epoch_dir(e): [] for e in range(config.num_epochs)}
    short_users = [0, 0]
    written_rows = 0
    task_seconds = {"train": 0.0, "eval": 0.0}
    t_write = time.perf_counter()
    try:
        with _task_results(tasks, workers) as results:
            for done, ((fn, args), result) in enumerate(zip(tasks, results, strict=True), start=1):
                if fn is _write_eval_shard:
                    shard_file, short, seconds = result
                    eval_files.append(shard_file)
                    short_users = [a + b for a, b in zip(short_users, short, strict=True)]
                    task_seconds["eval"] += seconds
                else:
                    shard_file, seconds = result
                    train_files[epoch_dir(args[1])].append(shard_file)
                    task_seconds["train"] += seconds
                written_rows += shard_file.elements
                rate = written_rows / max(time.perf_counter() - t_write, 1e-9)
                log.info(
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
    return train_files, eval_files, (short_users[0], short_users[1])


def summary(result: PrepareResult) -> str:
    """A few lines a person reads at the end of a run."""
    m = result.metadata
    files = sum(len(v) for v in m.train_files.values()) + len(m.eval_files)
    train_rows = m.num_train_elements * m.num_epochs
    return "\n".join(
        [
            f"{'Reused' if result.reused else 'Prepared'} {result.output_dir}",
            f"  users {m.num_users:,}  items {m.num_items:,}  "
            f"source rows {m.source['rows_read']:,} (kept {m.source['rows_kept']:,})",
            f"  train: {train_rows:,} rows over {m.num_epochs} epoch(s), "
            f"{m.train_steps_per_epoch:,} batches of {m.train_prebatch_size} per epoch",
            f"  eval:  {m.num_eval_elements:,} rows, {m.eval_steps:,} batches of "
            f"{m.eval_prebatch_size} ({m.eval_users_per_batch} users x {1 + m.eval_negatives})",
            f"  files {files}  bytes {result.total_bytes / 1e6:,.1f} MB  "
            f"time {result.seconds:.1f}s",
        ]
    )


def artifact_metadata(result: PrepareResult) -> dict:
    """Counts worth showing on a KFP artifact (flat, JSON-friendly)."""
    m = result.metadata
    return {
        "num_users": m.num_users,
        "num_items": m.num_items,
        "num_train_elements": m.num_train_elements,
        "train_steps_per_epoch": m.train_steps_per_epoch,
        "num_epochs": m.num_epochs,
        "num_eval_users": m.num_eval_users,
        "eval_prebatch_size": m.eval_prebatch_size,
        "fingerprint": m.fingerprint,
        "source_sha256": m.source["sha256"],
        "reused": result.reused,
    }
