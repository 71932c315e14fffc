"""Warm start (training_core/training/warm_start.py): a weekly run starts from the champion.

The champion is the session's tiny model (``tiny_model``) and its export (``tiny_export``); the
new run's data is the tiny ratings a week later, with 5 new users and 3 new items
(``next_week``). Known raw ids keep the champion's rows exactly, new ones keep their fresh rows,
every other weight is the champion's; a champion of another shape or id kind is refused naming
``--warm-start-from``; a warm-started run records it in ``model_config.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import prepare_tiny

from training_core.data import synthetic
from training_core.data.ids import ID_STRING
from training_core.data.metadata import METADATA_FILE, read_metadata, read_vocab, vocab_text
from training_core.training import loop, train_config, trainer, warm_start
from training_core.training.model_dir import DATA_DIR, config_path

NEW_USERS, NEW_ITEMS = 5, 3


@pytest.fixture(scope="module")
def next_week(tmp_path_factory, tiny_interactions):
    """The tiny ratings a week later: 5 new users rating old items and 3 new ones, latest."""
    raw = tiny_interactions
    rng = np.random.default_rng(1)
    old_items = np.unique(raw.items)
    new_items = old_items.max() + 1 + np.arange(NEW_ITEMS)
    users, items = [], []
    for user in raw.users.max() + 1 + np.arange(NEW_USERS):
        picked = np.concatenate([rng.choice(old_items, 12, replace=False), new_items])
        users += [user] * len(picked)
        items += list(picked)
    week = dataclasses.replace(
        raw,
        users=np.concatenate([raw.users, np.asarray(users, np.int64)]),
        items=np.concatenate([raw.items, np.asarray(items, np.int64)]),
        timestamps=np.concatenate(
            [raw.timestamps, raw.timestamps.max() + 1 + np.arange(len(users))]
        ),
    )
    root = tmp_path_factory.mktemp("next-week")
    csv = str(root / "ratings.csv")
    synthetic.write(week, csv, "csv")
    return prepare_tiny(csv, str(root / "data"), num_epochs=1)


def _fresh_model(data_dir: str, **options):
    config = train_config.config_for(data_dir, "unused", "tiny", **options)
    return trainer.build_model(config.model, read_metadata(data_dir), seed=0)


def _ids(data_dir: str):
    meta = read_metadata(data_dir)
    return (
        read_vocab(os.path.join(data_dir, meta.user_vocab), meta.user_id_type),
        read_vocab(os.path.join(data_dir, meta.item_vocab), meta.item_id_type),
    )


def test_known_ids_keep_their_champion_rows_and_new_ones_start_fresh(tiny_export, next_week):
    champion = warm_start.read_champion(tiny_export.export_dir)
    model = _fresh_model(next_week)
    fresh = {side: getattr(model, f"{side}_embedding").numpy() for side in ("user", "item")}
    done = warm_start.apply(champion, model, read_metadata(next_week), next_week)

    for side, ids in zip(("user", "item"), _ids(next_week), strict=True):
        old_ids = champion.user_ids if side == "user" else champion.item_ids
        table = getattr(model, f"{side}_embedding").numpy()
        old_table = champion.table(f"{side}_embedding")
        known = np.isin(ids, old_ids)
        for row in np.flatnonzero(known):
            (old_row,) = np.flatnonzero(old_ids == ids[row])
            np.testing.assert_array_equal(table[row], old_table[old_row])
        np.testing.assert_array_equal(table[~known], fresh[side][~known])
        assert not np.array_equal(table[known], fresh[side][known])  # Something was carried.
        rows = getattr(done, f"{side}s")
        assert (rows.carried, rows.new) == (int(known.sum()), int((~known).sum()))
    assert (done.users.new, done.items.new) == (NEW_USERS, NEW_ITEMS)
    assert done.dense_copied == len(model.dense_variables())
    export_model = tf.saved_model.load(tiny_export.export_dir).model
    np.testing.assert_array_equal(model.logit_kernel.numpy(), export_model.logit_kernel.numpy())
    np.testing.assert_array_equal(model.mlp_kernels[1].numpy(), export_model.mlp_kernels[1].numpy())


@pytest.mark.parametrize(
    "options, named",
    [
        ({"architecture": "mf"}, "columns"),  # Another architecture: other widths.
        ({"num_factors": 4}, "columns"),
        ({"mlp_layers": "16,8"}, "other weights"),  # Same embedding width, another MLP.
    ],
)
def test_a_champion_of_another_shape_is_refused_naming_the_option(
    tiny_export, next_week, options, named
):
    champion = warm_start.read_champion(tiny_export.export_dir)
    model = _fresh_model(next_week, **options)
    before = model.user_embedding.numpy()
    with pytest.raises(ValueError, match="--warm-start-from") as err:
        warm_start.apply(champion, model, read_metadata(next_week), next_week)
    assert named in str(err.value) and tiny_export.export_dir in str(err.value)
    np.testing.assert_array_equal(model.user_embedding.numpy(), before)  # Nothing copied.


def _with_string_ids(data_dir: str, out: str) -> str:
    """A copy of a prepared folder whose raw ids are strings ("user-0042", "item-0007").

    Zero-padded, so each vocabulary stays in string order; rows and records are unchanged.
    """
    shutil.copytree(data_dir, out)
    meta = read_metadata(data_dir)
    with open(os.path.join(out, METADATA_FILE)) as f:
        raw = json.load(f)
    for side, vocab in (("user", meta.user_vocab), ("item", meta.item_vocab)):
        ids = read_vocab(os.path.join(data_dir, vocab))
        names = np.asarray([f"{side}-{int(i):04d}" for i in ids], dtype=object)
        with open(os.path.join(out, vocab), "w", encoding="utf-8") as f:
            f.write(vocab_text(names))
        raw[f"{side}_id_type"] = ID_STRING
    with open(os.path.join(out, METADATA_FILE), "w") as f:
        json.dump(raw, f)
    return out


@pytest.fixture(scope="module")
def string_ids(tiny_model, tiny_data, next_week, tmp_path_factory):
    """(the champion exported with string ids, next week's data with string ids)."""
    from training_core.serving import export

    root = tmp_path_factory.mktemp("string-ids")
    champion_data = _with_string_ids(tiny_data, str(root / "champion-data"))
    out = str(root / "export")
    export.export(export.ExportConfig(tiny_model.model_dir, champion_data, out))
    return out, _with_string_ids(next_week, str(root / "next-week"))


def test_string_ids_are_matched_as_strings(string_ids, tiny_export, next_week):
    string_export, string_week = string_ids
    champion = warm_start.read_champion(string_export)
    assert (champion.user_id_type, champion.item_id_type) == (ID_STRING, ID_STRING)
    model = _fresh_model(string_week)
    done = warm_start.apply(champion, model, read_metadata(string_week), string_week)
    assert (done.users.new, done.items.new) == (NEW_USERS, NEW_ITEMS)
    # The same rows as the integer champion gives the integer copy of the data.
    same = _fresh_model(next_week)
    warm_start.apply(
        warm_start.read_champion(tiny_export.export_dir), same, read_metadata(next_week), next_week
    )
    np.testing.assert_array_equal(model.item_embedding.numpy(), same.item_embedding.numpy())
    np.testing.assert_array_equal(model.user_embedding.numpy(), same.user_embedding.numpy())


def test_a_champion_of_another_id_kind_is_refused(string_ids, next_week):
    champion = warm_start.read_champion(string_ids[0])  # String ids; next_week's are integers.
    with pytest.raises(ValueError, match="--warm-start-from .*user ids are string, this data's"):
        warm_start.apply(champion, _fresh_model(next_week), read_metadata(next_week), next_week)


def test_a_model_folder_is_read_with_the_data_it_names(
    tiny_model, tiny_data, tiny_export, tmp_path
):
    folder = str(tmp_path / "model")
    shutil.copytree(tiny_model.model_dir, folder)
    with open(config_path(folder)) as f:
        payload = json.load(f)
    assert payload[DATA_DIR] == tiny_data  # Every run records the data it trained on.
    del payload[DATA_DIR]  # As a folder trained before warm starts existed.
    with open(config_path(folder), "w") as f:
        json.dump(payload, f)
    with pytest.raises(ValueError, match="--warm-start-from .*pass its export"):
        warm_start.read_champion(folder)
    shutil.rmtree(folder)
    shutil.copytree(tiny_model.model_dir, folder)
    from_folder = warm_start.read_champion(folder)
    from_export = warm_start.read_champion(tiny_export.export_dir)
    assert from_folder.source == warm_start.SOURCE_MODEL_DIR
    assert sorted(from_folder.weights) == sorted(from_export.weights)
    for key, value in from_export.weights.items():
        np.testing.assert_array_equal(from_folder.weights[key], value)
    np.testing.assert_array_equal(from_folder.item_ids, from_export.item_ids)
    with pytest.raises(ValueError, match="--warm-start-from .*not an export"):
        warm_start.read_champion(str(tmp_path))


@pytest.mark.slow  # Two one-epoch runs: about 30 s on the 2-core machine.
def test_a_warm_started_run_records_where_it_started(tiny_export, next_week, tmp_path):
    model_dir = str(tmp_path / "warm")
    config = train_config.config_for(
        next_week,
        model_dir,
        "tiny",
        epochs=1,
        steps_per_loop=50,
        warm_start_uri=tiny_export.export_dir,
    )
    assert config.warm_start_from == tiny_export.export_dir
    loop.train(config, tf.distribute.get_strategy())
    record = warm_start.recorded(model_dir)
    assert record["source"] == tiny_export.export_dir
    assert record["kind"] == warm_start.SOURCE_EXPORT
    assert (record["users"]["new"], record["items"]["new"]) == (NEW_USERS, NEW_ITEMS)
    users = read_metadata(next_week).num_users
    assert record["users"]["carried"] == users - NEW_USERS > 0
    cold = str(tmp_path / "cold")
    loop.train(
        train_config.config_for(next_week, cold, "tiny", epochs=1, steps_per_loop=50),
        tf.distribute.get_strategy(),
    )
    assert warm_start.recorded(cold) is None


def test_an_empty_warm_start_option_is_refused(next_week):
    with pytest.raises(ValueError, match="--warm-start-from must name"):
        train_config.config_for(next_week, "m", "tiny", warm_start_uri="")
