"""Warm start: a new run's model begins from the champion's weights, its rows matched by raw id.

A weekly retraining (docs/weekly-runs.md) meets the users and items it already had and a few new
ones. ``train --warm-start-from PATH`` (the ``train_model`` component's ``warm_start_uri``) reads
the champion, an export (the SavedModel ``ncf-pipelines export`` writes, as the registry's
``champion_uri`` names it) or a training output folder, and before the first step:

- each user and item of the new data's vocabularies that the champion knows (the same raw id,
  compared with NumPy whatever the ids' kind) gets the champion's embedding row, exactly;
- each new one keeps the fresh row the run's seed gave it;
- every other weight (MLP, output layer, biases) is the champion's; the optimizer and the step
  start fresh.

The champion must be a model of the same shape: the same architecture and widths (every weight
but the two tables' row counts of the same shape) and the same kind of raw id (int64 or string)
for users and for items; else the run is refused, naming ``--warm-start-from`` and what differs.
``WarmStart.record`` is what ``model_config.json`` records: where the weights came from and how
many rows were carried over.

An export holds its vocabularies as assets (``training_core.serving.export``) and takes ids of
their kind in its ``score`` signature; a training output folder holds neither, so it is read
with the prepared data its ``model_config.json`` names (``data_dir``). The weights are read from
the export's variables or the folder's latest checkpoint, where the model is the object named
``model`` in both.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import numpy as np

from training_core.common import hints
from training_core.data.ids import ID_INT64, ID_STRING
from training_core.data.metadata import (
    ITEM_VOCAB,
    USER_VOCAB,
    DatasetMetadata,
    read_metadata,
    read_vocab,
)
from training_core.training import architectures
from training_core.training.model_dir import DATA_DIR, WARM_START
from training_core.training.presets import NeuMFConfig

OPTION = "--warm-start-from"
SOURCE_EXPORT = "export"
SOURCE_MODEL_DIR = "model folder"
# The model is the checkpoint's object named "model": Checkpoint(model=...) in a training
# folder, ServingModule.model in an export.
_MODEL_PREFIX = "model/"


def _refuse(path: str, why: str) -> ValueError:
    return ValueError(f"{hints.option(OPTION)} {path}: {why}")


@dataclasses.dataclass(frozen=True)
class Champion:
    """What a warm start reads of the champion: its raw ids, their kinds and its weights.

    ``weights`` holds the model's variables by checkpoint name (``model/...``), ``user_ids`` and
    ``item_ids`` the raw id of each table row.
    """

    path: str
    source: str  # SOURCE_EXPORT or SOURCE_MODEL_DIR.
    user_ids: np.ndarray
    item_ids: np.ndarray
    user_id_type: str
    item_id_type: str
    weights: dict[str, np.ndarray]
    config: NeuMFConfig | None = None  # A training folder's (an export records none).

    def table(self, name: str) -> np.ndarray:
        """The embedding table ``user_embedding`` or ``item_embedding``."""
        return self.weights[_key(name)]


def _key(name: str) -> str:
    return f"{_MODEL_PREFIX}{name}/.ATTRIBUTES/VARIABLE_VALUE"


def _model_weights(checkpoint: str) -> dict[str, np.ndarray]:
    """The model's variables in a checkpoint (a training folder's, or an export's variables)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(checkpoint)
    return {
        key: reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if key.startswith(_MODEL_PREFIX) and key.endswith("/.ATTRIBUTES/VARIABLE_VALUE")
    }


def _id_kind(dtype: Any) -> str:
    import tensorflow as tf

    return ID_STRING if tf.as_dtype(dtype) == tf.string else ID_INT64


