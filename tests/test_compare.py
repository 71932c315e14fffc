"""The champion/challenger gate (training_core/gate.py) on real exports of trained models.

A trained model of the tiny data (the session's ``tiny_model`` and ``tiny_export``) and an almost
untrained one are exported; the gate ranks both through their ``score`` signatures on the same
held-out sets, deciding on the validation split where the data has one. A champion trained on
other users, or on another catalogue, is refused by name; one of the same catalogue a week
older (a few new users and items) is compared.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from training_core.data import io, prepare, records, synthetic
from training_core.data.config import PrepareConfig
from training_core.data.metadata import (
    METADATA_FILE,
    SPLIT_TEST,
    SPLIT_VALIDATION,
    ShardFile,
    read_metadata,
    read_vocab,
)
from training_core.evaluation import gate
from training_core.evaluation.evaluate import evaluate
from training_core.serving import export, model_line
from training_core.training import loop, train_config


def _train_and_export(data_dir, root, name, **options):
    model_dir = str(root / f"{name}-model")
    config = train_config.config_for(data_dir, model_dir, "tiny", steps_per_loop=50, **options)
    loop.train(config, tf.distribute.get_strategy())
    out = str(root / f"{name}-export")
    export.export(export.ExportConfig(model_dir, data_dir, out))
    return model_dir, out


@pytest.fixture(scope="module")
def models(tiny_data, tiny_model, tiny_export, tmp_path_factory):
    """(model folder, export) of a good and a weak model; the good one is the session's."""
    good = (tiny_model.model_dir, tiny_export.export_dir)
    # The weak model is its own: one epoch at a learning rate that barely moves the weights,
    # close to the initial model, so that the gate has a clearly worse challenger to refuse.
    root = tmp_path_factory.mktemp("compare")
    weak = _train_and_export(tiny_data, root, "weak", epochs=1, learning_rate=1e-7)
    return {"good": good, "weak": weak}


def _prepare(raw: io.Interactions, root, name: str) -> str:
    """``raw`` written as CSV and prepared as the tiny data is, with 1 epoch, into ``root/name``."""
    csv = str(root / f"{name}.csv")
    synthetic.write(raw, csv, "csv")
    data = str(root / name)
    prepare.prepare(PrepareConfig(
        input_path=csv, output_dir=data, min_ratings=0, num_epochs=1, eval_negatives=99,
        train_batch_size=256, workers=1,
    ))  # fmt: skip
    return data


@pytest.fixture(scope="module")
def other_ids_export(tmp_path_factory, tiny_interactions):
    """A model of the tiny items rated by users whose raw ids share nothing with the tiny data's."""
    root = tmp_path_factory.mktemp("other-ids")
    raw = tiny_interactions
    data = _prepare(dataclasses.replace(raw, users=raw.users + 1_000_000), root, "data")
    return _train_and_export(data, root, "other", epochs=1)[1]


@pytest.fixture(scope="module")
def other_catalogue_export(tmp_path_factory, tiny_interactions):
    """A model of another catalogue whose integer ids overlap the tiny data's (same users).

    The tiny items are 1..300; these are 181..480: 120 ids in common, 40% of each catalogue,
    as ml-100k's 1682 item ids are all in ml-1m's id range but under half of its items.
    """
    root = tmp_path_factory.mktemp("other-catalogue")
    raw = tiny_interactions
    data = _prepare(dataclasses.replace(raw, items=raw.items + 180), root, "data")
    return _train_and_export(data, root, "other", epochs=1)[1]


@pytest.fixture(scope="module")
def next_week_data(tmp_path_factory, tiny_interactions):
    """The tiny data a week later: 5 new users and 3 new items, after every old interaction."""
    raw = tiny_interactions
    rng = np.random.default_rng(0)
    old_items = np.unique(raw.items)
    new_items = old_items.max() + 1 + np.arange(3)
    users, items = [], []
    for user in raw.users.max() + 1 + np.arange(5):
        picked = np.concatenate([rng.choice(old_items, 12, replace=False), new_items])
        users += [user] * len(picked)
        items += list(picked)
    later = raw.timestamps.max() + 1 + np.arange(len(users))
    week = dataclasses.replace(
        raw,
        users=np.concatenate([raw.users, np.asarray(users, np.int64)]),
        items=np.concatenate([raw.items, np.asarray(items, np.int64)]),
        timestamps=np.concatenate([raw.timestamps, later]),
    )
    return _prepare(week, tmp_path_factory.mktemp("next-week"), "data")


