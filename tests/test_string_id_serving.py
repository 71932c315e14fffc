"""Serving string ids (issue 40): the export, batch recommend, Vertex AI requests, the gate.

The string-id dataset is the tiny one (conftest's ``tiny_data``) with its vocabularies rewritten:
user ``7`` becomes ``"u-00007"``, item ``42`` the ISBN-like ``"080652120042X"``, in the same order,
and ``metadata.json`` says ``string`` for both kinds. The records hold indices only, so the
session's tiny model (``tiny_model``), exported from this copy, is the integer export
(``tiny_export``) under other names: every answer of the string export is checked against the
integer export's, mapped through the two vocabularies.
"""

import json
import os
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from conftest import TINY_TOP_K, serve_check

from pipelines import cli
from training_core.data.ids import ID_INT64, ID_STRING
from training_core.data.metadata import METADATA_FILE, read_metadata, read_vocab, vocab_text
from training_core.evaluation import gate
from training_core.serving import batch_recommend, export, vertex_registry
from training_core.serving.export_config import EMPTY_SLOT
from training_core.serving.vertex_registry import SERVING_METADATA_FILE


def user_key(user: int) -> str:
    """The string id of integer user ``user`` (zero-padded: the vocabulary stays sorted)."""
    return f"u-{user:05d}"


def item_code(item: int) -> str:
    """The ISBN-like string id of integer item ``item``."""
    return f"08065212{item:04d}X"


def stringify(data_dir: str, out: str, users: bool = True, items: bool = True) -> str:
    """A copy of the prepared ``data_dir`` whose user and/or item ids are strings."""
    shutil.copytree(data_dir, out)
    meta_path = os.path.join(out, METADATA_FILE)
    with open(meta_path) as f:
        raw = json.load(f)
    meta = read_metadata(data_dir)
    for wanted, key, path, name in (
        (users, "user_id_type", meta.user_vocab, user_key),
        (items, "item_id_type", meta.item_vocab, item_code),
    ):
        if not wanted:
            continue
        ids = read_vocab(os.path.join(data_dir, path))
        with open(os.path.join(out, path), "w", encoding="utf-8") as f:
            f.write(vocab_text(np.asarray([name(int(i)) for i in ids], dtype=object)))
        raw[key] = ID_STRING
    with open(meta_path, "w") as f:
        json.dump(raw, f, indent=2, sort_keys=True)
    return out


@pytest.fixture(scope="module")
def string_data(tiny_data, tmp_path_factory):
    return stringify(tiny_data, str(tmp_path_factory.mktemp("string-data") / "data"))


def _export(model_dir, data_dir, out):
    config = export.ExportConfig(model_dir, data_dir, out, top_k=TINY_TOP_K)
    return export.export(config)


@pytest.fixture(scope="module")
def string_export(tiny_model, string_data, tmp_path_factory):
    """``tiny_model`` exported from the string copy: (folder, ExportResult)."""
    out = str(tmp_path_factory.mktemp("string-export") / "saved")
    return out, _export(tiny_model.model_dir, string_data, out)


@pytest.fixture(scope="module")
def ids(tiny_data):
    """The integer vocabularies and their string names, by index."""
    meta = read_metadata(tiny_data)
    users = read_vocab(os.path.join(tiny_data, meta.user_vocab))
    items = read_vocab(os.path.join(tiny_data, meta.item_vocab))
    return {
        "users": users,
        "items": items,
        "user_keys": [user_key(int(u)) for u in users],
        "item_codes": {int(i): item_code(int(i)) for i in items},
    }


def _signature_dtypes(loaded, name):
    fn = loaded.signatures[name]
    inputs = {k: s.dtype.name for k, s in fn.structured_input_signature[1].items()}
    outputs = {k: s.dtype.name for k, s in fn.structured_outputs.items()}
    return inputs, outputs


