"""The NCF scorers as one plain ``tf.Module``: NeuMF, and its baselines MF, GMF and MLP.

One user and one item embedding table per model, sliced by column. NeuMF (the default, what the
reference trains) holds ``num_factors + layers[0] // 2`` columns: the first ``num_factors`` feed
the GMF tower (element-wise product), the rest the MLP tower (concatenated, then ``layers[1:]``
ReLU layers); both towers are concatenated into one logit. Storing both parts in one table is
what the reference found fastest. ``gmf`` and ``mlp`` are either tower alone with its own logit
layer; ``mf`` is a dot product of ``num_factors`` columns plus a user and an item bias (one more
column in each table) and a global bias. ``training_core.training.presets.ARCHITECTURES`` names
them.

A ``tf.Module`` with ``tf.Variable`` s (not Keras) keeps checkpoints strategy-independent (a
checkpoint written under ``MirroredStrategy`` restores on one device), lets the training loop own
mixed precision and gradient handling, and exports with ``tf.saved_model.save`` as is. Every
architecture has the same two tables, ``dense_variables`` and ``score``, so the training loop,
evaluation and export treat them alike.
"""

from __future__ import annotations

import math

import tensorflow as tf

from training_core.training.presets import NeuMFConfig


def _glorot(shape: tuple[int, int], seed: tf.Tensor | tuple[int, int]) -> tf.Tensor:
    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return tf.random.stateless_uniform(shape, seed, -limit, limit)


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
        layers = config.layers if config.uses_mlp else ()
        seeds = [(seed, i) for i in range(2 + 2 * len(config.layers))]
        # Reference: glorot_uniform for embeddings and hidden layers, lecun_uniform for the logit.
        self.user_embedding = tf.Variable(self._table(num_users, seeds[0]), name="user_embedding")
        self.item_embedding = tf.Variable(self._table(num_items, seeds[1]), name="item_embedding")
        self.mlp_kernels = []
        self.mlp_biases = []
        for i, (n_in, n_out) in enumerate(zip(layers[:-1], layers[1:], strict=True)):
            self.mlp_kernels.append(
                tf.Variable(_glorot((n_in, n_out), seeds[2 + i]), name=f"mlp_kernel_{i}")
            )
            self.mlp_biases.append(tf.Variable(tf.zeros([n_out]), name=f"mlp_bias_{i}"))
        self.logit_kernel = None
        if config.architecture != "mf":
            n_in = config.num_factors * config.uses_gmf + (layers[-1] if layers else 0)
            limit = math.sqrt(3.0 / n_in)
            self.logit_kernel = tf.Variable(
                tf.random.stateless_uniform((n_in, 1), seeds[-1], -limit, limit),
                name="logit_kernel",
            )
        self.logit_bias = tf.Variable(tf.zeros([1]), name="logit_bias")

    def _table(self, rows: int, seed: tuple[int, int]) -> tf.Tensor:
        dim = self.config.embedding_dim
        if self.config.architecture != "mf":
            return _glorot((rows, dim), seed)
        # MF: the factors, then the bias column, which starts at 0.
        factors = _glorot((rows, dim - 1), seed)
        return tf.concat([factors, tf.zeros([rows, 1])], axis=1)

    def dense_variables(self) -> list[tf.Variable]:
        """Every variable but the two embedding tables."""
        head = [self.logit_kernel] if self.logit_kernel is not None else []
        return [*self.mlp_kernels, *self.mlp_biases, *head, self.logit_bias]

    def item_side(self, compute_dtype: tf.DType = tf.float32) -> dict[str, tf.Tensor]:
        """What ``score_grid`` needs of every item, computed once.

        The item table's parts and, with an MLP, its half of the first layer
        (``v_mlp @ W1[item rows] + b1``).
        """
        c = self.config
        v = tf.cast(self.item_embedding, compute_dtype)
        if c.architecture == "mf":
            return {"table": v}
        out: dict[str, tf.Tensor] = {}
        k, half = c.num_factors, c.layers[0] // 2
        if c.architecture == "neumf":
            out["gmf"], v_mlp = tf.split(v, [k, half], axis=1)
        elif c.architecture == "gmf":
            out["gmf"], v_mlp = v, None
        else:
            v_mlp = v
        if v_mlp is not None:
            if self.mlp_kernels:
                kernel = tf.cast(self.mlp_kernels[0], compute_dtype)
                bias = tf.cast(self.mlp_biases[0], compute_dtype)
                out["mlp"] = tf.matmul(v_mlp, kernel[half:]) + bias
            else:  # No hidden layer: the concatenation feeds the logit directly.
                out["mlp"] = v_mlp
        return out

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
        candidates, as the eval records hold them) or ``None`` (every item, C = num_items). MF
        and GMF are a product per pair; NeuMF's and MLP's first layer is split into its user
        half (once per user) and its item half (once per item), added per pair, so a pair costs
        only the layers after the first (``score`` pays the first layer, the widest, for every
        pair). Same values up to float rounding.
        """
        c = self.config
        u = tf.cast(tf.gather(self.user_embedding, tf.reshape(user_ids, [-1])), compute_dtype)
        grid = item_ids is None

        def pick(side: tf.Tensor) -> tf.Tensor:  # [users or 1, C, width]
            return side[None] if grid else tf.gather(side, item_ids)

        def dot(user_part: tf.Tensor, side: tf.Tensor) -> tf.Tensor:  # [users, C]
            if grid:  # One matrix product over the whole grid.
                return tf.matmul(user_part, side, transpose_b=True)
            return tf.reduce_sum(user_part[:, None, :] * pick(side), axis=2)

        if c.architecture == "mf":
            k = c.num_factors
            v = items["table"]
            logits = dot(u[:, :k], v[:, :k]) + u[:, k : k + 1] + pick(v[:, k : k + 1])[..., 0]
            return tf.cast(logits, tf.float32) + self.logit_bias
        k, half = c.num_factors, c.layers[0] // 2
        if c.architecture == "neumf":
            u_gmf, u_mlp = tf.split(u, [k, half], axis=1)
        elif c.architecture == "gmf":
            u_gmf, u_mlp = u, None
        else:
            u_gmf, u_mlp = None, u
        w = tf.cast(self.logit_kernel, compute_dtype)
        logits = 0.0
        if u_gmf is not None:
            logits = dot(u_gmf * w[:k, 0], items["gmf"])
            w = w[k:]
        if u_mlp is not None:
            if not self.mlp_kernels:
                item_part = tf.matmul(items["mlp"], w[half:])  # [num_items, 1]
                logits += tf.matmul(u_mlp, w[:half]) + pick(item_part)[..., 0]
            else:
                kernel = tf.cast(self.mlp_kernels[0], compute_dtype)
                first = tf.matmul(u_mlp, kernel[:half])  # [users, width]
                h = tf.nn.relu(first[:, None, :] + pick(items["mlp"]))
                shape = tf.shape(h)
                h = tf.reshape(h, [-1, shape[2]])
                for kernel, bias in zip(self.mlp_kernels[1:], self.mlp_biases[1:], strict=True):
                    h = tf.nn.relu(
                        tf.matmul(h, tf.cast(kernel, compute_dtype)) + tf.cast(bias, compute_dtype)
                    )
                logits += tf.reshape(tf.matmul(h, w), [shape[0], shape[1]])
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
        config = self.config
        if config.architecture == "mf":
            k = config.num_factors
            u_factors, u_bias = tf.split(u, [k, 1], axis=1)
            v_factors, v_bias = tf.split(v, [k, 1], axis=1)
            logits = tf.reduce_sum(u_factors * v_factors, axis=1, keepdims=True) + u_bias + v_bias
            logits = tf.cast(logits, tf.float32) + self.logit_bias
            return tf.reshape(logits, shape)
        towers = []
        if config.architecture == "neumf":
            # tf.split rather than two slices per table: its gradient is one concat, where each
            # slice's gradient is a zero-padded full-width copy summed afterwards (about a fifth
            # of the CPU step at batch 1024). Same values either way.
            k = config.num_factors
            u_gmf, u_mlp = tf.split(u, [k, config.layers[0] // 2], axis=1)
            v_gmf, v_mlp = tf.split(v, [k, config.layers[0] // 2], axis=1)
        elif config.architecture == "gmf":
            u_gmf, v_gmf = u, v
        else:
            u_mlp, v_mlp = u, v
        if config.uses_gmf:
            towers.append(u_gmf * v_gmf)
        if config.uses_mlp:
            h = tf.concat([u_mlp, v_mlp], axis=1)
            for kernel, bias in zip(self.mlp_kernels, self.mlp_biases, strict=True):
                h = tf.nn.relu(
                    tf.matmul(h, tf.cast(kernel, compute_dtype)) + tf.cast(bias, compute_dtype)
                )
            towers.append(h)
        features = towers[0] if len(towers) == 1 else tf.concat(towers, axis=1)
        logits = tf.matmul(features, tf.cast(self.logit_kernel, compute_dtype))
        logits = tf.cast(logits, tf.float32) + self.logit_bias
        return tf.reshape(logits, shape)


# The name the trainer, evaluation and export have always used.
NeuMF = NCFModel
