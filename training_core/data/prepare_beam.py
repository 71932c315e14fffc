"""Raw interactions to pre-batched NCF TFRecords on Apache Beam (Dataflow).

The files are byte for byte those :mod:`training_core.data.prepare` writes on one machine.

The pipeline takes the same global decisions with the same functions (``plan``):

1. **Read** chunks, not rows: byte ranges of text files (``beam_source.read_text_range``, with
   ``io``'s layouts and parser) and Parquet row groups, into int64 arrays, each row keyed by its
   place in the input (chunk, row): the tie-breaker the single-machine path takes from file order.
2. **Clean** per bucket of raw users (one shuffle): keep the latest of repeated (user, item) rows,
   drop users under ``--min-ratings``. A global combine of the buckets' per-user and per-item
   counts drops users who rated every item and yields the sorted vocabularies (contiguous ids in
   ascending raw-id order) and the plan (``plan.make_plan``) as a side input.
3. **Shard** by ``user_index % num_shards`` (second shuffle); per shard, sort by (time, input
   order), then ``sampling``'s vectorized draws (training rows, the test and validation splits)
   and ``shards``' writers, with generators seeded by (seed, shard, purpose, epoch): same seed,
   same bytes, any worker count.
4. The launcher assembles ``metadata.json`` from the shards' counts and publishes it last.

Errors raised inside the job (bad lines, wrong types, too few users) carry a marker that the
launcher decodes, so the caller sees the single-machine path's message, not a Beam traceback.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import re
import shutil
import time
import traceback

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from training_core.common import atomic_writes
from training_core.data import (
    beam_source,
    dataset_folder,
    plan,
    prep_result,
    records,
    sampling,
    shards,
)
from training_core.data import io as rio
from training_core.data.config import PrepareConfig
from training_core.data.metadata import (
    ITEM_VOCAB,
    SPLIT_VALIDATION,
    USER_VOCAB,
    ShardFile,
    epoch_dir,
)

log = logging.getLogger(__name__)

_SUMMARY = "summary.json"
_ROW_BITS = 32  # Input order key: chunk id << 32 | row within the chunk.
_HASH = np.uint64(0x9E3779B97F4A7C15)


@dataclasses.dataclass(frozen=True)
class BeamConfig:
    """How the Beam path runs (the output does not depend on any of it)."""

    pipeline_args: tuple[str, ...] = ()  # e.g. --runner=DataflowRunner --project=... ; none: here.
    range_bytes: int = beam_source.DEFAULT_RANGE_BYTES  # Text is read in ranges of this size.
    num_buckets: int | None = None  # Groups of raw users for cleaning; None: from the input size.


# ---------------------------------------------------------------------------------------------
# Errors: raised on workers, decoded by the launcher.
# ---------------------------------------------------------------------------------------------

_MARK = re.compile(r"\[ncf-error ([A-Za-z0-9+/=]+)\]")


class _Reported(Exception):
    """A user-facing error raised inside the job, with its payload encoded for the launcher."""

    def __init__(self, payload: dict):
        blob = base64.b64encode(json.dumps(payload).encode()).decode()
        super().__init__(f"{payload.get('message', payload)} [ncf-error {blob}]")


def _report(kind: str, error: Exception | str, **extra) -> _Reported:
    return _Reported({"kind": kind, "message": str(error), **extra})


def _decode_failure(error: BaseException) -> dict | None:
    text = "".join(traceback.format_exception(error))
    found = _MARK.search(text)
    return json.loads(base64.b64decode(found.group(1))) if found else None


def _reporting(fn):
    """Runs ``fn``, turning DataError/ValueError into a marked error the launcher decodes."""

    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except rio.DataError as e:
            raise _report("data", e) from None
        except ValueError as e:
            raise _report("value", e) from None

    wrapper.__name__ = wrapper.__qualname__ = fn.__name__
    return wrapper


# ---------------------------------------------------------------------------------------------
# Reading: the launcher lists chunks from headers and footers; workers parse them.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FileSpec:
    """One input file: its layout as the launcher read it, where workers open it, its columns."""

    layout: rio.FileLayout  # Its path as the launcher sees it (named in messages, as io does).
    path: str  # As workers open it (gs:// on Dataflow).
    wanted: tuple[str, str, str]  # User, item and timestamp columns.


@dataclasses.dataclass(frozen=True)
class Chunk:
    """A unit of reading, in input order.

    Text: the byte range [start, end) (end -1: a whole compressed file). Parquet: row group
    ``start``, whose first row is row ``end`` of the file.
    """

    chunk_id: int
    file: int
    start: int
    end: int


def describe_files(
    files: list[str], fmt: str, columns: rio.Columns, remote: bool
) -> list[FileSpec]:
    """Checks every file's header or schema with the single path's messages; reads no rows."""
    specs = []
    for f in files:
        layout = rio.describe_file(f, fmt)
        wanted = rio.interaction_columns(layout, columns)
        specs.append(FileSpec(layout, beam_source.beam_path(f, remote), wanted))
    return specs


def list_chunks(specs: list[FileSpec], range_bytes: int) -> list[Chunk]:
    """Chunks in input order: their ids order rows as the single path's file order does."""
    out: list[Chunk] = []
    for i, spec in enumerate(specs):
        if spec.layout.format == rio.PARQUET:
            import pyarrow.parquet as pq

            meta = pq.ParquetFile(spec.layout.path).metadata
            first = 0
            for g in range(meta.num_row_groups):
                out.append(Chunk(len(out), i, g, first))
                first += meta.row_group(g).num_rows
        else:
            for _, start, end in beam_source.byte_ranges(
                [spec.layout.path], [spec.path], range_bytes
            ):
                out.append(Chunk(len(out), i, start, end))
    return out