def test_the_string_export_takes_and_returns_strings_and_records_the_kinds(
    string_export, tiny_export, ids
):
    folder, result = string_export
    loaded = tf.saved_model.load(folder)
    assert _signature_dtypes(loaded, "score") == (
        {"user_id": "string", "item_id": "string"},
        {"score": "float32", "known": "bool"},
    )
    assert _signature_dtypes(loaded, "recommend") == (
        {"user_id": "string", "exclude_seen": "bool"},
        {"item_ids": "string", "scores": "float32"},
    )
    assert loaded.item_raw_ids.dtype == tf.string
    with open(os.path.join(folder, SERVING_METADATA_FILE)) as f:
        facts = json.load(f)
    assert (facts["user_id_type"], facts["item_id_type"]) == (ID_STRING, ID_STRING)
    assert facts["signatures"]["recommend"]["outputs"]["item_ids"]["dtype"] == "string"
    score_body = facts["example_requests"]["score"]["instances"]
    assert all(isinstance(v, str) for row in score_body for v in row.values())
    assert '"" and score 0.0' in facts["unknown_ids"]["recommend"]
    # The integer export is as it was: int64 everywhere, its kinds int64.
    int_loaded = tf.saved_model.load(tiny_export.export_dir)
    assert _signature_dtypes(int_loaded, "recommend")[0] == {
        "user_id": "int64",
        "exclude_seen": "bool",
    }
    assert (tiny_export.result.user_id_type, tiny_export.result.item_id_type) == (ID_INT64,) * 2
    unknown = tiny_export.result.example_requests["score"]["instances"][-1]["user_id"]
    assert unknown == int(ids["users"].max()) + 1


def test_string_answers_are_the_integer_answers_under_their_string_names(
    string_export, tiny_export, ids
):
    s_loaded = tf.saved_model.load(string_export[0])
    i_loaded = tf.saved_model.load(tiny_export.export_dir)
    users, items, codes = ids["users"], ids["items"], ids["item_codes"]
    picked = [0, 1, 2, 5, len(users) - 1]
    for exclude in (True, False):
        want = i_loaded.signatures["recommend"](
            user_id=tf.constant(users[picked]), exclude_seen=tf.fill([len(picked)], exclude)
        )
        got = s_loaded.signatures["recommend"](
            user_id=tf.constant([ids["user_keys"][u] for u in picked]),
            exclude_seen=tf.fill([len(picked)], exclude),
        )
        want_ids = [[codes[int(i)] for i in row] for row in want["item_ids"].numpy()]
        got_ids = [[i.decode() for i in row] for row in got["item_ids"].numpy()]
        assert got_ids == want_ids
        np.testing.assert_allclose(got["scores"].numpy(), want["scores"].numpy(), rtol=1e-6)

    rng = np.random.default_rng(1)
    u_idx, i_idx = rng.integers(0, len(users), 30), rng.integers(0, len(items), 30)
    want = i_loaded.signatures["score"](
        user_id=tf.constant(users[u_idx]), item_id=tf.constant(items[i_idx])
    )
    got = s_loaded.signatures["score"](
        user_id=tf.constant([ids["user_keys"][u] for u in u_idx]),
        item_id=tf.constant([codes[int(items[i])] for i in i_idx]),
    )
    np.testing.assert_allclose(got["score"].numpy(), want["score"].numpy(), rtol=1e-6)
    assert got["known"].numpy().all()


