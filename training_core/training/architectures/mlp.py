"""MLP: NeuMF's MLP tower alone, ReLU layers over the concatenated ``layers[0] // 2`` columns."""

from __future__ import annotations

from training_core.training.architectures.base import ModelShape
from training_core.training.architectures.towers import Towers


class MLP(Towers):
    """The MLP tower alone: its columns are the whole table."""

    name = "mlp"
    description = "the MLP tower alone: ReLU layers over the concatenated embeddings"
    uses_layers = True

    def mlp_columns(self, config: ModelShape) -> int:
        """Half the MLP's input: every column."""
        return config.layers[0] // 2
