"""The pre-batched TFRecord format: one place for the feature spec, the writer and the reader spec.

Every record is one serialized ``tf.train.Example`` holding a whole batch: int64 features of shape
``[batch, 1]`` (the layout TF Model Garden's NCF moved to so that TPUs get static shapes).

Training records hold ``user_id, item_id, valid_point_mask, labels``; evaluation records hold
``user_id, item_id, duplicate_mask``. The writer here encodes Examples straight from NumPy arrays
(no TensorFlow import, so worker processes can fork safely) and frames them as TFRecords with
CRC32C checksums; ``tests/test_records.py`` checks that TensorFlow's own parser reads them back
and that the bytes equal ``tf.train.Example.SerializeToString(deterministic=True)``.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import BinaryIO

import google_crc32c
import numpy as np

from training_core.common import atomic_writes

USER_ID = "user_id"
ITEM_ID = "item_id"
VALID_POINT_MASK = "valid_point_mask"
LABELS = "labels"
DUPLICATE_MASK = "duplicate_mask"

TRAIN_FEATURES: tuple[str, ...] = (USER_ID, ITEM_ID, VALID_POINT_MASK, LABELS)
EVAL_FEATURES: tuple[str, ...] = (USER_ID, ITEM_ID, DUPLICATE_MASK)

RECORD_SUFFIX = ".tfrecord"

# What to do about a damaged prepared dataset. A plain re-run of prepare-data reuses a complete
# folder with the same fingerprint without reading its records, so --overwrite is needed.
PREPARE_AGAIN = (
    "prepare the data again with ncf-pipelines prepare-data --overwrite (a re-run without it "
    "rebuilds missing or cut files, but cannot see a changed byte in a file of the right size)"
)


class CorruptRecordsError(ValueError):
    """A TFRecord file of a prepared dataset cannot be read; the message names the file."""


def feature_names(training: bool) -> tuple[str, ...]:
    """The features a training or evaluation record holds."""
    return TRAIN_FEATURES if training else EVAL_FEATURES


def feature_spec(batch_size: int, training: bool) -> dict:
    """The ``tf.io.parse_single_example`` spec for one pre-batched record.

    Args:
        batch_size: rows per record (the pre-batch size in ``metadata.json``).
        training: whether the record is a training record (else evaluation).
    """
    import tensorflow as tf  # Only the reader needs TensorFlow.

    return {
        name: tf.io.FixedLenFeature([batch_size, 1], dtype=tf.int64)
        for name in feature_names(training)
    }


# ---------------------------------------------------------------------------------------------
# Example encoding. Wire format (example.proto / feature.proto):
#   Example  { Features features = 1; }
#   Features { map<string, Feature> feature = 1; }   entry { string key = 1; Feature value = 2; }
#   Feature  { Int64List int64_list = 3; }
#   Int64List{ repeated int64 value = 1 [packed = true]; }
# Keys are written sorted, which is what deterministic serialization produces.
# ---------------------------------------------------------------------------------------------


_RECORDS_PER_READ = 64


def read_columns(files: list[str], prebatch: int, training: bool):
    """Yields the records of ``files`` parsed into flat NumPy columns, a few records at a time.

    In file order, row by row (the order the records hold); on any filesystem TensorFlow reads,
    which is imported when this is called.
    """
    import tensorflow as tf

    spec = feature_spec(prebatch, training)
    ds = tf.data.TFRecordDataset(files, buffer_size=8 << 20).batch(_RECORDS_PER_READ)
    # Plain graph code: traced as written, without AutoGraph's conversion (about 50 ms a call).
    parse = tf.autograph.experimental.do_not_convert(lambda s: tf.io.parse_example(s, spec))
    ds = ds.map(parse, num_parallel_calls=2)
    for batch in ds.as_numpy_iterator():
        yield {name: value.reshape(-1) for name, value in batch.items()}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _varint_width(top: int) -> int:
    """Bytes a protobuf varint takes for the non-negative ``top``."""
    width = 1
    while top >= 1 << (7 * width):
        width += 1
    return width


def _encode_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint-encodes a flat array of non-negative ints.

    Returns:
        The concatenated encodings as uint8, and the bytes each value took.

    Every value's bytes go to its start position in one vectorised store per byte position,
    highest position first: a value's unused high positions spill into the next values' first
    positions, and those are stored later (the spill of value i lands on value j > i at a lower
    position than its own store for j), so the last store at each position is the right byte.
    """
    n = len(values)
    width = _varint_width(int(values.max())) if n else 1
    if width == 1:
        return values.astype(np.uint8), np.ones(n, dtype=np.uint8)
    work = values.astype(np.uint32 if width <= 4 else np.uint64, copy=False)
    lengths = np.ones(n, dtype=np.uint8)
    for k in range(1, width):
        lengths += work >= (1 << (7 * k))
    starts = np.cumsum(lengths, dtype=np.int64)
    total = int(starts[-1])
    starts -= lengths
    out = np.empty(total + width - 1, dtype=np.uint8)
    for k in reversed(range(width)):
        byte = ((work >> (7 * k)) & 0x7F).astype(np.uint8)
        if k + 1 < width:
            byte |= (lengths > k + 1).view(np.uint8) << 7
        out[k:][starts] = byte
    return out[:total], lengths