def read_chunk(chunk: Chunk, specs: list[FileSpec]):
    """One chunk as (users, items, timestamps, input order) int64 arrays; [] when empty."""
    spec = specs[chunk.file]
    local_path = spec.layout.path
    user_col, item_col, time_col = spec.wanted
    if spec.layout.format == rio.PARQUET:
        import pyarrow.parquet as pq

        with FileSystems.open(spec.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            table = pq.ParquetFile(f).read_row_group(chunk.start, columns=list(spec.wanted))
        try:
            arrays = rio._columns_to_arrays(table, user_col, item_col, time_col, local_path)
        except rio.DataError as e:  # Row numbers count from the row group: make them global.
            message = re.sub(
                r"data row (\d+)", lambda m: f"data row {int(m[1]) + chunk.end}", str(e)
            )
            raise _report("data", message) from None
    else:
        try:
            table = beam_source.read_text_range(
                spec.path,
                chunk.start,
                chunk.end,
                spec.layout,
                spec.wanted,
                {user_col: pa.int64(), item_col: pa.int64()},
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            # The launcher finds the first bad line of the file, as the single path does.
            raise _report("parse", e, file=chunk.file) from None
        if table is None:
            return []
        try:
            arrays = rio._columns_to_arrays(table, user_col, item_col, time_col, local_path)
        except rio.DataError as e:
            where = f" (row counted from byte {chunk.start})" if chunk.start > 0 else ""
            raise _report("data", f"{e}{where}") from None
    users, items, ts = arrays
    if not len(users):
        return []
    order = (np.int64(chunk.chunk_id) << _ROW_BITS) + np.arange(len(users), dtype=np.int64)
    return [(users, items, ts, order)]


# ---------------------------------------------------------------------------------------------
# Cleaning per bucket of raw users, then one global summary.
# ---------------------------------------------------------------------------------------------


def _split_by(key: np.ndarray, rows: tuple[np.ndarray, ...]):
    """(key value, rows with that key) for each key value present; rows keep their order."""
    if not len(key):
        return []
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    bounds = np.flatnonzero(np.diff(sorted_key)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(key)]])
    return [
        (int(sorted_key[s]), tuple(a[order[s:e]] for a in rows))
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


def to_buckets(rows, num_buckets: int):
    """Splits a chunk's rows by a hash of the raw user id."""
    mixed = rows[0].astype(np.uint64) * _HASH
    return _split_by(((mixed >> np.uint64(32)) % np.uint64(num_buckets)).astype(np.int64), rows)


def _concat(parts) -> tuple[np.ndarray, ...]:
    parts = list(parts)
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(4))


