"""The NCF scorer as one plain ``tf.Module``, holding any architecture of ``architectures``.

One user and one item embedding table per model, sliced by column as the architecture says
(``architectures.base``: NeuMF's GMF and MLP columns, MF's factors and bias column), plus the
architecture's dense layers (``mlp_kernels``, ``mlp_biases``, ``logit_kernel``) and a global
``logit_bias``. Every architecture has these attributes (empty, or ``None``, where it has no such
layer), so every checkpoint and export has the same variable paths, whatever the architecture.

A ``tf.Module`` with ``tf.Variable`` s (not Keras) keeps checkpoints strategy-independent (a
checkpoint written under ``MirroredStrategy`` restores on one device), lets the training loop own
mixed precision and gradient handling, and exports with ``tf.saved_model.save`` as is. Every
architecture has the same two tables, ``dense_variables`` and ``score``, so the training loop,
evaluation and export treat them alike.
"""

from __future__ import annotations

import math

import tensorflow as tf

from training_core.training import architectures
from training_core.training.architectures.base import Architecture, Candidates, glorot
from training_core.training.presets import NeuMFConfig


class NCFModel(tf.Module):
    """An NCF scorer: ``(user_id, item_id) -> logit``, of the architecture ``config`` names.

    Args:
        config: hyperparameters (``config.architecture`` picks the scorer).
        num_users: rows of the user table.
        num_items: rows of the item table.
        seed: initialization seed (stateless, so the same seed gives the same weights anywhere).
    """

    def __init__(self, config: NeuMFConfig, num_users: int, num_items: int, seed: int = 0):
        super().__init__(name=config.architecture)
        self.config = config
        self.num_users = num_users
        self.num_items = num_items
        arch = self.architecture
        # Fixed for every architecture (the layers' seeds whether it has them or not), so the
        # same seed keeps giving the same weights.
        seeds = [(seed, i) for i in range(2 + 2 * len(config.layers))]
        # Reference: glorot_uniform for embeddings and hidden layers, lecun_uniform for the logit.
        self.user_embedding = tf.Variable(
            arch.table(config, num_users, seeds[0]), name="user_embedding"
        )
        self.item_embedding = tf.Variable(
            arch.table(config, num_items, seeds[1]), name="item_embedding"
        )
        self.mlp_kernels = []
        self.mlp_biases = []
        widths = arch.mlp_widths(config)
        for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            kernel = glorot((n_in, n_out), seeds[2 + i])
            self.mlp_kernels.append(tf.Variable(kernel, name=f"mlp_kernel_{i}"))
            self.mlp_biases.append(tf.Variable(tf.zeros([n_out]), name=f"mlp_bias_{i}"))
        self.logit_kernel = None
        n_in = arch.logit_inputs(config)
        if n_in is not None:
            limit = math.sqrt(3.0 / n_in)
            self.logit_kernel = tf.Variable(
                tf.random.stateless_uniform((n_in, 1), seeds[-1], -limit, limit),
                name="logit_kernel",
            )
        self.logit_bias = tf.Variable(tf.zeros([1]), name="logit_bias")

    @property
    def architecture(self) -> Architecture:
        """What this model's scorer computes (looked up, so nothing of it is tracked)."""
        return architectures.get(self.config.architecture)

    def named_dense_variables(self) -> dict[str, tf.Variable]:
        """Every variable but the two embedding tables, by its path on the model.

        The path is the variable's checkpoint name below the model (``mlp_kernels/0``,
        ``logit_bias``); the order is the optimizer's.
        """
        named = {f"mlp_kernels/{i}": v for i, v in enumerate(self.mlp_kernels)}
        named.update({f"mlp_biases/{i}": v for i, v in enumerate(self.mlp_biases)})
        if self.logit_kernel is not None:
            named["logit_kernel"] = self.logit_kernel
        named["logit_bias"] = self.logit_bias
        return named

    def dense_variables(self) -> list[tf.Variable]:
        """Every variable but the two embedding tables."""
        return list(self.named_dense_variables().values())

    def trained_variables(self) -> list[tf.Variable]:
        """Every variable, in the optimizer's order (its moments are checkpointed in it)."""
        return [self.user_embedding, self.item_embedding, *self.dense_variables()]

    def item_side(self, compute_dtype: tf.DType = tf.float32) -> dict[str, tf.Tensor]:
        """What ``score_grid`` needs of every item, computed once (the architecture's)."""
        v = tf.cast(self.item_embedding, compute_dtype)
        return self.architecture.item_side(self, v, compute_dtype)

    def score_grid(
        self,
        user_ids: tf.Tensor,
        items: dict[str, tf.Tensor],
        compute_dtype: tf.DType = tf.float32,
    ) -> tf.Tensor:
        """Logits of each user against every item, float32 ``[len(user_ids), num_items]``.

        ``score_candidates`` with every item as each user's candidates.
        """
        return self.score_candidates(user_ids, items, None, compute_dtype)

    def score_candidates(
        self,
        user_ids: tf.Tensor,
        items: dict[str, tf.Tensor],
        item_ids: tf.Tensor | None = None,
        compute_dtype: tf.DType = tf.float32,
    ) -> tf.Tensor:
        """Logits of each user against its candidates, float32 ``[len(user_ids), C]``.

        The function ``score`` computes, with each side's share done once: ``items`` is
        ``item_side(compute_dtype)``, ``item_ids`` is ``[len(user_ids), C]`` (each user's own
        candidates, as the eval records hold them) or ``None`` (every item, C = num_items).
        Same values as ``score`` up to float rounding
        (``architectures.base.Architecture.candidate_logits``).
        """
        u = tf.cast(tf.gather(self.user_embedding, tf.reshape(user_ids, [-1])), compute_dtype)
        logits = self.architecture.candidate_logits(
            self, u, items, Candidates(item_ids), compute_dtype
        )
        return tf.cast(logits, tf.float32) + self.logit_bias

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
        logits = self.architecture.logits(self, u, v, compute_dtype)
        logits = tf.cast(logits, tf.float32) + self.logit_bias
        return tf.reshape(logits, shape)


# The name the trainer, evaluation and export have always used.
NeuMF = NCFModel
