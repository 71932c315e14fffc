"""Export: the SavedModel serves raw ids in a fresh process with only TensorFlow.

The session's tiny model (conftest's ``tiny_model``: 2 epochs of the tiny preset) and its export
(``tiny_export``, top k ``TINY_TOP_K``) are served by tests/serve_check.py under ``python -I``
from a temporary folder, with the project's packages made unimportable there. Expected values
come from the restored checkpoint here.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, TINY_TOP_K, seen_from_raw, serve_check
from kfp import dsl

from components.export_model import export_model, register_model
from pipelines import cli
from training_core.data import positives
from training_core.data.metadata import read_metadata
from training_core.evaluation.evaluate import load_model
from training_core.serving import export
from training_core.serving.vertex_registry import serving_container_for, upload_args


@pytest.fixture(scope="module")
def reference(tiny_model, tiny_data, tiny_csv):
    """Vocabularies and seen items from the raw CSV, and a scorer from the checkpoint."""
    meta = read_metadata(tiny_data)
    assert meta.source["path"] == tiny_csv  # The prepared data is this CSV's.
    model, _, _ = load_model(tiny_model.model_dir, tf.distribute.get_strategy())
    users, items, seen, held_out, all_seen = seen_from_raw(tiny_csv, meta)

    def probs(u_idx, i_idx):
        logits = model.score(tf.constant(u_idx, tf.int64), tf.constant(i_idx, tf.int64))
        return tf.sigmoid(logits).numpy()

    # What recommend leaves out (all_seen): every item the data holds for the user, the held-out
    # validation and test items too.
    return {
        "meta": meta,
        "users": users,
        "items": items,
        "seen": seen,
        "held_out": held_out,
        "all_seen": all_seen,
        "probs": probs,
    }


def _serve(export_dir, requests, tmp_path, python=sys.executable):
    """Runs the requests through tests/serve_check.py in an isolated interpreter."""
    got, err = serve_check(export_dir, requests, tmp_path, python)
    assert got is not None, err[-4000:]
    return got


def test_vocabularies_and_training_positives_match_the_raw_data(reference, tiny_data):
    """What export builds the serving tables from, against the raw CSV computed independently."""
    meta = reference["meta"]
    for path, raw_ids in (
        (meta.user_vocab, reference["users"]),
        (meta.item_vocab, reference["items"]),
    ):
        with open(os.path.join(tiny_data, path)) as f:
            assert [int(line) for line in f.read().split()] == raw_ids.tolist(), path
    splits, items = positives.training_positives(meta, tiny_data)
    got = [set(items[splits[u] : splits[u + 1]].tolist()) for u in range(meta.num_users)]
    assert got == reference["seen"]
    assert sum(len(s) for s in reference["seen"]) == meta.num_train_positives
    # Seen, what recommend excludes: the training positives and the held-out latest item.
    splits, items = positives.seen_items(meta, tiny_data)
    got = [set(items[splits[u] : splits[u + 1]].tolist()) for u in range(meta.num_users)]
    assert got == reference["all_seen"] != reference["seen"]


@pytest.mark.slow
def test_saved_model_serves_raw_ids_without_this_package(tiny_export, reference, tmp_path):
    export_dir, result = tiny_export
    users, items, seen, probs = (reference[k] for k in ("users", "items", "all_seen", "probs"))
    held_out = reference["held_out"]
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
    # The first 10 users, and 5 whose own latest (held-out) item would be in their top k if only
    # training items were left out: the case recommending it back would fail.
    leaks = []
    for u in range(len(users)):
        p = probs(np.full(len(items), u), np.arange(len(items)))
        p[list(reference["seen"][u])] = -np.inf
        if held_out[u] in np.argsort(-p, kind="stable")[:TINY_TOP_K]:
            leaks.append(u)
    assert len(leaks) >= 5, leaks  # The tiny model ranks some users' latest item that high.
    rec_users = sorted(set(range(10)) | set(leaks[:5]))
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
    assert set(got["signatures"]) == {"serving_default", "score", "recommend", "recommend_unseen"}
    assert got["signatures"]["recommend"]["inputs"] == {"user_id": "int64", "exclude_seen": "bool"}
    assert got["signatures"]["recommend_unseen"]["inputs"] == {"user_id": "int64"}
    assert got["signatures"]["serving_default"] == got["signatures"]["score"]

    # score: known pairs equal the checkpoint's probabilities; unknown ids give 0.0 / False.
    preds = got["responses"][0]["predictions"]
    assert len(preds) == len(score_instances)
    np.testing.assert_allclose(
        [p["score"] for p in preds[:20]], probs(u_idx, i_idx), rtol=1e-5, atol=1e-6
    )
    assert all(p["known"] for p in preds[:20])
    assert [(p["score"], p["known"]) for p in preds[20:]] == [(0.0, False)] * 3
    # A smaller batch may take another kernel (oneDNN picks by shape and CPU): equal to float32's
    # rounding, not bit for bit.
    few = got["responses"][1]["predictions"]
    assert [p["known"] for p in few] == [p["known"] for p in preds[:3]]
    np.testing.assert_allclose(
        [p["score"] for p in few], [p["score"] for p in preds[:3]], rtol=1e-6, atol=0
    )

    # recommend: k raw ids, best first; equal to ranking every item with the checkpoint.
    recs = got["responses"][2]["predictions"]
    any_seen_on_top = held_out_on_top = False
    for row, inst in zip(recs, rec_instances, strict=True):
        ids, scores = row["item_ids"], row["scores"]
        assert len(ids) == TINY_TOP_K and scores == sorted(scores, reverse=True)
        if inst["user_id"] == unknown_user:
            assert ids == [export.UNKNOWN_ITEM] * TINY_TOP_K and scores == [0.0] * TINY_TOP_K
            continue
        u = int(np.flatnonzero(users == inst["user_id"])[0])
        p = probs(np.full(len(items), u), np.arange(len(items)))
        if inst["exclude_seen"]:
            p[list(seen[u])] = -np.inf
        order = np.argsort(-p, kind="stable")[:TINY_TOP_K]
        assert ids == items[order].tolist()
        np.testing.assert_allclose(scores, p[order], rtol=1e-5, atol=1e-6)
        index_of = {int(raw): i for i, raw in enumerate(items)}
        hit_seen = {index_of[i] for i in ids} & seen[u]
        if inst["exclude_seen"]:
            assert not hit_seen
        else:
            any_seen_on_top |= bool(hit_seen)
            held_out_on_top |= held_out[u] in {index_of[i] for i in ids}
    assert any_seen_on_top, "a trained model should rank some training items in the top k"
    assert held_out_on_top  # Kept in when asked, so left out only by exclude_seen.

    # The example bodies written to serving_metadata.json work as they are.
    examples = dict(zip(result.example_requests, got["responses"][3:], strict=True))
    assert [p["known"] for p in examples["score"]["predictions"]] == [True, True, False]
    assert len(examples["recommend"]["predictions"]) == 2
    # The ids-only body: the first user's unseen items, as recommend with exclude_seen true.
    assert examples["recommend_unseen"]["predictions"] == examples["recommend"]["predictions"][:1]


@pytest.fixture(scope="module")
def loaded(tiny_export):
    """The SavedModel as TensorFlow loads it (``signatures[...]`` is what TF Serving calls)."""
    return tf.saved_model.load(tiny_export.export_dir)


def _ids(values):
    return tf.constant(values, tf.int64)


def _rejected(loaded, signature, **inputs):
    """The message of the InvalidArgumentError a signature call raises."""
    with pytest.raises(tf.errors.InvalidArgumentError) as exc:
        loaded.signatures[signature](**inputs)
    return exc.value.message


@pytest.mark.parametrize(
    ("n_users", "n_items"),
    [(1, 3), (3, 1), (3, 2), (0, 2)],
    ids=["1-user-3-items", "3-users-1-item", "3-vs-2", "0-vs-2"],
)
@pytest.mark.parametrize("signature", ["score", "serving_default"])
def test_score_rejects_unequal_lengths(loaded, reference, signature, n_users, n_items):
    # Before: 1 vs 3 and 3 vs 1 broadcast one id over the other input; 3 vs 2 failed with
    # "Incompatible shapes: [3] vs. [2] [[{{node and}}]]".
    users, items = reference["users"], reference["items"]
    message = _rejected(
        loaded, signature, user_id=_ids(users[:n_users]), item_id=_ids(items[:n_items])
    )
    assert (
        f"score: user_id has {n_users} values but item_id has {n_items}; "
        "pass one user_id per item_id"
    ) in message
    assert "Incompatible shapes" not in message


@pytest.mark.parametrize(("n_users", "n_flags"), [(1, 3), (3, 2), (2, 0)])
def test_recommend_rejects_unequal_lengths(loaded, reference, n_users, n_flags):
    # Before: extra flags were ignored (1 vs 3); too few failed inside map_fn with
    # "Trying to access element 2 in a list with 2 elements".
    flags = tf.constant([True, False, True][:n_flags], tf.bool)
    message = _rejected(
        loaded, "recommend", user_id=_ids(reference["users"][:n_users]), exclude_seen=flags
    )
    assert (
        f"recommend: user_id has {n_users} values but exclude_seen has {n_flags}; "
        "pass one exclude_seen flag per user_id"
    ) in message


RANK_CASES = {  # case -> (bad value, its rank, its shape as the message prints it)
    "scalar": (7, 0, "[]"),
    "2-D": ([[7], [8]], 2, "[2 1]"),
}


@pytest.mark.parametrize("case", list(RANK_CASES))
@pytest.mark.parametrize(
    ("signature", "bad"),
    [
        ("score", "user_id"),
        ("score", "item_id"),
        ("recommend", "user_id"),
        ("recommend", "exclude_seen"),
    ],
)
def test_signatures_reject_inputs_that_are_not_1d(loaded, signature, bad, case):
    # Before: a scalar or a 2-D batch passed the (None,) signature (score answered in that shape,
    # [[1], [2]] against [1, 2] broadcast to [2, 2]); recommend failed inside map_fn.
    value, rank, shape = RANK_CASES[case]
    spec = loaded.signatures[signature].structured_input_signature[1]
    inputs = {name: tf.cast([1, 2], s.dtype) for name, s in spec.items()}  # Well formed.
    inputs[bad] = tf.cast(value, spec[bad].dtype)  # int64 ids, or bool flags.
    message = _rejected(loaded, signature, **inputs)
    assert (
        f"{signature}: {bad} must be 1-D, one value per instance; got rank {rank} (shape {shape})"
    ) in message


def test_score_reports_a_rank_before_a_length(loaded):
    # [[1], [2], [3]] vs [1, 2]: both wrong; the rank check runs first, so it is the one reported.
    message = _rejected(loaded, "score", user_id=_ids([[1], [2], [3]]), item_id=_ids([1, 2]))
    assert "score: user_id must be 1-D" in message and "(shape [3 1])" in message


def test_restored_functions_reject_other_ranks_when_binding(loaded):
    # Called as a tf.function (not through signatures), TF itself checks the (None,) spec.
    with pytest.raises(TypeError, match=r"Can not cast TensorSpec\(shape=\(\).*name='user_id'"):
        loaded.score(_ids(1), _ids(2))
    with pytest.raises(TypeError, match=r"shape=\(2, 1\).*name='user_id'"):
        loaded.recommend(_ids([[1], [2]]), tf.constant([True, False]))


def test_well_formed_and_empty_batches_still_serve(loaded, reference):
    for name in ("score", "recommend"):  # The checks live in the graph: the specs stay (None,).
        specs = loaded.signatures[name].structured_input_signature[1].values()
        assert [s.shape.as_list() for s in specs] == [[None], [None]]
    users, items, probs = reference["users"], reference["items"], reference["probs"]
    out = loaded.signatures["score"](user_id=_ids(users[[0, 1, 2]]), item_id=_ids(items[[3, 4, 0]]))
    np.testing.assert_allclose(out["score"], probs([0, 1, 2], [3, 4, 0]), rtol=1e-5, atol=1e-6)
    assert out["known"].numpy().all()
    out = loaded.signatures["score"](user_id=_ids([]), item_id=_ids([]))
    assert out["score"].shape == (0,) and out["known"].shape == (0,)
    out = loaded.signatures["recommend"](user_id=_ids([]), exclude_seen=tf.constant([], tf.bool))
    assert out["item_ids"].shape == (0, TINY_TOP_K) and out["scores"].shape == (0, TINY_TOP_K)
    out = loaded.signatures["recommend"](user_id=_ids(users[:1]), exclude_seen=tf.constant([True]))
    assert out["item_ids"].shape == (1, TINY_TOP_K)


def test_export_layout_and_metadata(tiny_export):
    export_dir, result = tiny_export
    names = set(os.listdir(export_dir))
    assert {"saved_model.pb", "variables", "assets", export.SERVING_METADATA_FILE} <= names
    assert sorted(os.listdir(os.path.join(export_dir, "assets"))) == ["items.txt", "users.txt"]
    assert not [n for n in os.listdir(os.path.dirname(export_dir)) if ".partial" in n]
    with open(os.path.join(export_dir, export.SERVING_METADATA_FILE)) as f:
        meta = json.load(f)
    assert meta["tensorflow_version"] == tf.__version__ and meta["top_k"] == TINY_TOP_K
    assert meta["signatures"]["recommend"]["outputs"]["item_ids"] == {
        "dtype": "int64",
        "shape": [None, TINY_TOP_K],
    }
    assert meta["num_seen_pairs"] == result.num_seen_pairs > 0


def test_export_refuses_a_non_empty_folder_and_overwrites_on_request(
    tiny_model, tiny_data, tmp_path
):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("x")
    config = export.ExportConfig(tiny_model.model_dir, tiny_data, str(target), top_k=3)
    with pytest.raises(FileExistsError, match="not empty"):
        export.export(config)
    assert os.listdir(target) == ["old.txt"] and len(os.listdir(tmp_path)) == 1
    export.export(export.ExportConfig(tiny_model.model_dir, tiny_data, str(target), overwrite=True))
    assert "saved_model.pb" in os.listdir(target) and "old.txt" not in os.listdir(target)


@pytest.mark.slow
def test_export_model_component_and_recommend_as_default(tiny_model, tiny_data, tmp_path):
    exported_model = dsl.Model(uri=str(tmp_path / "exported"))
    export_model.python_func(
        model=dsl.Model(uri=tiny_model.model_dir),
        examples=dsl.Dataset(uri=tiny_data),
        exported_model=exported_model,
        top_k=3,
        default_signature="recommend",
    )
    m = exported_model.metadata
    assert m["framework"] == "tensorflow" and m["framework_version"] == tf.__version__
    assert m["signatures"] == ["recommend", "recommend_unseen", "score", "serving_default"]
    assert m["top_k"] == 3 and m["default_signature"] == "recommend"
    loaded = tf.saved_model.load(exported_model.path)
    out = loaded.signatures["serving_default"](
        user_id=tf.constant([1], tf.int64), exclude_seen=tf.constant([True])
    )
    assert out["item_ids"].shape == (1, 3)
    # A retry of the task (Vertex AI's retryPolicy) after an attempt that published but died
    # before its executor output finds its own output folder full: the component replaces it.
    first = set(os.listdir(exported_model.path))
    retried = dsl.Model(uri=exported_model.uri)
    export_model.python_func(
        model=dsl.Model(uri=tiny_model.model_dir),
        examples=dsl.Dataset(uri=tiny_data),
        exported_model=retried,
        top_k=4,
    )
    assert set(os.listdir(retried.path)) == first and retried.metadata["top_k"] == 4


def test_cli_export_prints_where_and_a_request(tiny_model, tiny_data, tmp_path, capsys):
    out, model_dir = tmp_path / "cli", tiny_model.model_dir
    args = ["export", "--model-dir", model_dir, "--data", tiny_data, "--output", str(out)]
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
        "parent_model": None,  # A new model.
        "is_default_version": True,
        "sync": True,
    }
    assert upload_args("gs://b/m", "n", "2.16", serving_image="img")["serving_container_image_uri"]
    version = upload_args("gs://b/m", "n", "2.16", parent_model="projects/p/locations/l/models/7")
    assert version["parent_model"] == "projects/p/locations/l/models/7"
    with pytest.raises(ValueError, match="Cloud Storage"):
        upload_args("/tmp/m", "n", "2.16")


def test_register_model_component_interface():
    # The upload runs against the Vertex stand-in in tests/test_submit.py (register_model).
    inputs = register_model.component_spec.inputs
    assert {"exported_model", "project", "location", "display_name", "serving_image"} <= set(inputs)
    assert "vertex_model" in register_model.component_spec.outputs


# Loads and serves a SavedModel the way TensorFlow Serving does (TF1 graph + session, tag "serve",
# SignatureDef tensors fed and fetched by name), in an interpreter with only TensorFlow: written
# to a temporary folder and run with ``python -I``, the repository dropped from sys.path and the
# project's packages refused, as tests/serve_check.py does for the TF2 path.
TF1_SERVE = r"""
import importlib.abc
import json
import os
import sys

