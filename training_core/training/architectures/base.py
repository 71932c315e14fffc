"""What an NCF architecture is: the interface each one implements, and the parts they share.

An architecture holds what differs between the scorers: the width of its two embedding tables
and its config checks (plain Python, so the CLI checks a config without TensorFlow), the table
initialization and the dense layers it builds (``mlp_widths``, ``logit_inputs``), its logits for
pairs of rows (``logits``), and the same split into a user and an item side for ranking
(``item_side``, ``candidate_logits``). ``training_core.training.model.NCFModel`` holds any of
them: the tables, the variables and the framing (gathering rows, the compute dtype, the global
bias) are its, so every architecture checkpoints, trains, evaluates, exports and warm-starts
alike.

The two tables (``user_embedding``, ``item_embedding``) are every architecture's sparse rows:
what a step updates row by row, what the L2 penalty and a warm start match by raw id. Every other
variable is dense (``NCFModel.named_dense_variables``).

TensorFlow is imported inside the methods that build and compute, not here: the registry
(``training_core.training.architectures``) and ``presets.ARCHITECTURES`` import without it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    import tensorflow as tf


class ModelShape(Protocol):
    """What an architecture reads of a model's config (``presets.NeuMFConfig`` is one)."""

    architecture: str
    num_factors: int
    layers: tuple[int, ...]


def glorot(shape: tuple[int, int], seed: Any) -> tf.Tensor:
    """Glorot-uniform draws, stateless (the same seed gives the same weights anywhere)."""
    import tensorflow as tf

    limit = math.sqrt(6.0 / (shape[0] + shape[1]))
    return tf.random.stateless_uniform(shape, seed, -limit, limit)


class Candidates:
    """How each user meets its candidates: every item (a grid), or its own ``item_ids``.

    ``item_ids`` is ``[users, C]`` (each user's candidates, as the eval records hold them) or
    ``None`` (every item: C = num_items).
    """

    def __init__(self, item_ids: tf.Tensor | None):
        self.item_ids = item_ids

    def pick(self, side: tf.Tensor) -> tf.Tensor:
        """An item-side tensor's rows per user and candidate: ``[users or 1, C, width]``."""
        import tensorflow as tf

        return side[None] if self.item_ids is None else tf.gather(side, self.item_ids)

    def dot(self, user_part: tf.Tensor, side: tf.Tensor) -> tf.Tensor:
        """Each user's row dotted with each of its candidates' rows: ``[users, C]``."""
        import tensorflow as tf

        if self.item_ids is None:  # One matrix product over the whole grid.
            return tf.matmul(user_part, side, transpose_b=True)
        return tf.reduce_sum(user_part[:, None, :] * self.pick(side), axis=2)


class Architecture:
    """One scorer ``(user row, item row) -> logit``; subclasses say what is theirs.

    Stateless: one instance per architecture is registered, and every method takes the config
    or the ``NCFModel`` it works on.
    """

    name: ClassVar[str]  # What --model takes.
    description: ClassVar[str]  # One line for the CLI's help.
    # Whether config.layers shape the model (an MLP): a warm start compares them only then.
    uses_layers: ClassVar[bool] = False

    def embedding_dim(self, config: ModelShape) -> int:
        """Width of each embedding table."""
        raise NotImplementedError

    def check(self, config: ModelShape) -> None:
        """Refuses (``ValueError``) a config this architecture cannot build; none by default."""

    def table(self, config: ModelShape, rows: int, seed: Any) -> tf.Tensor:
        """An embedding table's initial values (reference: glorot_uniform)."""
        return glorot((rows, self.embedding_dim(config)), seed)

    def mlp_widths(self, config: ModelShape) -> tuple[int, ...]:
        """The MLP's widths, input first (its layers join consecutive widths); none by default."""
        return ()

    def logit_inputs(self, config: ModelShape) -> int | None:
        """Rows of the logit layer's kernel; ``None``: no logit layer (the global bias only)."""
        raise NotImplementedError

    def logits(self, model, u: tf.Tensor, v: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
        """Logits ``[n, 1]`` in ``dtype`` of ``n`` pairs' user and item rows, before the bias."""
        raise NotImplementedError

    def item_side(self, model, v: tf.Tensor, dtype: tf.DType) -> dict[str, tf.Tensor]:
        """What ``candidate_logits`` needs of every item (``v``: the item table), computed once."""
        raise NotImplementedError

    def candidate_logits(
        self,
        model,
        u: tf.Tensor,
        items: dict[str, tf.Tensor],
        candidates: Candidates,
        dtype: tf.DType,
    ) -> tf.Tensor:
        """Logits ``[users, C]`` in ``dtype`` of each user (rows ``u``) and its candidates.

        ``items`` is ``item_side``'s; the same values as ``logits`` up to float rounding.
        """
        raise NotImplementedError