def _with_validation(data_dir: str, out: str, positive_of) -> str:
    """A copy of ``data_dir`` whose validation split is its test split with another positive.

    Each evaluated user's candidates (its test rows) are reordered so that the row
    ``positive_of(raw user ids, raw item ids)`` picks (an index into the counted rows) is the
    held-out positive, last; written with the records writer and named in metadata.json as the
    validation split (replacing one data prep may have written).
    """
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(data_dir, out)
    meta = read_metadata(out)
    users_raw = read_vocab(os.path.join(out, meta.user_vocab))
    items_raw = read_vocab(os.path.join(out, meta.item_vocab))
    per_user = 1 + meta.eval_negatives
    files = []
    for shard in meta.eval_files:
        batches = []
        for data in records.read_tfrecord_file(os.path.join(out, shard.path)):
            cols = records.decode_example(data)
            user, item, mask = (cols[k].reshape(-1, per_user) for k in records.EVAL_FEATURES)
            for row in np.flatnonzero(mask[:, -1] == 0):  # Evaluated users.
                counted = np.flatnonzero(mask[row] == 0)
                pick = counted[positive_of(users_raw[user[row]], items_raw[item[row]], counted)]
                order = np.concatenate([np.delete(np.arange(per_user), pick), [pick]])
                item[row], mask[row] = item[row][order], mask[row][order]
            batches.append({records.USER_ID: user, records.ITEM_ID: item, "mask": mask})
        columns = {
            records.USER_ID: np.concatenate([b[records.USER_ID] for b in batches]).ravel(),
            records.ITEM_ID: np.concatenate([b[records.ITEM_ID] for b in batches]).ravel(),
            records.DUPLICATE_MASK: np.concatenate([b["mask"] for b in batches]).ravel(),
        }
        path = os.path.join("validation-by-hand", os.path.basename(shard.path))
        os.makedirs(os.path.join(out, os.path.dirname(path)), exist_ok=True)
        encoded = records.encode_examples(columns, meta.eval_prebatch_size)
        size = records.write_tfrecord_file(os.path.join(out, path), encoded)
        files.append(ShardFile(path, shard.batches, shard.elements, size))
    meta = dataclasses.replace(
        meta,
        validation_files=files,
        num_validation_users=meta.num_eval_users,
        num_validation_elements=meta.num_eval_elements,
        validation_steps=meta.eval_steps,
    )
    with open(os.path.join(out, METADATA_FILE), "w") as f:
        f.write(meta.to_json())
    assert read_metadata(out).selection_split == SPLIT_VALIDATION
    return out


@pytest.fixture(scope="module")
def validation_against_good(models, tiny_data, tmp_path_factory):
    """The tiny data with a validation split on which the good model is at its worst: each
    user's held-out positive is the candidate the good model scores lowest (test is unchanged)."""
    good = gate.load_export(models["good"][1])

    def lowest(users, items, counted):
        scores = good.score(user_id=tf.constant(users), item_id=tf.constant(items))["score"]
        return int(np.argmin(scores.numpy()[counted]))

    root = tmp_path_factory.mktemp("validation")
    return _with_validation(tiny_data, str(root / "data"), lowest)


def test_an_export_scores_as_its_checkpoint_evaluates(models, tiny_data):
    """Raw ids through the SavedModel's signature rank like the checkpoint on index ids."""
    for model_dir, export_dir in models.values():
        via_export = gate.score_export(export_dir, tiny_data)
        via_checkpoint = evaluate(tiny_data, model_dir)
        assert via_export.users == via_checkpoint.eval_users
        assert via_export.hr_at_10 == pytest.approx(via_checkpoint.hr_at_10, abs=1e-9)
        assert via_export.ndcg_at_10 == pytest.approx(via_checkpoint.ndcg_at_10, rel=1e-5)
        assert via_export.known_users == 1.0 and via_export.known_items == 1.0


