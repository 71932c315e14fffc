"""Which registry model (model line) a run's model belongs to: by default, one per dataset.

The gate compares a run's model with the default version of its line, and a model of one
dataset is no champion of another (``training_core.evaluation.gate``, the catalogue rule). So
unless the pipeline parameter ``model_display_name`` names a line, the line is derived from
what identifies the data, ``data_uri``, by this one rule (``compare_models`` applies it when
the pipeline runs; ``run-local`` applies it before, to name the line and check its champion):

- the embedded sample: ``ncf-sample``;
- anything else: ``ncf-<name>-<digest>``, where ``<name>`` is the file's or folder's name
  (lower case, its extensions dropped; a MovieLens ratings file, ``u.data``, ``ratings.dat``,
  ``ratings.csv``, takes its folder's name, which names the dataset) and ``<digest>`` the
  first 8 hex digits of the SHA-256 of the data's location (``identity``): two files of one
  name in two folders are two lines.

The location, not the content: new data behind the same path (next week's table in the same
file or folder, a schedule's fixed ``data_uri``) stays in its line and is compared with the
line's champion, as the gate means it to be; data at a new path starts a new line unless
``model_display_name`` names one. Every name is a valid registry folder, display name and
label value (``[a-z0-9-]``, at most 43 characters).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re

from training_core.evaluation.gate import REGISTRY_MODEL_PARAM as PARAM
from training_core.serving.vertex_registry import gs_uri

PREFIX = "ncf"
SAMPLE_LINE = f"{PREFIX}-sample"
_EXTENSIONS = (".gz", ".csv", ".tsv", ".parquet", ".dat", ".data", ".txt", ".json", ".jsonl")
# MovieLens ratings files (training_core/data/io.py's known layouts): the folder names the data.
_GENERIC_FILES = ("u.data", "ratings.dat", "ratings.csv")
_NAME_CHARS = 24
_DIGEST_CHARS = 8


@dataclasses.dataclass(frozen=True)
class ModelLine:
    """A run's model line: the registry model's display name, and why it is that one."""

    name: str
    why: str  # In words, for a person: "named by model_display_name", "the embedded sample"...


def identity(data_uri: str) -> str:
    """What locates the data, without a trailing slash: its ``gs://`` URI, or its absolute path.

    A ``/gcs/`` path (Vertex AI's mount) is its ``gs://`` URI. Symlinks are not resolved: the
    path given names the data, so a ``latest`` link moved to next week's file keeps its line.
    """
    uri = gs_uri(data_uri.strip())  # A /gcs/ path as its gs:// URI.
    if uri.startswith("gs://"):
        return uri.rstrip("/")
    return os.path.abspath(os.path.expanduser(uri))


def _is_sample(data_uri: str) -> bool:
    from training_core.data.sample_data import sample_path

    return "://" not in data_uri and identity(data_uri) == os.path.abspath(sample_path())


def _short_name(location: str) -> str:
    parts = [p for p in location.removeprefix("gs://").split("/") if p]
    base = parts[-1] if parts else "data"
    if base.lower() in _GENERIC_FILES and len(parts) > 1:
        base = parts[-2]
    stem = base.lower()
    while stem.endswith(_EXTENSIONS) and "." in stem[1:]:
        stem = stem[: stem.rindex(".")]
    slug = re.sub(r"[^a-z0-9]+", "-", stem)[:_NAME_CHARS].strip("-")
    return slug or "data"


def of_data(data_uri: str) -> ModelLine:
    """The line of the data at ``data_uri`` (the module's rule).

    Raises:
        ValueError: an empty ``data_uri``.
    """
    if not data_uri.strip():
        raise ValueError(f"no data_uri to name the model line after; set {PARAM}")
    if _is_sample(data_uri):
        return ModelLine(SAMPLE_LINE, "the embedded sample's line")
    location = identity(data_uri)
    digest = hashlib.sha256(location.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    return ModelLine(
        f"{PREFIX}-{_short_name(location)}-{digest}",
        f"named after the data at {location} (its name and a digest of its path: a line per "
        "dataset)",
    )


def resolve(model_display_name: str, data_uri: str) -> ModelLine:
    """``model_display_name`` when set, else the line of ``data_uri`` (``of_data``)."""
    if model_display_name:
        return ModelLine(model_display_name, f"named by {PARAM}")
    return of_data(data_uri)
