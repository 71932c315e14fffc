"""The training and eval steps compiled as TPUStrategy compiles them, on the CPU.

Under ``TPUStrategy`` every step ``strategy.run`` runs is compiled by XLA, with the inputs'
shapes fixed at trace time and bfloat16 compute: a dynamic shape or an op XLA cannot compile
fails there, on the TPU, after the job has waited for its machine. Here the product's own step
functions (``compiled_step.make_replica_step``, ``evaluate.eval_step_fn``) are compiled with
``jit_compile=True`` on the batches the product's input pipelines give, in bfloat16, with
dense gradients (what an accelerator trains with): the same failure, on the CPU, in a test.

Used in-process by tests/test_xla_step.py (the project's TensorFlow) and, as a script, in the
tpu image's TensorFlow by tests/test_tpu_env.py::

    python tests/xla_step.py DATA_DIR MODEL_DIR   # prints one JSON line

Imports nothing from tests/conftest.py (the tpu environment has no data-preparation stack).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import training_core  # noqa: E402, F401  (first: keeps libtpu off on a host without a TPU)


def static_spec_problems(element_spec) -> list[str]:
    """The features of a dataset element whose shape is not fully known at trace time."""
    return [
        f"{name}: {spec.shape}"
        for name, spec in element_spec.items()
        if not spec.shape.is_fully_defined()
    ]


def compile_steps(data_dir: str, model_dir: str, perturb=None) -> dict:
    """Compiles and runs one training step and one eval step with XLA in bfloat16.

    Args:
        data_dir: a prepared dataset.
        model_dir: a folder for the trainer's state (its checkpoint manager writes there).
        perturb: ``features -> features`` applied inside the compiled training step (tests give
            it an op XLA cannot compile, to show the check fails).

    Returns:
        What was compiled: TensorFlow's version, the batch shapes, the loss and eval sums.

    Raises:
        ValueError: a feature's shape is not static.
        tf.errors.InvalidArgumentError (or another ``OpError``): XLA could not compile a step.
    """
    import tensorflow as tf

    from training_core.evaluation.evaluate import eval_step_fn
    from training_core.training import compiled_step, input_pipeline, loop, train_config
    from training_core.training import trainer as trainer_lib

    config = train_config.config_for(
        data_dir, model_dir, "tiny", epochs=1, precision="bfloat16", embedding_updates="dense"
    )
    strategy = tf.distribute.get_strategy()
    trainer = trainer_lib._Trainer(config, strategy, loop.Evaluation)
    if trainer.dtype != tf.bfloat16 or not trainer.dense:
        raise AssertionError(f"not a TPU-like run: {trainer.dtype}, dense {trainer.dense}")
    context = tf.distribute.InputContext()
    train = input_pipeline.train_dataset_fn(trainer.meta, data_dir, trainer.layout, 0)(context)
    evals = input_pipeline.eval_dataset_fn(trainer.meta, data_dir, 1)(context)
    problems = static_spec_problems(train.element_spec) + static_spec_problems(evals.element_spec)
    if problems:
        raise ValueError(f"dynamic shapes (TPUStrategy needs static ones): {problems}")

    replica_step = compiled_step.make_replica_step(
        strategy,
        trainer.model,
        trainer.variables,
        trainer.optimizer,
        trainer.loss_scale,
        global_batch=trainer.layout.global_batch,
        dtype=trainer.dtype,
        dense=trainer.dense,
        jit=False,  # The whole step is compiled below, as TPUStrategy compiles it.
    )

    @tf.function(jit_compile=True, autograph=False)
    def compiled_train(features):
        return replica_step(perturb(features) if perturb else features)

    items = input_pipeline.eval_items_per_user(trainer.meta)
    compiled_eval = tf.function(
        eval_step_fn(trainer.model, items, trainer.dtype), jit_compile=True, autograph=False
    )
    batch = next(iter(train))
    before = [v.numpy().copy() for v in trainer.variables]
    loss = float(compiled_train(batch))
    moved = sum(int((v.numpy() != b).any()) for v, b in zip(trainer.variables, before, strict=True))
    hits, ndcg, users = (float(x) for x in compiled_eval(next(iter(evals))))
    return {
        "tensorflow": tf.__version__,
        "train_shapes": {k: v.shape.as_list() for k, v in train.element_spec.items()},
        "eval_shapes": {k: v.shape.as_list() for k, v in evals.element_spec.items()},
        "loss": loss,
        "eval": [hits, ndcg, users],
        "variables_moved": moved,
        "variables": len(before),
    }


if __name__ == "__main__":
    print(json.dumps(compile_steps(sys.argv[1], sys.argv[2])))