def test_a_better_challenger_is_blessed_and_a_worse_one_refused(models, tiny_data):
    good, weak = models["good"][1], models["weak"][1]
    up = gate.compare(good, tiny_data, champion_dir=weak)
    down = gate.compare(weak, tiny_data, champion_dir=good)
    assert up.challenger.hr_at_10 > down.challenger.hr_at_10  # The models really differ.
    assert up.blessed and "not worse than" in up.reason
    assert not down.blessed
    assert f"{down.challenger.hr_at_10:.4f} is worse than the champion's" in down.reason
    assert f"{up.challenger.hr_at_10:.4f}" in down.reason  # Both models' numbers are named.
    metrics = down.to_metrics()
    split = down.split  # The tiny data's selection split (validation once data prep makes one).
    assert metrics["blessed"] == 0.0
    assert metrics[f"champion_{split}_hr_at_10"] == up.challenger.hr_at_10
    page = gate.decision_html(down)
    assert "not blessed" in page and weak in page and good in page
    # The baselines beside them, on both splits, as evaluate ranks them (issue 52).
    result = evaluate(tiny_data, models["good"][0])
    by = {(b.name, b.split): b for b in down.baselines}
    assert set(by) == {(n, s) for n in ("popularity", "ease") for s in ("validation", "test")}
    assert by["popularity", "test"].hr_at_10 == result.popularity_hr_at_10
    assert by["ease", "test"].hr_at_10 == pytest.approx(result.ease_hr_at_10, abs=1e-9)
    assert by["ease", "validation"].detail == f"lambda {result.ease_lambda:g}"
    assert metrics["ease_test_hr_at_10"] == by["ease", "test"].hr_at_10
    assert "ease (baseline)" in page and "popularity (baseline)" in page


def test_tolerance_and_metric_choose_what_worse_means(models, tiny_data):
    good, weak = models["good"][1], models["weak"][1]
    strict = gate.compare(weak, tiny_data, champion_dir=good, metric="ndcg_at_10")
    gap = strict.champion.ndcg_at_10 - strict.challenger.ndcg_at_10
    assert gap > 0 and not strict.blessed and "ndcg_at_10" in strict.reason
    lenient = gate.compare(
        weak, tiny_data, champion_dir=good, metric="ndcg_at_10", tolerance=gap + 1e-6
    )
    assert lenient.blessed


def test_without_a_champion_the_first_model_is_blessed(models, tiny_data):
    decision = gate.compare(models["weak"][1], tiny_data)
    assert decision.blessed and decision.champion is None and "first model" in decision.reason
    metrics = decision.to_metrics()
    assert not any(k.startswith("champion_") for k in metrics)
    assert metrics[f"challenger_{SPLIT_TEST}_hr_at_10"] == decision.challenger_test.hr_at_10


def test_a_champion_of_other_ids_is_refused_naming_both(models, tiny_data, other_ids_export):
    challenger = models["good"][1]
    with pytest.raises(ValueError) as e:
        gate.compare(challenger, tiny_data, champion_dir=other_ids_export)
    assert other_ids_export in str(e.value) and challenger in str(e.value)
    assert "knows 0% of the" in str(e.value) and "users of" in str(e.value)


def test_a_champion_of_another_catalogue_is_refused_naming_both_and_the_way_out(
    models, tiny_data, other_catalogue_export
):
    """Its integer ids overlap the data's and it knows every user, as ml-1m's model knows the
    embedded sample's: the catalogue rule refuses it, before anything is scored or blessed."""
    champion = gate.load_export(other_catalogue_export)
    overlap = gate.catalogue(champion, tiny_data)
    assert 0 < overlap.shared and not overlap.same  # Shared ids, another catalogue.
    challenger = models["good"][1]
    with pytest.raises(ValueError) as e:
        gate.compare(challenger, tiny_data, champion_dir=other_catalogue_export)
    message = str(e.value)
    assert f"the champion {other_catalogue_export} was trained on another catalogue" in message
    assert challenger in message and tiny_data in message
    assert f"it knows {overlap.champion_knows:.0%} of the {overlap.data_items} items" in message
    assert f"--param {gate.REGISTRY_MODEL_PARAM}=" in message  # The way out, by its name.
    assert "without a champion" in message


def test_a_champion_of_last_week_with_a_few_new_users_and_items_is_compared(models, next_week_data):
    good, weak = models["good"][1], models["weak"][1]  # Both of the week before.
    decision = gate.compare(good, next_week_data, champion_dir=weak)
    overlap = decision.catalogue
    assert overlap.champion_in_data == 1.0 and 0.5 < overlap.champion_knows < 1.0
    assert decision.blessed and decision.champion.known_users < 1.0  # New users: unknown.
    metrics = decision.to_metrics()
    assert metrics["champion_knows_data_items"] == overlap.champion_knows


