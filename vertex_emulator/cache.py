"""An execution cache across verifications, keyed as Vertex AI Pipelines keys its own.

Vertex AI's key (docs "Configure execution caching") is a step's interface: its inputs (input
parameter values, input artifact IDs), its output definition (output parameter and artifact
names) and its component spec (image, command, arguments, environment variables, in order), and
only pipelines of the same name share a cache. The run is not in it: a resubmitted run whose task
has the same spec and inputs gets the earlier execution's outputs, output artifact URIs and
output parameters included, even when those URIs lie under the earlier run's folder. A task
whose ``cachingOptions.enableCache`` is off is never served from the cache (nor stored in it
here), and only a succeeded execution is ever served.

This key (:func:`key`) holds the same: the pipeline's name; the executor's image, command, args
and env (not the resources, which KFP's ``CacheKey`` leaves out too); the resolved input
parameter values (run-level placeholders such as ``{{$.pipeline_job_name}}`` resolved first, as
KFP's open-source driver resolves them before it computes the key; Vertex AI's order is not
public, so this project never relies on one to tell runs apart);
input artifacts; and the output names (with each output artifact's type). Two differences, both
on the safe side: an input artifact is identified by its URI, type and metadata (here one
artifact per URI, as an importer with ``reimport=False`` reuses one ML Metadata artifact on
Vertex AI; Vertex AI keys its ID), and the key also holds a fingerprint of the staged data, so
changed data behind the same URI is never answered from the cache.

A hit's files are what Cloud Storage would hold at the earlier URIs now (:func:`restore`): the
earlier verification's folder as it is, later writes into it included, or a snapshot taken when
the execution succeeded when that folder is gone. Layout: ``CACHE_DIR/KEY/outputs.json`` (the
task root URI, output artifacts and parameters, the verification's folder) and
``CACHE_DIR/KEY/files/`` (the snapshot), published by renaming a finished folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Entry:
    """One cached execution: where its outputs were, and what they were."""

    task_root: str
    artifacts: dict[str, dict[str, Any]]
    parameters: dict[str, Any]
    files: str  # The task root's files when the execution succeeded.
    source: str = ""  # The verification's own folder for the task root (the live copy).


def fingerprint_path(path: str) -> str:
    """A content hash of a file or folder (names and bytes)."""
    digest = hashlib.sha256()
    paths = [path]
    if os.path.isdir(path):
        paths = sorted(os.path.join(d, f) for d, _, files in os.walk(path) for f in files)
    for p in paths:
        digest.update(os.path.relpath(p, path).encode())
        with open(p, "rb") as f:
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def key(
    executor: Mapping[str, Any],
    executor_input: Mapping[str, Any],
    data: str,
    pipeline_name: str = "",
) -> str:
    """The cache key of one execution (see the module docstring for what it holds)."""
    inputs = executor_input.get("inputs") or {}
    artifacts = {
        name: [
            {k: a.get(k) for k in ("uri", "type", "metadata")}
            for a in (listed or {}).get("artifacts") or []
        ]
        for name, listed in (inputs.get("artifacts") or {}).items()
    }
    outputs = executor_input.get("outputs") or {}
    container = executor.get("container") or {}
    material = {
        "pipeline": pipeline_name,
        # As KFP's CacheKey and Vertex AI's: the image, command line and environment, in order;
        # not the resources.
        "image": container.get("image"),
        "command": [*(container.get("command") or []), *(container.get("args") or [])],
        "env": container.get("env") or [],
        "parameters": inputs.get("parameterValues") or {},
        "artifacts": artifacts,
        "output_artifacts": {
            name: [a.get("type") for a in (listed or {}).get("artifacts") or []]
            for name, listed in (outputs.get("artifacts") or {}).items()
        },
        "output_parameters": sorted((outputs.get("parameters") or {}).keys()),
        "data": data,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]


def load(cache_dir: str, cache_key: str) -> Entry | None:
    """The cached execution for a key, if there is one."""
    folder = os.path.join(cache_dir, cache_key)
    record = os.path.join(folder, "outputs.json")
    if not os.path.exists(record):
        return None
    with open(record) as f:
        saved = json.load(f)
    return Entry(
        saved["task_root"],
        saved["artifacts"],
        saved["parameters"],
        os.path.join(folder, "files"),
        saved.get("source", ""),
    )


def store(
    cache_dir: str,
    cache_key: str,
    task_root: str,
    local_task_root: str,
    artifacts: Mapping[str, Any],
    parameters: Mapping[str, Any],
) -> None:
    """Saves a successful execution (its task root's files and its outputs)."""
    os.makedirs(cache_dir, exist_ok=True)
    target = os.path.join(cache_dir, cache_key)
    if os.path.exists(target):
        return
    tmp = tempfile.mkdtemp(prefix=f".{cache_key}-", dir=cache_dir)
    if os.path.isdir(local_task_root):
        shutil.copytree(local_task_root, os.path.join(tmp, "files"))
    with open(os.path.join(tmp, "outputs.json"), "w") as f:
        saved = {
            "task_root": task_root,
            "artifacts": artifacts,
            "parameters": parameters,
            "source": os.path.abspath(local_task_root),
        }
        json.dump(saved, f, indent=1)
    try:  # A folder, and the first writer wins (publish's helpers replace what is there).
        os.rename(tmp, target)
    except OSError:  # Another verification stored the same execution first.
        shutil.rmtree(tmp, ignore_errors=True)


def restore(entry: Entry, local_task_root: str) -> None:
    """Puts a cached execution's files back where its outputs point, as they are now.

    On Vertex AI a cached output's URI is a Cloud Storage folder that later tasks of the
    earlier run may have written into (a tuning job's trials under ``tuning_trial_spec``'s
    artifact); a later run finds those files too. So the verification's own folder is copied
    when it is still there, and the snapshot taken when the execution succeeded otherwise.
    """
    if os.path.exists(local_task_root):
        return
    live = entry.source
    if live and os.path.isdir(live) and os.path.abspath(live) != os.path.abspath(local_task_root):
        shutil.copytree(live, local_task_root)
    elif os.path.isdir(entry.files):
        shutil.copytree(entry.files, local_task_root)
