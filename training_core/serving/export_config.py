"""What an export is asked for: its one home, without TensorFlow.

The CLI reads it to build its options; ``training_core.serving.export`` does the export.
"""

from __future__ import annotations

import dataclasses

from training_core.data.ids import ID_INT64, ID_STRING
from training_core.training.model_dir import CHECKPOINT_SUBDIR

# Each signature of the export (training_core/serving/export.py); any can be serving_default.
SIGNATURES = ("score", "recommend", "recommend_unseen")

# The raw item id of an empty ``recommend`` slot, per id kind: a value no vocabulary holds
# (integer ids are >= 0; a string id is never empty).
EMPTY_SLOT = {ID_INT64: -1, ID_STRING: ""}


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """What to export and where.

    Attributes:
        model_dir: a training output folder (checkpoints and ``model_config.json``).
        data_dir: the prepared dataset the model was trained on (vocab files and each user's
            seen items, which ``recommend`` can exclude).
        export_dir: the SavedModel folder to create (must not exist or be empty, unless
            ``overwrite``).
        top_k: items ``recommend`` returns per user (capped at the number of items).
        default_signature: which signature ``serving_default`` is: ``score``, ``recommend`` or
            ``recommend_unseen`` (user ids only, what Vertex AI's predict can send).
        checkpoint: a checkpoint path prefix; ``None``: the latest in ``model_dir``.
        model_name: recorded in ``serving_metadata.json``.
        overwrite: replace an existing, non-empty ``export_dir``.

    The fields with help in their metadata are also options of ``ncf-pipelines export``
    (``pipelines/commands/config_options.py``).
    """

    model_dir: str
    data_dir: str
    export_dir: str
    top_k: int = dataclasses.field(
        default=10, metadata={"help": "items per recommendation (default {default})"}
    )
    default_signature: str = dataclasses.field(
        default="score",
        metadata={
            "choices": SIGNATURES,
            "help": "what serving_default (Vertex AI's predict) runs (default {default})",
        },
    )
    checkpoint: str | None = dataclasses.field(
        default=None,
        metadata={
            "help": f"a checkpoint path prefix (.../{CHECKPOINT_SUBDIR}/ckpt-100) or a folder of "
            "checkpoints (its latest); default: the latest in --model-dir"
        },
    )
    model_name: str = "ncf"
    overwrite: bool = dataclasses.field(
        default=False, metadata={"help": "replace a non-empty --output"}
    )

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.default_signature not in SIGNATURES:
            raise ValueError(f"default_signature must be one of {', '.join(SIGNATURES)}")