EXPORT_DIR, REQUESTS, OUT, REPO = sys.argv[1:5]
PROJECT_PACKAGES = ("training_core", "components", "pipelines", "vertex_emulator")


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in PROJECT_PACKAGES:
            raise ImportError(f"{name} must not be needed to serve the model")
        return None


sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != REPO]
sys.meta_path.insert(0, _Refuse())

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
with open(REQUESTS) as f:
    requests = json.load(f)
with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as sess:
    # Restores the variables and runs the init op (the vocab tables, from assets/).
    meta_graph = tf1.saved_model.loader.load(sess, ["serve"], EXPORT_DIR)
    eager_inside = tf.executing_eagerly()
    sigs = {k: v for k, v in meta_graph.signature_def.items() if not k.startswith("__")}
    responses = []
    for body in requests:
        sig = sigs[body.get("signature_name", "serving_default")]
        instances = body["instances"]
        for i, inst in enumerate(instances):
            if set(inst) != set(sig.inputs):
                raise ValueError(f"instance {i} has {sorted(inst)}, takes {sorted(sig.inputs)}")
        feed = {
            info.name: np.asarray(
                [inst[name] for inst in instances],
                dtype=tf.dtypes.as_dtype(info.dtype).as_numpy_dtype,
            )
            for name, info in sig.inputs.items()
        }
        fetched = sess.run({k: info.name for k, info in sig.outputs.items()}, feed_dict=feed)
        arrays = {k: v.tolist() for k, v in fetched.items()}
        n = len(next(iter(arrays.values())))
        responses.append(
            {"predictions": [{k: arrays[k][i] for k in sorted(arrays)} for i in range(n)]}
        )
