"""The decisions taken once for the whole dataset, by either engine with this code.

Both engines (``prepare`` on one machine, ``prepare_beam`` as a Beam job) read the source with
the same reader options (``read_options``: the id kind, which rows are positives). Once the
source is hashed and cleaned, they take the same global decisions here: the error for data that
cleaning emptied, the build folder's name, the :class:`Plan` (shards, eval batch, the held-out
split's counts, options, fingerprint) and, at the end, what records them: ``metadata.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
from collections.abc import Sequence
from importlib import metadata as importlib_metadata

from training_core.common import hints
from training_core.data import dataset_folder, positive_rules, read_errors, sampling
from training_core.data import io as rio
from training_core.data.config import EVAL_USERS_MULTIPLE, PrepareConfig
from training_core.data.ids import ID_AUTO, ID_INT64
from training_core.data.metadata import (
    FORMAT_VERSION,
    ITEM_VOCAB,
    USER_VOCAB,
    DatasetMetadata,
    ShardFile,
    epoch_dir,
)
from training_core.data.shards import ShardOptions

log = logging.getLogger(__name__)

DEFAULT_EVAL_USERS_PER_BATCH = 160  # As the reference (160 users x 1000 candidates).
ROWS_PER_AUTO_SHARD = 1_000_000


def nothing_left(stats: dict[str, int], min_ratings: int) -> read_errors.DataError:
    """The error for data that cleaning left empty, naming the rule that emptied it."""
    if stats.get("users_with_every_item"):
        return read_errors.DataError(
            f"every user left interacted with every item ({stats['users_with_every_item']} "
            "users): no negatives can be drawn, and NCF learns from items a user did not "
            "interact with. Check the input (is the item column right?) or add items."
        )
    seen_only = {rule: stats[rule] for rule in SEEN_ONLY_RULES if stats.get(rule)}
    rules = (
        " (positives only: "
        + ", ".join(f"{count} rows {rule.replace('_', ' ')}" for rule, count in seen_only.items())
        + f" are seen only; lower {hints.option('--min-rating')} or name more "
        f"{hints.option('--positive-events')})"
        if seen_only
        else ""
    )
    return read_errors.DataError(
        f"no user has at least {max(min_ratings, 2)} interactions{rules}; lower "
        f"{hints.option('--min-ratings')} (now {min_ratings}) or check the input"
    )


# The stats (metadata.json's ``source``) that count the rows each positive rule turned into
# seen-only rows, as the reader names them (``io.Interactions.rule_counts``).
SEEN_ONLY_RULES = (positive_rules.BELOW_MIN_RATING, positive_rules.NOT_POSITIVE_EVENT)


def resolve_eval_users_per_batch(
    requested_rows: int | None,
    eval_negatives: int,
    max_shard_users: int,
    multiple: int = EVAL_USERS_MULTIPLE,
) -> int:
    """Users per eval record: whole users only; a size that does not fit is rounded, and said.

    Automatic sizes are a multiple of ``multiple`` (the replica count training will split eval
    records over, or 8), at most the reference's 160 users unless ``multiple`` needs more.
    """
    per_user = 1 + eval_negatives
    if requested_rows is None:
        cap = max(DEFAULT_EVAL_USERS_PER_BATCH // multiple, 1) * multiple
        return min(cap, -(-max_shard_users // multiple) * multiple)
    upb = max(1, round(requested_rows / per_user))
    if upb * per_user != requested_rows:
        log.warning(
            "eval batch size %d does not hold whole users (%d rows each: the positive and %d "
            "negatives); using %d (%d users) instead",
            requested_rows,
            per_user,
            eval_negatives,
            upb * per_user,
            upb,
        )
    return upb


def auto_num_shards(num_rows: int) -> int:
    """One shard per million interactions, at least 2 and at most 256."""
    return int(min(256, max(2, math.ceil(num_rows / ROWS_PER_AUTO_SHARD))))


def package_version() -> str:
    """This package's version (``unknown`` when it is not installed), part of the build name."""
    try:
        return importlib_metadata.version("ncf-pipelines")
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What is decided once the clean data's size is known: shards, eval batch, fingerprint."""

    num_shards: int
    eval_users_per_batch: int
    num_epochs: int  # Resolved: PrepareConfig.resolved_epochs.
    options: dict
    fingerprint: str
    num_validation_users: int  # Users with a validation item; 0 without a validation split.
    # Interactions less the held-out ones (test and validation items); a refit's: every one.
    num_train_positives: int

    def shard_options(self, config: PrepareConfig) -> ShardOptions:
        """The per-shard options of this plan."""
        return ShardOptions(
            num_shards=self.num_shards,
            num_neg=config.num_neg,
            recency_boost=config.recency_boost,
            recency_scale=config.recency_scale,
            seed=config.seed,
            train_batch_size=config.train_batch_size,
            eval_negatives=config.eval_negatives,
            eval_sampling=config.eval_sampling,
            eval_users_per_batch=self.eval_users_per_batch,
            validation=config.validation,
            refit=config.refit,
        )


