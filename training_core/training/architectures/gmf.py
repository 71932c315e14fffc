"""GMF: NeuMF's GMF tower alone, a weighted element-wise product of ``num_factors`` columns."""

from __future__ import annotations

from training_core.training.architectures.base import ModelShape
from training_core.training.architectures.towers import Towers


class GMF(Towers):
    """The GMF tower alone: its columns are the whole table."""

    name = "gmf"
    description = "the GMF tower alone: a weighted element-wise product of the embeddings"

    def gmf_columns(self, config: ModelShape) -> int:
        """``num_factors``: every column."""
        return config.num_factors