with open(OUT, "w") as f:
    json.dump(
        {
            "tags": list(meta_graph.meta_info_def.tags),
            "eager_inside": eager_inside,
            "signatures": {
                name: {
                    "method": sig.method_name,
                    "inputs": {k: tf.dtypes.as_dtype(v.dtype).name for k, v in sig.inputs.items()},
                    "outputs": {
                        k: tf.dtypes.as_dtype(v.dtype).name for k, v in sig.outputs.items()
                    },
                }
                for name, sig in sigs.items()
            },
            "responses": responses,
            "modules": sorted(m for m in sys.modules if m.split(".")[0] in PROJECT_PACKAGES),
            "tensorflow": tf.__version__,
        },
        f,
    )
"""


def _serve_tf1(export_dir, requests, tmp_path, python=sys.executable):
    """Runs the requests through TF1_SERVE in an isolated interpreter."""
    script = tmp_path / "tf1_serve.py"
    script.write_text(TF1_SERVE)
    req = tmp_path / "tf1-requests.json"
    out = tmp_path / f"tf1-responses-{abs(hash(python))}.json"
    req.write_text(json.dumps(requests))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [python, "-I", str(script), export_dir, str(req), str(out), ROOT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def _assert_same_responses(got, want):
    """Equal predictions: ids and flags exactly, scores to float32 rounding."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert len(g["predictions"]) == len(w["predictions"])
        for a, b in zip(g["predictions"], w["predictions"], strict=True):
            assert sorted(a) == sorted(b)
            for k in a:
                if k == "score" or k == "scores":
                    np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-7)
                else:
                    assert a[k] == b[k], k