# The reading options added with string ids and seen-only rows, and their defaults: recorded in a
# dataset's options (its fingerprint and build folder) only when set otherwise, so a dataset
# prepared without them keeps the fingerprint it had before they existed.
_READING_DEFAULTS = {"id_type": ID_AUTO, "min_rating": None, "positive_events": ""}
# Column names added with them: recorded only when named.
_NEW_COLUMNS = ("rating", "event")


def _set_reading_options(config: PrepareConfig) -> dict:
    set_options = {
        name: getattr(config, name)
        for name, default in _READING_DEFAULTS.items()
        if getattr(config, name) != default
    }
    if "positive_events" in set_options:  # As the reader takes them: "a, b" is "a,b".
        set_options["positive_events"] = ",".join(config.positive_rule().positive_events)
    return set_options


def recorded_columns(columns: rio.Columns) -> dict:
    """The input columns as a dataset's options record them: the rating and event only if named."""
    return {
        k: v
        for k, v in dataclasses.asdict(columns).items()
        if k not in _NEW_COLUMNS or v is not None
    }


def read_options(config: PrepareConfig) -> dict:
    """The keyword arguments of ``io.read_interactions`` beside the path, format and columns.

    Both engines read through these, so they see the same ids and the same positives. Only
    what is set is passed: the reader's defaults are the options' defaults.
    """
    options: dict = {"id_type": config.id_type} if config.id_type != ID_AUTO else {}
    rule = config.positive_rule()
    if rule.active:
        options["rule"] = rule
    return options