@dataclasses.dataclass(frozen=True)
class BucketSummary:
    """What the global decisions need from one bucket of raw users."""

    users: np.ndarray  # Raw ids of users kept so far (enough distinct items).
    counts: np.ndarray  # Their distinct items.
    items: np.ndarray  # Raw item ids rated by kept users.
    item_users: np.ndarray  # Kept users who rated each.
    rows_read: int
    duplicate_pairs_dropped: int
    users_below_min_ratings: int
    single_interaction_users: int


def clean_bucket(element, min_ratings: int):
    """Keeps the latest of repeated (user, item) rows and users with enough items.

    Yields the kept rows, and a :class:`BucketSummary` on the ``summary`` output.
    """
    _, parts = element
    users, items, ts, order = _concat(parts)
    n = len(users)
    # As prepare.index_interactions: sort by (user, item, time, input order), keep each pair's last.
    idx = np.lexsort((order, ts, items, users))
    users, items, ts, order = users[idx], items[idx], ts[idx], order[idx]
    last = np.ones(n, dtype=bool)
    last[:-1] = (users[1:] != users[:-1]) | (items[1:] != items[:-1])
    users, items, ts, order = users[last], items[last], ts[last], order[last]
    ids, counts = np.unique(users, return_counts=True)
    good = counts >= max(min_ratings, 2)
    keep = np.repeat(good, counts)
    users, items, ts, order = users[keep], items[keep], ts[keep], order[keep]
    item_ids, item_users = np.unique(items, return_counts=True)
    yield beam.pvalue.TaggedOutput(
        "summary",
        BucketSummary(
            users=ids[good],
            counts=counts[good],
            items=item_ids,
            item_users=item_users,
            rows_read=n,
            duplicate_pairs_dropped=n - int(last.sum()),
            users_below_min_ratings=int((counts < min_ratings).sum()),
            single_interaction_users=int(((counts < 2) & (counts >= min_ratings)).sum()),
        ),
    )
    if len(users):
        yield users, items, ts, order


@dataclasses.dataclass(frozen=True)
class Summary:
    """The global decisions: vocabularies, counts and the plan (a side input of the shards)."""

    user_vocab: np.ndarray
    item_vocab: np.ndarray
    stats: dict[str, int]
    plan: plan.Plan


def summarize(
    buckets: list[BucketSummary],
    config: PrepareConfig,
    fmt: str,
    source_sha: str,
    input_path: str,
) -> Summary:
    """Merges the buckets' counts into the single path's decisions and plan (one worker).

    Users who rated every item are dropped as ``index_interactions`` drops them: such a user
    holds every item present, so dropping ``d`` of them lowers every item's user count by ``d``
    and the loop needs only the per-item user counts.
    """
    rows_read = sum(b.rows_read for b in buckets)
    if rows_read == 0:
        raise rio.DataError(f"{input_path}: no interactions (the table has a header but no rows)")
    stats = {
        "rows_read": rows_read,
        "duplicate_pairs_dropped": sum(b.duplicate_pairs_dropped for b in buckets),
        "users_below_min_ratings": sum(b.users_below_min_ratings for b in buckets),
        "single_interaction_users": sum(b.single_interaction_users for b in buckets),
    }
    users = np.concatenate([b.users for b in buckets])
    counts = np.concatenate([b.counts for b in buckets])
    order = np.argsort(users)
    users, counts = users[order], counts[order]
    item_ids, inverse = np.unique(np.concatenate([b.items for b in buckets]), return_inverse=True)
    item_users = np.bincount(
        inverse.reshape(-1),
        weights=np.concatenate([b.item_users for b in buckets]),
        minlength=len(item_ids),
    ).astype(np.int64)
    alive = np.ones(len(users), dtype=bool)
    dropped = 0
    while True:
        present = item_users > dropped
        full = alive & (counts >= int(present.sum()))
        if not full.any():
            break
        alive &= ~full
        dropped += int(full.sum())
        stats["users_with_every_item"] = dropped
    if not alive.any():
        raise plan.nothing_left(stats, config.min_ratings)
    stats["rows_kept"] = int(counts[alive].sum())
    user_vocab, item_vocab = users[alive], item_ids[present]
    decided = plan.make_plan(
        config,
        fmt,
        source_sha,
        stats["rows_kept"],
        len(user_vocab),
        len(item_vocab),
        int(sampling.has_validation_item(counts[alive]).sum()),
    )
    return Summary(user_vocab, item_vocab, stats, decided)