def _read_export(path: str) -> Champion:
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    score = loaded.signatures.get("score")
    inputs = score.structured_input_signature[1] if score is not None else {}
    if not {"user_id", "item_id"} <= set(inputs):
        raise _refuse(path, "the export has no score signature taking user_id and item_id")
    user_kind = _id_kind(inputs["user_id"].dtype)
    item_kind = _id_kind(inputs["item_id"].dtype)
    assets = os.path.join(path, tf.saved_model.ASSETS_DIRECTORY)
    user_ids = read_vocab(os.path.join(assets, os.path.basename(USER_VOCAB)), user_kind)
    item_ids = read_vocab(os.path.join(assets, os.path.basename(ITEM_VOCAB)), item_kind)
    variables = os.path.join(
        path, tf.saved_model.VARIABLES_DIRECTORY, tf.saved_model.VARIABLES_FILENAME
    )
    weights = _model_weights(variables)
    return Champion(path, SOURCE_EXPORT, user_ids, item_ids, user_kind, item_kind, weights)


def _read_model_dir(path: str) -> Champion:
    from training_core.training.model_dir import config_path, latest_checkpoint, read_model_config

    config, num_users, num_items = read_model_config(path)
    with open(config_path(path)) as f:
        data_dir = json.load(f).get(DATA_DIR)
    if not data_dir:
        raise _refuse(
            path,
            "its model_config.json does not name the prepared data it was trained on, so its "
            "rows cannot be matched to raw ids; pass its export instead (ncf-pipelines export "
            "writes one; the registry's champion_uri is one)",
        )
    meta = read_metadata(data_dir)
    user_ids = read_vocab(os.path.join(data_dir, meta.user_vocab), meta.user_id_type)
    item_ids = read_vocab(os.path.join(data_dir, meta.item_vocab), meta.item_id_type)
    if (len(user_ids), len(item_ids)) != (num_users, num_items):
        raise _refuse(
            path,
            f"it was trained on {num_users} users and {num_items} items, but the data it names "
            f"({data_dir}) holds {len(user_ids)} and {len(item_ids)}",
        )
    weights = _model_weights(latest_checkpoint(path))
    return Champion(
        path,
        SOURCE_MODEL_DIR,
        user_ids,
        item_ids,
        meta.user_id_type,
        meta.item_id_type,
        weights,
        config,
    )


def read_champion(path: str) -> Champion:
    """The champion at ``path``: an export (a SavedModel folder) or a training output folder.

    Raises:
        ValueError: ``path`` is neither, or cannot be matched by raw id (naming the option).
    """
    import tensorflow as tf

    from training_core.training.model_dir import config_path

    if tf.io.gfile.isdir(path) and tf.saved_model.contains_saved_model(path):
        return _read_export(path)
    if tf.io.gfile.exists(config_path(path)):
        return _read_model_dir(path)
    raise _refuse(
        path,
        "not an export (no SavedModel) nor a training output folder (no model_config.json); "
        "give the champion's export, e.g. the registry's champion_uri",
    )


@dataclasses.dataclass(frozen=True)
class Rows:
    """How one table's rows were filled: ``carried`` from the champion, ``new`` fresh."""

    carried: int
    new: int
    champion: int  # Rows of the champion's table (some may be gone from the new data).


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """What a warm start did; ``record()`` is what ``model_config.json`` keeps of it."""

    source: str  # The path given.
    kind: str  # SOURCE_EXPORT or SOURCE_MODEL_DIR.
    users: Rows
    items: Rows
    dense_copied: int  # Weights other than the tables, all of them copied.

    def record(self) -> dict[str, Any]:
        """JSON-ready."""
        return dataclasses.asdict(self)