@pytest.mark.slow
def test_tf1_session_loader_serves_the_same(tiny_export, reference, tmp_path):
    """The SavedModel served through the TF1 session loader that TF Serving uses.

    What it proves: the ``serve`` MetaGraph loads with ``tf.compat.v1.saved_model.loader.load``
    (variables restored, ``__saved_model_init_op`` run, the vocab assets found) in a Session, in
    an interpreter with only TensorFlow; each SignatureDef is a ``tensorflow/serving/predict``
    signature whose input and output tensors, fed and fetched by the names the SignatureDef
    gives, answer the same as the TF2 ``signatures[...]`` call (tests/serve_check.py). That is
    the C++ loader's and TF Serving's contract, exercised from Python.

    What it does not prove: that another TensorFlow release (Vertex AI's prebuilt serving
    images run 2.15 at the newest) has every op and GraphDef version this export uses, because
    both paths here run this environment's TensorFlow; nor anything about the TF Serving binary
    itself (its REST JSON parsing, batching). With NCF_SERVING_PYTHON set to a Python that has
    another TensorFlow, both paths also run there and must answer the same.
    """
    export_dir, result = tiny_export
    users, items = reference["users"], reference["items"]
    unknown_user = int(users.max()) + 1
    score = [{"user_id": int(users[u]), "item_id": int(items[i])} for u, i in ((0, 3), (5, 7))]
    score += [{"user_id": unknown_user, "item_id": int(items[0])}]
    recommend = [
        {"user_id": int(users[u]), "exclude_seen": flag}
        for u in (0, 1, 2)
        for flag in (True, False)
    ] + [{"user_id": unknown_user, "exclude_seen": True}]
    requests = [
        {"instances": score},
        {"signature_name": "score", "instances": score},
        {"signature_name": "recommend", "instances": recommend},
        *result.example_requests.values(),
    ]
    pythons = [sys.executable]
    if os.environ.get("NCF_SERVING_PYTHON"):  # An extra, where another TensorFlow is at hand.
        pythons.append(os.environ["NCF_SERVING_PYTHON"])
    tf2_here = _serve(export_dir, requests, tmp_path)
    for python in pythons:
        tf1 = _serve_tf1(export_dir, requests, tmp_path, python)
        assert tf1["tags"] == ["serve"] and tf1["eager_inside"] is False
        assert tf1["modules"] == []
        assert set(tf1["signatures"]) == {
            "serving_default",
            "score",
            "recommend",
            "recommend_unseen",
        }
        for name, sig in tf1["signatures"].items():
            assert sig["method"] == "tensorflow/serving/predict", name
            assert (sig["inputs"], sig["outputs"]) == (
                tf2_here["signatures"][name]["inputs"],
                tf2_here["signatures"][name]["outputs"],
            ), name
        _assert_same_responses(tf1["responses"], tf2_here["responses"])
        if python != sys.executable:
            tf2_there = _serve(export_dir, requests, tmp_path, python)
            assert tf2_there["modules"] == []
            _assert_same_responses(tf2_there["responses"], tf2_here["responses"])
    # Not vacuous: known pairs score, the unknown user gets the fallback, both recommend modes ran.
    assert [p["known"] for p in tf2_here["responses"][0]["predictions"]] == [True, True, False]
    recs = tf2_here["responses"][2]["predictions"]
    assert recs[-1]["item_ids"] == [export.UNKNOWN_ITEM] * TINY_TOP_K
    assert all(len(r["item_ids"]) == TINY_TOP_K for r in recs)


