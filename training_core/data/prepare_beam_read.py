"""The read stage of Beam data prep: input chunks, their rows, and the id kinds over all of them.

The launcher checks every file's header or schema and lists chunks (byte ranges of text files,
``beam_source``'s range reader; Parquet row groups); workers parse each chunk with the parser
of ``delimited`` and the per-table reader of ``io`` (``io.table_columns``) into ids, timestamps
and each row's positive flag, each row keyed by its place in the input (chunk, row): the
tie-breaker the single-machine path takes from file order. Each chunk also reports what its id
columns hold; :func:`decide_reading` decides each column's kind over all of them
(``id_columns.resolve_kinds``).
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from training_core.data import (
    beam_source,
    delimited,
    formats,
    id_columns,
    positive_rules,
    prep_plan,
    prepare_beam_errors,
    read_errors,
)
from training_core.data import io as rio
from training_core.data.config import PrepareConfig
from training_core.data.ids import ID_AUTO, ID_INT64

_ROW_BITS = 32  # Input order key: chunk id << 32 | row within the chunk.


@dataclasses.dataclass(frozen=True)
class FileSpec:
    """One input file: its layout as the launcher read it, where workers open it, its columns."""

    layout: formats.FileLayout  # Its path as the launcher sees it (named in messages, as io does).
    path: str  # As workers open it (gs:// on Dataflow).
    cols: delimited.ReadColumns  # Ids, time, and the positive rule's columns (``io.read_columns``).


@dataclasses.dataclass(frozen=True)
class Reading:
    """How ids and positives are read (``prep_plan.read_options``: the single path's too)."""

    id_type: str = ID_AUTO
    rule: positive_rules.PositiveRule = positive_rules.PositiveRule()

    @classmethod
    def of(cls, config: PrepareConfig) -> Reading:
        """The reading of ``config``'s options."""
        return cls(**prep_plan.read_options(config))


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
    files: list[str],
    fmt: str,
    columns: rio.Columns,
    rule: positive_rules.PositiveRule,
    remote: bool,
) -> list[FileSpec]:
    """Checks every file's header or schema with the single path's messages; reads no rows."""
    specs = []
    for f in files:
        layout = formats.describe_file(f, fmt)
        cols = rio.read_columns(layout, columns, rule)
        specs.append(FileSpec(layout, beam_source.beam_path(f, remote), cols))
    return specs


def list_chunks(specs: list[FileSpec], range_bytes: int) -> list[Chunk]:
    """Chunks in input order: their ids order rows as the single path's file order does."""
    out: list[Chunk] = []
    for i, spec in enumerate(specs):
        if spec.layout.format == formats.PARQUET:
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
    # Data rows counted from the chunk's first (text).
    scans: tuple[id_columns.IdScan, id_columns.IdScan]
    rule_counts: dict[str, int]


def _read_table(chunk: Chunk, spec: FileSpec, reading: Reading):
    """A chunk's rows as ``io.table_columns`` reads them (``io.ChunkRows``); None when blank."""
    layout, cols = spec.layout, spec.cols
    if layout.format == formats.PARQUET:
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
        table = delimited.parse_ids(parse, cols, reading.id_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        # The launcher finds the first bad line of the file, as the single path does.
        raise prepare_beam_errors.report("parse", e, file=chunk.file) from None
    try:
        return rio.table_columns(table, cols, layout.path, reading.id_type, reading.rule)
    except read_errors.DataError as e:
        # Its data row counts from the chunk: the launcher names the line, as the single path
        # does (this message, noting where the count starts, where no line is found).
        where = f" (row counted from byte {chunk.start})" if chunk.start > 0 else ""
        raise prepare_beam_errors.report(
            "parse", f"{e}{where}", file=chunk.file, fallback=True
        ) from None


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


def _chunk_ids(column: id_columns.IdColumn, id_type: str) -> np.ndarray:
    """A chunk's ids as the column's kind will be, where the chunk alone tells it.

    Under ``auto``, text ids that are all integers are int64 (else the column mixes kinds, an
    error); text with any other value stays text. ``string`` and ``int64`` ids are read as such.
    """
    if id_type == ID_AUTO and column.scan.first_other is None:
        return id_columns.convert(column, ID_INT64)
    return column.values


@dataclasses.dataclass(frozen=True)
class ReadDecision:
    """The id kinds and the positive rule's counts over every chunk."""

    id_types: tuple[str, str]  # ids.ID_KINDS of the user and item columns.
    rule_counts: dict[str, int]  # Summed over the chunks; empty without a rule.


def _counted_from(scan: id_columns.IdScan, offset: int) -> id_columns.IdScan:
    """``scan`` with its data rows counted from the file's first, ``offset`` rows before."""

    def moved(seen: id_columns.Sighting | None) -> id_columns.Sighting | None:
        if seen is None or not offset:
            return seen
        head, _, _ = seen.where.rpartition("data row ")
        row = seen.row + offset
        return dataclasses.replace(seen, where=f"{head}data row {row}", row=row)

    return dataclasses.replace(
        scan, first_int=moved(scan.first_int), first_other=moved(scan.first_other)
    )


def _first_of(scans: list[id_columns.IdScan]) -> id_columns.IdScan:
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
            if specs[f].layout.format != formats.PARQUET:
                offset += r.rows
        out[f] = tuple(_first_of([m[k] for m in moved]) for k in range(2))
    return out


def decide_reading(reports: list[ChunkReport], specs: list[FileSpec], id_type: str) -> ReadDecision:
    """The kinds of the id columns (``id_columns.resolve_kinds`` over the files' scans, in order).

    A text file's mix of kinds is named by line, as the single path names it: the launcher
    finds the lines (``_raise_failure``) from the scans this error carries.
    """
    scans = _file_scans(reports, specs)
    try:
        kinds = id_columns.resolve_kinds(list(scans.values()), id_type)
    except read_errors.DataError as e:
        if specs[0].layout.format == formats.PARQUET:
            raise
        encoded = [[f, [dataclasses.asdict(s) for s in pair]] for f, pair in scans.items()]
        raise prepare_beam_errors.report("kinds", e, scans=encoded) from None
    counts: dict[str, int] = {}
    for r in reports:
        for key, n in r.rule_counts.items():
            counts[key] = counts.get(key, 0) + n
    return ReadDecision(kinds, counts)


def decoded_scan(raw: dict) -> id_columns.IdScan:
    """A scan as :func:`decide_reading`'s error carries it (``dataclasses.asdict``)."""
    sighting = {
        k: None if raw[k] is None else id_columns.Sighting(**raw[k])
        for k in ("first_int", "first_other")
    }
    return id_columns.IdScan(raw["column"], raw["role"], **sighting)