def _matched_rows(new_ids: np.ndarray, old_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows of ``new_ids``, rows of ``old_ids``) holding the same raw id."""
    _, new_rows, old_rows = np.intersect1d(
        new_ids, old_ids, assume_unique=True, return_indices=True
    )
    return new_rows, old_rows


def _shape_problems(champion: Champion, model) -> list[str]:
    """What keeps the champion's weights out of ``model``: widths, architecture, layers."""
    problems = []
    c = champion.config
    if c is not None:  # A training folder says its shape; an export, only its weights.
        want = model.config
        for field in ("architecture", "num_factors"):
            if getattr(c, field) != getattr(want, field):
                problems.append(f"{field} {getattr(c, field)} there, {getattr(want, field)} here")
        layered = architectures.get(c.architecture).uses_layers or model.architecture.uses_layers
        if layered and tuple(c.layers) != tuple(want.layers):
            problems.append(f"mlp_layers {list(c.layers)} there, {list(want.layers)} here")
    width = champion.table("user_embedding").shape[1]
    if width != model.config.embedding_dim:
        problems.append(
            f"its embedding tables have {width} columns, this run's {model.config.embedding_dim}"
        )
    theirs = sorted(
        tuple(v.shape)
        for k, v in champion.weights.items()
        if k not in (_key("user_embedding"), _key("item_embedding"))
    )
    ours = sorted(tuple(v.shape.as_list()) for v in model.dense_variables())
    if theirs != ours and not problems:
        problems.append(
            f"its other weights have the shapes {theirs}, this run's {ours} (another "
            "architecture or other MLP layers)"
        )
    return problems


def check(champion: Champion, model, meta: DatasetMetadata) -> None:
    """Refuses a champion whose weights or ids do not fit ``model`` on ``meta``'s data.

    Raises:
        ValueError: naming ``--warm-start-from``, the champion, and each difference.
    """
    problems = []
    for side, theirs, ours in (
        ("user", champion.user_id_type, meta.user_id_type),
        ("item", champion.item_id_type, meta.item_id_type),
    ):
        if theirs != ours:
            problems.append(f"its {side} ids are {theirs}, this data's {ours}")
    problems += _shape_problems(champion, model)
    if problems:
        raise _refuse(
            champion.path,
            "the champion cannot start this run ("
            + "; ".join(problems)
            + "): warm-start only from a model of the same architecture, sizes and id kinds "
            "(train this one cold, leaving out the option, or give it the same --model, "
            "--num-factors and --mlp-layers as the champion)",
        )


def apply(champion: Champion, model, meta: DatasetMetadata, data_dir: str) -> WarmStart:
    """Puts the champion's weights into the freshly built ``model`` (rows by raw id).

    ``model`` is the run's ``NCFModel`` for ``meta``'s data (``trainer.build_model``), before its
    first step. Known rows are copied exactly; new rows keep their fresh values.

    Raises:
        ValueError: the champion does not fit (``check``).
    """
    check(champion, model, meta)
    counts = {}
    for side, vocab, kind in (
        ("user", meta.user_vocab, meta.user_id_type),
        ("item", meta.item_vocab, meta.item_id_type),
    ):
        ids = read_vocab(os.path.join(data_dir, vocab), kind)
        old_ids = champion.user_ids if side == "user" else champion.item_ids
        new_rows, old_rows = _matched_rows(ids, old_ids)
        variable = getattr(model, f"{side}_embedding")
        table = variable.numpy()
        table[new_rows] = champion.table(f"{side}_embedding")[old_rows]
        variable.assign(table)
        counts[side] = Rows(len(new_rows), len(ids) - len(new_rows), len(old_ids))
    dense = [
        (k, v)
        for k, v in sorted(champion.weights.items())
        if k not in (_key("user_embedding"), _key("item_embedding"))
    ]
    # Same shapes (checked): matched by name, each our variable's own checkpoint name.
    by_name = dict(dense)
    for path, variable in model.named_dense_variables().items():
        variable.assign(by_name[_key(path)])
    return WarmStart(champion.path, champion.source, counts["user"], counts["item"], len(dense))


def recorded(model_dir: str) -> dict[str, Any] | None:
    """The warm start ``model_dir``'s ``model_config.json`` records (None: trained cold)."""
    from training_core.training.model_dir import config_path

    with open(config_path(model_dir)) as f:
        return json.load(f).get(WARM_START)