def to_shards(rows, summary: Summary):
    """Contiguous ids for a bucket's kept rows, split by ``user_index % num_shards``."""
    users, items, ts, order = rows
    vocab = summary.user_vocab
    uidx = np.searchsorted(vocab, users)
    known = vocab[np.minimum(uidx, len(vocab) - 1)] == users
    uidx, items, ts, order = uidx[known], items[known], ts[known], order[known]
    iidx = np.searchsorted(summary.item_vocab, items)
    return _split_by(uidx % summary.plan.num_shards, (uidx, iidx, ts, order))


# ---------------------------------------------------------------------------------------------
# Writing: per shard the single path's functions; the summary's vocabularies.
# ---------------------------------------------------------------------------------------------


class _BeamFiles:
    """``atomic_writes.Files`` through Beam's FileSystems: ``atomic_output`` writes to ``gs://``.

    Unlike ``atomic_writes.LOCAL_FILES`` there is no fsync (an object store has none), and the
    target is deleted before the rename (on Cloud Storage a rename is a copy and a delete).
    """

    def open(self, path: str, mode: str):
        return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def publish(self, tmp: str, path: str) -> None:
        if FileSystems.exists(path):
            FileSystems.delete([path])
        FileSystems.rename([tmp], [path])

    def discard(self, tmp: str) -> None:
        if FileSystems.exists(tmp):
            FileSystems.delete([tmp])


_BEAM_FILES = _BeamFiles()


def _writer(remote: bool) -> shards.RecordWriter:
    if not remote:

        def write_local(path: str, recs) -> int:
            os.makedirs(os.path.dirname(path), exist_ok=True)  # An epoch's folder.
            return records.write_tfrecord_file(path, recs)

        return write_local

    def write(path: str, recs) -> int:
        with atomic_writes.atomic_output(path, files=_BEAM_FILES) as f:
            return records.write_frames(f, recs)

    return write


def _write_text(path: str, text: str) -> None:
    with atomic_writes.atomic_output(path, files=_BEAM_FILES) as f:
        f.write(text.encode())


def build_shard(index: int, parts, num_items: int) -> sampling.Shard:
    """A shard's rows grouped by user, each user's in (time, input order): ``make_shard``'s."""
    uidx, iidx, ts, order = _concat(parts)
    idx = np.lexsort((order, ts, uidx))
    users, counts = np.unique(uidx[idx], return_counts=True)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return sampling.Shard(index, users.astype(np.int64), offsets, iidx[idx], num_items)


def write_shard(element, summary: Summary, config: PrepareConfig, out: str, remote: bool):
    """A shard's test, validation and every epoch's training files; counts go to the staging."""
    t0 = time.perf_counter()
    index, parts = element
    shard = build_shard(index, parts, len(summary.item_vocab))
    comp = sampling.complement(shard)
    opts = summary.plan.shard_options(config)
    write = _writer(remote)
    eval_file, short = shards.write_eval_shard(shard, comp, opts, out, write)
    validation = []  # The split's file, when there is one (as many as the eval files: 0 or 1).
    if config.validation:
        split_file, _ = shards.write_eval_shard(shard, comp, opts, out, write, SPLIT_VALIDATION)
        validation.append(dataclasses.asdict(split_file))
    train = [
        dataclasses.asdict(shards.write_train_shard(shard, comp, e, opts, out, write))
        for e in range(summary.plan.num_epochs)
    ]
    result = {
        "shard": index,
        "eval": dataclasses.asdict(eval_file),
        "validation": validation,
        "short_users": short,
        "short_train_users": sampling.short_train_users(comp, opts.num_neg),
        "train": train,
        "seconds": time.perf_counter() - t0,
    }
    _write_text(
        FileSystems.join(out, dataset_folder.BEAM_STAGING, f"shard-{index:05d}.json"),
        json.dumps(result),
    )
    return [index]


