"""NeuMF's two towers, for the architectures built of them (``neumf``, ``gmf``, ``mlp``).

Each embedding table holds the GMF tower's columns, then the MLP tower's: ``gmf_columns`` and
``mlp_columns`` say how many of each (0: no such tower). The GMF tower is the element-wise
product of its user and item columns; the MLP tower concatenates its columns and runs
``layers[1:]`` ReLU layers (``layers[0]`` is that concatenation's width); the towers' outputs,
concatenated, feed one logit layer. Storing both towers' columns in one table is what the
reference found fastest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from training_core.training.architectures.base import Architecture, Candidates, ModelShape

if TYPE_CHECKING:
    import tensorflow as tf


class Towers(Architecture):
    """A scorer of GMF and/or MLP towers into one logit; subclasses give the columns of each."""

    def gmf_columns(self, config: ModelShape) -> int:
        """Columns of each table feeding the GMF tower (0: none)."""
        return 0

    def mlp_columns(self, config: ModelShape) -> int:
        """Columns of each table feeding the MLP tower (0: none)."""
        return 0

    def embedding_dim(self, config: ModelShape) -> int:
        """Both towers' columns."""
        return self.gmf_columns(config) + self.mlp_columns(config)

    def mlp_widths(self, config: ModelShape) -> tuple[int, ...]:
        """``config.layers`` where there is an MLP tower."""
        return tuple(config.layers) if self.mlp_columns(config) else ()

    def logit_inputs(self, config: ModelShape) -> int | None:
        """The GMF tower's width plus the MLP's last layer's."""
        widths = self.mlp_widths(config)
        return self.gmf_columns(config) + (widths[-1] if widths else 0)

    def _towers(self, model, x: tf.Tensor) -> tuple[tf.Tensor | None, tf.Tensor | None]:
        """Rows ``x`` of a table as (GMF columns, MLP columns); ``None`` for a missing tower."""
        import tensorflow as tf

        gmf, mlp = self.gmf_columns(model.config), self.mlp_columns(model.config)
        if gmf and mlp:
            # tf.split rather than two slices per table: its gradient is one concat, where each
            # slice's gradient is a zero-padded full-width copy summed afterwards (about a fifth
            # of the CPU step at batch 1024). Same values either way.
            u_gmf, u_mlp = tf.split(x, [gmf, mlp], axis=1)
            return u_gmf, u_mlp
        return (x, None) if gmf else (None, x)

    def logits(self, model, u: tf.Tensor, v: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """The towers' outputs, concatenated, through the logit layer."""
        import tensorflow as tf

        (u_gmf, u_mlp), (v_gmf, v_mlp) = self._towers(model, u), self._towers(model, v)
        towers = []
        if u_gmf is not None:
            towers.append(u_gmf * v_gmf)
        if u_mlp is not None:
            h = tf.concat([u_mlp, v_mlp], axis=1)
            for kernel, bias in zip(model.mlp_kernels, model.mlp_biases, strict=True):
                h = tf.nn.relu(tf.matmul(h, tf.cast(kernel, dtype)) + tf.cast(bias, dtype))
            towers.append(h)
        features = towers[0] if len(towers) == 1 else tf.concat(towers, axis=1)
        return tf.matmul(features, tf.cast(model.logit_kernel, dtype))

    def item_side(self, model, v: tf.Tensor, dtype: tf.DType) -> dict[str, tf.Tensor]:
        """The GMF columns and, with an MLP, the item half of its first layer.

        That half is ``v_mlp @ W1[item rows] + b1``, once per item.
        """
        import tensorflow as tf

        out: dict[str, tf.Tensor] = {}
        v_gmf, v_mlp = self._towers(model, v)
        if v_gmf is not None:
            out["gmf"] = v_gmf
        if v_mlp is not None:
            half = self.mlp_columns(model.config)
            if model.mlp_kernels:
                kernel = tf.cast(model.mlp_kernels[0], dtype)
                bias = tf.cast(model.mlp_biases[0], dtype)
                out["mlp"] = tf.matmul(v_mlp, kernel[half:]) + bias
            else:  # No hidden layer: the concatenation feeds the logit directly.
                out["mlp"] = v_mlp
        return out

    def candidate_logits(
        self,
        model,
        u: tf.Tensor,
        items: dict[str, tf.Tensor],
        candidates: Candidates,
        dtype: tf.DType,
    ) -> tf.Tensor:
        """The GMF tower a product per pair; the MLP's first layer split into its two halves.

        The user half is computed once per user and the item half once per item
        (``item_side``), added per pair, so a pair costs only the layers after the first
        (``logits`` pays the first layer, the widest, for every pair).
        """
        import tensorflow as tf

        k, half = self.gmf_columns(model.config), self.mlp_columns(model.config)
        u_gmf, u_mlp = self._towers(model, u)
        pick = candidates.pick
        w = tf.cast(model.logit_kernel, dtype)
        logits = 0.0
        if u_gmf is not None:
            logits = candidates.dot(u_gmf * w[:k, 0], items["gmf"])
            w = w[k:]
        if u_mlp is not None:
            if not model.mlp_kernels:
                item_part = tf.matmul(items["mlp"], w[half:])  # [num_items, 1]
                logits += tf.matmul(u_mlp, w[:half]) + pick(item_part)[..., 0]
            else:
                kernel = tf.cast(model.mlp_kernels[0], dtype)
                first = tf.matmul(u_mlp, kernel[:half])  # [users, width]
                h = tf.nn.relu(first[:, None, :] + pick(items["mlp"]))
                shape = tf.shape(h)
                h = tf.reshape(h, [-1, shape[2]])
                for kernel, bias in zip(model.mlp_kernels[1:], model.mlp_biases[1:], strict=True):
                    h = tf.nn.relu(tf.matmul(h, tf.cast(kernel, dtype)) + tf.cast(bias, dtype))
                logits += tf.reshape(tf.matmul(h, w), [shape[0], shape[1]])
        return logits