def test_the_validation_split_decides_and_both_splits_are_reported(models, validation_against_good):
    """On a validation split where the good model ranks every positive last, the good model is
    refused against the weak one although it beats it on test; and the weak one is blessed."""
    good, weak = models["good"][1], models["weak"][1]
    down = gate.compare(good, validation_against_good, champion_dir=weak)
    up = gate.compare(weak, validation_against_good, champion_dir=good)
    assert down.split == up.split == SPLIT_VALIDATION
    assert down.challenger_test.hr_at_10 > down.champion_test.hr_at_10  # Better on test...
    assert down.challenger.hr_at_10 < down.champion.hr_at_10  # ...worse on validation.
    assert not down.blessed and up.blessed
    assert down.challenger.split == SPLIT_VALIDATION and down.challenger_test.split == SPLIT_TEST
    assert down.reason.startswith("on the validation split, challenger hr_at_10 ")
    test_numbers = (down.challenger_test.hr_at_10, down.champion_test.hr_at_10)
    assert "challenger {:.4f}, champion {:.4f}".format(*test_numbers) in down.reason
    metrics = down.to_metrics()
    assert metrics["decided_on_validation"] == 1.0
    for who, scores in (("challenger", down.challenger), ("champion", down.champion)):
        assert metrics[f"{who}_validation_hr_at_10"] == scores.hr_at_10
    assert metrics["challenger_test_hr_at_10"] == down.challenger_test.hr_at_10
    assert metrics["champion_test_ndcg_at_10"] == down.champion_test.ndcg_at_10
    page = gate.decision_html(down)
    assert "validation (decides)" in page and "test (reported)" in page
    # The test split's numbers are the test split's own.
    alone = gate.score_export(good, validation_against_good, SPLIT_TEST)
    assert alone.hr_at_10 == down.challenger_test.hr_at_10


def test_bad_choices_and_folders_are_named(models, tiny_data, tmp_path):
    with pytest.raises(ValueError, match="--metric must be one of hr_at_10, ndcg_at_10"):
        gate.compare(models["good"][1], tiny_data, metric="auc")
    with pytest.raises(ValueError, match="--tolerance must be >= 0"):
        gate.compare(models["good"][1], tiny_data, tolerance=-0.1)
    with pytest.raises(ValueError, match=f"{tmp_path} holds no SavedModel"):
        gate.compare(str(tmp_path), tiny_data)
    model_dir = models["good"][0]  # A training folder, not an export.
    with pytest.raises(ValueError, match="holds no SavedModel"):
        gate.compare(models["good"][1], tiny_data, champion_dir=model_dir)


def test_the_compare_models_component_blesses_and_refuses(models, tiny_data, tmp_path):
    """The component's own function with real artifacts: a champion given by URI, and none."""
    from kfp import dsl

    from components.compare_models import compare_models

    def run(challenger, champion_uri, **kw):
        decision = dsl.Metrics(uri=str(tmp_path / "decision"))
        report = dsl.HTML(uri=str(tmp_path / "report.html"))
        out = compare_models.python_func(
            challenger=dsl.Model(uri=challenger),
            examples=dsl.Dataset(uri=tiny_data),
            decision=decision,
            report=report,
            champion_uri=champion_uri,
            **kw,
        )
        return out, decision, open(report.path).read()

    (blessed, champion, line), decision, page = run(models["weak"][1], models["good"][1])
    assert (blessed, champion, line) == (False, "", "")  # A URI champion; no line to name.
    assert decision.metadata["blessed"] == 0.0 and "worse than" in decision.metadata["reason"]
    assert decision.metadata["split"] == read_metadata(tiny_data).selection_split
    assert "not blessed" in page
    (blessed, _, line), decision, _ = run(models["good"][1], "", data_uri="gs://b/week/")
    assert blessed and "first model" in decision.metadata["reason"]
    assert line == model_line.of_data("gs://b/week").name  # The data's own line, registered.
    (_, _, line), _, _ = run(models["good"][1], "", data_uri="gs://b/x", model_display_name="m")
    assert line == "m"


def test_the_gate_scores_the_records_rows_in_order_in_chunks_of_whole_calls():
    # score_export reads records a few at a time and scores a fixed number of rows per call.
    reads = [
        {"a": np.arange(0, 2), "b": -np.arange(0, 2)},
        {"a": np.arange(2, 7), "b": -np.arange(2, 7)},
    ]
    reads.append({"a": np.arange(7, 8), "b": -np.arange(7, 8)})
    chunks = list(gate._rechunked(iter(reads), 3))
    assert [c["a"].tolist() for c in chunks] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert all((c["b"] == -c["a"]).all() for c in chunks)
    assert list(gate._rechunked(iter([{"a": np.arange(6)}]), 3))[1]["a"].tolist() == [3, 4, 5]
    assert list(gate._rechunked(iter([]), 3)) == []
