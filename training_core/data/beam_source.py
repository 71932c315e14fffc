"""Apache Beam source of raw interactions as Arrow record batches, the input TFDV takes.

Reads the same inputs as :mod:`training_core.data.io` (every MovieLens layout, CSV, Parquet; a
file or a folder) without turning rows into Python objects: delimited text is cut into byte ranges
that workers parse with pyarrow, Parquet is read row group by row group with
``beam.io.ReadFromParquetBatched``. Columns get canonical names (``user_id``, ``item_id``,
``timestamp``, and ``rating`` and ``event`` when named or found by alias), so schemas and drift
settings do not depend on the layout. Columns that cannot be found are left out: the schema then
reports them missing.

Id columns are read as data prep reads them (``Source.id_type``, the ``--id-type`` rule of
``id_columns``): ``int64`` as integers (text stays text, and the schema says it is of the wrong
type); ``string`` as their text, integer columns too (Parquet integers as their decimal text);
``auto`` as integers where every value of the column is one, else as text (a float-looking id
such as ``1.5`` stays the text it was written as).

Each value becomes a one-element list, the layout TFDV's statistics generators expect. Text is
parsed twice: a first pass finds each column's type over all ranges (a column with one
non-number anywhere is text everywhere, as TFDV's own CSV decoder decides), the second parses with
that type, so that every batch of a column has the same type.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from training_core.common import hints
from training_core.data import delimited, formats, read_errors
from training_core.data import io as rio
from training_core.data.ids import ID_AUTO, ID_STRING

USER, ITEM, TIME, RATING, EVENT = "user_id", "item_id", "timestamp", "rating", "event"
CANONICAL = (USER, ITEM, TIME, RATING, EVENT)
IDS = (USER, ITEM)
DEFAULT_RANGE_BYTES = 64 << 20
BATCH_ROWS = 1 << 16


@dataclasses.dataclass(frozen=True)
class Source:
    """What to read and how its columns map to canonical names."""

    files: tuple[str, ...]
    layout: (
        formats.FileLayout
    )  # The first file's (``formats.describe_file``); every file is read with it.
    rename: tuple[tuple[str, str], ...]  # (column in the file, canonical name), found ones only.
    id_type: str = ID_AUTO  # How id columns are read (ids.ID_TYPES, id_columns' --id-type).

    @property
    def format(self) -> str:
        """The files' format (a canonical ``formats`` name)."""
        return self.layout.format

    @property
    def column_names(self) -> tuple[str, ...]:
        """Every column in file order (text) or in the schema (Parquet)."""
        return self.layout.names

    @property
    def missing(self) -> tuple[str, ...]:
        """Required canonical columns that the file does not have."""
        found = {c for _, c in self.rename}
        return tuple(c for c in (USER, ITEM, TIME) if c not in found)


def describe_source(
    path: str, fmt: str = "auto", columns: rio.Columns | None = None, id_type: str = ID_AUTO
) -> Source:
    """Resolves the files, their layout and the column mapping, reading only headers.

    Raises:
        DataError: no such input, an unknown layout, or an empty file (named).
    """
    files, fmt = formats.resolve_input(path, fmt)
    columns = columns or rio.Columns()
    for f in files:
        if os.path.getsize(f) == 0:
            raise read_errors.DataError(f"{f}: the file is empty (no interactions)")
    layout = formats.describe_file(files[0], fmt)
    if layout.has_header and not layout.names:  # A blank first line.
        raise read_errors.DataError(f"{files[0]}: the file is empty (no interactions)")
    return Source(tuple(files), layout, _mapping(layout.names, columns, fmt), id_type)


def _mapping(names: tuple[str, ...], columns: rio.Columns, fmt: str) -> tuple[tuple[str, str], ...]:
    if fmt in (formats.MOVIELENS_100K, formats.MOVIELENS_DAT):
        return (("user", USER), ("item", ITEM), ("timestamp", TIME), ("rating", RATING))
    wanted = (
        (USER, columns.user, rio.USER_ALIASES),
        (ITEM, columns.item, rio.ITEM_ALIASES),
        (TIME, columns.timestamp, rio.TIME_ALIASES),
        (RATING, columns.rating, rio.RATING_ALIASES),
        (EVENT, columns.event, rio.EVENT_ALIASES),
    )
    out = []
    for canonical, explicit, aliases in wanted:
        candidates = (explicit,) if explicit else aliases
        found = next((c for c in candidates if c in names), None)
        if found is not None:
            out.append((found, canonical))
    return tuple(out)


def beam_path(path: str, runner_is_remote: bool) -> str:
    """A path remote workers can open: ``/gcs/b/x`` (Vertex AI's Cloud Storage mount) as ``gs://b/x``."""
    if runner_is_remote and path.startswith("/gcs/"):
        return "gs://" + path[len("/gcs/") :]
    return path


