"""Serves an exported SavedModel on Vertex AI's custom-container contract: our own serve image.

Vertex AI's prebuilt TensorFlow prediction images end at TF 2.15, whose availability Google ends
on 2027-01-14. This module is the model logic of the image that replaces them (the Dockerfile's
``serve`` stage): :class:`NcfPredictor`, a Custom Prediction Routines ``Predictor``, run by the
SDK's own server (``python3 -m google.cloud.aiplatform.prediction.model_server``: FastAPI on
uvicorn), which reads Vertex AI's environment: ``AIP_HTTP_PORT``, ``AIP_PREDICT_ROUTE``,
``AIP_HEALTH_ROUTE``, ``AIP_STORAGE_URI`` (the model), and ``HANDLER_MODULE``/``HANDLER_CLASS``,
``PREDICTOR_MODULE``/``PREDICTOR_CLASS`` (:data:`SERVER_ENV`, set by the image).

Callers need not change: a request is what the prebuilt TF Serving image takes, TF Serving's
REST row format, ``{"instances": [...]}`` with an optional ``"signature_name"`` (default
``serving_default``; reached through ``rawPredict``, as with TF Serving: docs/serving.md), and the
answer is TF Serving's, ``{"predictions": [...]}``, one object per instance (a bare value where
the signature has one output). An instance lacking an input or carrying an unknown one, an
unknown signature, and a request the SavedModel's own checks refuse answer 400 with the reason.

KFP-free; TensorFlow is imported when the model is loaded.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from fastapi import HTTPException
from google.cloud.aiplatform.prediction.predictor import Predictor

DEFAULT_SIGNATURE = "serving_default"

# What the serve image's environment names for CPR's model server (the Dockerfile's serve stage
# sets these; tests start the server with them).
SERVER_ENV = {
    "HANDLER_MODULE": "google.cloud.aiplatform.prediction.handler",
    "HANDLER_CLASS": "PredictionHandler",
    "PREDICTOR_MODULE": __name__,
    "PREDICTOR_CLASS": "NcfPredictor",
}


def local_model_dir(artifacts_uri: str) -> str:
    """The SavedModel folder to load: ``artifacts_uri`` itself, or a local copy of a gs:// one.

    A ``gs://`` URI (what Vertex AI sets ``AIP_STORAGE_URI`` to) is copied by the SDK's
    ``download_model_artifacts``, which writes into the working directory: here a fresh folder
    of its own, so the server's user needs no writable working directory.

    Raises:
        ValueError: no URI (``AIP_STORAGE_URI`` unset), or a local path that is not a folder.
    """
    if not artifacts_uri:
        raise ValueError("no model: AIP_STORAGE_URI is not set (Vertex AI sets it to the model)")
    if not artifacts_uri.startswith("gs://"):
        if not os.path.isdir(artifacts_uri):
            raise ValueError(f"AIP_STORAGE_URI {artifacts_uri!r} is not a folder")
        return artifacts_uri
    from google.cloud.aiplatform.utils import prediction_utils

    folder = tempfile.mkdtemp(prefix="model-")
    here = os.getcwd()
    os.chdir(folder)
    try:
        prediction_utils.download_model_artifacts(artifacts_uri)
    finally:
        os.chdir(here)
    return folder


def _bad_request(message: str) -> HTTPException:
    """A 400 answer, as TF Serving answers a request it cannot run (``{"detail": message}``)."""
    return HTTPException(status_code=400, detail=message)


def _json_value(value: Any) -> Any:
    """A tensor's value as TF Serving's REST API writes it: a ``tf.string`` as a JSON string."""
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    return value.decode("utf-8") if isinstance(value, bytes) else value


class NcfPredictor(Predictor):
    """The exported SavedModel's signatures, in TF Serving's row format.

    ``load`` restores the SavedModel; ``preprocess`` turns a request body into the signature's
    name and its input tensors (every instance's values batched along a new first axis, cast to
    the signature's dtypes, as TF Serving does); ``predict`` calls the signature;
    ``postprocess`` writes one prediction per instance.
    """

    def __init__(self) -> None:
        super().__init__()
        self._signatures: dict[str, Any] = {}

    def load(self, artifacts_uri: str, **kwargs: Any) -> None:
        """Loads the SavedModel at ``artifacts_uri`` (a folder, or gs:// as Vertex AI gives it)."""
        import tensorflow as tf

        self._model = tf.saved_model.load(local_model_dir(artifacts_uri))
        self._signatures = dict(self._model.signatures)

    def preprocess(self, prediction_input: Any) -> tuple[str, dict[str, Any]]:
        """``(signature name, input tensors)`` from a TF Serving row-format request body.

        Raises:
            HTTPException: 400 for a body that is not such a request, an unknown signature, or
                an instance whose inputs are not exactly the signature's.
        """
        import tensorflow as tf

        if not isinstance(prediction_input, dict) or not isinstance(
            prediction_input.get("instances"), list
        ):
            raise _bad_request(
                'expected a JSON object with "instances": a list, one entry per instance '
                '(TF Serving\'s row format; "signature_name" optional)'
            )
        name = prediction_input.get("signature_name") or DEFAULT_SIGNATURE
        if name not in self._signatures:
            raise _bad_request(
                f"Serving signature name: {name!r} not found in signature def; the model has "
                f"{', '.join(sorted(self._signatures))}"
            )
        _, specs = self._signatures[name].structured_input_signature
        instances = prediction_input["instances"]
        if len(specs) == 1:  # TF Serving: one input, so an instance may be its bare value.
            (only,) = specs
            instances = [i if isinstance(i, dict) else {only: i} for i in instances]
        for i, instance in enumerate(instances):
            if not isinstance(instance, dict) or set(instance) != set(specs):
                got = sorted(instance) if isinstance(instance, dict) else repr(instance)
                raise _bad_request(
                    f"instance {i} has {got}; signature {name!r} takes exactly "
                    f"{sorted(specs)}, one value each"
                )
        try:
            tensors = {
                key: tf.constant([instance[key] for instance in instances], dtype=spec.dtype)
                for key, spec in specs.items()
            }
        except (TypeError, ValueError) as error:
            raise _bad_request(f"{name}: the instances' values do not fit: {error}") from None
        return name, tensors

    def predict(self, instances: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        """The signature's outputs (tensors by name) for ``preprocess``'s inputs.

        Raises:
            HTTPException: 400 when the SavedModel's own input checks refuse the request.
        """
        import tensorflow as tf

        name, tensors = instances
        try:
            return self._signatures[name](**tensors)
        except tf.errors.InvalidArgumentError as error:
            raise _bad_request(f"{name}: {error.message}") from None

    def postprocess(self, prediction_results: dict[str, Any]) -> dict[str, list]:
        """``{"predictions": [...]}``: one object per instance, or bare values for one output."""
        arrays = {k: _json_value(v.numpy().tolist()) for k, v in prediction_results.items()}
        if len(arrays) == 1:
            (only,) = arrays.values()
            return {"predictions": only}
        count = len(next(iter(arrays.values()), []))
        return {"predictions": [{k: arrays[k][i] for k in sorted(arrays)} for i in range(count)]}
