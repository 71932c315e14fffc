"""The training and eval steps compile as TPUStrategy compiles them (tests/xla_step.py), here in
the project's TensorFlow; tests/test_tpu_env.py runs the same in the tpu image's release.

A dynamic shape or an op XLA cannot compile must fail here, not on a TPU: both are shown to.
"""

from __future__ import annotations

import pytest
import tensorflow as tf
import xla_step


@pytest.mark.slow
def test_the_steps_compile_under_xla_in_bfloat16_with_static_shapes(tiny_data, tmp_path):
    result = xla_step.compile_steps(tiny_data, str(tmp_path / "model"))
    assert result["tensorflow"] == tf.__version__
    assert result["variables_moved"] == result["variables"] > 0  # The compiled step trained.
    assert all(d > 0 for shape in result["train_shapes"].values() for d in shape)
    hits, _, users = result["eval"]
    assert users > 0 and 0 <= hits <= users


@pytest.mark.slow
def test_an_op_xla_cannot_compile_fails_the_check(tiny_data, tmp_path):
    """A string op in the step (XLA has no string kernels): refused, as a TPU would refuse it."""

    def perturb(features):
        text = tf.strings.as_string(features["user_id"])
        return {**features, "user_id": tf.strings.to_number(text, features["user_id"].dtype)}

    with pytest.raises((tf.errors.InvalidArgumentError, tf.errors.UnimplementedError)) as err:
        xla_step.compile_steps(tiny_data, str(tmp_path / "model"), perturb=perturb)
    assert "AsString" in str(err.value) or "StringToNumber" in str(err.value)


def test_a_dataset_without_static_shapes_is_named():
    rows = tf.data.Dataset.from_tensor_slices({"user_id": tf.zeros([10, 1], tf.int64)})
    assert xla_step.static_spec_problems(rows.batch(4, drop_remainder=True).element_spec) == []
    problems = xla_step.static_spec_problems(rows.batch(4).element_spec)  # A short last batch.
    assert problems == ["user_id: (None, 1)"]