def test_unknown_string_ids_get_the_unknown_answer(string_export, ids):
    folder, result = string_export
    loaded = tf.saved_model.load(folder)
    known_user, known_item = ids["user_keys"][0], ids["item_codes"][int(ids["items"][0])]
    # Near misses: the integer text of a known id, a case change, a trailing space, the empty id.
    strangers = [str(int(ids["users"][0])), known_user.upper(), known_user + " ", ""]
    out = loaded.signatures["score"](
        user_id=tf.constant([*strangers, known_user, known_user]),
        item_id=tf.constant([known_item] * 5 + [known_item.lower()]),
    )
    assert out["known"].numpy().tolist() == [False] * 4 + [True, False]
    assert out["score"].numpy()[:4].tolist() == [0.0] * 4
    recs = loaded.signatures["recommend"](
        user_id=tf.constant(strangers), exclude_seen=tf.fill([len(strangers)], True)
    )
    assert recs["item_ids"].numpy().tolist() == [[b""] * TINY_TOP_K] * len(strangers)
    assert recs["scores"].numpy().tolist() == [[0.0] * TINY_TOP_K] * len(strangers)
    # The example request's unknown user is a string the vocabulary does not hold.
    unknown = result.example_requests["score"]["instances"][-1]["user_id"]
    assert isinstance(unknown, str) and unknown not in ids["user_keys"]
    assert export.absent_id(np.asarray(["unknown-user", "a"], dtype=object), ID_STRING) == (
        "unknown-user-1"
    )


@pytest.mark.slow
def test_a_rest_body_of_json_strings_is_served_without_this_package(string_export, ids, tmp_path):
    """Vertex AI's predict body (TF Serving's row format): ids as JSON strings, in and out."""
    folder, result = string_export
    user = ids["user_keys"][3]
    bodies = [
        result.example_requests["score"],
        {"instances": [{"user_id": user, "item_id": ids["item_codes"][int(ids["items"][4])]}]},
        {"signature_name": "recommend", "instances": [{"user_id": user, "exclude_seen": True}]},
        result.example_requests["recommend"],
    ]
    got, err = serve_check(folder, bodies, tmp_path)
    assert got is not None, err[-4000:]
    assert got["modules"] == []
    assert got["signatures"]["serving_default"]["inputs"] == {
        "user_id": "string",
        "item_id": "string",
    }
    example_score, default, recommend, example_rec = got["responses"]
    assert [p["known"] for p in example_score["predictions"]] == [True, True, False]
    assert default["predictions"][0]["known"] is True
    (row,) = recommend["predictions"]
    loaded = tf.saved_model.load(folder)
    want = loaded.signatures["recommend"](
        user_id=tf.constant([user]), exclude_seen=tf.constant([True])
    )
    assert row["item_ids"] == [i.decode() for i in want["item_ids"].numpy()[0]]
    assert all(i in ids["item_codes"].values() for i in row["item_ids"])
    assert len(example_rec["predictions"]) == 2


@pytest.mark.slow
def test_batch_recommend_writes_string_columns_with_the_online_answer(
    string_export, string_data, tiny_export, tiny_data, ids, tmp_path
):
    folder, _ = string_export
    out = str(tmp_path / "recs")
    batch_recommend.recommend(
        batch_recommend.RecommendConfig(folder, string_data, out, batch_size=64)
    )
    (name,) = [n for n in os.listdir(out) if n.endswith(".parquet")]
    schema = pq.read_schema(os.path.join(out, name))
    assert str(schema.field("user_id").type) == "string"
    assert str(schema.field("item_ids").type) == "list<item: string>"
    rows = {r["user_id"]: r for r in batch_recommend.read(out)}
    assert sorted(rows) == sorted(ids["user_keys"])
    manifest = json.loads((tmp_path / "recs" / "manifest.json").read_text())
    assert manifest["id_types"] == {"user_id": ID_STRING, "item_ids": ID_STRING}

    # The integer export's rows under their string names.
    int_out = str(tmp_path / "int-recs")
    batch_recommend.recommend(
        batch_recommend.RecommendConfig(tiny_export.export_dir, tiny_data, int_out, batch_size=64)
    )
    int_rows = batch_recommend.read(int_out)
    assert "id_types" not in json.loads((tmp_path / "int-recs" / "manifest.json").read_text())
    assert {type(r["user_id"]) for r in int_rows} == {int}
    for r in int_rows:
        mine = rows[user_key(r["user_id"])]
        assert mine["item_ids"] == [ids["item_codes"][i] for i in r["item_ids"]]
        np.testing.assert_allclose(mine["scores"], r["scores"], rtol=1e-6)


