"""Reads the pre-batched TFRecords into per-replica batches with static shapes.

A record holds ``P`` rows (the pre-batch); a training step takes the global batch ``G`` rows split
into ``R`` per-replica batches of ``G / R`` rows. The stream of an epoch is its files' records in
order, so step ``s`` of an epoch always sees the same rows: resuming skips ``s`` steps of records
(strings, before parsing) and continues bit for bit. Each input pipeline (one per worker) parses
only its own replicas' share where the pre-batch allows, else parses the chunk and slices it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence

import tensorflow as tf

from training_core.data import records
from training_core.data.metadata import SPLIT_VALIDATION, DatasetMetadata

log = logging.getLogger(__name__)

PARSE_GROUP_ROWS = 16384  # Training rows parsed per map call (whole chunks, at least one).
# The datasets' map functions are plain graph code (no Python control flow on tensors): traced as
# written, without AutoGraph's conversion of them and of every function they call (about 1 s of
# a training process's start on CPU).
_plain = tf.autograph.experimental.do_not_convert


@dataclasses.dataclass(frozen=True)
class BatchLayout:
    """How records map to steps and replicas.

    Attributes:
        global_batch: rows per step over all replicas.
        num_replicas: replicas in sync.
        prebatch: rows per record.
        records_per_chunk: records read together (``max(1, G / P)``).
        steps_per_chunk: steps one chunk feeds (``max(1, P / G)``).
        steps_per_epoch: whole steps in one epoch of records.
    """

    global_batch: int
    num_replicas: int
    prebatch: int
    records_per_chunk: int
    steps_per_chunk: int
    steps_per_epoch: int

    @property
    def per_replica_batch(self) -> int:
        """Rows each replica takes per step."""
        return self.global_batch // self.num_replicas


def train_layout(meta: DatasetMetadata, global_batch: int, num_replicas: int) -> BatchLayout:
    """Checks a runtime batch against the pre-batch and the replica count.

    Raises:
        ValueError: the batch cannot be split; the message says which sizes would work.
    """
    p = meta.train_prebatch_size
    if global_batch % num_replicas:
        lower = global_batch - global_batch % num_replicas
        raise ValueError(
            f"global batch {global_batch} does not split evenly over {num_replicas} replicas; "
            f"use a multiple of {num_replicas} (e.g. {lower or num_replicas} or "
            f"{lower + num_replicas})"
        )
    if global_batch % p and p % global_batch:
        raise ValueError(
            f"global batch {global_batch} and the data's pre-batch of {p} rows do not divide one "
            f"another; use a batch that is a multiple or a divisor of {p} (e.g. {p} or {2 * p}), "
            "or prepare the data with a matching pre-batch size"
        )
    records_per_chunk = max(1, global_batch // p)
    steps_per_chunk = max(1, p // global_batch)
    chunks = meta.train_steps_per_epoch // records_per_chunk
    steps = chunks * steps_per_chunk
    if steps == 0:
        raise ValueError(
            f"an epoch holds {meta.train_steps_per_epoch * p} rows, less than one global batch "
            f"of {global_batch}; use a smaller batch"
        )
    dropped = meta.train_steps_per_epoch - chunks * records_per_chunk
    if dropped:
        log.warning("each epoch drops its last %d records (not a whole global batch)", dropped)
    return BatchLayout(global_batch, num_replicas, p, records_per_chunk, steps_per_chunk, steps)


def eval_items_per_user(meta: DatasetMetadata) -> int:
    """Rows per evaluated user."""
    return 1 + meta.eval_negatives


def check_eval_layout(meta: DatasetMetadata, num_replicas: int) -> None:
    """Every replica must get whole users out of each eval record."""
    k = eval_items_per_user(meta)
    if meta.eval_prebatch_size != meta.eval_users_per_batch * k:
        raise ValueError(
            f"eval pre-batch of {meta.eval_prebatch_size} rows is not {meta.eval_users_per_batch} "
            f"users x {k} rows; the dataset is inconsistent, prepare it again"
        )
    if meta.eval_users_per_batch % num_replicas:
        raise ValueError(
            f"an eval record holds {meta.eval_users_per_batch} users, which do not split into "
            f"whole users over {num_replicas} replicas; prepare the data with an eval "
            f"users-per-batch that is a multiple of {num_replicas}, or a replica count dividing "
            f"{meta.eval_users_per_batch}"
        )


def check_files(meta: DatasetMetadata, data_dir: str, epochs: int) -> None:
    """Checks that the files ``metadata.json`` lists exist with the sizes and counts it gives.

    Raises:
        FileNotFoundError: a listed file is missing.
        ValueError: a file's size or the record counts disagree with the metadata.
    """
    groups = {"eval": meta.eval_files}
    if meta.has_validation:
        groups[SPLIT_VALIDATION] = meta.validation_files
    for epoch in range(min(epochs, meta.num_epochs)):
        key = f"epoch_{epoch:03d}"
        if key not in meta.train_files:
            raise ValueError(f"metadata.json lists no training files for {key}")
        groups[key] = meta.train_files[key]
    for name, files in groups.items():
        for f in files:
            path = os.path.join(data_dir, f.path)
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} is listed in metadata.json but missing")
            size = os.path.getsize(path)
            if size != f.bytes:
                raise ValueError(
                    f"{path} has {size} bytes, metadata.json says {f.bytes}; the dataset is "
                    "damaged or was changed after preparation, prepare it again"
                )
        total = sum(f.batches for f in files)
        want = {"eval": meta.eval_steps, SPLIT_VALIDATION: meta.validation_steps}.get(
            name, meta.train_steps_per_epoch
        )
        if total != want:
            raise ValueError(f"{name} files hold {total} records, metadata.json says {want}")


def _parse(serialized: tf.Tensor, prebatch: int, training: bool) -> dict[str, tf.Tensor]:
    """Parses ``[n]`` serialized records into int32 ``[n * prebatch, 1]`` features."""
    spec = records.feature_spec(prebatch, training)
    parsed = tf.io.parse_example(serialized, spec)
    return {k: tf.reshape(tf.cast(v, tf.int32), [-1, 1]) for k, v in parsed.items()}


def ordered_records(files: list[str]) -> tf.data.Dataset:
    """An epoch's training records in their one fixed order: round robin over the shard files.

    Each file holds one shard of users, so reading the files one after the other would train on
    one slice of the users at a time (with 20 shards, 5% of users per twentieth of an epoch).
    Taking one record from each file in turn mixes every step's neighbourhood across all users.
    The order is deterministic (resume depends on it), and parallel reads keep it.
    """
    buffer = max(256 << 10, (32 << 20) // max(len(files), 1))
    if len(files) == 1:
        return tf.data.TFRecordDataset(files, buffer_size=buffer)
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        _plain(lambda f: tf.data.TFRecordDataset(f, buffer_size=buffer)),
        cycle_length=len(files),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def train_dataset_fn(
    meta: DatasetMetadata,
    data_dir: str,
    layout: BatchLayout,
    epoch: int,
    skip_steps: int = 0,
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A ``dataset_fn`` for ``strategy.distribute_datasets_from_function`` over one epoch.

    Args:
        meta: the dataset.
        data_dir: its folder.
        layout: from ``train_layout``.
        epoch: training epoch (wraps over the prepared epochs).
        skip_steps: steps of this epoch already trained (resume).
    """
    files = meta.train_file_paths(data_dir, epoch)
    c, s, p = layout.records_per_chunk, layout.steps_per_chunk, layout.prebatch
    b, r = layout.per_replica_batch, layout.num_replicas
    steps_left = layout.steps_per_epoch - skip_steps

    # Parse several chunks per map call: one parse_example over a few dozen records costs about
    # what one record does, and unbatching the result is cheaper than running the map per step.
    group = max(1, PARSE_GROUP_ROWS // (c * p))

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        n = ctx.num_input_pipelines
        i = ctx.input_pipeline_id
        local = r // n
        ds = ordered_records(files).skip((skip_steps // s) * c).batch(c, drop_remainder=True)
        # [g, c] strings per element; the last group may be short, never a chunk.
        ds = ds.batch(group)
        rows_here = local * b
        if s == 1 and rows_here % p == 0:
            # Slice the strings first: this pipeline parses only its own records.
            lo, hi = i * rows_here // p, (i + 1) * rows_here // p

            @_plain
            def parse(strings):
                mine = strings[:, lo:hi] if n > 1 else strings
                feats = _parse(tf.reshape(mine, [-1]), p, True)
                return {k: tf.reshape(v, [-1, b, 1]) for k, v in feats.items()}
        else:

            @_plain
            def parse(strings):
                feats = _parse(tf.reshape(strings, [-1]), p, True)
                return {
                    k: tf.reshape(
                        tf.reshape(v, [-1, s, r, b, 1])[:, :, i * local : (i + 1) * local],
                        [-1, b, 1],
                    )
                    for k, v in feats.items()
                }

        ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
        ds = ds.skip((skip_steps % s) * local).take(steps_left * local)
        return ds.prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def eval_dataset_fn(
    meta: DatasetMetadata, data_dir: str, num_replicas: int
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A ``dataset_fn`` yielding each eval record split into whole users per replica."""
    check_eval_layout(meta, num_replicas)
    files = meta.eval_file_paths(data_dir)
    p = meta.eval_prebatch_size
    b = p // num_replicas

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        local = num_replicas // ctx.num_input_pipelines
        i = ctx.input_pipeline_id

        @_plain
        def parse(strings):
            feats = _parse(strings, p, False)
            return {
                k: tf.reshape(v, [num_replicas, b, 1])[i * local : (i + 1) * local]
                for k, v in feats.items()
            }

        ds = tf.data.TFRecordDataset(files, buffer_size=8 << 20).batch(1, drop_remainder=True)
        ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
        return ds.prefetch(tf.data.AUTOTUNE)

    return dataset_fn


_WHERE = re.compile(r"(corrupted|truncated) record at (\d+)")


def find_unreadable(files: Sequence[str]) -> list[tuple[str, str]]:
    """(file, what is wrong) for each file TensorFlow cannot read to the end, in order.

    Reads every record of every file: meant for the error path, to name the file that a
    ``DataLossError`` from a dataset over many (interleaved) files came from.
    """
    bad = []
    for path in files:
        try:
            tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
        except tf.errors.OpError as e:
            bad.append((path, _reason(e)))
    return bad


def _reason(error: tf.errors.OpError) -> str:
    """``corrupted record at byte 34235`` out of TensorFlow's message, without op names."""
    text = error.message or str(error)
    found = _WHERE.search(text)
    if found:
        return f"{found.group(1)} record at byte {found.group(2)}"
    line = (text.strip().splitlines() or [type(error).__name__])[0]
    return re.sub(r"\{\{.*?\}\}\s*|\s*\[Op:.*$", "", line).strip() or type(error).__name__


def explain_data_loss(error: tf.errors.OpError, files: Sequence[str]) -> Exception:
    """A clear error for ``error`` (a DataLossError while reading ``files``), naming the file.

    TensorFlow's message (``corrupted record at 34235``) names no file; this one reads each file
    again to find which ones are damaged. Raise what it returns ``from None``.
    """
    bad = find_unreadable(files)
    if not bad:
        first = _reason(error)
        where = os.path.dirname(files[0]) if files else "the dataset"
        return records.CorruptRecordsError(
            f"reading the TFRecord files in {where} failed ({first}), but each reads cleanly "
            f"now: a passing storage error? Run again; if it happens again, "
            f"{records.PREPARE_AGAIN}."
        )
    path, what = bad[0]
    also = f" (also unreadable: {', '.join(p for p, _ in bad[1:])})" if len(bad) > 1 else ""
    return records.CorruptRecordsError(
        f"{path}: {what}; the prepared data is damaged{also}. To fix it, {records.PREPARE_AGAIN}."
    )


@contextlib.contextmanager
def naming_damaged_files(files: Sequence[str]) -> Iterator[None]:
    """Turns a ``DataLossError`` raised inside into ``explain_data_loss``'s error.

    Wrap the code that iterates a dataset over ``files`` (the loop, not only ``iter()``: errors
    surface when records are read).
    """
    try:
        yield
    except tf.errors.DataLossError as e:
        raise explain_data_loss(e, files) from None


def distribute(strategy: tf.distribute.Strategy, dataset_fn) -> tf.distribute.DistributedDataset:
    """Distributes a ``dataset_fn`` over ``strategy``'s replicas."""
    return strategy.distribute_datasets_from_function(dataset_fn)
