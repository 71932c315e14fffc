"""``metadata.json``: what a prepared dataset holds, written last and read first."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from typing import Any

import numpy as np

from training_core.data.ids import ID_INT64, ID_KINDS, ID_STRING

# 2: training negatives may be any item a user does not train on, held-out items included
# (docs/model-quality.md, "What training may know"); a version 1 dataset never drew them, so a
# model trained on it learned its held-out items from their absence: it is refused, to be prepared
# again.
FORMAT_VERSION = 2
METADATA_FILE = "metadata.json"
SUCCESS_FILE = "_SUCCESS"
# The folders of a dataset build, and the files whose place is fixed (metadata.json names every
# other file by its path under the build).
TRAIN_DIR = "train"  # train/epoch_NNN/<shard files>
EVAL_DIR = "eval"  # eval/<shard files>: the test split, each user's last interaction.
# validation/<shard files>: each user's second-to-last interaction (users with three or more).
VALIDATION_DIR = "validation"
VOCAB_DIR = "vocab"
USER_VOCAB = f"{VOCAB_DIR}/users.txt"
ITEM_VOCAB = f"{VOCAB_DIR}/items.txt"


# The held-out splits. Every choice (the best epoch, patience, tuning, presets, the gate) is made
# on ``validation`` when the dataset has one; ``test`` is scored once, for the reported number.
SPLIT_VALIDATION = "validation"
SPLIT_TEST = "test"
SPLITS = (SPLIT_VALIDATION, SPLIT_TEST)


@dataclasses.dataclass(frozen=True)
class ShardFile:
    """One TFRecord file of a prepared dataset."""

    path: str  # Relative to the dataset folder.
    batches: int  # Records (pre-batches) in the file.
    elements: int  # Real rows, padding excluded.
    bytes: int


@dataclasses.dataclass(frozen=True)
class DatasetMetadata:
    """Everything a reader needs to check and consume a prepared dataset.

    Eval layout: each user takes ``1 + eval_negatives`` consecutive rows, the negatives first
    and the held-out positive last. A row whose ``duplicate_mask`` is 1 never counts; a user whose
    positive row is masked is padding and is not evaluated. Ties count against the positive.

    ``eval_*`` are the test split (each user's last interaction). ``validation_*`` are the
    validation split, in the same layout (each user's second-to-last interaction, for users with
    at least three); empty in a dataset prepared without one (``--no-validation``, or before
    validation splits existed), where the test split is also the one choices are made on.
    ``split(name)`` gives a view whose ``eval_*`` fields are the named split's, so every reader
    of eval records reads either.

    ``refit``: every interaction is a training positive (``PrepareConfig.refit``), the held-out
    items too. The splits' records are written as without it, so every reader works, but they
    measure nothing (``held_out_unseen`` is False): no choice and no reported number comes from
    them. False in a dataset prepared before refits.
    """

    format_version: int
    num_users: int
    num_items: int
    train_prebatch_size: int
    eval_prebatch_size: int
    eval_users_per_batch: int
    num_epochs: int
    num_neg: int
    eval_negatives: int
    eval_sampling: str
    seed: int
    num_train_positives: int
    num_train_elements: int  # Real training rows per epoch (positives plus negatives).
    train_steps_per_epoch: int  # Training records per epoch over all shards.
    num_eval_users: int
    num_eval_elements: int  # Real eval rows, padding users excluded.
    eval_steps: int
    num_shards: int
    train_files: dict[str, list[ShardFile]]  # "epoch_000" -> files.
    eval_files: list[ShardFile]
    source: dict[str, Any]  # path, format, sha256, rows read, rows kept.
    options: dict[str, Any]  # The preparation options, for the fingerprint and for people.
    fingerprint: str  # Hash of source content and options: same value, same bytes.
    user_vocab: str = USER_VOCAB
    item_vocab: str = ITEM_VOCAB
    positive_position: str = "last"
    created_by: str = ""
    validation_files: list[ShardFile] = dataclasses.field(default_factory=list)
    num_validation_users: int = 0
    num_validation_elements: int = 0
    validation_steps: int = 0
    refit: bool = False
    # The kind of raw id each vocabulary holds (ID_KINDS); int64 in a dataset prepared before
    # string ids existed.
    user_id_type: str = ID_INT64
    item_id_type: str = ID_INT64
    # The seen-only (user, item) pairs (rows that are no positive: --min-rating,
    # --positive-events), one file per shard in the eval records' layout with
    # ``train_prebatch_size`` rows a record (``shards.write_seen_only_shard``); none in a dataset
    # without such rows, or prepared before they existed.
    seen_only_files: list[ShardFile] = dataclasses.field(default_factory=list)
    num_seen_only: int = 0

    def to_json(self) -> str:
        """Serializes to pretty JSON."""
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DatasetMetadata:
        """Builds from a parsed ``metadata.json``, checking the format version."""
        version = raw.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(
                f"metadata.json has format_version {version!r}; this ncf-pipelines reads "
                f"version {FORMAT_VERSION}. Prepare the data again with this version"
                + (
                    " (version 1 never drew a user's held-out items as training negatives, "
                    "which leaks them to the model: docs/model-quality.md)."
                    if version == 1
                    else "."
                )
            )
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in raw
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        if missing:
            raise ValueError(f"metadata.json lacks fields: {', '.join(missing)}")
        kwargs = {k: v for k, v in raw.items() if k in fields}
        kwargs["train_files"] = {
            epoch: [ShardFile(**f) for f in files] for epoch, files in raw["train_files"].items()
        }
        kwargs["eval_files"] = [ShardFile(**f) for f in raw["eval_files"]]
        kwargs["validation_files"] = [ShardFile(**f) for f in raw.get("validation_files", [])]
        kwargs["seen_only_files"] = [ShardFile(**f) for f in raw.get("seen_only_files", [])]
        return cls(**kwargs)

    @property
    def has_validation(self) -> bool:
        """Whether the dataset holds a validation split."""
        return bool(self.validation_files)

    @property
    def held_out_unseen(self) -> bool:
        """Whether the held-out splits' items were kept out of training, so scores on them measure.

        False for a refit (``refit``): its model trained on them, so a hit rate there is no
        estimate of anything; choose and report on the non-refit dataset of the same options.
        """
        return not self.refit

    @property
    def selection_split(self) -> str:
        """The split choices are made on: validation where there is one, else test."""
        return SPLIT_VALIDATION if self.has_validation else SPLIT_TEST

    def split(self, name: str) -> DatasetMetadata:
        """This metadata with ``eval_*`` set to split ``name``'s records (``test``: itself).

        Raises:
            ValueError: an unknown split, or ``validation`` of a dataset without one.
        """
        if name == SPLIT_TEST:
            return self
        if name != SPLIT_VALIDATION:
            raise ValueError(f"unknown split {name!r}; use one of {', '.join(SPLITS)}")
        if not self.has_validation:
            raise ValueError(
                "this dataset has no validation split (prepared with --no-validation, or by an "
                "older ncf-pipelines); prepare it again to make choices on a validation split"
            )
        return dataclasses.replace(
            self,
            eval_files=self.validation_files,
            num_eval_users=self.num_validation_users,
            num_eval_elements=self.num_validation_elements,
            eval_steps=self.validation_steps,
        )

    def train_file_paths(self, root: str, epoch: int) -> list[str]:
        """Absolute paths of one epoch's training files (epochs past the prepared ones wrap)."""
        key = epoch_dir(epoch % self.num_epochs)
        return [os.path.join(root, f.path) for f in self.train_files[key]]

    def eval_file_paths(self, root: str) -> list[str]:
        """Absolute paths of the eval files."""
        return [os.path.join(root, f.path) for f in self.eval_files]


def epoch_dir(epoch: int) -> str:
    """Folder name of one epoch's training files."""
    return f"epoch_{epoch:03d}"


def train_file(epoch: int, name: str) -> str:
    """Where a training shard file of an epoch goes, relative to the build."""
    return os.path.join(TRAIN_DIR, epoch_dir(epoch), name)


def eval_file(name: str) -> str:
    """Where an eval (test) shard file goes, relative to the build."""
    return os.path.join(EVAL_DIR, name)


def validation_file(name: str) -> str:
    """Where a validation shard file goes, relative to the build."""
    return os.path.join(VALIDATION_DIR, name)


def build_folders(num_epochs: int, validation: bool = True) -> list[str]:
    """Every folder a build of ``num_epochs`` epochs has, relative to the build."""
    epochs = [os.path.join(TRAIN_DIR, epoch_dir(e)) for e in range(num_epochs)]
    return [*epochs, EVAL_DIR, *([VALIDATION_DIR] if validation else []), VOCAB_DIR]


def _not_prepared(root: str) -> str:
    """Why ``root`` is not a prepared dataset, and the command that makes one from what is there."""
    from training_core.data import formats, read_errors  # Only on this path: they import pyarrow.

    try:
        raw, _ = formats.resolve_input(root)  # Raw ratings, as prepare-data would read them?
    except (read_errors.DataError, OSError):
        return (
            f"{root} holds no complete prepared dataset ({METADATA_FILE} and {SUCCESS_FILE} are "
            "written last; a run that was interrupted leaves neither). Run "
            "`ncf-pipelines prepare-data` into this folder first."
        )
    what = "is a raw ratings file" if raw == [root] else f"holds raw ratings ({raw[0]})"
    return (
        f"{root} {what}, not a prepared dataset. Prepare "
        f"them first: `ncf-pipelines prepare-data --input {shlex.quote(root)} --output DATA_DIR`, "
        "then pass DATA_DIR where you passed this path."
    )


def read_metadata(root: str | os.PathLike) -> DatasetMetadata:
    """Reads and checks ``metadata.json`` of a complete prepared dataset.

    Raises:
        FileNotFoundError: the folder holds no complete dataset (no success marker).
        ValueError: the metadata is of another format version or malformed.
    """
    root = os.fspath(root)
    meta_path = os.path.join(root, METADATA_FILE)
    if not os.path.exists(os.path.join(root, SUCCESS_FILE)) or not os.path.exists(meta_path):
        raise FileNotFoundError(_not_prepared(root))
    with open(meta_path) as f:
        try:
            raw = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{meta_path}: not valid JSON ({e})") from e
    return DatasetMetadata.from_dict(raw)


def vocab_text(vocab: np.ndarray) -> str:
    """A vocabulary file's content: the raw id of index 0, 1, ... one per line, UTF-8.

    The reader refuses ids that hold a line break (``training_core.data.io``), so a line is
    always one id.
    """
    return "\n".join(map(str, vocab.tolist())) + "\n"


def parse_vocab(text: str, id_type: str = ID_INT64) -> np.ndarray:
    """The raw ids of a vocabulary file's ``text`` (``vocab_text``'s inverse).

    int64 ids as an int64 array; string ids as an object array of ``str``, each line as
    written (only the line break is removed).
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if id_type == ID_STRING:
        return np.asarray(lines, dtype=object)
    if id_type != ID_INT64:
        raise ValueError(f"unknown id type {id_type!r}; use one of {', '.join(ID_KINDS)}")
    return np.asarray([int(line) for line in lines], dtype=np.int64)


def read_vocab(path: str, id_type: str = ID_INT64) -> np.ndarray:
    """Raw ids of a vocab file (line number = index), on any filesystem TensorFlow reads.

    ``id_type``: the vocabulary's kind (``DatasetMetadata.user_id_type`` or ``item_id_type``).
    TensorFlow is imported when this is called, so importing this module stays free of it.
    """
    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return parse_vocab(f.read().decode("utf-8"), id_type)