class ReadInteractionBatches(beam.PTransform):
    """Reads a :class:`Source` into ``pa.RecordBatch`` es of canonical, list-wrapped columns."""

    def __init__(
        self,
        source: Source,
        range_bytes: int = DEFAULT_RANGE_BYTES,
        runner_is_remote: bool = False,
    ):
        """Reads ``source``; text files are cut into ranges of about ``range_bytes``."""
        super().__init__()
        self._source = source
        self._range_bytes = range_bytes
        self._remote = runner_is_remote

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        """Builds the read."""
        src = self._source
        files = [beam_path(f, self._remote) for f in src.files]
        if src.format == formats.PARQUET:
            wanted = [c for c, _ in src.rename]
            types = _parquet_types(src.files, wanted)
            if src.id_type == ID_STRING:  # Integer ids as their decimal text.
                types.update({c: pa.string() for c in _id_columns(src)})
            return (
                pbegin
                | "Files" >> beam.Create(files)
                | "ReadParquet" >> beam.io.ReadAllFromParquetBatched(columns=wanted)
                | "ToBatches" >> beam.FlatMap(_table_to_batches, src.rename, types)
            )
        ranges = (
            pbegin
            | "Ranges" >> beam.Create(byte_ranges(src.files, files, self._range_bytes))
            | "Spread" >> beam.Reshuffle()
        )
        types = (
            ranges
            | "ColumnTypes" >> beam.Map(_range_types, src)
            | "MergeTypes" >> beam.CombineGlobally(_merge_types)
        )
        return ranges | "Parse" >> beam.FlatMap(_parse_range, src, beam.pvalue.AsSingleton(types))


def byte_ranges(
    local: Sequence[str], files: Sequence[str], range_bytes: int
) -> list[tuple[str, int, int]]:
    """(file, start, end) byte ranges of ``files``; a compressed file is one range (end -1).

    Sizes come from ``local``: the same files as the launcher sees them.
    """
    out = []
    for lf, f in zip(local, files, strict=True):
        if f.endswith(".gz"):
            out.append((f, 0, -1))
            continue
        size = os.path.getsize(lf)
        out.extend((f, s, min(s + range_bytes, size)) for s in range(0, size, range_bytes))
    return out


def read_range(path: str, start: int, end: int) -> bytes:
    """The lines that begin in [start, end), whole (a compressed file: all of it)."""
    if end < 0:
        with FileSystems.open(path) as f:
            return f.read()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        if start > 0:
            f.seek(start - 1)
            f.readline()  # The line under way at `start` belongs to the range before.
        pos = f.tell()
        if pos >= end:
            return b""
        data = f.read(end - pos)
        if not data.endswith(b"\n"):
            data += f.readline()
        return data


def read_text_range(
    path: str,
    start: int,
    end: int,
    layout: formats.FileLayout,
    include_columns: Sequence[str],
    column_types: dict[str, pa.DataType],
) -> pa.Table | None:
    """The lines that begin in [start, end) of a text file, parsed; None when they are blank.

    :func:`read_range` reads them from ``path`` (where workers open the file) and
    ``delimited.parse_delimited`` parses them as ``layout`` (read by the launcher) says.

    Raises:
        pa.ArrowInvalid, pa.ArrowTypeError: text the parser rejects; the caller says where.
    """
    data = read_range(path, start, end)
    if not data.strip():
        return None
    return parse_text_range(data, start, layout, include_columns, column_types)


def parse_text_range(
    data: bytes,
    start: int,
    layout: formats.FileLayout,
    include_columns: Sequence[str],
    column_types: dict[str, pa.DataType],
) -> pa.Table:
    """Lines ``read_range`` read from byte ``start`` on, parsed as ``layout`` says.

    The header line is skipped where the range starts the file.
    """
    skip = 1 if layout.has_header and start == 0 else 0
    return delimited.parse_delimited(
        data, layout.delimiter, layout.names, skip, include_columns, column_types
    )


