"""The core's decision rules, each held to the line that makes it (issue 36's mutants).

The order of the best epoch's weights and its checkpoint, the first of equal epochs as the best,
a damaged training shard named by ``train`` itself, the gate's "not worse" boundary, and the
epochs data prep prepares for ``auto``. Each test here fails when that one line is broken.
"""

import dataclasses
import json
import os
import shutil
import struct
import types

import numpy as np
import pytest
import tensorflow as tf
from conftest import checkpoint_values

from pipelines import cli
from training_core.data import prep_plan, prepare
from training_core.data.config import PrepareConfig
from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION, read_metadata
from training_core.evaluation import gate
from training_core.training import loop, presets, results, train_config, trainer
from training_core.training.model_dir import best_dir, checkpoint_dir, history_path

# --- patience: the best epoch's weights, and which epoch is the best ----------------------------


class _Crash(RuntimeError):
    """A kill injected right after an epoch's checkpoint is written."""


@pytest.mark.slow
def test_a_kill_right_after_an_epoch_s_checkpoint_finds_its_best_weights_saved(
    tiny_data, tmp_path, monkeypatch
):
    """The best epoch's weights are saved before its checkpoint, so a kill just after the
    checkpoint (the latest a kill can come before the next epoch) never leaves a checkpoint whose
    history claims a best epoch whose weights are not in ``best/``."""
    model_dir = str(tmp_path / "m")
    config = train_config.config_for(
        tiny_data, model_dir, "tiny", epochs=2, target_hr=0.0, steps_per_loop=50
    )
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, patience=1))
    real_save = trainer._Trainer._save

    def save_then_die(self, *args):
        real_save(self, *args)
        if self.history:  # An epoch's checkpoint (not a mid-epoch one): die right after it.
            raise _Crash

    monkeypatch.setattr(trainer._Trainer, "_save", save_then_die)
    with pytest.raises(_Crash):
        loop.train(config, tf.distribute.get_strategy())

    latest = tf.train.latest_checkpoint(checkpoint_dir(model_dir))
    step = int(latest.rsplit("-", 1)[1])
    with open(history_path(model_dir, step)) as f:
        claimed = [results.EpochResult(**e) for e in json.load(f)["epochs"]]
    best = results.best_epoch(claimed)
    assert [e.epoch for e in claimed] == [1] and best.epoch == 1
    saved = tf.train.latest_checkpoint(best_dir(model_dir))
    assert saved is not None and saved.endswith(f"-{best.epoch}"), (
        f"the checkpoint at step {step} claims epoch {best.epoch} the best, but "
        f"{best_dir(model_dir)} holds {saved}"
    )
    # And they are that epoch's weights: the checkpoint's own (epoch 1 is its last).
    ours = checkpoint_values(latest, model_only=True)
    kept = checkpoint_values(saved, model_only=True)
    assert ours and ours.keys() == kept.keys()
    for name in ours:
        np.testing.assert_array_equal(ours[name], kept[name], err_msg=name)


def _epoch(epoch: int, hr: float) -> results.EpochResult:
    return results.EpochResult(
        epoch=epoch, step=10 * epoch, loss=0.5, hr_at_10=hr, ndcg_at_10=hr / 2,
        examples_per_sec=1.0, eval_users=100,
    )  # fmt: skip


def test_of_equal_hr_at_10_the_first_epoch_is_the_best_and_a_later_tie_counts_as_no_better():
    history = [_epoch(1, 0.25), _epoch(2, 0.5), _epoch(3, 0.5), _epoch(4, 0.5)]
    assert results.best_epoch(history) is history[1]
    assert results.best_epoch(history[:3]) is history[1]
    assert results.epochs_without_better(history) == 2
    # Patience 2: two tying epochs after the best are two epochs without a better HR@10.
    model = presets.get_preset("tiny", patience=2)
    assert results.stop_reason(model, history[:3]) is None
    reason = results.stop_reason(model, history)
    assert reason is not None and "no better HR@10 than epoch 2's 0.5000 for 2 epochs" in reason
    # What a run reports as best (and keeps, with patience) is that first epoch.
    result = results.TrainResult(
        epochs=history, global_step=40, steps_per_epoch=10, stopped_early=True, num_replicas=1,
        strategy="_DefaultDistributionStrategy", kept_epoch=2,
    )  # fmt: skip
    assert result.best is history[1] and result.to_dict()["best"]["epoch"] == 2


