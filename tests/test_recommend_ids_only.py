"""A recommend request with only user ids is served (issue 55, item 2).

The export's ``recommend`` signature takes ``user_id`` and ``exclude_seen``, and TF Serving
refuses an instance without every input of its signature, so ``{"instances": [{"user_id": 1}]}``
failed. ``recommend_unseen`` takes the ids alone and leaves the seen items out, as batch
recommendations do; ``recommend`` stays for callers who want seen items back. Requests go through
tests/serve_check.py (TF Serving's row format, an instance must carry exactly the signature's
inputs) over the session's export (conftest's ``tiny_export``); expected items come from the raw
CSV (conftest's ``seen_from_raw``), not from the code under test.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY_TOP_K, seen_from_raw, serve_check

from training_core.data.metadata import read_metadata
from training_core.serving import export
from training_core.serving.export_config import SIGNATURES, ExportConfig


@pytest.fixture(scope="module")
def raw(tiny_data, tiny_csv):
    """Raw user and item ids and every user's seen items (indices), from the raw CSV."""
    users, items, _, _, seen = seen_from_raw(tiny_csv, read_metadata(tiny_data))
    return users, items, seen


@pytest.mark.slow
def test_user_ids_alone_get_unseen_items_and_the_explicit_request_still_gets_seen_ones(
    tiny_export, raw, tmp_path
):
    export_dir, result = tiny_export
    users, items, seen = raw
    picked = list(range(12))
    unknown = int(users.max()) + 1
    ids_only = [{"user_id": int(users[u])} for u in picked] + [{"user_id": unknown}]
    requests = [
        {"signature_name": "recommend_unseen", "instances": ids_only},
        {
            "signature_name": "recommend",
            "instances": [{**inst, "exclude_seen": True} for inst in ids_only],
        },
        {
            "signature_name": "recommend",
            "instances": [{**inst, "exclude_seen": False} for inst in ids_only],
        },
        result.example_requests["recommend_unseen"],  # The body serving_metadata.json shows.
        {"signature_name": "recommend", "instances": ids_only},  # Still needs exclude_seen.
    ]
    got, err = serve_check(export_dir, requests[:4], tmp_path)
    assert got is not None, err[-4000:]
    assert got["signatures"]["recommend_unseen"]["inputs"] == {"user_id": "int64"}
    assert got["signatures"]["recommend"]["inputs"] == {"user_id": "int64", "exclude_seen": "bool"}
    unseen, excluded, kept, example = (r["predictions"] for r in got["responses"])

    assert unseen == excluded  # The ids-only answer is exclude_seen=True's, slot for slot.
    index_of = {int(raw_id): i for i, raw_id in enumerate(items)}
    seen_back = 0
    for u, row_unseen, row_kept in zip(picked, unseen, kept, strict=False):
        assert len(row_unseen["item_ids"]) == TINY_TOP_K
        assert not {index_of[i] for i in row_unseen["item_ids"]} & seen[u]
        seen_back += len({index_of[i] for i in row_kept["item_ids"]} & seen[u])
    assert seen_back > 0  # The explicit request still returns seen items when asked.
    assert unseen[-1] == {"item_ids": [-1] * TINY_TOP_K, "scores": [0.0] * TINY_TOP_K}
    user = result.example_requests["recommend_unseen"]["instances"][0]["user_id"]
    assert example == [unseen[ids_only.index({"user_id": user})]]

    # The explicit signature is unchanged: an instance without exclude_seen is still refused,
    # as TF Serving refuses it.
    refused, err = serve_check(export_dir, requests[4:], tmp_path)
    assert refused is None and "the signature takes ['exclude_seen', 'user_id']" in err


def test_recommend_unseen_in_python_and_its_input_checks(tiny_export, raw):
    users, _, _ = raw
    loaded = tf.saved_model.load(tiny_export.export_dir)
    some = tf.constant(users[:3], tf.int64)
    out = loaded.signatures["recommend_unseen"](user_id=some)
    want = loaded.signatures["recommend"](user_id=some, exclude_seen=tf.fill([3], True))
    np.testing.assert_array_equal(out["item_ids"], want["item_ids"])
    np.testing.assert_array_equal(out["scores"], want["scores"])
    out = loaded.signatures["recommend_unseen"](user_id=tf.constant([], tf.int64))
    assert out["item_ids"].shape == (0, TINY_TOP_K)
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        loaded.signatures["recommend_unseen"](user_id=tf.constant([[1], [2]], tf.int64))
    assert "recommend_unseen: user_id must be 1-D, one value per instance; got rank 2" in str(
        raised.value
    )
    with open(os.path.join(tiny_export.export_dir, export.SERVING_METADATA_FILE)) as f:
        meta = json.load(f)
    assert meta["signatures"]["recommend_unseen"]["inputs"] == {
        "user_id": {"dtype": "int64", "shape": [None]}
    }
    assert "recommend_unseen" in meta["unknown_ids"]


def test_recommend_unseen_can_be_serving_default():
    """Vertex AI's predict reaches only serving_default: the ids-only signature can be it."""
    assert "recommend_unseen" in SIGNATURES
    config = ExportConfig("m", "d", "e", default_signature="recommend_unseen")
    assert config.default_signature == "recommend_unseen"


@pytest.mark.slow
def test_an_ids_only_predict_request_on_a_recommend_unseen_default_export(
    tiny_model, tiny_data, raw, tmp_path
):
    out = str(tmp_path / "export")
    config = ExportConfig(
        tiny_model.model_dir, tiny_data, out, top_k=3, default_signature="recommend_unseen"
    )
    result = export.export(config)
    users, _, _ = raw
    body = {"instances": [{"user_id": int(u)} for u in users[:2]]}  # Plain predict: no name.
    got, err = serve_check(out, [body, result.example_requests["recommend_unseen"]], tmp_path)
    assert got is not None, err[-4000:]
    assert got["signatures"]["serving_default"] == got["signatures"]["recommend_unseen"]
    assert [len(p["item_ids"]) for p in got["responses"][0]["predictions"]] == [3, 3]
