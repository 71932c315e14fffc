import numpy as np
import pytest
import tensorflow as tf

from training_core.data import records
from training_core.training import input_pipeline


def _tf_example(cols, lo, hi):
    feats = {
        n: tf.train.Feature(int64_list=tf.train.Int64List(value=v[lo:hi].tolist()))
        for n, v in cols.items()
    }
    return tf.train.Example(features=tf.train.Features(feature=feats))


@pytest.mark.parametrize("training", [True, False])
def test_encoding_equals_tensorflow_serialization(training):
    rng = np.random.default_rng(0)
    batch = 64
    # Values across every varint width, including 0 and > 2**35.
    cols = {n: rng.integers(0, 2**40, size=batch * 3) for n in records.feature_names(training)}
    cols[records.USER_ID][:5] = [0, 1, 127, 128, 2**21]
    encoded = records.encode_examples(cols, batch)
    assert len(encoded) == 3
    for b, rec in enumerate(encoded):
        expected = _tf_example(cols, b * batch, (b + 1) * batch)
        assert rec == expected.SerializeToString(deterministic=True)


def test_tensorflow_reads_our_files_with_the_shared_spec(tmp_path):
    batch = 32
    rng = np.random.default_rng(1)
    cols = {n: rng.integers(0, 1000, size=batch * 5) for n in records.TRAIN_FEATURES}
    path = tmp_path / "x.tfrecord"
    size = records.write_tfrecord_file(path, records.encode_examples(cols, batch))
    assert size == path.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == ["x.tfrecord"]  # No partial left.
    spec = records.feature_spec(batch, training=True)
    ds = tf.data.TFRecordDataset(str(path)).map(lambda s: tf.io.parse_single_example(s, spec))
    seen = 0
    for b, ex in enumerate(ds):
        for n in records.TRAIN_FEATURES:
            assert ex[n].shape == (batch, 1)
            np.testing.assert_array_equal(ex[n].numpy()[:, 0], cols[n][b * batch : (b + 1) * batch])
        seen += 1
    assert seen == 5


def test_decode_roundtrip_and_checksums(tmp_path):
    cols = {n: np.arange(20) * 1000 for n in records.EVAL_FEATURES}
    path = tmp_path / "e.tfrecord"
    records.write_tfrecord_file(path, records.encode_examples(cols, 10))
    recs = records.read_tfrecord_file(path)
    assert len(recs) == 2
    back = records.decode_example(recs[1])
    np.testing.assert_array_equal(back[records.ITEM_ID], np.arange(10, 20) * 1000)
    blob = bytearray(path.read_bytes())
    blob[20] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match="checksum"):
        records.read_tfrecord_file(path)


def test_encoder_rejects_bad_shapes():
    with pytest.raises(ValueError, match="whole batches"):
        records.encode_examples({"user_id": np.arange(5)}, 2)
    with pytest.raises(ValueError, match="negative"):
        records.encode_examples({"user_id": np.array([-1, 2])}, 2)
    with pytest.raises(ValueError, match="rows"):
        records.encode_examples({"a": np.arange(4), "b": np.arange(2)}, 2)


def _shards(tmp_path, count, batch=16, batches=4):
    paths = []
    for s in range(count):
        cols = {n: np.arange(batch * batches) + s for n in records.TRAIN_FEATURES}
        path = tmp_path / records.shard_name(s, count)
        records.write_tfrecord_file(path, records.encode_examples(cols, batch))
        paths.append(str(path))
    return paths


def test_a_damaged_shard_in_an_interleaved_stream_is_named(tmp_path):
    paths = _shards(tmp_path, 3)
    blob = bytearray(open(paths[1], "rb").read())
    blob[len(blob) // 2] ^= 0x01  # One flipped bit: same size, a bad checksum.
    open(paths[1], "wb").write(bytes(blob))
    # What TensorFlow says alone: an offset, no file.
    with pytest.raises(tf.errors.DataLossError, match="corrupted record at") as raw:
        for _ in input_pipeline.ordered_records(paths):
            pass
    assert paths[1] not in str(raw.value)
    # Named: the file, the offset, and what to do.
    with pytest.raises(records.CorruptRecordsError) as exc:
        with input_pipeline.naming_damaged_files(paths):
            for _ in input_pipeline.ordered_records(paths):
                pass
    message = str(exc.value)
    assert message.startswith(f"{paths[1]}: corrupted record at byte ")
    assert "prepare-data --overwrite" in message and paths[0] not in message
    assert isinstance(exc.value, ValueError)  # The CLI prints it without a traceback.
    [(path, what)] = input_pipeline.find_unreadable(paths)
    assert path == paths[1] and what.startswith("corrupted record at byte ")


def test_a_data_loss_that_does_not_happen_again_says_so(tmp_path):
    paths = _shards(tmp_path, 2)
    error = tf.errors.DataLossError(None, None, "corrupted record at 12")
    message = str(input_pipeline.explain_data_loss(error, paths))
    assert "corrupted record at byte 12" in message and "reads cleanly now" in message
    assert str(tmp_path) in message