# --- a damaged training shard, met by train itself -----------------------------------------------


def _record_starts(path: str) -> list[int]:
    """Byte offsets of the TFRecord frames in ``path`` (length, its CRC, data, data CRC)."""
    with open(path, "rb") as f:
        blob = f.read()
    starts, at = [], 0
    while at < len(blob):
        starts.append(at)
        (length,) = struct.unpack("<Q", blob[at : at + 8])
        at += 8 + 4 + length + 4
    assert at == len(blob), f"{path} is not whole TFRecord frames"
    return starts


def test_train_names_a_damaged_training_shard_and_the_offset(tiny_data, tmp_path, capsys):
    """One flipped byte inside a record of an epoch's shard (same size, so the preflight's size
    check passes): ``ncf-pipelines train`` stops naming the file, the damaged record's offset and
    what to do, without a traceback."""
    root = str(tmp_path / "data")
    shutil.copytree(tiny_data, root)
    damaged = read_metadata(root).train_file_paths(root, 0)[-1]
    starts = _record_starts(damaged)
    assert len(starts) >= 2
    record = starts[1]  # The second record: an offset that is not 0.
    with open(damaged, "r+b") as f:
        f.seek(record + 8 + 4 + 20)  # Inside its data: the data's CRC no longer matches.
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))

    args = ["train", "--data", root, "--model-dir", str(tmp_path / "m")]
    code = cli.main([*args, "--preset", "tiny", "--epochs", "1", "--steps-per-loop", "50"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    # TensorFlow counts the offset of the record's data, after its 12-byte header.
    data_at = record + 8 + 4
    assert f"{damaged}: corrupted record at byte {data_at}; the prepared data is damaged" in err
    assert "prepare the data again with ncf-pipelines prepare-data --overwrite" in err


# --- the gate's boundary: not worse is >= -tolerance, on the selection split ---------------------


def _scores(export_dir: str, hr: float, split: str) -> gate.Scores:
    return gate.Scores(export_dir, hr, hr / 2, 100, 1.0, 1.0, split)


def _exact_gate(monkeypatch, hr: dict[tuple[str, str], float], selection: str) -> None:
    """compare with its models' scores replaced by ``hr[(model, split)]`` and the data's
    selection split set to ``selection`` (same catalogue, every user known)."""
    data = types.SimpleNamespace(selection_split=selection)
    monkeypatch.setattr(gate, "read_metadata", lambda data_dir: data)
    monkeypatch.setattr(gate, "load_export", lambda path: path)
    monkeypatch.setattr(gate, "score_baselines", lambda data_dir, splits: ())  # test_compare's.
    monkeypatch.setattr(gate, "catalogue", lambda model, data_dir: gate.Catalogue(10, 10, 10))
    monkeypatch.setattr(
        gate, "score_export", lambda m, data_dir, split: _scores(m, hr[m, split], split)
    )


@pytest.mark.parametrize("selection", [SPLIT_TEST, SPLIT_VALIDATION])
@pytest.mark.parametrize(
    "challenger,champion,tolerance,blessed",
    [
        (0.5, 0.5, 0.0, True),  # Equal, no tolerance: not worse.
        (0.5, 0.75, 0.25, True),  # Worse by exactly the tolerance (all exact in binary).
        (0.5 - 2**-20, 0.75, 0.25, False),  # Just beyond it.
        (0.5 - 2**-20, 0.5, 0.0, False),  # The least bit worse, no tolerance.
        (0.5 + 2**-20, 0.5, 0.0, True),
    ],
    ids=["equal", "gap-equals-tolerance", "just-beyond-tolerance", "just-worse", "just-better"],
)
def test_the_gate_blesses_up_to_the_tolerance_inclusive_on_the_selection_split(
    monkeypatch, challenger, champion, tolerance, blessed, selection
):
    """compare's own rule on exactly chosen scores (each model's scoring through its signature is
    tested in test_compare.py): the gap ``challenger - champion`` may equal ``-tolerance``, on
    the split the data selects. With a validation split, the test split's scores are the other
    way round and decide nothing."""
    hr = {("challenger", selection): challenger, ("champion", selection): champion}
    if selection == SPLIT_VALIDATION:  # The test split says the opposite.
        hr |= {("challenger", SPLIT_TEST): champion, ("champion", SPLIT_TEST): challenger}
    _exact_gate(monkeypatch, hr, selection)
    decision = gate.compare("challenger", "data", "champion", "hr_at_10", tolerance)
    assert decision.blessed is blessed, decision.reason
    verdict = "is not worse than" if blessed else "is worse than"
    expected = f"on the {selection} split, challenger hr_at_10 {challenger:.4f} {verdict}"
    assert expected in decision.reason
    metrics = decision.to_metrics()
    assert metrics["blessed"] == float(blessed) and decision.split == selection
    assert metrics["decided_on_validation"] == float(selection == SPLIT_VALIDATION)
    assert metrics[f"challenger_{selection}_hr_at_10"] == challenger
    assert metrics[f"champion_{selection}_hr_at_10"] == champion
    if selection == SPLIT_VALIDATION:  # Reported beside it, named by split.
        assert metrics["challenger_test_hr_at_10"] == champion
        assert metrics["champion_test_hr_at_10"] == challenger
        assert "On the test split (reported, not deciding)" in decision.reason
    else:
        assert not any("_validation_" in k for k in metrics)


# --- the epochs data prep prepares for auto: by training positives, not rows ---------------------


def test_auto_prepares_the_epochs_of_the_preset_its_training_positives_choose():
    """At the ml-1m/ml-20m limit the two counts choose differently: positives (rows less one
    held-out rating per user) at the limit choose ml-1m, the rows themselves ml-20m."""
    limit, below = presets.AUTO_BY_SIZE[-1]
    users = 10_000
    rows = limit + users  # Training positives: exactly the limit.
    by_positives = presets.PRESETS[below].epochs
    by_rows = presets.PRESETS[presets.AUTO_LARGEST].epochs
    assert by_positives != by_rows  # The counts straddle a limit where the epochs differ.
    config = PrepareConfig(input_path="in.csv", output_dir="out", num_epochs=None)
    assert config.train_preset == presets.AUTO and config.train_epochs is None
    config = train_config.with_training_epochs(config)  # As the CLI and the component tell it.
    decided = prep_plan.make_plan(config, "csv", "0" * 64, rows, users, num_items=5_000)
    assert decided.num_epochs == decided.options["num_epochs"] == by_positives


def test_auto_prepares_the_epochs_training_resolves_from_the_metadata(
    tiny_csv, tiny_data, tmp_path, monkeypatch
):
    """A real prepare with the size limit moved onto the tiny data's training positives (rows
    are more by one held-out rating per user): the epochs prepared are the epochs that training,
    reading the metadata, runs."""
    counted = read_metadata(tiny_data)  # The same ratings, prepared with the same filter.
    positives = counted.num_train_positives
    assert counted.num_users > 0  # Rows: positives + one held-out rating per user.
    # tiny (3 epochs) up to the positives, reference (2) beyond: rows would choose reference.
    monkeypatch.setattr(presets, "AUTO_BY_SIZE", ((positives, "tiny"),))
    monkeypatch.setattr(presets, "AUTO_LARGEST", "reference")
    assert presets.PRESETS["tiny"].epochs != presets.PRESETS["reference"].epochs

    out = str(tmp_path / "auto")
    config = train_config.with_training_epochs(PrepareConfig(
        input_path=tiny_csv, output_dir=out, min_ratings=0, num_epochs=None, eval_negatives=20,
        train_batch_size=256, workers=1,
    ))  # fmt: skip
    meta = prepare.prepare(config).metadata
    assert meta.num_train_positives == positives
    trains = train_config.config_for(out, str(tmp_path / "m"), presets.AUTO).model.epochs
    assert meta.num_epochs == trains == presets.PRESETS["tiny"].epochs
