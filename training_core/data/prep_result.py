"""What a data prep run returns, whichever engine ran it, and how it is shown.

:class:`PrepareResult` (the dataset's metadata, where it is, whether it was reused, how long it
took), the lines a person reads at the end of a run (:func:`summary`) and the counts put on a KFP
artifact (:func:`artifact_metadata`).
"""

from __future__ import annotations

import dataclasses

from training_core.data.dataset_folder import record_files
from training_core.data.metadata import DatasetMetadata
from training_core.data.prep_plan import SEEN_ONLY_RULES


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    """What a run produced (or found already in place)."""

    metadata: DatasetMetadata
    output_dir: str
    reused: bool
    seconds: float
    total_bytes: int
    timings: dict[str, float] = dataclasses.field(default_factory=dict)


def dataset_bytes(meta: DatasetMetadata) -> int:
    """Bytes of a dataset's TFRecord files."""
    return sum(f.bytes for f in record_files(meta))


def summary(result: PrepareResult) -> str:
    """A few lines a person reads at the end of a run."""
    m = result.metadata
    files = len(record_files(m))
    train_rows = m.num_train_elements * m.num_epochs
    if m.has_validation:
        validation = (
            f"  validation: {m.num_validation_users:,} users, {m.num_validation_elements:,} rows, "
            f"{m.validation_steps:,} batches (choices are made on it)"
        )
    else:
        validation = "  validation: none (choices are made on the test split; --no-validation)"
    refit = (
        ["  refit: every interaction is a training positive; the held-out records measure nothing"]
        if m.refit
        else []
    )
    rules = [f"{m.source[k]:,} {k.replace('_', ' ')}" for k in SEEN_ONLY_RULES if k in m.source]
    seen_only = (
        [
            f"  seen only: {m.num_seen_only:,} pairs kept, never positives nor negatives ("
            f"rows: {', '.join(rules)})"
        ]
        if rules
        else []
    )
    return "\n".join(
        [
            f"{'Reused' if result.reused else 'Prepared'} {result.output_dir}",
            f"  users {m.num_users:,}  items {m.num_items:,}  "
            f"source rows {m.source['rows_read']:,} (kept {m.source['rows_kept']:,})",
            *seen_only,
            f"  train: {train_rows:,} rows over {m.num_epochs} epoch(s), "
            f"{m.train_steps_per_epoch:,} batches of {m.train_prebatch_size} per epoch",
            f"  eval:  {m.num_eval_elements:,} rows, {m.eval_steps:,} batches of "
            f"{m.eval_prebatch_size} ({m.eval_users_per_batch} users x {1 + m.eval_negatives})"
            " (the test split)",
            validation,
            *refit,
            f"  files {files}  bytes {result.total_bytes / 1e6:,.1f} MB  "
            f"time {result.seconds:.1f}s",
        ]
    )


def artifact_metadata(result: PrepareResult) -> dict:
    """Counts worth showing on a KFP artifact (flat, JSON-friendly)."""
    m = result.metadata
    return {
        "num_users": m.num_users,
        "num_items": m.num_items,
        "num_train_elements": m.num_train_elements,
        "train_steps_per_epoch": m.train_steps_per_epoch,
        "num_epochs": m.num_epochs,
        "num_eval_users": m.num_eval_users,
        "num_validation_users": m.num_validation_users,
        "num_train_positives": m.num_train_positives,
        "refit": m.refit,
        "num_seen_only": m.num_seen_only,
        "eval_prebatch_size": m.eval_prebatch_size,
        "fingerprint": m.fingerprint,
        "source_sha256": m.source["sha256"],
        "reused": result.reused,
    }
