"""Data prep as an Apache Beam (Dataflow) job: the launcher; its files equal ``prepare``'s.

Raw interactions to pre-batched NCF TFRecords; the files are byte for byte those
:mod:`training_core.data.prepare` writes on one machine. The job takes the same global decisions
with the same functions (``prep_plan``), in three stages, each a module:

1. **Read** (``prepare_beam_read``) chunks, not rows: byte ranges of text files and Parquet row
   groups, into ids (int64, or text), timestamps and each row's positive flag (``--min-rating``,
   ``--positive-events``), each row keyed by its place in the input (chunk, row). The id
   columns' kinds are decided over every chunk (a column mixing integers and text fails the
   job), and the rule counts are summed.
2. **Clean** (``prepare_beam_clean``) per bucket of raw users (one shuffle), then one global
   combine: duplicates, ``--min-ratings``, users with every item; the sorted vocabularies and
   the plan (``prep_plan.make_plan``) as a side input.
3. **Write** (``prepare_beam_write``) by ``user_index % num_shards`` (second shuffle): per shard
   the single path's sampling and writers, seeded by (seed, shard, purpose, epoch): same seed,
   same bytes, any worker count.

This module builds the graph (:func:`build_pipeline`), runs it, assembles ``metadata.json``
from the shards' counts and publishes it last. Errors raised inside the job (bad lines, wrong
types, too few users) carry a marker (``prepare_beam_errors``) that the launcher decodes, so
the caller sees the single-machine path's message, not a Beam traceback.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time

import apache_beam as beam

from training_core.data import (
    beam_source,
    dataset_folder,
    delimited,
    formats,
    id_columns,
    input_files,
    prep_plan,
    prep_result,
    prepare_beam_read,
    prepare_beam_write,
    read_errors,
)
from training_core.data import io as rio
from training_core.data.config import PrepareConfig
from training_core.data.metadata import ShardFile, epoch_dir
from training_core.data.prepare_beam_clean import (
    clean_bucket,
    covering_bound,
    covering_sets,
    summarize,
    to_buckets,
    to_shards,
)
from training_core.data.prepare_beam_errors import decode_failure, reporting
from training_core.data.prepare_beam_read import (
    Chunk,
    FileSpec,
    Reading,
    decide_reading,
    describe_files,
    list_chunks,
    read_chunk,
)
from training_core.data.prepare_beam_write import write_shard, write_summary

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BeamConfig:
    """How the Beam path runs (the output does not depend on any of it)."""

    pipeline_args: tuple[str, ...] = ()  # e.g. --runner=DataflowRunner --project=... ; none: here.
    range_bytes: int = beam_source.DEFAULT_RANGE_BYTES  # Text is read in ranges of this size.
    num_buckets: int | None = None  # Groups of raw users for cleaning; None: from the input size.


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
    reading = Reading.of(config)
    read = (
        p
        | "Chunks" >> beam.Create(chunks)
        | "Spread" >> beam.Reshuffle()
        | "Read"
        >> beam.FlatMap(reporting(read_chunk), specs, reading).with_outputs("report", main="rows")
    )
    decision = beam.pvalue.AsSingleton(
        read.report
        | "AllChunks" >> beam.combiners.ToList()
        | "DecideIds" >> beam.Map(reporting(decide_reading), specs, reading.id_type)
    )
    cleaned = (
        read.rows
        | "ToBuckets" >> beam.FlatMap(to_buckets, num_buckets)
        | "GroupBuckets" >> beam.GroupByKey()
        | "Clean"
        >> beam.FlatMap(clean_bucket, config.min_ratings, decision).with_outputs(
            "summary", main="rows"
        )
    )
    buckets = cleaned.summary | "AllBuckets" >> beam.combiners.ToList()
    bound = buckets | "CoveringBound" >> beam.Map(covering_bound)
    covering = (
        cleaned.rows
        | "CoveringSets" >> beam.FlatMap(covering_sets, beam.pvalue.AsSingleton(bound))
        | "AllCovering" >> beam.combiners.ToList()
    )
    summary = buckets | "Summarize" >> beam.Map(
        reporting(summarize),
        beam.pvalue.AsSingleton(covering),
        decision,
        config,
        fmt,
        source_sha,
        config.input_path,
    )
    side = beam.pvalue.AsSingleton(summary)
    _ = summary | "WriteVocab" >> beam.Map(write_summary, out)
    _ = (
        cleaned.rows
        | "ToShards" >> beam.FlatMap(to_shards, side)
        | "GroupShards" >> beam.GroupByKey()
        | "WriteShards" >> beam.FlatMap(reporting(write_shard), side, config, out, remote)
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
    if m.source.get("sha256") != source_sha:
        return "(different)"
    try:
        # The users with a validation item are known where the dataset has a validation split;
        # where it has none, this run's options differ from its options or do not count them.
        decided = prep_plan.make_plan(
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
    # Options that read or clean the data otherwise are in the fingerprint: it then differs.
    return decided.fingerprint


def _raise_failure(error: BaseException, specs: list[FileSpec], config: PrepareConfig) -> None:
    """Re-raises a job failure as the single path's error where it is one of ours."""
    payload = decode_failure(error)
    if payload is None:
        return
    if payload["kind"] == "parse":
        spec = specs[payload["file"]]
        message = payload["message"]
        fallback = read_errors.DataError(message) if payload.get("fallback") else None
        raise delimited.locate_error(
            spec.layout, spec.cols, message, fallback, id_type=Reading.of(config).id_type
        ) from None
    if payload["kind"] == "kinds":
        # Text files' sightings by line, as the single path names them (a pass over the files).
        scans = [
            rio.scans_at_lines(
                specs[f].layout, tuple(prepare_beam_read.decoded_scan(s) for s in pair)
            )
            for f, pair in payload["scans"]
        ]
        id_columns.resolve_kinds(scans, Reading.of(config).id_type)
    if payload["kind"] in ("data", "kinds"):
        raise read_errors.DataError(payload["message"]) from None
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
    files, fmt = formats.resolve_input(config.input_path, config.format)
    specs = describe_files(files, fmt, config.columns, Reading.of(config).rule, remote)
    source_sha = input_files.file_sha256(files)
    out = config.output_dir
    build = prep_plan.build_name(config, source_sha)
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
                _raise_failure(e, specs, config)
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
    with open(os.path.join(staging, prepare_beam_write.SUMMARY_FILE)) as f:
        summary = json.load(f)
    decided = prep_plan.Plan(**summary["plan"])
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
        path = os.path.join(staging, prepare_beam_write.staged_shard(s))
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
    seen_only_files = [ShardFile(**f) for r in results for f in r["seen_only"]]
    return prep_plan.build_metadata(
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
        seen_only_files,
        tuple(summary["id_types"]),
    )