@pytest.mark.slow
def test_recommend_command_takes_string_user_ids_for_a_string_export(
    string_export, string_data, tiny_export, tiny_data, ids, tmp_path
):
    folder, _ = string_export
    out = tmp_path / "some"
    chosen = [ids["user_keys"][2], ids["user_keys"][0], "nobody"]
    args = ["recommend", "--model", folder, "--data", string_data, "--output", str(out)]
    assert cli.main([*args, "--format", "jsonl", "--users", *chosen]) == 0
    (shard,) = [n for n in os.listdir(out) if n.endswith(".jsonl")]
    rows = [json.loads(line) for line in (out / shard).read_text().splitlines()]
    by_user = {r["user_id"]: r for r in rows}
    assert sorted(by_user) == sorted(chosen)
    assert by_user["nobody"]["item_ids"] == [] and by_user["nobody"]["scores"] == []
    loaded = tf.saved_model.load(folder)
    want = loaded.signatures["recommend"](
        user_id=tf.constant(chosen[:1]), exclude_seen=tf.constant([True])
    )
    assert by_user[chosen[0]]["item_ids"] == [i.decode() for i in want["item_ids"].numpy()[0]]
    assert all(isinstance(i, str) for i in by_user[chosen[0]]["item_ids"])

    # An integer export reads the given ids as integers, and names one that is not.
    assert batch_recommend.parse_users(["7", "3", "7"], ID_INT64) == [7, 3]
    with pytest.raises(ValueError, match="user id 'u-00001' is not an integer"):
        batch_recommend.recommend(
            batch_recommend.RecommendConfig(
                tiny_export.export_dir, tiny_data, str(tmp_path / "x"), users=("u-00001",)
            )
        )
    # The export and the data must be of one kind.
    with pytest.raises(ValueError, match="holds int64 user ids and int64 item ids but the export"):
        batch_recommend.recommend(
            batch_recommend.RecommendConfig(folder, tiny_data, str(tmp_path / "y"))
        )


def test_the_gate_finds_no_shared_item_between_integer_and_string_catalogues(
    string_export, string_data, tiny_export, tiny_data, ids
):
    s_champion = gate.load_export(string_export[0])
    i_champion = gate.load_export(tiny_export.export_dir)
    assert s_champion.item_ids.tolist() == [ids["item_codes"][int(i)] for i in ids["items"]]
    # run-local's preflight reads the same items without TensorFlow, of the same kinds.
    for export_dir, champion in (
        (string_export[0], s_champion),
        (tiny_export.export_dir, i_champion),
    ):
        got = vertex_registry.export_items(export_dir)
        assert got.dtype == champion.item_ids.dtype and got.tolist() == champion.item_ids.tolist()
    n = len(ids["items"])
    # Same kind: by raw id, every item shared.
    assert gate.catalogue(s_champion, string_data).shared == n
    assert gate.catalogue(i_champion, tiny_data).shared == n
    # Another kind either way: nothing shared, never a crash.
    for champion, data in ((i_champion, string_data), (s_champion, tiny_data)):
        overlap = gate.catalogue(champion, data)
        assert overlap.shared == 0 and not overlap.same
    # Scored through the string signature on the string data: the integer numbers.
    got = gate.score_export(s_champion, string_data)
    want = gate.score_export(i_champion, tiny_data)
    assert (got.hr_at_10, got.ndcg_at_10, got.known_users) == (
        want.hr_at_10,
        want.ndcg_at_10,
        want.known_users,
    )
    # compare refuses the integer champion with the usual message, before scoring.
    with pytest.raises(ValueError, match="was trained on another catalogue: it knows 0% of"):
        gate.compare(string_export[0], string_data, champion_dir=tiny_export.export_dir)


