"""Runs the training step in whatever Python runs this file: the tpu image's set, in the tests.

tests/test_tpu_env.py starts it with the interpreter of the environment ``make test-tpu-env``
builds from images/tpu's lock (TensorFlow's TPU build 2.19, no data-preparation stack), so it
imports nothing from tests/conftest.py::

    python tests/tpu_env_worker.py component SPEC.json   # train_model, as the image runs it
    python tests/tpu_env_worker.py train SPEC.json       # loop.train with config_for's options

SPEC holds ``data``, ``model`` and ``out`` paths and ``params`` (train_model's parameters) or
``options`` (``config_for``'s). The result goes to ``out`` as JSON: TensorFlow's version and
what the run gave, written only when the run ends.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import training_core  # noqa: E402, F401  (first: keeps libtpu off on a host without a TPU)


def component(spec: dict) -> dict:
    """``train_model``'s python function with real artifacts, as the tpu image's replica runs it."""
    from kfp import dsl

    from components.train_model import train_model

    model = dsl.Model(uri=spec["model"])
    metrics = dsl.Metrics(uri=spec["model"] + ".metrics")
    plots = dsl.HTML(uri=spec["model"] + ".html")
    train_model.python_func(
        examples=dsl.Dataset(uri=spec["data"]),
        model=model,
        metrics=metrics,
        plots=plots,
        **spec["params"],
    )
    return {"metrics": metrics.metadata, "model": model.metadata}


def train(spec: dict) -> dict:
    """``loop.train`` on the default strategy with ``config_for``'s options."""
    import tensorflow as tf

    from training_core.training import loop, train_config

    config = train_config.config_for(spec["data"], spec["model"], **spec["options"])
    result = loop.train(config, tf.distribute.get_strategy())
    return {
        "global_step": result.global_step,
        "epochs": [[e.step, e.loss, e.hr_at_10, e.ndcg_at_10] for e in result.epochs],
        "test": [result.test.hr_at_10, result.test.ndcg_at_10] if result.test else None,
    }


def main(argv: list[str]) -> None:
    """Runs one mode; writes its result with TensorFlow's version to the spec's ``out``."""
    import tensorflow as tf

    mode, path = argv
    with open(path) as f:
        spec = json.load(f)
    result = {"component": component, "train": train}[mode](spec)
    result["tensorflow"] = tf.__version__
    result["libtpu_off"] = os.environ.get("NCF_LIBTPU_OFF")
    with open(spec["out"], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
