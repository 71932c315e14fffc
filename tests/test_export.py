"""Export: the SavedModel serves raw ids in a fresh process with only TensorFlow.

One tiny model is trained in-process (2 epochs of the tiny preset, a couple of seconds), exported,
and served by tests/serve_check.py under ``python -I`` from a temporary folder, with the project's
packages made unimportable there. Expected values come from the restored checkpoint here.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import test_training
from kfp import dsl

from components.export_model import (
    export_model,
    register_model,
    serving_container_for,
    upload_args,
)
from pipelines import cli
from training_core import export, train
from training_core.evaluate import load_model
from training_core.metadata import read_metadata

tiny_data = test_training.tiny_data  # The shared session fixture.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVE_CHECK = os.path.join(ROOT, "tests", "serve_check.py")
TOP_K = 5


@pytest.fixture(scope="module")
def trained_model(tiny_data, tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("export") / "model")
    config = train.config_for(tiny_data, model_dir, "tiny", epochs=2, steps_per_loop=50)
    train.train(config, tf.distribute.get_strategy())
    return model_dir


@pytest.fixture(scope="module")
def exported(trained_model, tiny_data, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("export") / "saved")
    result = export.export(export.ExportConfig(trained_model, tiny_data, out, top_k=TOP_K))
    return out, result


@pytest.fixture(scope="module")
def reference(trained_model, tiny_data):
    """Vocabularies, seen items and a scorer from the checkpoint, on the training side."""
    meta = read_metadata(tiny_data)
    model, _, _ = load_model(trained_model, tf.distribute.get_strategy())
    users = export.read_vocab(os.path.join(tiny_data, meta.user_vocab))
    items = export.read_vocab(os.path.join(tiny_data, meta.item_vocab))
    splits, seen = export.training_positives(meta, tiny_data)

    def probs(u_idx, i_idx):
        logits = model.score(tf.constant(u_idx, tf.int64), tf.constant(i_idx, tf.int64))
        return tf.sigmoid(logits).numpy()

    return {
        "meta": meta,
        "users": users,
        "items": items,
        "seen": [set(seen[splits[u] : splits[u + 1]].tolist()) for u in range(meta.num_users)],
        "probs": probs,
    }


def _serve(export_dir, requests, tmp_path, python=sys.executable):
    """Runs the requests through tests/serve_check.py in an isolated interpreter."""
    req = tmp_path / "requests.json"
    out = tmp_path / f"responses-{abs(hash(python))}.json"
    req.write_text(json.dumps(requests))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [python, "-I", SERVE_CHECK, export_dir, str(req), str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def test_training_positives_match_metadata(reference):
    meta = reference["meta"]
    assert sum(len(s) for s in reference["seen"]) == meta.num_train_positives


def test_saved_model_serves_raw_ids_without_this_package(exported, reference, tmp_path):
    export_dir, result = exported
    users, items, seen, probs = (reference[k] for k in ("users", "items", "seen", "probs"))
    rng = np.random.default_rng(0)
    u_idx = rng.integers(0, len(users), 20)
    i_idx = rng.integers(0, len(items), 20)
    unknown_user = int(users.max()) + 1
    unknown_item = int(items.max()) + 7
    score_instances = [
        {"user_id": int(users[u]), "item_id": int(items[i])}
        for u, i in zip(u_idx, i_idx, strict=True)
    ] + [
        {"user_id": unknown_user, "item_id": int(items[0])},
        {"user_id": int(users[0]), "item_id": unknown_item},
        {"user_id": -5, "item_id": -5},
    ]
    rec_users = list(range(10))
    rec_instances = [{"user_id": int(users[u]), "exclude_seen": True} for u in rec_users]
    rec_instances += [{"user_id": int(users[u]), "exclude_seen": False} for u in rec_users]
    rec_instances += [{"user_id": unknown_user, "exclude_seen": True}]
    requests = [
        {"instances": score_instances},  # Vertex AI's predict: serving_default.
        {"signature_name": "score", "instances": score_instances[:3]},
        {"signature_name": "recommend", "instances": rec_instances},
        *result.example_requests.values(),
    ]
    got = _serve(export_dir, requests, tmp_path)

    # Isolation was real: the repository was off sys.path and no project module was loaded.
    assert got["modules"] == [] and not got["sys_path_has_repo"]
    assert got["project_importable"] is False
    assert set(got["signatures"]) == {"serving_default", "score", "recommend"}
    assert got["signatures"]["recommend"]["inputs"] == {"user_id": "int64", "exclude_seen": "bool"}
    assert got["signatures"]["serving_default"] == got["signatures"]["score"]

    # score: known pairs equal the checkpoint's probabilities; unknown ids give 0.0 / False.
    preds = got["responses"][0]["predictions"]
    assert len(preds) == len(score_instances)
    np.testing.assert_allclose(
        [p["score"] for p in preds[:20]], probs(u_idx, i_idx), rtol=1e-5, atol=1e-6
    )
    assert all(p["known"] for p in preds[:20])
    assert [(p["score"], p["known"]) for p in preds[20:]] == [(0.0, False)] * 3
    assert got["responses"][1]["predictions"] == preds[:3]

    # recommend: k raw ids, best first; equal to ranking every item with the checkpoint.
    recs = got["responses"][2]["predictions"]
    any_seen_on_top = False
    for row, inst in zip(recs, rec_instances, strict=True):
        ids, scores = row["item_ids"], row["scores"]
        assert len(ids) == TOP_K and scores == sorted(scores, reverse=True)
        if inst["user_id"] == unknown_user:
            assert ids == [export.UNKNOWN_ITEM] * TOP_K and scores == [0.0] * TOP_K
            continue
        u = int(np.flatnonzero(users == inst["user_id"])[0])
        p = probs(np.full(len(items), u), np.arange(len(items)))
        if inst["exclude_seen"]:
            p[list(seen[u])] = -np.inf
        order = np.argsort(-p, kind="stable")[:TOP_K]
        assert ids == items[order].tolist()
        np.testing.assert_allclose(scores, p[order], rtol=1e-5, atol=1e-6)
        index_of = {int(raw): i for i, raw in enumerate(items)}
        hit_seen = {index_of[i] for i in ids} & seen[u]
        if inst["exclude_seen"]:
            assert not hit_seen
        else:
            any_seen_on_top |= bool(hit_seen)
    assert any_seen_on_top, "a trained model should rank some training items in the top k"

    # The example bodies written to serving_metadata.json work as they are.
    example_score, example_rec = got["responses"][3:]
    assert [p["known"] for p in example_score["predictions"]] == [True, True, False]
    assert len(example_rec["predictions"]) == 2


def test_export_layout_and_metadata(exported):
    export_dir, result = exported
    names = set(os.listdir(export_dir))
    assert {"saved_model.pb", "variables", "assets", export.SERVING_METADATA_FILE} <= names
    assert sorted(os.listdir(os.path.join(export_dir, "assets"))) == ["items.txt", "users.txt"]
    assert not [n for n in os.listdir(os.path.dirname(export_dir)) if ".partial" in n]
    with open(os.path.join(export_dir, export.SERVING_METADATA_FILE)) as f:
        meta = json.load(f)
    assert meta["tensorflow_version"] == tf.__version__ and meta["top_k"] == TOP_K
    assert meta["signatures"]["recommend"]["outputs"]["item_ids"] == {
        "dtype": "int64",
        "shape": [None, TOP_K],
    }
    assert meta["num_seen_pairs"] == result.num_seen_pairs > 0


def test_export_refuses_a_non_empty_folder_and_overwrites_on_request(
    trained_model, tiny_data, tmp_path
):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("x")
    config = export.ExportConfig(trained_model, tiny_data, str(target), top_k=3)
    with pytest.raises(FileExistsError, match="not empty"):
        export.export(config)
    assert os.listdir(target) == ["old.txt"] and len(os.listdir(tmp_path)) == 1
    export.export(export.ExportConfig(trained_model, tiny_data, str(target), overwrite=True))
    assert "saved_model.pb" in os.listdir(target) and "old.txt" not in os.listdir(target)


def test_export_model_component_and_recommend_as_default(trained_model, tiny_data, tmp_path):
    exported_model = dsl.Model(uri=str(tmp_path / "exported"))
    export_model.python_func(
        model=dsl.Model(uri=trained_model),
        examples=dsl.Dataset(uri=tiny_data),
        exported_model=exported_model,
        top_k=3,
        default_signature="recommend",
    )
    m = exported_model.metadata
    assert m["framework"] == "tensorflow" and m["framework_version"] == tf.__version__
    assert m["signatures"] == ["recommend", "score", "serving_default"]
    assert m["top_k"] == 3 and m["default_signature"] == "recommend"
    loaded = tf.saved_model.load(exported_model.path)
    out = loaded.signatures["serving_default"](
        user_id=tf.constant([1], tf.int64), exclude_seen=tf.constant([True])
    )
    assert out["item_ids"].shape == (1, 3)


def test_cli_export_prints_where_and_a_request(trained_model, tiny_data, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["export", "--model-dir", trained_model, "--data", tiny_data, "--output", str(out)]
    assert cli.main([*args, "--top-k", "4"]) == 0
    printed = capsys.readouterr().out
    assert str(out) in printed and '"instances"' in printed and "saved_model_cli" in printed
    assert cli.main(args) == 2  # Not empty now, no --overwrite: one clear error.
    assert "not empty" in capsys.readouterr().err


def test_cli_help():
    with pytest.raises(SystemExit) as exc:
        cli.main(["export", "--help"])
    assert exc.value.code == 0


IMAGES = "docker.pkg.dev/vertex-ai/prediction"


@pytest.mark.parametrize(
    ("version", "gpu", "location", "image"),
    [
        ("2.16.2", False, "us-central1", f"us-{IMAGES}/tf2-cpu.2-15:latest"),
        ("2.16.2", True, "europe-west4", f"europe-{IMAGES}/tf2-gpu.2-15:latest"),
        ("2.14.1", False, "asia-northeast1", f"asia-{IMAGES}/tf2-cpu.2-14:latest"),
        ("3.1", False, "us-east1", f"us-{IMAGES}/tf2-cpu.2-15:latest"),
    ],
)
def test_serving_container_for(version, gpu, location, image):
    assert serving_container_for(version, gpu, location) == image


def test_serving_container_for_rejects_old_or_bad_versions():
    with pytest.raises(ValueError, match="no prebuilt"):
        serving_container_for("1.15")
    with pytest.raises(ValueError, match="not a TensorFlow version"):
        serving_container_for("nightly")


def test_upload_args():
    args = upload_args("/gcs/bucket/run/exported_model/", "ncf", "2.16.2", location="europe-west1")
    assert args == {
        "display_name": "ncf",
        "artifact_uri": "gs://bucket/run/exported_model",
        "serving_container_image_uri": (
            "europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
        ),
        "labels": {},
        "sync": True,
    }
    assert upload_args("gs://b/m", "n", "2.16", serving_image="img")["serving_container_image_uri"]
    with pytest.raises(ValueError, match="Cloud Storage"):
        upload_args("/tmp/m", "n", "2.16")


def test_register_model_component_interface():
    # The upload itself needs Vertex AI and is not exercised here (see docs/serving.md).
    inputs = register_model.component_spec.inputs
    assert {"exported_model", "project", "location", "display_name", "serving_image"} <= set(inputs)
    assert "vertex_model" in register_model.component_spec.outputs


@pytest.mark.skipif(
    not os.environ.get("NCF_SERVING_PYTHON"),
    reason="set NCF_SERVING_PYTHON to a Python with another TensorFlow (e.g. 2.15, the newest "
    "Vertex AI serving image) to check the SavedModel loads there",
)
def test_other_tensorflow_serves_the_same(exported, tmp_path):
    export_dir, result = exported
    requests = list(result.example_requests.values())
    here = _serve(export_dir, requests, tmp_path)
    there = _serve(export_dir, requests, tmp_path, os.environ["NCF_SERVING_PYTHON"])
    assert there["responses"] == here["responses"] and there["modules"] == []
