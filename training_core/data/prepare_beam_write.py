"""The write stage of Beam data prep: each shard's files, the vocabularies, their counts staged.

Per shard (rows split by ``user_index % num_shards``, the second shuffle) the single path's
functions: sort by (time, input order), ``sampling``'s vectorized draws (training rows, the
test and validation splits) and ``shards``' writers (the seen-only pairs' file too, where the
data keeps any), with generators seeded by (seed, shard, purpose, epoch): same seed, same bytes,
any worker count. Each shard's file counts and the summary's are staged as JSON in the build
folder (``dataset_folder.BEAM_STAGING``), where the launcher assembles ``metadata.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from training_core.common import atomic_writes
from training_core.data import dataset_folder, records, sampling, shards
from training_core.data.config import PrepareConfig
from training_core.data.metadata import (
    ITEM_VOCAB,
    SPLIT_TEST,
    SPLIT_VALIDATION,
    USER_VOCAB,
    vocab_text,
)
from training_core.data.prepare_beam_clean import Summary, concat

SUMMARY_FILE = "summary.json"  # The summary's counts, in the staging folder.


def staged_shard(index: int) -> str:
    """The name of shard ``index``'s results (file counts, short users) in the staging folder."""
    return f"shard-{index:05d}.json"


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
    """A shard as ``indexing.make_shard`` makes it.

    Each user's positives in (time, input order); their seen-only items ascending, each with
    the number of the user's positives before it in that order.
    """
    uidx, iidx, ts, order, positive = concat(parts)
    every = np.lexsort((order, ts, uidx))
    along = positive[every].astype(np.int64)
    before_place = np.cumsum(along) - along
    idx = every[positive[every]]
    users, counts = np.unique(uidx[idx], return_counts=True)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    seen_place = np.flatnonzero(~positive[every])
    seen_users, seen_items = uidx[every[seen_place]], iidx[every[seen_place]]
    local = np.searchsorted(users, seen_users)
    seen_before = before_place[seen_place] - offsets[local]
    keys = local * num_items + seen_items
    by_pair = np.argsort(keys, kind="stable")
    seen_offsets = np.zeros(len(users) + 1, np.int64)
    np.cumsum(np.bincount(local, minlength=len(users)), out=seen_offsets[1:])
    return sampling.Shard(
        index,
        users.astype(np.int64),
        offsets,
        iidx[idx],
        num_items,
        seen_offsets,
        (keys[by_pair] % num_items).astype(np.int64),
        seen_before[by_pair].astype(np.int64),
    )


def write_shard(element, summary: Summary, config: PrepareConfig, out: str, remote: bool):
    """A shard's test, validation and every epoch's training files; counts go to the staging."""
    t0 = time.perf_counter()
    index, parts = element
    shard = build_shard(index, parts, len(summary.item_vocab))
    opts = summary.plan.shard_options(config)
    write = _writer(remote)
    test_comp = sampling.split_complement(shard, SPLIT_TEST)
    eval_file, short = shards.write_eval_shard(shard, test_comp, opts, out, write)
    del test_comp
    validation = []  # The split's file, when there is one (as many as the eval files: 0 or 1).
    if config.validation:
        split_comp = sampling.split_complement(shard, SPLIT_VALIDATION)
        split_file, _ = shards.write_eval_shard(
            shard, split_comp, opts, out, write, SPLIT_VALIDATION
        )
        validation.append(dataclasses.asdict(split_file))
        del split_comp
    comp = sampling.train_complement(shard, opts.validation, opts.refit)
    train = [
        dataclasses.asdict(shards.write_train_shard(shard, comp, e, opts, out, write))
        for e in range(summary.plan.num_epochs)
    ]
    seen_only = []  # The shard's seen-only file, when the data keeps seen-only pairs.
    if summary.num_seen_only:
        seen_only.append(dataclasses.asdict(shards.write_seen_only_shard(shard, opts, out, write)))
    result = {
        "shard": index,
        "seen_only": seen_only,
        "eval": dataclasses.asdict(eval_file),
        "validation": validation,
        "short_users": short,
        "short_train_users": sampling.short_train_users(comp, opts.num_neg),
        "train": train,
        "seconds": time.perf_counter() - t0,
    }
    _write_text(
        FileSystems.join(out, dataset_folder.BEAM_STAGING, staged_shard(index)),
        json.dumps(result),
    )
    return [index]


def write_summary(summary: Summary, out: str) -> None:
    """Vocabularies and the counts the launcher needs for metadata.json."""
    _write_text(FileSystems.join(out, USER_VOCAB), vocab_text(summary.user_vocab))
    _write_text(FileSystems.join(out, ITEM_VOCAB), vocab_text(summary.item_vocab))
    payload = {
        "stats": summary.stats,
        "num_users": len(summary.user_vocab),
        "num_items": len(summary.item_vocab),
        "plan": dataclasses.asdict(summary.plan),
        "id_types": summary.id_types,
    }
    _write_text(
        FileSystems.join(out, dataset_folder.BEAM_STAGING, SUMMARY_FILE), json.dumps(payload)
    )