def write_summary(summary: Summary, out: str) -> None:
    """Vocabularies and the counts the launcher needs for metadata.json."""
    _write_text(FileSystems.join(out, USER_VOCAB), plan.vocab_text(summary.user_vocab))
    _write_text(FileSystems.join(out, ITEM_VOCAB), plan.vocab_text(summary.item_vocab))
    payload = {
        "stats": summary.stats,
        "num_users": len(summary.user_vocab),
        "num_items": len(summary.item_vocab),
        "plan": dataclasses.asdict(summary.plan),
    }
    _write_text(FileSystems.join(out, dataset_folder.BEAM_STAGING, _SUMMARY), json.dumps(payload))


# ---------------------------------------------------------------------------------------------
# The launcher.
# ---------------------------------------------------------------------------------------------


def build_pipeline(
    p: beam.Pipeline,
    config: PrepareConfig,
    specs: list[FileSpec],
    chunks: list[Chunk],
    num_buckets: int,
    fmt: str,
    source_sha: str,
    out: str,
    remote: bool,
) -> None:
    """The data prep graph (see the module docstring)."""
    cleaned = (
        p
        | "Chunks" >> beam.Create(chunks)
        | "Spread" >> beam.Reshuffle()
        | "Read" >> beam.FlatMap(_reporting(read_chunk), specs)
        | "ToBuckets" >> beam.FlatMap(to_buckets, num_buckets)
        | "GroupBuckets" >> beam.GroupByKey()
        | "Clean"
        >> beam.FlatMap(clean_bucket, config.min_ratings).with_outputs("summary", main="rows")
    )
    summary = (
        cleaned.summary
        | "AllBuckets" >> beam.combiners.ToList()
        | "Summarize" >> beam.Map(_reporting(summarize), config, fmt, source_sha, config.input_path)
    )
    side = beam.pvalue.AsSingleton(summary)
    _ = summary | "WriteVocab" >> beam.Map(write_summary, out)
    _ = (
        cleaned.rows
        | "ToShards" >> beam.FlatMap(to_shards, side)
        | "GroupShards" >> beam.GroupByKey()
        | "WriteShards" >> beam.FlatMap(_reporting(write_shard), side, config, out, remote)
    )


def _predicted_fingerprint(config: PrepareConfig, out: str, fmt: str, source_sha: str) -> str:
    """The fingerprint this run will have, known before the job where it matters.

    When ``out`` holds a dataset of the same source and cleaning options, its counts fix the
    plan, hence the fingerprint; otherwise the value matches nothing.
    """
    try:
        m = dataset_folder.published(out)
    except ValueError:
        return "(unknown)"
    if m is None:
        return "(unknown)"
    same_cleaning = (
        m.source.get("sha256") == source_sha
        and m.options.get("format") == fmt
        and m.options.get("columns") == dataclasses.asdict(config.columns)
        and m.options.get("min_ratings") == config.min_ratings
    )
    if not same_cleaning:
        return "(different)"
    try:
        # The users with a validation item are known where the dataset has a validation split;
        # where it has none, this run's options differ from its options or do not count them.
        decided = plan.make_plan(
            config,
            fmt,
            source_sha,
            m.source["rows_kept"],
            m.num_users,
            m.num_items,
            m.num_validation_users,
        )
    except ValueError:
        return "(different)"
    return decided.fingerprint


def _raise_failure(error: BaseException, specs: list[FileSpec]) -> None:
    """Re-raises a job failure as the single path's error where it is one of ours."""
    payload = _decode_failure(error)
    if payload is None:
        return
    if payload["kind"] == "parse":
        layout = specs[payload["file"]].layout
        raise rio.locate_error(layout, specs[payload["file"]].wanted, payload["message"]) from None
    if payload["kind"] == "data":
        raise rio.DataError(payload["message"]) from None
    raise ValueError(payload["message"]) from None


