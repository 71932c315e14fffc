"""Batch recommendations (training_core/serving/batch_recommend.py): RunInference, a real export.

Over the session's export of the tiny model (conftest's ``tiny_export``), ``recommend`` writes
every user's top-k items. Checked against what does not come from the code under test: the users
and each user's items from the raw CSV (conftest.seen_from_raw), and the items and
scores against the export's own ``recommend`` signature called directly (the online answer).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_TOP_K, seen_from_raw

from pipelines import cli
from training_core.common import atomic_writes
from training_core.data.metadata import read_metadata
from training_core.serving import batch_recommend, export


@pytest.fixture
def exported(tiny_export):
    """The session's export (read-only: the test that breaks one breaks a copy)."""
    return tiny_export.export_dir


def _online(export_dir, users, exclude_seen=True):
    loaded = tf.saved_model.load(export_dir)
    out = loaded.signatures["recommend"](
        user_id=tf.constant(users, tf.int64), exclude_seen=tf.fill([len(users)], exclude_seen)
    )
    return out["item_ids"].numpy(), out["scores"].numpy()


@pytest.mark.slow
def test_every_user_gets_the_online_answer_without_seen_items(
    exported, tiny_data, tiny_csv, tmp_path
):
    out = str(tmp_path / "recs")
    result = batch_recommend.recommend(
        batch_recommend.RecommendConfig(exported, tiny_data, out, batch_size=64, num_shards=2)
    )
    meta = read_metadata(tiny_data)
    users, items, _, _, every = seen_from_raw(tiny_csv, meta)
    rows = batch_recommend.read(out)
    assert sorted(r["user_id"] for r in rows) == users.tolist()  # Each user once.
    assert result.num_users == len(users) and result.top_k == TINY_TOP_K
    assert sorted(os.listdir(out)) == [
        "manifest.json",
        "recommendations-00000-of-00002.parquet",
        "recommendations-00001-of-00002.parquet",
    ]
    by_user = {r["user_id"]: r for r in rows}
    ids, scores = _online(exported, users.tolist())
    for u_idx, user in enumerate(users.tolist()):
        row = by_user[user]
        want = ids[u_idx][ids[u_idx] != export.UNKNOWN_ITEM]
        assert row["item_ids"] == want.tolist()
        np.testing.assert_allclose(row["scores"], scores[u_idx][: len(want)], rtol=1e-6)
        interacted = {int(items[i]) for i in every[u_idx]}
        assert not interacted & set(row["item_ids"]), user
        assert row["scores"] == sorted(row["scores"], reverse=True)
    # The tiny data's users have enough unseen items: every row is full.
    assert {len(r["item_ids"]) for r in rows} == {TINY_TOP_K}
    manifest = json.loads((tmp_path / "recs" / "manifest.json").read_text())
    assert manifest["num_users"] == len(users) and manifest["exclude_seen"] is True


@pytest.mark.slow
def test_jsonl_fewer_items_seen_items_kept_and_bad_options_named(exported, tiny_data, tmp_path):
    out = tmp_path / "recs"
    code = cli.main(
        [
            "recommend",
            "--model",
            exported,
            "--data",
            tiny_data,
            "--output",
            str(out),
            "--format",
            "jsonl",
            "--top-k",
            "3",
            "--include-seen",
        ]
    )
    assert code == 0
    (shard,) = [n for n in os.listdir(out) if n.endswith(".jsonl")]
    rows = [json.loads(line) for line in (out / shard).read_text().splitlines()]
    ids, _ = _online(exported, [r["user_id"] for r in rows], exclude_seen=False)
    assert [r["item_ids"] for r in rows] == ids[:, :3].tolist()

    too_many = TINY_TOP_K + 1
    with pytest.raises(
        ValueError,
        match=rf"top_k {too_many} is more than the export's {TINY_TOP_K} .*--top-k {too_many}",
    ):
        batch_recommend.recommend(
            batch_recommend.RecommendConfig(exported, tiny_data, str(out), top_k=too_many)
        )
    with pytest.raises(ValueError, match="output_format 'csv' is not one of parquet, jsonl"):
        batch_recommend.recommend(
            batch_recommend.RecommendConfig(exported, tiny_data, str(out), output_format="csv")
        )
    with pytest.raises(ValueError, match="is not an export of this project"):
        batch_recommend.recommend(batch_recommend.RecommendConfig(tiny_data, tiny_data, str(out)))
    assert (out / shard).exists()  # Refused runs leave the earlier output alone.


@pytest.mark.slow
def test_a_failing_job_leaves_the_previous_output_complete(
    exported, tiny_data, tmp_path, monkeypatch
):
    out = tmp_path / "recs"
    batch_recommend.recommend(batch_recommend.RecommendConfig(exported, tiny_data, str(out)))
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}

    # A model that fails inside the Beam job (every call), after the job has started writing.
    broken = tmp_path / "broken-export"
    import shutil

    shutil.copytree(exported, broken)
    with open(broken / "serving_metadata.json") as f:
        facts = json.load(f)
    shutil.rmtree(broken / "variables")  # The SavedModel no longer loads on the workers.
    (broken / "serving_metadata.json").write_text(json.dumps(facts))
    # The private folders the job builds in: the failure must come after one was made.
    built, partial_name = [], atomic_writes.partial_name

    def recorded(path: str) -> str:
        built.append(partial_name(path))
        return built[-1]

    monkeypatch.setattr(atomic_writes, "partial_name", recorded)
    with pytest.raises(Exception):  # noqa: B017 (whatever Beam raises from the worker)
        batch_recommend.recommend(batch_recommend.RecommendConfig(str(broken), tiny_data, str(out)))
    assert built and not any(os.path.exists(p) for p in built), built  # Started, cleaned up.
    assert {n: (out / n).read_bytes() for n in os.listdir(out)} == before
    assert [p for p in os.listdir(tmp_path) if ".partial-" in p] == []