@functools.lru_cache(maxsize=65536)
def _feature_header(key: bytes, payload_len: int) -> bytes:
    """The bytes of one ``Features.feature`` map entry before its packed payload."""
    int64_list = 1 + len(_varint(payload_len)) + payload_len  # Int64List.value, packed
    feature = 1 + len(_varint(int64_list)) + int64_list  # Feature.int64_list
    entry = 1 + len(_varint(len(key))) + len(key) + 1 + len(_varint(feature)) + feature
    return b"".join(
        (
            b"\x0a" + _varint(entry),  # Features.feature (map entry)
            b"\x0a" + _varint(len(key)) + key,  # entry.key
            b"\x12" + _varint(feature),  # entry.value
            b"\x1a" + _varint(int64_list),  # Feature.int64_list
            b"\x0a" + _varint(payload_len),  # Int64List.value, packed
        )
    )


def encode_examples(columns: Mapping[str, np.ndarray], batch_size: int) -> list[bytes]:
    """Encodes equal-length int64 columns as serialized Examples of ``batch_size`` rows each.

    Args:
        columns: feature name to a 1-D array of non-negative integers (any integer dtype);
            every array has the same length, a multiple of ``batch_size``.
        batch_size: rows per Example.

    Returns:
        One serialized ``tf.train.Example`` per batch, in order.
    """
    names = sorted(columns)
    n = len(columns[names[0]])
    if n % batch_size:
        raise ValueError(f"{n} rows do not fill whole batches of {batch_size}")
    num_batches = n // batch_size
    if num_batches == 0:
        return []
    # Per feature: packed payload bytes of every batch, and where each batch's bytes end.
    payloads = []
    for name in names:
        col = np.asarray(columns[name])
        if len(col) != n:
            raise ValueError(f"feature {name!r} has {len(col)} rows, expected {n}")
        if col.size and col.min() < 0:
            raise ValueError(f"feature {name!r} holds negative values; the encoder takes ids >= 0")
        data, lengths = _encode_varints(col)
        ends = np.cumsum(lengths.reshape(num_batches, batch_size).sum(axis=1, dtype=np.int64))
        payloads.append((name.encode(), data.tobytes(), ends.tolist()))

    records = []
    starts = [0] * len(payloads)
    for b in range(num_batches):
        pieces = []
        for f, (key, data, ends) in enumerate(payloads):
            lo, hi = starts[f], ends[b]
            pieces.append(_feature_header(key, hi - lo))
            pieces.append(data[lo:hi])
            starts[f] = hi
        features = b"".join(pieces)
        records.append(b"\x0a" + _varint(len(features)) + features)  # Example.features
    return records