def _parse(
    rng: tuple[str, int, int], src: Source, types: dict[str, pa.DataType] | None
) -> pa.Table | None:
    path, start, end = rng
    try:
        table = read_text_range(
            path, start, end, src.layout, [c for c, _ in src.rename], types or {}
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        where = path if end < 0 else f"{path} (bytes {start}-{end})"
        raise read_errors.DataError(
            f"{where}: cannot be parsed as {src.format}: {e}. Fix or remove the bad line "
            f"(or check {hints.option('--format')})."
        ) from None
    return table if table is not None and table.num_rows else None


def _range_types(rng: tuple[str, int, int], src: Source) -> dict[str, tuple[str, ...]]:
    table = _parse(rng, src, None)
    if table is None:
        return {}
    return {f.name: (str(f.type),) for f in table.schema}


def _merge_types(parts) -> dict[str, tuple[str, ...]]:
    out: dict[str, set[str]] = {}
    for part in parts:
        for name, kinds in part.items():
            out.setdefault(name, set()).update(kinds)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def unify_type(kinds: tuple[str, ...]) -> pa.DataType | None:
    """One Arrow type for a column that parsed as ``kinds`` in different ranges or files."""
    kinds = tuple(k for k in kinds if k != "null")
    if not kinds:
        return None
    parsed = [_type_from_name(k) for k in kinds]
    if all(pa.types.is_integer(t) for t in parsed):
        return pa.int64()
    if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in parsed):
        return pa.float64()
    if all(pa.types.is_timestamp(t) or pa.types.is_date(t) for t in parsed):
        # Times written with a zone ("...Z", "+02:00") parse only as a zoned type; all of one
        # kind keep it, zoned and plain mixed are left as text (as data prep parses each value).
        zoned = {pa.types.is_timestamp(t) and t.tz is not None for t in parsed}
        if zoned == {True}:
            return pa.timestamp("s", tz="UTC")
        return pa.timestamp("s") if zoned == {False} else pa.string()
    return pa.string()


def _type_from_name(name: str) -> pa.DataType:
    simple = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}
    if name in simple:
        return getattr(pa, name)()
    if name in ("float", "double", "halffloat"):
        return pa.float64()
    if name.startswith("timestamp"):
        return pa.timestamp("s", tz="UTC") if "tz=" in name else pa.timestamp("s")
    if name.startswith("date"):
        return pa.date32()
    return pa.string()


def _id_columns(src: Source) -> list[str]:
    return [c for c, canonical in src.rename if canonical in IDS]


def _parse_range(
    rng: tuple[str, int, int], src: Source, kinds: dict[str, tuple[str, ...]]
) -> list[pa.RecordBatch]:
    types = {name: t for name, k in kinds.items() if (t := unify_type(k)) is not None}
    for name in _id_columns(src):
        if src.id_type == ID_STRING or (
            src.id_type == ID_AUTO and name in types and not pa.types.is_integer(types[name])
        ):
            types[name] = pa.string()  # Text ids as written ("1.5" stays "1.5").
    table = _parse(rng, src, types)
    return [] if table is None else _table_to_batches(table, src.rename, types)


def _parquet_types(files: tuple[str, ...], wanted: list[str]) -> dict[str, pa.DataType]:
    import pyarrow.parquet as pq

    kinds: dict[str, set[str]] = {}
    for f in files:
        schema = pq.read_schema(f)
        for name in wanted:
            if name in schema.names:
                kinds.setdefault(name, set()).add(str(schema.field(name).type))
    return {n: t for n, k in kinds.items() if (t := unify_type(tuple(k))) is not None}


def _table_to_batches(
    table: pa.Table, rename: tuple[tuple[str, str], ...], types: dict[str, pa.DataType]
) -> list[pa.RecordBatch]:
    """Canonical names, one type per column, each value wrapped in a one-element list."""
    arrays, names = [], []
    for source_name, canonical in rename:
        if source_name not in table.column_names:
            continue
        col = table.column(source_name).combine_chunks()
        target = types.get(source_name)
        if target is not None and col.type != target:
            col = col.cast(target) if not pa.types.is_null(col.type) else pa.nulls(len(col), target)
        if pa.types.is_timestamp(col.type) or pa.types.is_date(col.type):
            col = col.cast(pa.timestamp("s")).cast(pa.int64())
        arrays.append(_as_lists(col))
        names.append(canonical)
    if not arrays:
        return []
    batch = pa.RecordBatch.from_arrays(arrays, names)
    return [batch.slice(s, BATCH_ROWS) for s in range(0, batch.num_rows, BATCH_ROWS)]


def _as_lists(values: pa.Array) -> pa.ListArray:
    """[v0, None, v2] -> [[v0], null, [v2]]: a missing value is a missing feature to TFDV."""
    n = len(values)
    if values.null_count == 0:
        offsets = pa.array(np.arange(n + 1, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, values)
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    offsets = np.concatenate([[0], np.cumsum(valid, dtype=np.int32)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values.drop_null(), mask=pa.array(~valid))


def pipeline_options(args: tuple[str, ...]):
    """``(PipelineOptions, the --runner named or None, whether it is Dataflow)`` from arguments."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(list(args))
    runner_name = options.view_as(StandardOptions).runner
    return options, runner_name, "dataflow" in str(runner_name).lower()


def in_process_runner(options):
    """Beam's FnApiRunner, set up as the DirectRunner sets it up for a batch pipeline.

    Named explicitly because Beam 2.72's DirectRunner first tries the Prism runner, which it
    downloads from GitHub at run time; where that works, behaviour and speed differ from what
    was tested, and a container should not fetch binaries.
    """
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(
        provision_info=fn_runner.ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
        )
    )
