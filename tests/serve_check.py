"""Serves requests from an exported SavedModel in a process that has only TensorFlow.

Usage: python -I tests/serve_check.py EXPORT_DIR REQUESTS_JSON OUT_JSON

REQUESTS_JSON is a list of TF Serving REST predict bodies, each
``{"signature_name": NAME (optional), "instances": [{input: value, ...}, ...]}``, the row format
Vertex AI's prebuilt TensorFlow container receives. Each is converted as TensorFlow Serving does
(every instance's named values batched along a new first axis, cast to the signature's dtypes; a
missing or extra input name is an error) and the outputs are returned in TF Serving's row format
(``{"predictions": [{output: value, ...}, ...]}``; a string id, in or out, is a JSON string).
OUT_JSON gets ``{"signatures": {...}, "responses": [...], "modules": [...]}``.

Run it with ``-I`` from a folder outside the repository. This project is installed editable (a
``.pth`` file puts the repository on ``sys.path``), so the script also drops that path and refuses
imports of the project's packages: the SavedModel must load and serve without them.
"""

import importlib.abc
import json
import os
import sys

PROJECT_PACKAGES = ("training_core", "components", "pipelines", "vertex_emulator")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in PROJECT_PACKAGES:
            raise ImportError(f"{name} must not be needed to serve the model")
        return None


sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != REPO]
sys.meta_path.insert(0, _Refuse())

import tensorflow as tf  # noqa: E402


def to_tensors(signature, instances):
    """Row format to named tensors, as TensorFlow Serving converts a JSON ``instances`` list."""
    _, specs = signature.structured_input_signature
    for i, inst in enumerate(instances):
        if set(inst) != set(specs):
            raise ValueError(
                f"instance {i} has {sorted(inst)}, the signature takes {sorted(specs)}"
            )
    return {
        name: tf.constant([inst[name] for inst in instances], dtype=spec.dtype)
        for name, spec in specs.items()
    }


def _json_value(value):
    """A tensor's value as TF Serving's REST API writes it: a ``tf.string`` as a JSON string."""
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def to_predictions(outputs):
    """Named output tensors to TF Serving's row-format ``predictions`` list."""
    arrays = {k: _json_value(v.numpy().tolist()) for k, v in outputs.items()}
    n = len(next(iter(arrays.values())))
    return [{k: arrays[k][i] for k in sorted(arrays)} for i in range(n)]


def _importable(name):
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def main(export_dir, requests_path, out_path):
    loaded = tf.saved_model.load(export_dir)
    with open(requests_path) as f:
        requests = json.load(f)
    responses = []
    for body in requests:
        sig = loaded.signatures[body.get("signature_name", "serving_default")]
        outputs = sig(**to_tensors(sig, body["instances"]))
        responses.append({"predictions": to_predictions(outputs)})
    signatures = {
        name: {
            "inputs": {k: s.dtype.name for k, s in fn.structured_input_signature[1].items()},
            "outputs": {k: s.dtype.name for k, s in fn.structured_outputs.items()},
        }
        for name, fn in loaded.signatures.items()
    }
    with open(out_path, "w") as f:
        json.dump(
            {
                "signatures": signatures,
                "responses": responses,
                "modules": sorted(m for m in sys.modules if m.split(".")[0] in PROJECT_PACKAGES),
                "sys_path_has_repo": any(os.path.abspath(p or ".") == REPO for p in sys.path),
                "project_importable": _importable("training_core"),
            },
            f,
        )


if __name__ == "__main__":
    main(*sys.argv[1:4])
