"""Exports a trained model folder as a SavedModel that serves with TensorFlow alone.

The SavedModel holds everything a request needs, so neither this package nor the prepared data is
needed to serve it:

- the NeuMF weights (float32, restored from the latest checkpoint on the CPU);
- raw id -> index lookup tables, initialized from the data prep vocab files, which the SavedModel
  carries as assets (``assets/users.txt``, ``assets/items.txt``);
- each item's raw id (index -> raw id) and every user's seen items (every item the data holds for
  the user, the held-out latest one included) in CSR form (row splits + item indices), as
  non-trainable variables.

Signatures (see docs/serving.md):

- ``score(user_id int64 [N], item_id int64 [N]) -> {score float32 [N], known bool [N]}``:
  the predicted probability of each raw (user, item) pair; a pair with an id unseen in training
  gets ``score = 0.0`` and ``known = False``.
- ``recommend_unseen(user_id int64 [N]) -> {item_ids int64 [N, k], scores float32 [N, k]}``:
  the top ``k`` raw item ids per user, best first, without the user's seen items (what batch
  recommendations serve). The common request: the ids alone, since TF Serving refuses an
  instance that lacks an input of its signature.
- ``recommend(user_id int64 [N], exclude_seen bool [N]) -> {item_ids int64 [N, k],
  scores float32 [N, k]}``: the same, with the seen items left out or not per instance. A slot
  with nothing to recommend (unknown user, or every item excluded) holds ``item_id = -1`` and
  ``score = 0.0``, in both.
- The ids are of the data's kind (``DatasetMetadata.user_id_type`` / ``item_id_type``, each its
  own): ``int64`` as above, or ``tf.string`` for string ids (UTF-8, as written in the data), where
  ``user_id``, ``item_id`` and ``item_ids`` are ``string`` and an empty ``recommend`` slot holds
  the empty string (no string id is empty). ``serving_metadata.json`` records both kinds
  (``user_id_type``, ``item_id_type``), so batch recommend and online requests know them without
  the dataset; over REST a string id is a JSON string.
- ``serving_default``: one of the three (``score`` unless the config says otherwise), which is
  what Vertex AI's prebuilt TensorFlow container calls for ``{"instances": [...]}`` requests.

Every signature checks its inputs in the graph before any work: each must be 1-D (one value per
instance) and all must have the same length, else the call fails with ``InvalidArgumentError``
naming the inputs, e.g. ``score: user_id has 1 values but item_id has 3; pass one user_id per
item_id``. A call through ``signatures[...]`` does not enforce the ``(None,)`` input shapes
itself, so without the checks a scalar, a 2-D batch or one user next to several items was
broadcast into a wrong answer, and other mismatches failed deep in the graph.

Why assets for the vocabularies and variables for the rest: the vocab files are the id mapping data
prep wrote, so carrying them unchanged keeps one source for that fact; and variables go to the
``variables/`` shards, not into ``saved_model.pb``, which as one protobuf cannot pass 2 GB (the
seen-items lists of ml-20m alone are ~20M ids). Baking them as graph constants would not scale.

Over 500 lines, for one reason: the serving module's signatures and the tables and variables
they read are one contract (what a request may send and gets back, docs/serving.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any

import numpy as np
import tensorflow as tf

from training_core.common import atomic_writes, output_folders, process_lifetime
from training_core.data.ids import ID_INT64, ID_STRING
from training_core.data.metadata import read_metadata, read_vocab
from training_core.data.positives import seen_items  # What "seen" means for recommend.
from training_core.evaluation.evaluate import load_model
from training_core.serving.export_config import EMPTY_SLOT, ExportConfig
from training_core.serving.vertex_registry import (
    SERVING_METADATA_FILE,  # Named TF-free: registering reads it.
)
from training_core.training.model import NeuMF
from training_core.training.model_dir import latest_checkpoint, read_model_config

log = logging.getLogger(__name__)

UNKNOWN_ITEM = EMPTY_SLOT[ID_INT64]  # Raw item id of an empty slot (integer item ids).
DTYPES = {ID_INT64: tf.int64, ID_STRING: tf.string}  # Each id kind's dtype in the signatures.


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """Where the SavedModel went and what it holds (also ``serving_metadata.json``)."""

    export_dir: str
    checkpoint: str
    step: int
    top_k: int
    num_users: int
    num_items: int
    num_seen_pairs: int
    tensorflow_version: str
    default_signature: str
    signatures: dict[str, dict[str, Any]]
    example_requests: dict[str, dict[str, Any]]
    # The kind of raw id (ids.ID_KINDS) the signatures take and return, so that serving
    # knows it without the dataset; an export without them (older) is int64.
    user_id_type: str = ID_INT64
    item_id_type: str = ID_INT64

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return dataclasses.asdict(self)


# ---------------------------------------------------------------------------------------------
# The serving module.
# ---------------------------------------------------------------------------------------------


def _vocab_table(path: str, id_type: str) -> tf.lookup.StaticHashTable:
    """Raw id -> index from a vocab file; string keys are whole lines, as written."""
    init = tf.lookup.TextFileInitializer(
        path,
        key_dtype=DTYPES[id_type],
        key_index=tf.lookup.TextFileIndex.WHOLE_LINE,
        value_dtype=tf.int64,
        value_index=tf.lookup.TextFileIndex.LINE_NUMBER,
    )
    return tf.lookup.StaticHashTable(init, default_value=-1)


def _runtime_rank(x: tf.Tensor) -> tf.Tensor:
    """``x``'s number of dimensions, counted when the graph runs.

    A signature input is traced as ``(None,)``, so ``tf.rank(x)`` (or ``tf.size(tf.shape(x))``)
    is folded to the constant 1, at trace time or by Grappler's constant folding, although a
    signature call feeds a tensor of whatever shape it is given. ``tf.where`` has a data-dependent
    output length, so nothing can fold this count.
    """
    return tf.shape(tf.where(tf.shape(x) >= 0), out_type=tf.int64)[0]


def _checked_inputs(
    signature: str, inputs: dict[str, tf.Tensor], hint: str = ""
) -> list[tf.Tensor]:
    """The ``inputs``, gated on checks that each is 1-D and that they all have one length.

    The checks run one after another, so the first failure is the one reported (a rank before a
    length), and before anything that uses the returned tensors. A failure is an
    ``InvalidArgumentError`` whose message names the signature, the inputs and their shapes or
    lengths (``hint`` ends a length message). Cheap: a few scalar ops per call.
    """

    def after(previous: tf.Operation, condition, template: str, values) -> tf.Operation:
        with tf.control_dependencies([previous]):
            message = tf.strings.format(template, values, summarize=-1)
            return tf.debugging.Assert(condition, [message])

    check = tf.no_op()
    for name, x in inputs.items():
        rank = _runtime_rank(x)
        template = f"{signature}: {name} must be 1-D, one value per instance; got rank {{}} "
        shape = tf.shape(x, tf.int64)
        check = after(check, tf.equal(rank, 1), template + "(shape {})", (rank, shape))
    (first, x0), *others = inputs.items()
    for name, x in others:
        with tf.control_dependencies([check]):  # Sizes only once the ranks are known good.
            n0, n = tf.size(x0, tf.int64), tf.size(x, tf.int64)
        template = f"{signature}: {first} has {{}} values but {name} has {{}}; {hint}"
        check = after(check, tf.equal(n0, n), template, (n0, n))
    with tf.control_dependencies([check]):
        return [tf.identity(x) for x in inputs.values()]


class ServingModule(tf.Module):
    """NeuMF behind raw-id lookups: ``score``, ``recommend``, ``recommend_unseen`` (tf.functions).

    Args:
        model: the restored NeuMF (float32 variables).
        user_vocab: path of the user vocab file (raw id per line, line number = index).
        item_vocab: path of the item vocab file.
        item_raw_ids: raw id of each item index (the item vocab, as an array).
        seen_row_splits: CSR row splits of each user's seen items (``seen_items``),
            ``[num_users + 1]``.
        seen_items: CSR values (item indices).
        top_k: items per ``recommend`` row.
        user_id_type: the kind of raw user id (ids.ID_KINDS): the signatures' ``user_id``
            is tf.int64 or tf.string.
        item_id_type: the kind of raw item id: ``item_id`` and ``item_ids`` likewise; an empty
            ``recommend`` slot holds ``EMPTY_SLOT[item_id_type]``.

    The signatures' input dtypes depend on the id kinds, so the functions are made per instance
    (an integer export's are exactly the former class-level ones).
    """

    def __init__(
        self,
        model: NeuMF,
        user_vocab: str,
        item_vocab: str,
        item_raw_ids: np.ndarray,
        seen_row_splits: np.ndarray,
        seen_items: np.ndarray,
        top_k: int,
        user_id_type: str = ID_INT64,
        item_id_type: str = ID_INT64,
    ):
        super().__init__(name="ncf_serving")
        self.model = model
        self.num_items = model.num_items
        self.top_k = min(top_k, model.num_items)
        self.item_dtype = DTYPES[item_id_type]
        self.empty_slot = EMPTY_SLOT[item_id_type]
        self.user_table = _vocab_table(user_vocab, user_id_type)
        self.item_table = _vocab_table(item_vocab, item_id_type)
        raw_ids = tf.constant(item_raw_ids.tolist(), self.item_dtype)  # Object arrays too.
        self.item_raw_ids = tf.Variable(raw_ids, trainable=False, name="item_raw_ids")
        self.seen_row_splits = tf.Variable(seen_row_splits, trainable=False, name="seen_row_splits")
        self.seen_items = tf.Variable(seen_items, trainable=False, name="seen_items")
        user = tf.TensorSpec([None], DTYPES[user_id_type], name="user_id")
        item = tf.TensorSpec([None], self.item_dtype, name="item_id")
        exclude = tf.TensorSpec([None], tf.bool, name="exclude_seen")
        # Plain graph code (no tensor-dependent Python control flow): AutoGraph's conversion of
        # the model's code took most of an export's time.
        self.score = tf.function(self._score, input_signature=[user, item], autograph=False)
        self.recommend = tf.function(
            self._recommend, input_signature=[user, exclude], autograph=False
        )
        self.recommend_unseen = tf.function(
            self._recommend_unseen, input_signature=[user], autograph=False
        )

    def _score(self, user_id: tf.Tensor, item_id: tf.Tensor) -> dict[str, tf.Tensor]:
        """Probability of each raw (user, item) pair; 0.0 and ``known`` False for unseen ids."""
        user_id, item_id = _checked_inputs(
            "score",
            {"user_id": user_id, "item_id": item_id},
            "pass one user_id per item_id",
        )
        users = self.user_table.lookup(user_id)
        items = self.item_table.lookup(item_id)
        known = (users >= 0) & (items >= 0)
        logits = self.model.score(tf.where(known, users, 0), tf.where(known, items, 0))
        return {"score": tf.where(known, tf.sigmoid(logits), 0.0), "known": known}

    def _recommend(self, user_id: tf.Tensor, exclude_seen: tf.Tensor) -> dict[str, tf.Tensor]:
        """``recommend``: seen items left out where ``exclude_seen`` says so."""
        user_id, exclude_seen = _checked_inputs(
            "recommend",
            {"user_id": user_id, "exclude_seen": exclude_seen},
            "pass one exclude_seen flag per user_id",
        )
        return self._top_k(user_id, exclude_seen)

    def _recommend_unseen(self, user_id: tf.Tensor) -> dict[str, tf.Tensor]:
        """``recommend_unseen``: ``recommend`` with ``exclude_seen`` true for every user."""
        (user_id,) = _checked_inputs("recommend_unseen", {"user_id": user_id})
        return self._top_k(user_id, tf.fill(tf.shape(user_id), True))

    def _top_k(self, user_id: tf.Tensor, exclude_seen: tf.Tensor) -> dict[str, tf.Tensor]:
        """Top-k raw item ids per raw user id, best first; the empty slot id/0.0 fill the rest."""
        k = self.top_k
        users = self.user_table.lookup(user_id)
        items = self.model.item_side()  # Every item's share of the score, once per call.
        neg_inf = tf.constant(-np.inf, tf.float32)

        def one_user(args):
            user, exclude = args
            known = user >= 0
            user = tf.maximum(user, 0)
            # One user at a time against every item: memory stays [num_items, width].
            logits = self.model.score_grid(user[None], items)[0]
            seen = self.seen_items[self.seen_row_splits[user] : self.seen_row_splits[user + 1]]
            masked = tf.where(exclude, neg_inf, tf.gather(logits, seen))
            logits = tf.tensor_scatter_nd_update(logits, seen[:, None], masked)
            top = tf.math.top_k(logits, k=k)
            valid = known & (top.values > neg_inf)
            empty = tf.constant(self.empty_slot, self.item_dtype)
            ids = tf.where(valid, tf.gather(self.item_raw_ids, top.indices), empty)
            return ids, tf.where(valid, tf.sigmoid(top.values), 0.0)

        ids, scores = tf.map_fn(
            one_user,
            (users, exclude_seen),
            fn_output_signature=(
                tf.TensorSpec([k], self.item_dtype),
                tf.TensorSpec([k], tf.float32),
            ),
        )
        return {"item_ids": ids, "scores": scores}


def _signature_info(fn) -> dict[str, Any]:
    """Inputs and outputs of a concrete function, for serving_metadata.json."""

    def describe(spec) -> dict[str, Any]:
        return {"dtype": spec.dtype.name, "shape": [d for d in spec.shape.as_list()]}

    specs = tf.nest.flatten(fn.structured_input_signature)
    return {
        "inputs": {spec.name: describe(spec) for spec in specs},
        "outputs": {name: describe(spec) for name, spec in sorted(fn.structured_outputs.items())},
    }


# ---------------------------------------------------------------------------------------------
# Export.
# ---------------------------------------------------------------------------------------------


def _check_target(export_dir: str, overwrite: bool) -> bool:
    """Whether ``export_dir`` exists; raises if the export may not replace it."""
    if not tf.io.gfile.exists(export_dir):
        return False
    if not tf.io.gfile.isdir(export_dir):
        raise FileExistsError(f"{export_dir} exists and is not a folder")
    if (
        tf.io.gfile.listdir(export_dir)
        and not overwrite
        and not atomic_writes.interrupted(export_dir)
    ):
        raise FileExistsError(
            f"{export_dir} is not empty; choose another folder or pass overwrite (--overwrite)"
        )
    return True


def _make_room(export_dir: str, overwrite: bool) -> None:
    """Clears the way for the final rename (an empty folder, as KFP may create, is fine)."""
    if _check_target(export_dir, overwrite):
        tf.io.gfile.rmtree(export_dir)
    elif parent := os.path.dirname(export_dir):
        tf.io.gfile.makedirs(parent)


def export(config: ExportConfig) -> ExportResult:
    """Restores the model on the CPU and writes the serving SavedModel to ``config.export_dir``.

    The SavedModel is written to a private sibling folder and published last, and
    ``serving_metadata.json`` (what registering and ``recommend`` read) says it is complete: on
    local disks an existing export is swapped for the new one in one step; on the Cloud Storage
    FUSE mount, which renames no folders, its files are moved in one by one with
    ``serving_metadata.json`` last (``atomic_writes.replace_folder``), and a folder an interrupted
    attempt left that way is published over, as a retry of the task needs. On ``gs://`` the
    folder is copied, then ``serving_metadata.json`` written. SIGTERM removes the private folder.

    Raises:
        FileNotFoundError: no checkpoint, model_config.json or prepared dataset.
        FileExistsError: ``export_dir`` is not empty and ``overwrite`` is off.
        ValueError: the model and the dataset do not match.
        output_folders.UnsafeOutputError: another local user could plant links in ``export_dir`` or
            its parent (``output_folders.check_output_folder``).
    """
    export_dir = config.export_dir.rstrip("/")
    if "://" not in export_dir:
        output_folders.check_output_folder(export_dir, "export")
    _check_target(export_dir, config.overwrite)  # Fail before the work, not after.
    meta = read_metadata(config.data_dir)
    _, num_users, num_items = read_model_config(config.model_dir)
    if (num_users, num_items) != (meta.num_users, meta.num_items):
        raise ValueError(
            f"the model has {num_users} users and {num_items} items but {config.data_dir} has "
            f"{meta.num_users} and {meta.num_items}; export with the data it was trained on"
        )
    user_vocab = os.path.join(config.data_dir, meta.user_vocab)
    item_vocab = os.path.join(config.data_dir, meta.item_vocab)
    item_raw_ids = read_vocab(item_vocab, meta.item_id_type)
    user_raw_ids = read_vocab(user_vocab, meta.user_id_type)
    num_vocab_users = len(user_raw_ids)
    if (num_vocab_users, len(item_raw_ids)) != (num_users, num_items):
        raise ValueError(
            f"{config.data_dir}'s vocab files hold {num_vocab_users} users and "
            f"{len(item_raw_ids)} items, metadata.json says {num_users} and {num_items}"
        )

    with tf.device("/CPU:0"):
        checkpoint = config.checkpoint or latest_checkpoint(config.model_dir)
        model, checkpoint, step = load_model(
            config.model_dir, tf.distribute.get_strategy(), checkpoint
        )
        for v in model.trainable_variables:
            if v.dtype != tf.float32:  # NeuMF keeps float32 weights under mixed precision.
                raise ValueError(f"{v.name} is {v.dtype.name}; export expects float32 weights")
        row_splits, seen = seen_items(meta, config.data_dir)
        module = ServingModule(
            model,
            user_vocab,
            item_vocab,
            item_raw_ids,
            row_splits,
            seen,
            config.top_k,
            meta.user_id_type,
            meta.item_id_type,
        )
        fns = {
            "score": module.score.get_concrete_function(),
            "recommend": module.recommend.get_concrete_function(),
            "recommend_unseen": module.recommend_unseen.get_concrete_function(),
        }
    signatures = {**fns, "serving_default": fns[config.default_signature]}

    result = ExportResult(
        export_dir=config.export_dir,
        checkpoint=checkpoint,
        step=step,
        top_k=module.top_k,
        num_users=num_users,
        num_items=num_items,
        num_seen_pairs=int(len(seen)),
        tensorflow_version=tf.__version__,
        default_signature=config.default_signature,
        signatures={name: _signature_info(fn) for name, fn in signatures.items()},
        example_requests=example_requests(
            user_raw_ids[:1].tolist()[0],  # Python int or str: a JSON number or string.
            item_raw_ids[:2].tolist(),
            absent_id(user_raw_ids, meta.user_id_type),
        ),
        user_id_type=meta.user_id_type,
        item_id_type=meta.item_id_type,
    )
    local = "://" not in export_dir
    if local:  # A killed export's private folders (their processes are gone).
        for path in atomic_writes.remove_stale_partials(export_dir):
            log.warning("removed %s, left by an export that was killed", path)
    tmp = atomic_writes.partial_name(export_dir)
    if local:  # Made here, never reused: a name that is already there fails.
        os.makedirs(os.path.dirname(os.path.abspath(tmp)), exist_ok=True)
        os.mkdir(tmp)
    with process_lifetime.terminate_as_exit():
        try:
            tf.saved_model.save(module, tmp, signatures=signatures)
            marker = json.dumps(serving_metadata(result, config), indent=2) + "\n"
            if local:
                with tf.io.gfile.GFile(os.path.join(tmp, SERVING_METADATA_FILE), "w") as f:
                    f.write(marker)
                _check_target(export_dir, config.overwrite)
                atomic_writes.replace_folder(tmp, export_dir, marker=SERVING_METADATA_FILE)
            else:  # An object store: the marker goes after the copy of every other object.
                _make_room(export_dir, config.overwrite)
                tf.io.gfile.rename(tmp, export_dir)
                with tf.io.gfile.GFile(os.path.join(export_dir, SERVING_METADATA_FILE), "w") as f:
                    f.write(marker)
        finally:
            if tf.io.gfile.exists(tmp):
                tf.io.gfile.rmtree(tmp)
    log.info(
        "exported %s (step %d) to %s: %d users, %d items, top %d",
        checkpoint,
        step,
        export_dir,
        num_users,
        num_items,
        module.top_k,
    )
    return result


def serving_metadata(result: ExportResult, config: ExportConfig) -> dict[str, Any]:
    """What ``serving_metadata.json`` records."""
    payload = result.to_dict()
    payload.pop("export_dir")
    empty = (
        f"item id {json.dumps(EMPTY_SLOT[result.item_id_type])} and score 0.0 in every slot for "
        "an unknown user, and in slots left empty after excluding seen items"
    )
    return {
        "model_name": config.model_name,
        **payload,
        "unknown_ids": {
            "score": "score 0.0 and known false when the user or the item id is unknown",
            "recommend": empty,
            "recommend_unseen": empty,
        },
        "seen_items": "every item the data holds for the user: the training positives and the "
        "held-out (latest) one",
    }


def absent_id(raw_ids: np.ndarray, id_type: str) -> int | str:
    """A raw id of kind ``id_type`` that ``raw_ids`` does not hold, to show the unknown-id answer.

    The largest integer id plus one; for strings "unknown-user", numbered until it is not a
    vocabulary's id.
    """
    if id_type == ID_INT64:
        return int(raw_ids.max()) + 1 if len(raw_ids) else 0
    taken = set(raw_ids.tolist())
    candidate, n = "unknown-user", 0
    while candidate in taken:
        n += 1
        candidate = f"unknown-user-{n}"
    return candidate


def example_requests(
    user_id: int | str, item_ids: list[int] | list[str], unknown_id: int | str
) -> dict[str, Any]:
    """Request bodies (TF Serving / Vertex AI row format) for each signature, with real ids.

    Ids are JSON numbers for integer ids and JSON strings for string ids (TF Serving's REST API
    reads a JSON string as a ``tf.string`` value). ``unknown_id`` shows the unknown-id answer;
    the ``signature_name`` field selects the signature where the server passes it on (TF
    Serving's REST API; Vertex AI's rawPredict).
    """
    return {
        "score": {
            "signature_name": "score",
            "instances": [{"user_id": user_id, "item_id": i} for i in item_ids]
            + [{"user_id": unknown_id, "item_id": item_ids[0]}],
        },
        "recommend_unseen": {
            "signature_name": "recommend_unseen",
            "instances": [{"user_id": user_id}],
        },
        "recommend": {
            "signature_name": "recommend",
            "instances": [
                {"user_id": user_id, "exclude_seen": True},
                {"user_id": user_id, "exclude_seen": False},
            ],
        },
    }
