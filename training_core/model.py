"""NeuMF (GMF + MLP) as a plain ``tf.Module``, with config presets.

One user and one item embedding table, each ``num_factors + layers[0] // 2`` wide, sliced in two:
the first ``num_factors`` columns feed the GMF tower (element-wise product), the rest the MLP tower
(concatenated, then ``layers[1:]`` ReLU layers). Both towers are concatenated into one logit.
Storing both parts in one table is what the reference found fastest.

A ``tf.Module`` with ``tf.Variable`` s (not Keras) keeps checkpoints strategy-independent (a
checkpoint written under ``MirroredStrategy`` restores on one device), lets the training loop own
mixed precision and gradient handling, and exports with ``tf.saved_model.save`` as is.
"""

from __future__ import annotations

import math

import tensorflow as tf

from training_core.presets import PRESETS, NeuMFConfig, get_preset  # noqa: F401 (re-exported)


def _glorot(shape: tuple[int, int], seed: tf.Tensor | tuple[int, int]) -> tf.Tensor:
    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return tf.random.stateless_uniform(shape, seed, -limit, limit)


class NeuMF(tf.Module):
    """The NeuMF scorer: ``(user_id, item_id) -> logit``.

    Args:
        config: hyperparameters.
        num_users: rows of the user table.
        num_items: rows of the item table.
        seed: initialization seed (stateless, so the same seed gives the same weights anywhere).
    """

    def __init__(self, config: NeuMFConfig, num_users: int, num_items: int, seed: int = 0):
        super().__init__(name="neumf")
        self.config = config
        self.num_users = num_users
        self.num_items = num_items
        dim = config.embedding_dim
        seeds = [(seed, i) for i in range(2 + 2 * len(config.layers))]
        # Reference: glorot_uniform for embeddings and hidden layers, lecun_uniform for the logit.
        self.user_embedding = tf.Variable(
            _glorot((num_users, dim), seeds[0]), name="user_embedding"
        )
        self.item_embedding = tf.Variable(
            _glorot((num_items, dim), seeds[1]), name="item_embedding"
        )
        self.mlp_kernels = []
        self.mlp_biases = []
        for i, (n_in, n_out) in enumerate(zip(config.layers[:-1], config.layers[1:], strict=True)):
            self.mlp_kernels.append(
                tf.Variable(_glorot((n_in, n_out), seeds[2 + i]), name=f"mlp_kernel_{i}")
            )
            self.mlp_biases.append(tf.Variable(tf.zeros([n_out]), name=f"mlp_bias_{i}"))
        n_in = config.num_factors + config.layers[-1]
        limit = math.sqrt(3.0 / n_in)
        self.logit_kernel = tf.Variable(
            tf.random.stateless_uniform((n_in, 1), seeds[-1], -limit, limit), name="logit_kernel"
        )
        self.logit_bias = tf.Variable(tf.zeros([1]), name="logit_bias")

    def dense_variables(self) -> list[tf.Variable]:
        """Every variable but the two embedding tables."""
        return [*self.mlp_kernels, *self.mlp_biases, self.logit_kernel, self.logit_bias]

    def score(
        self,
        user_ids: tf.Tensor,
        item_ids: tf.Tensor,
        compute_dtype: tf.DType = tf.float32,
    ) -> tf.Tensor:
        """Logits, float32, shape of the ids (``[batch]`` or ``[batch, 1]``).

        Args:
            user_ids: int ids, ``[batch]`` or ``[batch, 1]``.
            item_ids: int ids, same shape.
            compute_dtype: float32, or bfloat16/float16 for mixed precision (variables stay
                float32).
        """
        shape = tf.shape(user_ids)
        users = tf.reshape(user_ids, [-1])
        items = tf.reshape(item_ids, [-1])
        u = tf.cast(tf.gather(self.user_embedding, users), compute_dtype)
        v = tf.cast(tf.gather(self.item_embedding, items), compute_dtype)
        # tf.split rather than two slices per table: its gradient is one concat, where each
        # slice's gradient is a zero-padded full-width copy summed afterwards (about a fifth of
        # the CPU step at batch 1024). Same values either way.
        k = self.config.num_factors
        u_gmf, u_mlp = tf.split(u, [k, self.config.layers[0] // 2], axis=1)
        v_gmf, v_mlp = tf.split(v, [k, self.config.layers[0] // 2], axis=1)
        gmf = u_gmf * v_gmf
        h = tf.concat([u_mlp, v_mlp], axis=1)
        for kernel, bias in zip(self.mlp_kernels, self.mlp_biases, strict=True):
            h = tf.nn.relu(
                tf.matmul(h, tf.cast(kernel, compute_dtype)) + tf.cast(bias, compute_dtype)
            )
        features = tf.concat([gmf, h], axis=1)
        logits = tf.matmul(features, tf.cast(self.logit_kernel, compute_dtype))
        logits = tf.cast(logits, tf.float32) + self.logit_bias
        return tf.reshape(logits, shape)
