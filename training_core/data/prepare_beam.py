"""Raw interactions to pre-batched NCF TFRecords on Apache Beam (Dataflow).

The files are byte for byte those :mod:`training_core.data.prepare` writes on one machine.

The pipeline takes the same global decisions with the same functions (``plan``):

1. **Read** chunks, not rows: byte ranges of text files (``beam_source.read_range``, parsed with
   ``io``'s layouts, parser and per-table reader ``io.table_columns``) and Parquet row groups,
   into ids (int64, or text), timestamps and each row's positive flag (``--min-rating``,
   ``--positive-events``), each row keyed by its place in the input (chunk, row): the
   tie-breaker the single-machine path takes from file order. Each chunk also reports what its
   id columns hold; ``io.resolve_kinds`` decides each column's kind over all of them (a column
   mixing integers and text fails the job), and the rule counts are summed.
2. **Clean** per bucket of raw users (one shuffle, by a hash of the raw id that every process
   computes alike): the latest of repeated (user, item) rows decides whether the pair is a
   positive or seen only; users with too few positives go (``--min-ratings``). A global combine
   of the buckets' per-user and per-item counts drops users who interacted with every item (the
   few users who could, found by :func:`covering_bound`, send their item sets) and yields the
   sorted vocabularies (contiguous ids in ascending raw-id order: numeric, or str order) and the
   plan (``plan.make_plan``) as a side input.
3. **Shard** by ``user_index % num_shards`` (second shuffle); per shard, sort by (time, input
   order), then ``sampling``'s vectorized draws (training rows, the test and validation splits)
   and ``shards``' writers (the seen-only pairs' file too, where the data keeps any), with
   generators seeded by (seed, shard, purpose, epoch): same seed, same bytes, any worker count.
4. The launcher assembles ``metadata.json`` from the shards' counts and publishes it last.

Errors raised inside the job (bad lines, wrong types, too few users) carry a marker that the
launcher decodes, so the caller sees the single-machine path's message, not a Beam traceback.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
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
from training_core.data.ids import ID_AUTO, ID_INT64
from training_core.data.metadata import (
    ITEM_VOCAB,
    SPLIT_TEST,
    SPLIT_VALIDATION,
    USER_VOCAB,
    ShardFile,
    epoch_dir,
    vocab_text,
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
    cols: rio.ReadColumns  # Ids, time, and the positive rule's columns (``io.read_columns``).


@dataclasses.dataclass(frozen=True)
class Reading:
    """How ids and positives are read (``plan.read_options``: the single path's too)."""

    id_type: str = ID_AUTO
    rule: rio.PositiveRule = rio.PositiveRule()

    @classmethod
    def of(cls, config: PrepareConfig) -> Reading:
        """The reading of ``config``'s options."""
        return cls(**plan.read_options(config))


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
    files: list[str], fmt: str, columns: rio.Columns, rule: rio.PositiveRule, remote: bool
) -> list[FileSpec]:
    """Checks every file's header or schema with the single path's messages; reads no rows."""
    specs = []
    for f in files:
        layout = rio.describe_file(f, fmt)
        cols = rio.read_columns(layout, columns, rule)
        specs.append(FileSpec(layout, beam_source.beam_path(f, remote), cols))
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


@dataclasses.dataclass(frozen=True)
class ChunkReport:
    """What the global reading decisions need from one chunk (:func:`decide_reading`)."""

    chunk_id: int
    file: int
    rows: int
    scans: tuple[rio.IdScan, rio.IdScan]  # Data rows counted from the chunk's first (text).
    rule_counts: dict[str, int]


