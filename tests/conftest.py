"""Shared fixtures: small real files, prepared datasets, helpers to read them back."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from training_core import records, synthetic
from training_core.metadata import DatasetMetadata
from training_core.publish import LOCK_FILE

TINY = dataclasses.replace(synthetic.SHAPES["tiny"], seed=3)


@pytest.fixture(scope="session")
def tiny_interactions():
    return synthetic.generate(TINY)


@pytest.fixture(scope="session")
def tiny_csv(tmp_path_factory, tiny_interactions):
    path = tmp_path_factory.mktemp("raw") / "ratings.csv"
    synthetic.write(tiny_interactions, str(path), "csv")
    return str(path)


def read_split(root: str, meta: DatasetMetadata, training: bool, epoch: int = 0):
    """All rows of a prepared split, concatenated, via our own decoder (TF is tested separately)."""
    paths = meta.train_file_paths(root, epoch) if training else meta.eval_file_paths(root)
    cols: dict[str, list[np.ndarray]] = {n: [] for n in records.feature_names(training)}
    for p in paths:
        for rec in records.read_tfrecord_file(p):
            ex = records.decode_example(rec)
            for n in cols:
                cols[n].append(ex[n])
    return {n: np.concatenate(v) for n, v in cols.items()}


def tree_bytes(root: str) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f == LOCK_FILE:  # Who held the folder last, not content.
                continue
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = fh.read()
    return out
