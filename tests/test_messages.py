"""Errors a user meets on the command line: each names the file or option and says what to do.

The session's tiny data and tiny model (conftest's ``tiny_data``, ``tiny_model``): the tests
damage copies of the data, or point the commands at checkpoints that do not exist.
"""

import os
import shutil

import pytest
import tensorflow as tf

from pipelines import cli
from training_core.data import records
from training_core.data.metadata import read_metadata
from training_core.training import input_pipeline
from training_core.training.model_dir import checkpoint_dir, list_checkpoints, resolve_checkpoint


@pytest.fixture
def prepared(tiny_data):
    """The session's prepared tiny data (read-only: the tests damage copies)."""
    return tiny_data


@pytest.fixture
def model_dir(tiny_model):
    """The session's tiny model, 2 epochs: a checkpoint each (read-only)."""
    return tiny_model.model_dir


def _damaged_copy(prepared: str, tmp_path, pick) -> tuple[str, str]:
    """A copy of the dataset with one flipped bit in the file ``pick(meta, root)`` returns."""
    root = str(tmp_path / "data")
    shutil.copytree(prepared, root)
    path = pick(read_metadata(root), root)
    blob = bytearray(open(path, "rb").read())
    blob[len(blob) // 2] ^= 0x01
    with open(path, "wb") as f:
        f.write(bytes(blob))
    return root, path


# Negative ids (read_errors.MIN_ID): prepare-data rejects them as validate does.


def test_prepare_data_rejects_a_negative_id_naming_line_and_column(tmp_path, capsys):
    src = tmp_path / "events.csv"
    rows = [f"{u},{i},{1_000_000_000 + 60 * i}" for u in range(1, 6) for i in range(1, 30)]
    rows[40] = "-1,12,1000000720"
    src.write_text("user_id,item_id,timestamp\n" + "\n".join(rows) + "\n")
    code = cli.main(["prepare-data", "--input", str(src), "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"{src}:42: user id -1 in column 'user_id' is negative; ids must be integers >= 0" in err
    assert not (tmp_path / "o").exists()


# A damaged TFRecord shard: the error names the file and says what to do.


def test_evaluate_names_a_damaged_eval_file(prepared, model_dir, tmp_path, capsys):
    root, damaged = _damaged_copy(prepared, tmp_path, lambda m, r: m.eval_file_paths(r)[-1])
    code = cli.main(["evaluate", "--data", root, "--model-dir", model_dir])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"ncf-pipelines evaluate: error: {damaged}: corrupted record at byte " in err
    assert "prepare the data again with ncf-pipelines prepare-data --overwrite" in err


def test_the_training_stream_names_a_damaged_shard(prepared, tmp_path):
    # What train.py's epoch loop does (see input_pipeline.naming_damaged_files).
    root, damaged = _damaged_copy(prepared, tmp_path, lambda m, r: m.train_file_paths(r, 0)[-1])
    meta = read_metadata(root)
    layout = input_pipeline.train_layout(meta, 256, 1)
    dataset_fn = input_pipeline.train_dataset_fn(meta, root, layout, epoch=0)
    dist = input_pipeline.distribute(tf.distribute.get_strategy(), dataset_fn)
    with pytest.raises(records.CorruptRecordsError, match="corrupted record at byte") as exc:
        with input_pipeline.naming_damaged_files(meta.train_file_paths(root, 0)):
            for _ in dist:
                pass
    assert str(exc.value).startswith(f"{damaged}: ")


# --checkpoint that does not exist: the option, the path, and the checkpoints there are.


@pytest.mark.parametrize("command", ["evaluate", "export"])
def test_a_missing_checkpoint_names_the_option_and_lists_what_exists(
    command, prepared, model_dir, tmp_path, capsys
):
    ckpt_dir = checkpoint_dir(model_dir)
    names = [os.path.basename(p) for p in list_checkpoints(model_dir)]
    assert len(names) == 2  # One per epoch, oldest first: all are listed.
    latest = names[-1]
    missing = os.path.join(ckpt_dir, "ckpt-9")
    args = [command, "--data", prepared, "--model-dir", model_dir, "--checkpoint", missing]
    if command == "export":
        args += ["--output", str(tmp_path / "export")]
    code = cli.main(args)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "NotFoundError" not in err
    assert err.strip() == (
        f"ncf-pipelines {command}: error: --checkpoint {missing}: no such checkpoint "
        f"({missing}.index not found). Checkpoints in {ckpt_dir}: {', '.join(names)}. "
        "Pass one, e.g. "
        f"--checkpoint {os.path.join(ckpt_dir, latest)}, or leave out --checkpoint to use the "
        "latest."
    )
    assert not (tmp_path / "export").exists()


def test_checkpoint_folders_and_folders_without_checkpoints(model_dir, tmp_path):
    ckpt_dir = checkpoint_dir(model_dir)
    latest = tf.train.latest_checkpoint(ckpt_dir)
    assert resolve_checkpoint(model_dir, ckpt_dir) == latest  # A folder: its latest.
    assert resolve_checkpoint(model_dir, latest) == latest
    assert resolve_checkpoint(model_dir) == latest
    empty = checkpoint_dir(str(tmp_path / "untrained"))
    os.makedirs(empty)
    with pytest.raises(FileNotFoundError, match="holds no checkpoint: train first"):
        resolve_checkpoint(os.path.dirname(empty), os.path.join(empty, "ckpt-1"))
    with pytest.raises(FileNotFoundError, match=r"no such checkpoint \(a folder without"):
        resolve_checkpoint(os.path.dirname(empty), empty)
    with pytest.raises(FileNotFoundError, match="does not exist either"):
        resolve_checkpoint(str(tmp_path / "nope"), "ckpt-1", option="--checkpoint")