def _read_table(chunk: Chunk, spec: FileSpec, reading: Reading):
    """A chunk's rows as ``io.table_columns`` reads them (``io.ChunkRows``); None when blank."""
    layout, cols = spec.layout, spec.cols
    if layout.format == rio.PARQUET:
        import pyarrow.parquet as pq

        with FileSystems.open(spec.path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            table = pq.ParquetFile(f).read_row_group(chunk.start, columns=list(cols.names))
        # Row numbers are the file's: the group's first row is its row ``end``.
        return rio.table_columns(
            table,
            cols,
            layout.path,
            reading.id_type,
            reading.rule,
            parquet=True,
            first_row=chunk.end + 1,
        )
    data = beam_source.read_range(spec.path, chunk.start, chunk.end)
    if not data.strip():
        return None

    def parse(types):  # The bytes are read once, for parse_ids' second parse too.
        return beam_source.parse_text_range(data, chunk.start, layout, cols.names, types)

    try:
        table = rio.parse_ids(parse, cols, reading.id_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        # The launcher finds the first bad line of the file, as the single path does.
        raise _report("parse", e, file=chunk.file) from None
    try:
        return rio.table_columns(table, cols, layout.path, reading.id_type, reading.rule)
    except rio.DataError as e:
        # Its data row counts from the chunk: the launcher names the line, as the single path
        # does (this message, noting where the count starts, where no line is found).
        where = f" (row counted from byte {chunk.start})" if chunk.start > 0 else ""
        raise _report("parse", f"{e}{where}", file=chunk.file, fallback=True) from None


def read_chunk(chunk: Chunk, specs: list[FileSpec], reading: Reading):
    """One chunk's rows: (users, items, timestamps, input order, positive); its report aside.

    Ids are of their column's kind already (:func:`_chunk_ids`), so that the rows of one raw
    user meet in one bucket whatever chunk they come from.
    """
    rows = _read_table(chunk, specs[chunk.file], reading)
    if rows is None:
        return []
    report = ChunkReport(chunk.chunk_id, chunk.file, len(rows), rows.scans, rows.rule_counts)
    out = [beam.pvalue.TaggedOutput("report", report)]
    if not len(rows):
        return out
    users, items = (_chunk_ids(c, reading.id_type) for c in (rows.users, rows.items))
    n = len(rows)
    positive = np.ones(n, dtype=bool) if rows.positive is None else rows.positive
    order = (np.int64(chunk.chunk_id) << _ROW_BITS) + np.arange(n, dtype=np.int64)
    return [*out, (users, items, rows.timestamps, order, positive)]


def _chunk_ids(column: rio.IdColumn, id_type: str) -> np.ndarray:
    """A chunk's ids as the column's kind will be, where the chunk alone tells it.

    Under ``auto``, text ids that are all integers are int64 (else the column mixes kinds, an
    error); text with any other value stays text. ``string`` and ``int64`` ids are read as such.
    """
    if id_type == ID_AUTO and column.scan.first_other is None:
        return rio.convert(column, ID_INT64)
    return column.values


@dataclasses.dataclass(frozen=True)
class ReadDecision:
    """The id kinds and the positive rule's counts over every chunk."""

    id_types: tuple[str, str]  # ids.ID_KINDS of the user and item columns.
    rule_counts: dict[str, int]  # Summed over the chunks; empty without a rule.


def _counted_from(scan: rio.IdScan, offset: int) -> rio.IdScan:
    """``scan`` with its data rows counted from the file's first, ``offset`` rows before."""

    def moved(seen: rio.Sighting | None) -> rio.Sighting | None:
        if seen is None or not offset:
            return seen
        head, _, _ = seen.where.rpartition("data row ")
        row = seen.row + offset
        return dataclasses.replace(seen, where=f"{head}data row {row}", row=row)

    return dataclasses.replace(
        scan, first_int=moved(scan.first_int), first_other=moved(scan.first_other)
    )


def _first_of(scans: list[rio.IdScan]) -> rio.IdScan:
    """One scan of a file's chunks (in input order): the file's first sightings."""
    first_int = next((s.first_int for s in scans if s.first_int is not None), None)
    first_other = next((s.first_other for s in scans if s.first_other is not None), None)
    return dataclasses.replace(scans[0], first_int=first_int, first_other=first_other)


def _file_scans(reports: list[ChunkReport], specs: list[FileSpec]) -> dict[int, tuple]:
    """Per file (by index, in input order), its id columns' scans as the single path reads them.

    A text file's chunks count data rows from their own first: here from the file's first.
    Parquet row groups count from the file's already.
    """
    chunks: dict[int, list[ChunkReport]] = {}
    for r in sorted(reports, key=lambda r: r.chunk_id):
        chunks.setdefault(r.file, []).append(r)
    out = {}
    for f in sorted(chunks):
        offset, moved = 0, []
        for r in chunks[f]:
            moved.append(tuple(_counted_from(s, offset) for s in r.scans))
            if specs[f].layout.format != rio.PARQUET:
                offset += r.rows
        out[f] = tuple(_first_of([m[k] for m in moved]) for k in range(2))
    return out


def decide_reading(reports: list[ChunkReport], specs: list[FileSpec], id_type: str) -> ReadDecision:
    """The kinds of the id columns (``io.resolve_kinds`` over the files' scans, in input order).

    A text file's mix of kinds is named by line, as the single path names it: the launcher
    finds the lines (``_raise_failure``) from the scans this error carries.
    """
    scans = _file_scans(reports, specs)
    try:
        kinds = rio.resolve_kinds(list(scans.values()), id_type)
    except rio.DataError as e:
        if specs[0].layout.format == rio.PARQUET:
            raise
        encoded = [[f, [dataclasses.asdict(s) for s in pair]] for f, pair in scans.items()]
        raise _report("kinds", e, scans=encoded) from None
    counts: dict[str, int] = {}
    for r in reports:
        for key, n in r.rule_counts.items():
            counts[key] = counts.get(key, 0) + n
    return ReadDecision(kinds, counts)


def _decoded_scan(raw: dict) -> rio.IdScan:
    sighting = {
        k: None if raw[k] is None else rio.Sighting(**raw[k]) for k in ("first_int", "first_other")
    }
    return rio.IdScan(raw["column"], raw["role"], **sighting)


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


def _id_hash(ids: np.ndarray) -> np.ndarray:
    """A uint64 hash of each raw id, the same in every process and on every machine.

    Integer ids are mixed by a multiplication; string ids hash their UTF-8 bytes (pandas'
    SipHash under its fixed key), never Python's ``hash``, which each process salts.
    """
    if ids.dtype == object:
        from pandas.util import hash_array

        return hash_array(ids, encoding="utf8", categorize=False)
    return ids.astype(np.uint64) * _HASH


def to_buckets(rows, num_buckets: int):
    """Splits a chunk's rows by a hash of the raw user id."""
    mixed = _id_hash(rows[0])
    return _split_by(((mixed >> np.uint64(32)) % np.uint64(num_buckets)).astype(np.int64), rows)


def _concat(parts) -> tuple[np.ndarray, ...]:
    parts = list(parts)
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(len(parts[0])))


def _factorized(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """int64 keys that sort as the raw ids do, and the raw id of each key.

    Integer ids are their own keys (None); string ids get their rank among the distinct ids
    (str order), so that every sort and comparison after this one is on integers.
    """
    if ids.dtype != object:
        return ids, None
    import pandas as pd

    codes, uniques = pd.factorize(ids, sort=True)
    return codes.astype(np.int64, copy=False), np.asarray(uniques, dtype=object)


def _raw(keys: np.ndarray, uniques: np.ndarray | None) -> np.ndarray:
    """The raw ids of :func:`_factorized`'s keys."""
    return keys if uniques is None else uniques[keys]


@dataclasses.dataclass(frozen=True)
class BucketSummary:
    """What the global decisions need from one bucket of raw users.

    Users are those with enough positives (``--min-ratings``); every item array counts their
    pairs only. A user's total (their positive and seen-only items) bounds what they cover.
    """

    users: np.ndarray  # Raw ids, ascending.
    counts: np.ndarray  # Their distinct positive items.
    items: np.ndarray  # Raw ids of their positive items, ascending.
    item_users: np.ndarray  # Users holding each as a positive.
    item_min_total: np.ndarray  # The fewest items (positive or seen only) of those users.
    seen_items: np.ndarray  # Raw ids of their seen-only items, ascending.
    seen_item_users: np.ndarray  # Users holding each as a seen-only pair.
    rows_read: int
    duplicate_pairs_dropped: int
    users_below_min_ratings: int
    single_interaction_users: int


def _group_counts(keys: np.ndarray, values: np.ndarray | None = None):
    """Distinct int64 ``keys`` ascending, the count of each, and the least ``values`` of each."""
    ids, counts = np.unique(keys, return_counts=True)
    if values is None:
        return ids, counts, None
    order = np.lexsort((values, keys))
    return ids, counts, values[order][np.cumsum(counts) - counts]


def clean_bucket(element, min_ratings: int, decision: ReadDecision):
    """Keeps the latest of repeated (user, item) rows and the users with enough positives.

    As ``prepare.index_interactions``: the latest row of a pair decides whether the pair is a
    positive or seen only; only positives count towards ``min_ratings``. Yields the kept pairs
    (positive and seen-only, of the users kept) and a :class:`BucketSummary` on ``summary``.
    ``decision`` is not read: waiting for it, no bucket is cleaned before the ids' kinds are
    known not to mix (a failed decision fails the job first).
    """
    del decision
    _, parts = element
    rows = _concat(parts)
    n = len(rows[0])
    (user_key, user_raw), (item_key, item_raw) = _factorized(rows[0]), _factorized(rows[1])
    # Sort by (user, item, time, input order); each pair's last row decides it.
    idx = np.lexsort((rows[3], rows[2], item_key, user_key))
    users, items = user_key[idx], item_key[idx]
    last = np.ones(n, dtype=bool)
    last[:-1] = (users[1:] != users[:-1]) | (items[1:] != items[:-1])
    idx = idx[last]
    users, positive = user_key[idx], rows[4][idx]
    ids, counts, _ = _group_counts(users[positive])
    few = int((counts < min_ratings).sum())
    single = int(((counts < 2) & (counts >= min_ratings)).sum())
    _, good = _Vocab(ids[counts >= max(min_ratings, 2)]).lookup(users)
    idx, positive = idx[good], positive[good]
    users, items = user_key[idx], item_key[idx]
    ids, totals, _ = _group_counts(users)  # The pairs are grouped by user, ascending.
    counts = np.zeros(len(ids), np.int64)
    if len(ids):
        counts = np.add.reduceat(positive.astype(np.int64), np.cumsum(totals) - totals)
    user_total = np.repeat(totals, totals)
    pos_items, item_users, item_min_total = _group_counts(items[positive], user_total[positive])
    seen_items, seen_item_users, _ = _group_counts(items[~positive])
    yield beam.pvalue.TaggedOutput(
        "summary",
        BucketSummary(
            users=_raw(ids, user_raw),
            counts=counts,
            items=_raw(pos_items, item_raw),
            item_users=item_users,
            item_min_total=item_min_total,
            seen_items=_raw(seen_items, item_raw),
            seen_item_users=seen_item_users,
            rows_read=n,
            duplicate_pairs_dropped=n - int(last.sum()),
            users_below_min_ratings=few,
            single_interaction_users=single,
        ),
    )
    if len(idx):
        yield tuple(a[idx] for a in rows)


def covering_bound(buckets: list[BucketSummary]) -> int:
    """Users with fewer distinct items than this never cover every item (one worker).

    A user is dropped for interacting with every item left. An item held as a positive by a
    user of fewer than ``L`` items stays as long as at most ``L`` items are left; the largest
    ``L`` that many such items guarantee (``L`` items with a holder under ``L``) bounds the
    items left from below, so only users with at least ``L`` items need their item sets
    (:func:`covering_sets`).
    """
    if not buckets:
        return 0
    items = np.concatenate([b.items for b in buckets])
    least = np.concatenate([b.item_min_total for b in buckets])
    if not len(items):
        return 0
    order = np.lexsort((least, _factorized(items)[0]))
    items, least = items[order], least[order]
    first = np.ones(len(items), dtype=bool)
    first[1:] = items[1:] != items[:-1]
    least = np.sort(least[first])  # Per item present, its holder with the fewest items.
    bound = len(least)
    while True:
        below = int(np.searchsorted(least, bound, side="left"))
        if below == bound:
            return bound
        bound = below


def covering_sets(rows, bound: int):
    """(user, positive items, seen-only items) of a bucket's users with ``bound`` items or more."""
    users, items, _, _, positive = rows
    starts = np.flatnonzero(np.concatenate([[True], users[1:] != users[:-1]]))  # By user.
    ends = np.append(starts[1:], len(users))
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        if end - start >= bound:
            mine = slice(start, end)
            yield users[start], items[mine][positive[mine]], items[mine][~positive[mine]]


@dataclasses.dataclass(frozen=True)
class Summary:
    """The global decisions: vocabularies, counts and the plan (a side input of the shards)."""

    user_vocab: np.ndarray
    item_vocab: np.ndarray
    stats: dict[str, int]
    plan: plan.Plan
    num_seen_only: int  # Seen-only pairs kept (of users kept, on items kept).
    id_types: tuple[str, str]  # The users' and the items' (ids.ID_KINDS).

    @functools.cached_property
    def users(self) -> _Vocab:
        """The user vocabulary's lookup, built once per worker that reads this side input."""
        return _Vocab(self.user_vocab)

    @functools.cached_property
    def items(self) -> _Vocab:
        """The item vocabulary's lookup, likewise."""
        return _Vocab(self.item_vocab)


def _merge_counts(ids: list[np.ndarray], counts: list[np.ndarray]):
    """Distinct ids ascending and the sum of their counts over the parts."""
    merged, inverse = np.unique(np.concatenate(ids), return_inverse=True)
    total = np.bincount(inverse.reshape(-1), weights=np.concatenate(counts), minlength=len(merged))
    return merged, total.astype(np.int64)


class _Vocab:
    """An ascending vocabulary that tells each id's index in it.

    String ids go through a hash table (built once): a binary search would compare Python strs.
    """

    def __init__(self, vocab: np.ndarray):
        self.vocab = vocab
        self._table = None
        if vocab.dtype == object and len(vocab):
            import pandas as pd

            self._table = pd.Index(vocab)

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each id's index, and whether it is there (index 0 where it is not)."""
        vocab = self.vocab
        if not len(vocab):
            return np.zeros(len(ids), np.int64), np.zeros(len(ids), dtype=bool)
        if self._table is not None:
            index = self._table.get_indexer(ids).astype(np.int64)
            return np.maximum(index, 0), index >= 0
        index = np.searchsorted(vocab, ids)
        known = vocab[np.minimum(index, len(vocab) - 1)] == ids
        return index, np.asarray(known, dtype=bool)


def _drop_users_with_every_item(
    users: np.ndarray, item_ids: np.ndarray, item_users: np.ndarray, covering: list
) -> tuple[np.ndarray, np.ndarray, list[list[np.ndarray]]]:
    """Drops, in rounds, the users whose positive and seen-only items cover every item left.

    As ``index_interactions``: an item is left while a user kept holds it as a positive.
    ``users``, ``item_ids``: ascending raw ids; ``item_users``: each item's positive holders;
    ``covering``: :func:`covering_sets`' (user, positive items, seen-only items), the only users
    who can be dropped. Returns the users kept (a mask), the items left (a mask) and, per round,
    the seen-only items of each user dropped.
    """
    item_users = item_users.copy()
    alive = np.ones(len(users), dtype=bool)
    user_index, item_index = _Vocab(users), _Vocab(item_ids)
    # Per covering user: their index, their positives' and seen-only items' indices (those that
    # are some user's positive), and their seen-only items.
    sets = []
    for user, pos, seen in covering:
        index, _ = user_index.lookup(np.asarray([user], dtype=users.dtype))
        seen_index, known = item_index.lookup(seen)
        sets.append((int(index[0]), item_index.lookup(pos)[0], seen_index[known], seen))
    rounds = []
    while True:
        present = item_users > 0
        num_items = int(present.sum())
        full = [
            s for s in sets if alive[s[0]] and len(s[1]) + int(present[s[2]].sum()) >= num_items
        ]
        if not full:
            return alive, present, rounds
        for u, pos, _, _ in full:
            alive[u] = False
            np.subtract.at(item_users, pos, 1)
        rounds.append([seen for _, _, _, seen in full])


def summarize(
    buckets: list[BucketSummary],
    covering: list,
    decision: ReadDecision,
    config: PrepareConfig,
    fmt: str,
    source_sha: str,
    input_path: str,
) -> Summary:
    """Merges the buckets' counts into the single path's decisions and plan (one worker).

    Users who interacted with every item left are dropped, in rounds, as ``index_interactions``
    drops them; only the users :func:`covering_sets` gave can be (see :func:`covering_bound`).
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
    order = np.argsort(users, kind="stable")
    users, counts = users[order], counts[order]
    item_ids, item_users = _merge_counts(
        [b.items for b in buckets], [b.item_users for b in buckets]
    )
    seen_ids, seen_users = _merge_counts(
        [b.seen_items for b in buckets], [b.seen_item_users for b in buckets]
    )
    alive, present, dropped = _drop_users_with_every_item(users, item_ids, item_users, covering)
    if dropped:
        stats["users_with_every_item"] = sum(len(d) for d in dropped)
    if Reading.of(config).rule.active:  # As the single path counts them.
        stats.update(decision.rule_counts)
    if not alive.any():
        raise plan.nothing_left(stats, config.min_ratings)
    stats["rows_kept"] = int(counts[alive].sum())
    user_vocab, item_vocab = users[alive], item_ids[present]
    # Seen-only pairs kept: on items kept, less those of the users dropped.
    kept_items = _Vocab(item_vocab)
    num_seen_only = int(seen_users[kept_items.lookup(seen_ids)[1]].sum())
    for seen in (seen for d in dropped for seen in d):
        num_seen_only -= int(kept_items.lookup(seen)[1].sum())
    if Reading.of(config).rule.active:
        stats["seen_only_pairs"] = num_seen_only
    decided = plan.make_plan(
        config,
        fmt,
        source_sha,
        stats["rows_kept"],
        len(user_vocab),
        len(item_vocab),
        int(sampling.has_validation_item(counts[alive]).sum()),
    )
    return Summary(user_vocab, item_vocab, stats, decided, num_seen_only, decision.id_types)


def to_shards(rows, summary: Summary):
    """Contiguous ids for a bucket's kept pairs, split by ``user_index % num_shards``.

    Pairs of users dropped, and seen-only pairs on items dropped, go.
    """
    users, items, ts, order, positive = rows
    uidx, known = summary.users.lookup(users)
    iidx, item_known = summary.items.lookup(items)
    known &= item_known
    parts = (uidx[known], iidx[known], ts[known], order[known], positive[known])
    return _split_by(parts[0] % summary.plan.num_shards, parts)


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
    """A shard as ``prepare.make_shard`` makes it.

    Each user's positives in (time, input order); their seen-only items ascending, each with
    the number of the user's positives before it in that order.
    """
    uidx, iidx, ts, order, positive = _concat(parts)
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
        FileSystems.join(out, dataset_folder.BEAM_STAGING, f"shard-{index:05d}.json"),
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
    reading = Reading.of(config)
    read = (
        p
        | "Chunks" >> beam.Create(chunks)
        | "Spread" >> beam.Reshuffle()
        | "Read"
        >> beam.FlatMap(_reporting(read_chunk), specs, reading).with_outputs("report", main="rows")
    )
    decision = beam.pvalue.AsSingleton(
        read.report
        | "AllChunks" >> beam.combiners.ToList()
        | "DecideIds" >> beam.Map(_reporting(decide_reading), specs, reading.id_type)
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
        _reporting(summarize),
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
    if m.source.get("sha256") != source_sha:
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
    # Options that read or clean the data otherwise are in the fingerprint: it then differs.
    return decided.fingerprint


def _raise_failure(error: BaseException, specs: list[FileSpec], config: PrepareConfig) -> None:
    """Re-raises a job failure as the single path's error where it is one of ours."""
    payload = _decode_failure(error)
    if payload is None:
        return
    if payload["kind"] == "parse":
        spec = specs[payload["file"]]
        message = payload["message"]
        fallback = rio.DataError(message) if payload.get("fallback") else None
        raise rio.locate_error(
            spec.layout, spec.cols, message, fallback, id_type=Reading.of(config).id_type
        ) from None
    if payload["kind"] == "kinds":
        # Text files' sightings by line, as the single path names them (a pass over the files).
        scans = [
            rio.scans_at_lines(specs[f].layout, tuple(_decoded_scan(s) for s in pair))
            for f, pair in payload["scans"]
        ]
        rio.resolve_kinds(scans, Reading.of(config).id_type)
    if payload["kind"] in ("data", "kinds"):
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
    specs = describe_files(files, fmt, config.columns, Reading.of(config).rule, remote)
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
    seen_only_files = [ShardFile(**f) for r in results for f in r["seen_only"]]
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
        seen_only_files,
        tuple(summary["id_types"]),
    )