def prepare_beam(config: PrepareConfig, beam_config: BeamConfig) -> prep_result.PrepareResult:
    """Runs data preparation as a Beam job; the files equal ``prepare.prepare``'s byte for byte.

    Without ``--runner`` in the pipeline options the job runs on Beam's in-process FnApiRunner
    (``--direct_num_workers`` applies). The launcher needs the input and output as local or
    mounted paths (``/gcs/...`` on Vertex AI; workers then use ``gs://...``).
    """
    config.check()
    t0 = time.perf_counter()
    options, runner_name, remote = beam_source.pipeline_options(beam_config.pipeline_args)
    files, fmt = rio.resolve_input(config.input_path, config.format)
    specs = describe_files(files, fmt, config.columns, remote)
    source_sha = rio.file_sha256(files)
    out = config.output_dir
    build = plan.build_name(config, source_sha)
    with dataset_folder.holding(out):
        fingerprint = _predicted_fingerprint(config, out, fmt, source_sha)
        existing = dataset_folder.decide(out, (fingerprint,), build, config.overwrite)
        if existing is not None:
            log.info(
                "%s already holds this dataset (%s); reusing it", out, existing.fingerprint[:12]
            )
            return prep_result.PrepareResult(
                existing, out, True, time.perf_counter() - t0, prep_result.dataset_bytes(existing)
            )
        chunks = list_chunks(specs, beam_config.range_bytes)
        num_buckets = beam_config.num_buckets or max(4, min(4096, 2 * len(chunks)))
        # The epochs are the plan's, decided in the job once the data is counted: the workers
        # make the epoch folders as they write (_writer).
        with dataset_folder.building(out, build, validation=config.validation) as root:
            staging = os.path.join(root, dataset_folder.BEAM_STAGING)
            os.makedirs(staging, exist_ok=True)
            log.info(
                "Beam data prep of %s (%s): %d chunks, %d user buckets, runner %s",
                ", ".join(files),
                fmt,
                len(chunks),
                num_buckets,
                runner_name or "in-process",
            )
            t_job = time.perf_counter()
            try:
                runner = None if runner_name else beam_source.in_process_runner(options)
                with beam.Pipeline(runner=runner, options=options) as p:
                    build_pipeline(
                        p,
                        config,
                        specs,
                        chunks,
                        num_buckets,
                        fmt,
                        source_sha,
                        beam_source.beam_path(root, remote),
                        remote,
                    )
            except Exception as e:
                _raise_failure(e, specs)
                raise
            timings = {"job": time.perf_counter() - t_job}
            meta = _assemble(config, root, files, fmt, source_sha, build)
            shutil.rmtree(staging, ignore_errors=True)
            dataset_folder.publish(out, meta)
    return prep_result.PrepareResult(
        meta, out, False, time.perf_counter() - t0, prep_result.dataset_bytes(meta), timings
    )


def _assemble(
    config: PrepareConfig,
    root: str,
    files: list[str],
    fmt: str,
    source_sha: str,
    build: str,
):
    """metadata.json's content from the staged summary and per-shard results in ``root``."""
    staging = os.path.join(root, dataset_folder.BEAM_STAGING)
    with open(os.path.join(staging, _SUMMARY)) as f:
        summary = json.load(f)
    decided = plan.Plan(**summary["plan"])
    stats = summary["stats"]
    for key, what in (
        ("duplicate_pairs_dropped", "repeated (user, item) rows dropped; the latest kept"),
        ("users_below_min_ratings", "users with too few ratings dropped (--min-ratings)"),
        ("single_interaction_users", "users with a single interaction dropped"),
        ("users_with_every_item", "users who interacted with every item dropped"),
    ):
        if stats.get(key):
            log.warning("%d %s", stats[key], what)
    results = []
    for s in range(decided.num_shards):
        path = os.path.join(staging, f"shard-{s:05d}.json")
        if not os.path.exists(path):
            raise RuntimeError(f"the Beam job finished without shard {s} ({path} is missing)")
        with open(path) as f:
            results.append(json.load(f))
    train_files = {
        epoch_dir(e): [ShardFile(**r["train"][e]) for r in results]
        for e in range(decided.num_epochs)
    }
    eval_files = [ShardFile(**r["eval"]) for r in results]
    validation_files = [ShardFile(**f) for r in results for f in r["validation"]]
    return plan.build_metadata(
        config,
        decided,
        files,
        fmt,
        source_sha,
        stats,
        summary["num_users"],
        summary["num_items"],
        train_files,
        eval_files,
        (
            sum(r["short_users"] for r in results),
            sum(r["short_train_users"] for r in results),
        ),
        build,
        validation_files,
    )