def make_plan(
    config: PrepareConfig,
    fmt: str,
    source_sha: str,
    rows_kept: int,
    num_users: int,
    num_items: int,
    validation_users: int = 0,
) -> Plan:
    """Shards, eval batch, options and fingerprint: a pure function of the clean data's counts.

    ``validation_users``: the users with enough interactions for a validation item
    (``sampling.has_validation_item``); they have one when ``config.validation``. The epochs
    (``resolved_epochs``) are decided from the training positives that leaves: every
    interaction in a refit (``config.refit``), which holds nothing out of training.

    Raises:
        ValueError: more eval negatives asked for than the items allow.
    """
    if config.eval_negatives >= num_items:
        raise ValueError(
            f"--eval-negatives {config.eval_negatives} asks for more negatives than the "
            f"{num_items} items allow; use at most {num_items - 1} (the reference uses 999 on "
            "MovieLens)"
        )
    num_shards = config.num_shards or auto_num_shards(rows_kept)
    num_shards = min(num_shards, num_users)
    max_shard_users = -(-num_users // num_shards)
    upb = resolve_eval_users_per_batch(
        config.eval_batch_size, config.eval_negatives, max_shard_users, config.eval_users_multiple
    )
    num_validation_users = validation_users if config.validation else 0
    num_train_positives = (
        rows_kept if config.refit else rows_kept - num_users - num_validation_users
    )
    num_epochs = config.resolved_epochs(num_train_positives)
    options = {
        "format": fmt,
        "columns": recorded_columns(config.columns),
        "min_ratings": config.min_ratings,
        "num_epochs": num_epochs,
        "num_neg": config.num_neg,
        "recency_boost": config.recency_boost,
        "recency_scale": config.recency_scale,
        "eval_negatives": config.eval_negatives,
        "eval_sampling": config.eval_sampling,
        "train_batch_size": config.train_batch_size,
        "eval_users_per_batch": upb,
        "seed": config.seed,
        "num_shards": num_shards,
    }
    if config.validation:  # Absent without: such a dataset keeps the fingerprint it had before.
        options["validation"] = True
    if config.refit:  # Likewise absent without: a dataset that is no refit keeps its fingerprint.
        options["refit"] = True
    options.update(_set_reading_options(config))  # Likewise, each only when set.
    fingerprint = hashlib.sha256(
        json.dumps(
            {"v": FORMAT_VERSION, "source": source_sha, "options": options}, sort_keys=True
        ).encode()
    ).hexdigest()
    return Plan(
        num_shards, upb, num_epochs, options, fingerprint, num_validation_users, num_train_positives
    )


# Per record beyond the packed ids: the TFRecord frame (16 bytes) and each feature's key and
# headers (about 30 bytes); estimates round this up.
_RECORD_OVERHEAD = 160


def mean_varint_width(count: int) -> float:
    """The mean bytes of a varint over the ids ``0..count-1`` (one ``records`` id each)."""
    if count <= 0:
        return 1.0
    total, low, width = 0, 0, 1
    while low < count:
        high = min(count, 1 << (7 * width))
        total += (high - low) * width
        low, width = high, width + 1
    return total / count


@dataclasses.dataclass(frozen=True)
class Estimate:
    """What a plan will write and hold: ``bytes`` on disk, ``worker_memory`` per worker."""

    bytes: int
    train_rows: int  # Per epoch, padded.
    bytes_per_train_row: float
    eval_rows: int
    bytes_per_eval_row: float
    worker_memory: int

    def describe(self, num_epochs: int) -> str:
        """How ``bytes`` was reckoned, for a message."""
        return (
            f"{self.train_rows:,} training rows x {num_epochs} epoch(s) x "
            f"{self.bytes_per_train_row:.1f} bytes per row, and {self.eval_rows:,} eval rows x "
            f"{self.bytes_per_eval_row:.1f} bytes"
        )


# Bytes a worker holds per row of the shard file it writes: the rows' columns (int64 and
# narrower), their shuffle, the padded copies and the encoded records, measured on synthetic
# data (tests/test_machine_faults.py checks the disk estimate; this one is rounded up).
_WORKER_BYTES_PER_ROW = 64


def estimate(
    plan: Plan,
    config: PrepareConfig,
    rows_kept: int,
    num_users: int,
    num_items: int,
    num_seen_only: int = 0,
    recency_rows: int | None = None,
) -> Estimate:
    """The dataset's size on disk and each worker's peak memory, before anything is written.

    Size: rows x epochs x bytes per row, in the ``records`` layout (ids as varints), and the
    ``num_seen_only`` seen-only pairs' records (``shards.write_seen_only_shard``).
    ``recency_rows``: the positive copies ``--recency-boost`` adds
    (``sampling.recency_extra_rows``), where the users' counts are known; else every user's most.
    """
    user_bytes = mean_varint_width(num_users)
    item_bytes = mean_varint_width(num_items)
    # user_id, item_id, then a one-byte mask (valid_point_mask or duplicate_mask) and label.
    train_row = user_bytes + item_bytes + 2
    eval_row = user_bytes + item_bytes + 1
    batch = config.train_batch_size
    # Each user's recent positives repeat (sampling.recency_copies): at most this many more.
    extra = recency_rows
    if extra is None:
        extra = num_users * sampling.recency_extra(config.recency_boost, config.recency_scale)
    positives = plan.num_train_positives + extra
    per_shard_train = -(-positives * (1 + config.num_neg) // plan.num_shards)
    train_rows = plan.num_shards * max(1, -(-per_shard_train // batch)) * batch
    per_eval_user = 1 + config.eval_negatives
    upb = plan.eval_users_per_batch
    per_shard_users = -(-num_users // plan.num_shards)
    eval_rows = plan.num_shards * max(1, -(-per_shard_users // upb)) * upb * per_eval_user
    if config.validation:  # The validation split: at most the test split's size.
        eval_rows *= 2
    train_records = train_rows // batch
    eval_records = eval_rows // (upb * per_eval_user)
    total = (
        plan.num_epochs * (train_rows * train_row + train_records * _RECORD_OVERHEAD)
        + eval_rows * eval_row
        + eval_records * _RECORD_OVERHEAD
        + (num_users + num_items) * 12  # Vocabulary files: raw ids, one a line.
    )
    if num_seen_only:  # One record of train_batch_size rows at least per shard.
        seen_rows = num_seen_only + plan.num_shards * batch
        total += seen_rows * eval_row + (seen_rows // batch) * _RECORD_OVERHEAD
    biggest_file = max(per_shard_train, per_shard_users * per_eval_user)
    return Estimate(
        int(total),
        train_rows,
        train_row,
        eval_rows,
        eval_row,
        biggest_file * _WORKER_BYTES_PER_ROW,
    )


def build_options(config: PrepareConfig) -> dict:
    """The options that decide a run's bytes (not where it reads or writes, nor how fast).

    What training will run decides them only through the epochs, when ``num_epochs`` is not set:
    by its names (``train_preset``, ``train_epochs``), not by ``epochs_for``, the function that
    turns them into epochs.
    """
    skip = {"input_path", "output_dir", "workers", "overwrite", "epochs_for"}
    if config.num_epochs is not None:
        skip |= {"train_preset", "train_epochs"}
    if not config.validation:  # As before validation splits: the same build folder.
        skip |= {"validation"}
    if not config.refit:  # Likewise: a dataset that is no refit keeps its build folder.
        skip |= {"refit"}
    skip |= _READING_DEFAULTS.keys()  # Likewise: added below only when set.
    options = {k: v for k, v in dataclasses.asdict(config).items() if k not in skip}
    options["columns"] = recorded_columns(config.columns)
    options.update(_set_reading_options(config))
    return options


def build_name(config: PrepareConfig, source_sha: str) -> str:
    """The build folder this run writes (``dataset_folder.build_name``)."""
    return dataset_folder.build_name(source_sha, build_options(config), package_version())


def build_metadata(
    config: PrepareConfig,
    plan: Plan,
    files: list[str],
    fmt: str,
    source_sha: str,
    stats: dict[str, int],
    num_users: int,
    num_items: int,
    train_files: dict[str, list[ShardFile]],
    eval_files: list[ShardFile],
    short_users: tuple[int, int],
    build: str,
    validation_files: Sequence[ShardFile] = (),
    seen_only_files: Sequence[ShardFile] = (),
    id_types: tuple[str, str] = (ID_INT64, ID_INT64),
) -> DatasetMetadata:
    """``metadata.json`` from the shards' counts; both engines assemble it here.

    ``validation_files``: the validation split's, one per shard when ``config.validation``.
    ``seen_only_files``: the seen-only pairs', one per shard when the data has any
    (``shards.write_seen_only_shard``). ``id_types``: the users' and the items' id kinds, as
    the reader found them (``io.Interactions.user_id_type``, ``item_id_type``).

    Shard paths are relative to ``build`` (the build folder); metadata names them from the
    dataset folder.
    """
    short_eval, short_train = short_users
    if short_eval:
        log.warning(
            "%d users have fewer than %d never-seen items; their eval rows are filled with "
            "repeats marked in duplicate_mask",
            short_eval,
            config.eval_negatives,
        )
    if short_train:
        log.warning(
            "%d users have fewer than %d items they do not train on (--num-neg); each of their "
            "training positives gets repeated negatives. Lower --num-neg to avoid it.",
            short_train,
            config.num_neg,
        )
    train_files = {epoch: [_under(build, f) for f in files] for epoch, files in train_files.items()}
    eval_files = [_under(build, f) for f in eval_files]
    validation_files = [_under(build, f) for f in validation_files]
    seen_only_files = [_under(build, f) for f in seen_only_files]
    first_epoch = train_files[epoch_dir(0)]
    upb = plan.eval_users_per_batch
    return DatasetMetadata(
        format_version=FORMAT_VERSION,
        num_users=num_users,
        num_items=num_items,
        train_prebatch_size=config.train_batch_size,
        eval_prebatch_size=upb * (1 + config.eval_negatives),
        eval_users_per_batch=upb,
        num_epochs=plan.num_epochs,
        num_neg=config.num_neg,
        eval_negatives=config.eval_negatives,
        eval_sampling=config.eval_sampling,
        seed=config.seed,
        num_train_positives=plan.num_train_positives,
        num_train_elements=sum(f.elements for f in first_epoch),
        train_steps_per_epoch=sum(f.batches for f in first_epoch),
        num_eval_users=num_users,
        num_eval_elements=sum(f.elements for f in eval_files),
        eval_steps=sum(f.batches for f in eval_files),
        num_shards=plan.num_shards,
        train_files=train_files,
        eval_files=eval_files,
        source={
            "path": config.input_path,
            "files": [os.path.basename(f) for f in files],
            "format": fmt,
            "sha256": source_sha,
            **stats,
            "eval_users_with_duplicates": short_eval,
            "train_users_with_repeated_negatives": short_train,
        },
        options=plan.options,
        fingerprint=plan.fingerprint,
        user_vocab=f"{build}/{USER_VOCAB}",
        item_vocab=f"{build}/{ITEM_VOCAB}",
        created_by=f"ncf-pipelines {package_version()}",
        validation_files=validation_files,
        num_validation_users=plan.num_validation_users,
        num_validation_elements=sum(f.elements for f in validation_files),
        validation_steps=sum(f.batches for f in validation_files),
        refit=config.refit,
        user_id_type=id_types[0],
        item_id_type=id_types[1],
        seen_only_files=seen_only_files,
        num_seen_only=sum(f.elements for f in seen_only_files),
    )


def _under(build: str, f: ShardFile) -> ShardFile:
    return dataclasses.replace(f, path=f"{build}/{f.path}")
