"""Top-k recommendations for every user, in bulk: Beam RunInference over the exported SavedModel.

One Beam pipeline, the same code here (Beam's in-process runner) and on Dataflow
(``--runner=DataflowRunner`` in ``pipeline_args``):

    users (the prepared data's user vocabulary) -> RunInference(the export's ``recommend``
    signature, batches of ``batch_size`` users) -> one row per user -> Parquet or JSON Lines

A row is ``{"user_id": raw id, "item_ids": [k raw ids, best first], "scores": [k floats]}``,
the ids of the export's kinds (``serving_metadata.json``'s ``user_id_type``/``item_id_type``):
int64 columns (JSON numbers) for integer ids, string columns (JSON strings) for string ids;
the items the user has interacted with are left out (``exclude_seen``, the default), and a user with
fewer than ``k`` candidates left gets fewer items (the export's empty ``-1`` slots are dropped).
The export decides what "seen" is and ranks the items (training_core/serving/export.py): the bulk
answer is the online answer.

Nothing half-written looks complete: ``manifest.json`` (:data:`MANIFEST_FILE`, written last)
says the output is complete, and :func:`read` reads only what it lists. Locally the files are
written into a private folder and published with ``atomic_writes.replace_folder``: in one step on a
local disk; on the Cloud Storage FUSE mount (``/gcs/``, which renames no folders) file by file,
with the manifest last. On ``gs://`` the shards go to the folder itself, its old manifest
removed first.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from training_core.common import atomic_writes, output_folders, process_lifetime

log = logging.getLogger(__name__)

FORMATS = ("parquet", "jsonl")
DEFAULT_FORMAT = "parquet"
DEFAULT_BATCH_SIZE = 1024  # Users per call of the recommend signature.
FILE_PREFIX = "recommendations"  # Shards: recommendations-00000-of-00002.parquet
MANIFEST_FILE = "manifest.json"  # Written last: the output is complete.


@dataclasses.dataclass(frozen=True)
class RecommendConfig:
    """What ``recommend`` writes, and from what.

    Attributes:
        export_dir: the exported SavedModel (training_core/serving/export.py).
        data_dir: the prepared data the model was trained on (its user vocabulary lists the
            users).
        output_dir: the folder to write.
        output_format: ``parquet`` or ``jsonl``.
        top_k: items per user; 0 = the export's ``top_k`` (it cannot be more).
        exclude_seen: leave out the items each user has interacted with (the export's seen
            items: training positives and the held-out latest one).
        batch_size: users per inference call.
        num_shards: output files; 0 = one per 100,000 users (at least 1).
        users: only these users (raw ids as text, e.g. from the command line: read as the
            export's user id kind, ``parse_users``); none: every user of ``data_dir``. A user
            the model does not know gets a row without items (the export's unknown-user answer).
        pipeline_args: Beam pipeline options (``--runner=DataflowRunner --project=...``); none:
            Beam's in-process runner.

    The fields with help in their metadata are also options of ``ncf-pipelines recommend``
    (``pipelines/commands/config_options.py``).
    """

    export_dir: str
    data_dir: str
    output_dir: str
    output_format: str = dataclasses.field(
        default=DEFAULT_FORMAT,
        metadata={
            "flag": "--format",
            "choices": FORMATS,
            "help": "file format (default {default})",
        },
    )
    top_k: int = dataclasses.field(
        default=0,
        metadata={"help": "items per user, at most the export's --top-k (default 0: the export's)"},
    )
    exclude_seen: bool = dataclasses.field(
        default=True,
        metadata={
            "flag": "--include-seen",
            "action": "store_false",
            "help": "keep the items each user has interacted with (default: left out)",
        },
    )
    batch_size: int = dataclasses.field(
        default=DEFAULT_BATCH_SIZE,
        metadata={"help": "users per inference call (default {default})"},
    )
    num_shards: int = 0
    pipeline_args: tuple[str, ...] = ()
    users: tuple[str, ...] = dataclasses.field(
        default=(),
        metadata={
            "help": "only these users' rows (raw user ids: integers, or strings for an export of "
            "string ids, as written in the data); default: every user of --data"
        },
    )

    def check(self) -> None:
        """Raises ``ValueError`` naming the option and what to do."""
        if self.output_format not in FORMATS:
            raise ValueError(
                f"output_format {self.output_format!r} is not one of {', '.join(FORMATS)}"
            )
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: the export's), got {self.top_k}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.num_shards < 0:
            raise ValueError(f"num_shards must be >= 0 (0: automatic), got {self.num_shards}")


@dataclasses.dataclass(frozen=True)
class RecommendResult:
    """What was written."""

    output_dir: str
    files: tuple[str, ...]
    num_users: int
    top_k: int
    seconds: float

    @property
    def users_per_second(self) -> float:
        """Users recommended per second, end to end (model load included)."""
        return self.num_users / self.seconds if self.seconds else 0.0


def _export_facts(export_dir: str) -> dict[str, Any]:
    from training_core.serving.vertex_registry import SERVING_METADATA_FILE

    path = os.path.join(export_dir, SERVING_METADATA_FILE)
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(
            f"{export_dir} is not an export of this project (no {SERVING_METADATA_FILE}); "
            "pass the folder `ncf-pipelines export` wrote"
        ) from None


def id_types(facts: dict[str, Any]) -> tuple[str, str]:
    """The export's user and item id kinds (int64 for an export made before string ids)."""
    from training_core.data.ids import ID_INT64

    return facts.get("user_id_type", ID_INT64), facts.get("item_id_type", ID_INT64)


def parse_users(given: Sequence[str | int], user_id_type: str) -> list[int] | list[str]:
    """``given`` user ids (text) as the export takes them, each once, in order.

    Raises:
        ValueError: an integer export given an id that is not an integer (naming it).
    """
    from training_core.data.ids import ID_STRING

    out: dict[Any, None] = {}
    for text in given:
        if user_id_type == ID_STRING:
            out[str(text)] = None
            continue
        try:
            out[int(text)] = None
        except ValueError:
            raise ValueError(
                f"user id {text!r} is not an integer, and the export takes integer user ids; "
                "give its users' ids as written in the data it was trained on"
            ) from None
    return list(out)


def _users(data_dir: str, facts: dict[str, Any]) -> list[int] | list[str]:
    from training_core.data.metadata import read_metadata, read_vocab

    meta = read_metadata(data_dir)
    kinds = (meta.user_id_type, meta.item_id_type)
    if kinds != id_types(facts):
        raise ValueError(
            f"{data_dir} holds {kinds[0]} user ids and {kinds[1]} item ids but the export takes "
            f"{' and '.join(id_types(facts))}; pass the prepared data the model was trained on"
        )
    users = read_vocab(os.path.join(data_dir, meta.user_vocab), meta.user_id_type)
    if len(users) != facts["num_users"]:
        raise ValueError(
            f"{data_dir} has {len(users)} users but the export was made for "
            f"{facts['num_users']}; pass the prepared data the model was trained on"
        )
    return users.tolist()  # Python ints or strs.


class _Loaded:
    """The loaded SavedModel, in a holder that can be emptied.

    Beam keeps the last shared model alive until the interpreter exits, where TensorFlow's
    finalizers print errors.
    """

    def __init__(self, model):
        self.model = model


_LOADED: list[_Loaded] = []  # Models this process loaded, emptied when a job ends.


def _release_models() -> None:
    import gc

    for holder in _LOADED:
        holder.model = None
    _LOADED.clear()
    gc.collect()


def _handler(export_dir: str, exclude_seen: bool, top_k: int, batch_size: int):
    """A RunInference model handler for the export's ``recommend`` signature."""
    from apache_beam.ml.inference.base import ModelHandler, PredictionResult

    class RecommendHandler(ModelHandler):
        def load_model(self):
            import tensorflow as tf

            holder = _Loaded(tf.saved_model.load(export_dir))
            _LOADED.append(holder)
            return holder

        def run_inference(self, batch: Sequence[int | str], model, inference_args=None):
            import tensorflow as tf

            fn = model.model.signatures["recommend"]
            dtype = fn.structured_input_signature[1]["user_id"].dtype  # int64 or string.
            out = fn(
                user_id=tf.constant(list(batch), dtype),
                exclude_seen=tf.fill([len(batch)], exclude_seen),
            )
            ids = out["item_ids"].numpy()[:, :top_k]
            scores = out["scores"].numpy()[:, :top_k]
            return [PredictionResult(u, (ids[i], scores[i])) for i, u in enumerate(batch)]

        def batch_elements_kwargs(self):
            # Full batches from the start (Beam's default grows them from 1, for models whose
            # cost per element is unknown; this one is fixed).
            return {"min_batch_size": batch_size, "max_batch_size": batch_size}

        def get_num_bytes(self, batch: Sequence[int]) -> int:
            return 8 * len(batch)

    return RecommendHandler()


def to_row(result) -> dict[str, Any]:
    """One output row from a RunInference result; the export's empty slots dropped.

    Integer item ids come as an int64 array (empty slot -1), string ids as ``bytes`` (empty slot
    ``b""``, decoded to ``str`` here); the user id is as given (``int`` or ``str``).
    """
    from training_core.data.ids import ID_INT64, ID_STRING
    from training_core.serving.export_config import EMPTY_SLOT

    ids, scores = result.inference
    if ids.dtype.kind in "iu":
        keep = ids != EMPTY_SLOT[ID_INT64]
        item_ids: list[Any] = [int(i) for i in ids[keep]]
    else:
        keep = ids != EMPTY_SLOT[ID_STRING].encode()
        item_ids = [i.decode("utf-8") for i in ids[keep]]
    return {
        "user_id": result.example,
        "item_ids": item_ids,
        "scores": [float(s) for s in scores[keep]],
    }


def _parquet_schema(user_id_type: str, item_id_type: str):
    import pyarrow as pa

    from training_core.data.ids import ID_STRING

    def arrow(kind: str):
        return pa.string() if kind == ID_STRING else pa.int64()

    return pa.schema(
        [
            ("user_id", arrow(user_id_type)),
            ("item_ids", pa.list_(arrow(item_id_type))),
            ("scores", pa.list_(pa.float32())),
        ]
    )


def build(
    p,
    users: Iterable[int] | Iterable[str],
    config: RecommendConfig,
    top_k: int,
    prefix: str,
    shards: int,
    kinds: tuple[str, str] | None = None,
):
    """The Beam pipeline: users -> RunInference -> rows -> files under ``prefix``.

    ``kinds``: the export's user and item id kinds (``id_types``), the Parquet columns' types;
    ``None``: integer ids.
    """
    import apache_beam as beam
    from apache_beam.ml.inference.base import RunInference

    handler = _handler(config.export_dir, config.exclude_seen, top_k, config.batch_size)
    rows = (
        p
        | "Users" >> beam.Create(list(users), reshuffle=False)
        | "Recommend" >> RunInference(handler)
        | "Rows" >> beam.Map(to_row)
    )
    if config.output_format == "parquet":
        rows | "Parquet" >> beam.io.WriteToParquet(
            prefix,
            _parquet_schema(*(kinds or id_types({}))),
            file_name_suffix=".parquet",
            num_shards=shards,
        )
    else:
        (
            rows
            | "Json" >> beam.Map(json.dumps)
            | "JsonLines"
            >> beam.io.WriteToText(prefix, file_name_suffix=".jsonl", num_shards=shards)
        )


def recommend(config: RecommendConfig) -> RecommendResult:
    """Writes every user's top-k items (module doc); returns what it wrote.

    Raises:
        ValueError: a bad option, or (``output_folders.UnsafeOutputError``) an output folder another
            local user could plant links in (``output_folders.check_output_folder``).
    """
    import apache_beam as beam
    import tensorflow as tf

    from training_core.data import beam_source
    from training_core.data.ids import ID_INT64

    config.check()
    if "://" not in config.output_dir:  # Before the work: whose folder it is.
        output_folders.check_output_folder(config.output_dir.rstrip("/"), "recommend")
    t0 = time.perf_counter()
    facts = _export_facts(config.export_dir)
    top_k = config.top_k or int(facts["top_k"])
    if top_k > int(facts["top_k"]):
        raise ValueError(
            f"top_k {top_k} is more than the export's {facts['top_k']} items per user; export "
            f"again with --top-k {top_k} (or ask for at most {facts['top_k']})"
        )
    users = _users(config.data_dir, facts)
    if config.users:
        known = set(users)
        users = parse_users(config.users, id_types(facts)[0])
        unknown = [u for u in users if u not in known]
        if unknown:
            log.warning(
                "%d of the %d users given are not in %s's vocabulary (%s): their rows have no "
                "items",
                len(unknown),
                len(users),
                config.data_dir,
                ", ".join(map(repr, unknown[:5])),
            )
    shards = config.num_shards or max(1, -(-len(users) // 100_000))
    options, runner_name, remote = beam_source.pipeline_options(config.pipeline_args)
    out = config.output_dir.rstrip("/")
    local = "://" not in out
    if local:
        for path in atomic_writes.remove_stale_partials(out):
            log.warning("removed %s, left by a run that was killed", path)
        target = atomic_writes.partial_name(out)
        os.makedirs(target)
    else:
        target = out
        if tf.io.gfile.exists(os.path.join(out, MANIFEST_FILE)):
            tf.io.gfile.remove(os.path.join(out, MANIFEST_FILE))  # Incomplete until rewritten.
    log.info(
        "recommending top %d items for %d users with %s (runner %s)",
        top_k,
        len(users),
        config.export_dir,
        runner_name or "in-process",
    )
    try:
        with process_lifetime.terminate_as_exit():
            runner = None if runner_name else beam_source.in_process_runner(options)
            with beam.Pipeline(runner=runner, options=options) as p:
                # Remote workers read and write gs:// where this launcher sees /gcs/.
                on_workers = dataclasses.replace(
                    config, export_dir=beam_source.beam_path(config.export_dir, remote)
                )
                prefix = f"{beam_source.beam_path(target, remote)}/{FILE_PREFIX}"
                build(p, users, on_workers, top_k, prefix, shards, id_types(facts))
            files = sorted(
                os.path.basename(f) for f in tf.io.gfile.glob(f"{target}/{FILE_PREFIX}-*")
            )
            manifest = {
                "model": facts.get("model_name", ""),
                "export_dir": config.export_dir,
                "format": config.output_format,
                "files": files,
                "num_users": len(users),
                "top_k": top_k,
                "exclude_seen": config.exclude_seen,
                "columns": {
                    "user_id": "raw user id",
                    "item_ids": f"up to {top_k} raw item ids, best first",
                    "scores": "the model's probability for each item",
                },
            }
            if set(id_types(facts)) != {ID_INT64}:  # Integer ids: the manifest as before.
                manifest["id_types"] = dict(
                    zip(("user_id", "item_ids"), id_types(facts), strict=True)
                )
            with tf.io.gfile.GFile(os.path.join(target, MANIFEST_FILE), "w") as f:
                f.write(json.dumps(manifest, indent=2) + "\n")
            if local:
                atomic_writes.replace_folder(target, out, marker=MANIFEST_FILE)
    finally:
        _release_models()
        if local and os.path.exists(target):
            import shutil

            shutil.rmtree(target, ignore_errors=True)
    seconds = time.perf_counter() - t0
    log.info("wrote %d users' recommendations to %s in %.1fs", len(users), out, seconds)
    return RecommendResult(out, tuple(files), len(users), top_k, seconds)


def read(output_dir: str) -> list[dict[str, Any]]:
    """The rows of a complete output folder (for tests and small outputs)."""
    import pyarrow.parquet as pq

    import training_core.data  # noqa: F401 (pyarrow_hotfix first: CVE-2023-47248)

    with open(os.path.join(output_dir, MANIFEST_FILE)) as f:
        manifest = json.load(f)
    rows: list[dict[str, Any]] = []
    for name in manifest["files"]:
        path = os.path.join(output_dir, name)
        if manifest["format"] == "parquet":
            rows += pq.read_table(path).to_pylist()
        else:
            with open(path) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return rows
