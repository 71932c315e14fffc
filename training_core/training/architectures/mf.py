"""MF: a dot product of ``num_factors`` columns plus a user and an item bias (Rendle et al. 2020).

Each table holds the factors, then the bias column (one more column, starting at 0); the global
bias is the model's ``logit_bias``. No MLP and no logit layer. A tuned one matches or beats
NeuMF (Rendle et al. 2020), and it is what the ml-100k preset trains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from training_core.training.architectures.base import Architecture, Candidates, ModelShape, glorot

if TYPE_CHECKING:
    import tensorflow as tf


class MF(Architecture):
    """``u . v + b_u + b_v + b``: the factors' dot product and the three biases."""

    name = "mf"
    description = "matrix factorisation: dot product of the embeddings plus user and item biases"

    def embedding_dim(self, config: ModelShape) -> int:
        """The factors and one bias column."""
        return config.num_factors + 1

    def table(self, config: ModelShape, rows: int, seed: Any) -> tf.Tensor:
        """The factors (glorot_uniform), then the bias column, which starts at 0."""
        import tensorflow as tf

        factors = glorot((rows, config.num_factors), seed)
        return tf.concat([factors, tf.zeros([rows, 1])], axis=1)

    def logit_inputs(self, config: ModelShape) -> int | None:
        """None: no logit layer, the dot product is the logit."""
        return None

    def logits(self, model, u: tf.Tensor, v: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """Each pair's dot product of factors plus both bias columns."""
        import tensorflow as tf

        k = model.config.num_factors
        u_factors, u_bias = tf.split(u, [k, 1], axis=1)
        v_factors, v_bias = tf.split(v, [k, 1], axis=1)
        return tf.reduce_sum(u_factors * v_factors, axis=1, keepdims=True) + u_bias + v_bias

    def item_side(self, model, v: tf.Tensor, dtype: tf.DType) -> dict[str, tf.Tensor]:
        """The whole item table (factors and biases)."""
        return {"table": v}

    def candidate_logits(
        self,
        model,
        u: tf.Tensor,
        items: dict[str, tf.Tensor],
        candidates: Candidates,
        dtype: tf.DType,
    ) -> tf.Tensor:
        """``logits`` per user and candidate: the dot products as one product where a grid."""
        k = model.config.num_factors
        v = items["table"]
        bias = candidates.pick(v[:, k : k + 1])[..., 0]
        return candidates.dot(u[:, :k], v[:, :k]) + u[:, k : k + 1] + bias