# ---------------------------------------------------------------------------------------------
# TFRecord framing: uint64 length, masked crc32c(length), data, masked crc32c(data).
# ---------------------------------------------------------------------------------------------

_MASK_DELTA = 0xA282EAD8


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One TFRecord frame around ``data``."""
    header = struct.pack("<Q", len(data))
    return (
        header
        + struct.pack("<I", _masked_crc(header))
        + data
        + struct.pack("<I", _masked_crc(data))
    )


def write_tfrecord_file(path: str | os.PathLike, records: Iterable[bytes]) -> int:
    """Writes records to ``path`` through a temporary name, published by rename (``atomic_output``).

    Returns:
        The number of bytes written.
    """
    with atomic_writes.atomic_output(path) as f:
        return write_frames(f, records)


def write_frames(f: BinaryIO, records: Iterable[bytes]) -> int:
    """Writes records as TFRecord frames to the open file ``f``; returns the bytes written."""
    size = 0
    for rec in records:
        frame = frame_record(rec)
        f.write(frame)
        size += len(frame)
    return size


def read_tfrecord_file(path: str | os.PathLike) -> list[bytes]:
    """Reads every record of a TFRecord file, checking both checksums (for tests and tools)."""
    out = []
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0
    while pos < len(blob):
        header = blob[pos : pos + 8]
        if len(header) < 8:
            raise ValueError(f"{path}: truncated record header at byte {pos}")
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", blob[pos + 8 : pos + 12])
        if hcrc != _masked_crc(header):
            raise ValueError(f"{path}: corrupt length checksum at byte {pos}")
        data = blob[pos + 12 : pos + 12 + length]
        if len(data) < length:
            raise ValueError(f"{path}: truncated record at byte {pos}")
        (dcrc,) = struct.unpack("<I", blob[pos + 12 + length : pos + 16 + length])
        if dcrc != _masked_crc(data):
            raise ValueError(f"{path}: corrupt data checksum at byte {pos}")
        out.append(data)
        pos += 16 + length
    return out


def decode_example(data: bytes) -> dict[str, np.ndarray]:
    """Decodes one of our Examples back to arrays (the inverse of ``encode_examples``).

    A small pure-Python parser for tools and tests; training reads records with TensorFlow.
    """

    def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
        shift = result = 0
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result, pos
            shift += 7

    def fields(buf: bytes):
        pos = 0
        while pos < len(buf):
            tag, pos = read_varint(buf, pos)
            if tag & 7 != 2:
                raise ValueError("unexpected wire type in Example")
            length, pos = read_varint(buf, pos)
            yield tag >> 3, buf[pos : pos + length]
            pos += length

    out: dict[str, np.ndarray] = {}
    for _, features in fields(data):
        for _, entry in fields(features):
            key = value = None
            for num, sub in fields(entry):
                if num == 1:
                    key = sub.decode()
                elif num == 2:
                    value = sub
            for num, int64_list in fields(value or b""):
                if num != 3:
                    raise ValueError(f"feature {key!r} is not an int64 list")
                vals: list[int] = []
                for _, packed in fields(int64_list):
                    p = 0
                    while p < len(packed):
                        v, p = read_varint(packed, p)
                        vals.append(v)
                out[key] = np.asarray(vals, dtype=np.int64)
    return out


def shard_name(index: int, count: int) -> str:
    """File name of shard ``index`` of ``count``."""
    return f"part-{index:05d}-of-{count:05d}{RECORD_SUFFIX}"


def as_columns(arrays: Sequence[np.ndarray], training: bool) -> dict[str, np.ndarray]:
    """Zips arrays with the feature names of a training or evaluation record."""
    names = feature_names(training)
    if len(arrays) != len(names):
        raise ValueError(f"expected {len(names)} arrays ({', '.join(names)}), got {len(arrays)}")
    return dict(zip(names, arrays, strict=True))