def test_string_items_with_integer_users_mix_kinds(tiny_model, tiny_data, tmp_path, ids, capsys):
    """The kinds are each column's own: integer users, string items (``ncf-pipelines export``)."""
    data = stringify(tiny_data, str(tmp_path / "data"), users=False)
    folder = str(tmp_path / "saved")
    args = ["export", "--model-dir", tiny_model.model_dir, "--data", data, "--output", folder]
    assert cli.main([*args, "--top-k", str(TINY_TOP_K)]) == 0
    assert "ids: int64 user ids, string item ids" in capsys.readouterr().out
    with open(os.path.join(folder, SERVING_METADATA_FILE)) as f:
        facts = json.load(f)
    assert (facts["user_id_type"], facts["item_id_type"]) == (ID_INT64, ID_STRING)
    loaded = tf.saved_model.load(folder)
    assert _signature_dtypes(loaded, "recommend") == (
        {"user_id": "int64", "exclude_seen": "bool"},
        {"item_ids": "string", "scores": "float32"},
    )
    out = loaded.signatures["recommend"](
        user_id=tf.constant([int(ids["users"][0]), int(ids["users"].max()) + 1], tf.int64),
        exclude_seen=tf.constant([True, True]),
    )
    first, unknown = out["item_ids"].numpy().tolist()
    assert all(i.decode() in ids["item_codes"].values() for i in first)
    assert unknown == [EMPTY_SLOT[ID_STRING].encode()] * TINY_TOP_K
    body = facts["example_requests"]["score"]["instances"]
    assert isinstance(body[0]["user_id"], int) and isinstance(body[0]["item_id"], str)


@pytest.mark.slow
def test_the_vertex_endpoint_answers_string_ids_sent_as_json_strings(
    vertex, tmp_path, string_export, ids
):
    """The SDK's predict to the stand-in endpoint, served by the string export as the prebuilt
    container serves it: the ``instances`` carry string ids as JSON strings."""
    from google.cloud import aiplatform
    from test_deploy import _container, _deploy, _register

    folder, result = string_export
    version = _register(tmp_path, "run-1", source=folder)
    endpoint_artifact = _deploy("run-1", version)
    vertex.predictor = _container(tmp_path)
    endpoint = aiplatform.Endpoint(endpoint_artifact.metadata["resourceName"])
    rows = result.example_requests["score"]["instances"]
    answer = endpoint.predict(instances=rows)
    (sent,) = vertex.find("POST", r":predict$")
    assert all(isinstance(v, str) for row in sent.body["instances"] for v in row.values())
    loaded = tf.saved_model.load(folder)
    want = loaded.signatures["score"](
        user_id=tf.constant([r["user_id"] for r in rows]),
        item_id=tf.constant([r["item_id"] for r in rows]),
    )
    np.testing.assert_allclose(
        [p["score"] for p in answer.predictions], want["score"].numpy(), rtol=1e-5
    )
    assert [p["known"] for p in answer.predictions] == [True, True, False]


def test_the_run_report_samples_string_users_under_their_names(
    string_export, string_data, tiny_export, tiny_data
):
    # The run page's sample users (run-local's report and the pipeline's report step): a
    # string-id run shows the raw strings, the same users and items as the integer run's.
    from pipelines import run_report

    folder, _ = string_export
    samples, why = run_report.try_sample_users(folder, string_data, 3)
    assert why == "" and len(samples) == 3
    integer = run_report.sample_users(tiny_export.export_dir, tiny_data, 3)
    for mine, theirs in zip(samples, integer, strict=True):
        assert mine.user_id == user_key(theirs.user_id)
        assert mine.history == tuple(item_code(i) for i in theirs.history)
        assert mine.recommended == tuple(item_code(i) for i in theirs.recommended)
    assert all(isinstance(i, str) for s in samples for i in (s.user_id, *s.recommended))
