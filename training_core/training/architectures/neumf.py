"""NeuMF (He et al. 2017): the GMF and MLP towers joined in one logit; what the reference trains.

Each table holds ``num_factors`` GMF columns, then ``layers[0] // 2`` MLP columns.
"""

from __future__ import annotations

from training_core.training.architectures.base import ModelShape
from training_core.training.architectures.towers import Towers


class NeuMF(Towers):
    """Both towers: each table's GMF columns first, then its MLP columns."""

    name = "neumf"
    description = "NeuMF: GMF and MLP towers joined in one logit"
    uses_layers = True

    def gmf_columns(self, config: ModelShape) -> int:
        """The first ``num_factors`` columns."""
        return config.num_factors

    def mlp_columns(self, config: ModelShape) -> int:
        """The next ``layers[0] // 2`` columns (half the MLP's input)."""
        return config.layers[0] // 2