def _export_cli(model_dir, data, out, *extra):
    return [sys.executable, "-m", "pipelines.cli", "export", "--model-dir", model_dir, "--data"] + [
        data,
        "--output",
        str(out),
        *extra,
    ]


@pytest.mark.slow
def test_export_killed_at_random_moments_leaves_the_old_or_the_new_export(
    tiny_model, tiny_data, tmp_path, procs
):
    import random
    import shutil
    import signal
    import time

    from conftest import tree_bytes

    old, new = tmp_path / "old", tmp_path / "new"
    subprocess.run(
        _export_cli(tiny_model.model_dir, tiny_data, old, "--top-k", "3"), check=True, timeout=300
    )
    t0 = time.perf_counter()
    subprocess.run(
        _export_cli(tiny_model.model_dir, tiny_data, new, "--top-k", "5"), check=True, timeout=300
    )
    seconds = time.perf_counter() - t0
    trees = {"old": tree_bytes(str(old)), "new": tree_bytes(str(new))}
    rng = random.Random(8)
    seen = set()
    for i, sig in enumerate((signal.SIGKILL, signal.SIGTERM, signal.SIGKILL, signal.SIGTERM)):
        target = tmp_path / "runs" / f"e{i}"
        shutil.copytree(old, target)
        cmd = _export_cli(tiny_model.model_dir, tiny_data, target, "--top-k", "5", "--overwrite")
        proc = procs.popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # From a third of a whole export's time: on a loaded machine the measured export may
        # have run slower than these, and a kill after the publish shows nothing.
        delay = rng.uniform(0.3 * seconds, 1.1 * seconds)
        try:
            proc.wait(delay)
        except subprocess.TimeoutExpired:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        what = f"run {i}: {signal.Signals(sig).name} after {delay:.1f}s, exit {proc.returncode}"
        tree = tree_bytes(str(target))
        assert tree in trees.values(), f"{what}: a mix\n{err[-2000:]}"
        seen.add("new" if tree == trees["new"] else "old")
        leftovers = [n for n in os.listdir(target.parent) if ".partial" in n]
        if sig == signal.SIGTERM:  # Cleaned up on the way out.
            assert not leftovers, what
        rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert tree_bytes(str(target)) == trees["new"], what
        assert not [n for n in os.listdir(target.parent) if ".partial" in n], what
    assert "old" in seen, "no kill landed before the new export was published"
