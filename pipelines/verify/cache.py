"""An execution cache across verifications, keyed as Vertex AI Pipelines keys its own.

A task whose spec enables caching is skipped when an identical execution already succeeded: the
same image and command line (not the resources, which KFP's ``CacheKey`` leaves out too), the
same input parameter values and input artifacts (URI, type, metadata) and the same outputs. Its
outputs are then the earlier ones, at their earlier ``gs://`` URIs, as on Vertex AI. Unlike
Vertex AI, the key also holds a fingerprint of the staged data, so changed data behind the same
URI is never answered from the cache.

Layout: ``CACHE_DIR/KEY/outputs.json`` (the task root URI, output artifacts and parameters) and
``CACHE_DIR/KEY/files/`` (a copy of the task root's files), published by renaming a finished
folder.
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
    files: str


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


def key(executor: Mapping[str, Any], executor_input: Mapping[str, Any], data: str) -> str:
    """The cache key of one execution."""
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
        # As KFP's CacheKey: the image and command line, not the resources.
        "image": container.get("image"),
        "command": [*(container.get("command") or []), *(container.get("args") or [])],
        "parameters": inputs.get("parameterValues") or {},
        "artifacts": artifacts,
        "output_artifacts": sorted((outputs.get("artifacts") or {}).keys()),
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
        saved["task_root"], saved["artifacts"], saved["parameters"], os.path.join(folder, "files")
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
        json.dump(
            {"task_root": task_root, "artifacts": artifacts, "parameters": parameters}, f, indent=1
        )
    try:  # A folder, and the first writer wins (publish's helpers replace what is there).
        os.rename(tmp, target)
    except OSError:  # Another verification stored the same execution first.
        shutil.rmtree(tmp, ignore_errors=True)


def restore(entry: Entry, local_task_root: str) -> None:
    """Puts a cached execution's files back where its outputs point."""
    if os.path.isdir(entry.files) and not os.path.exists(local_task_root):
        shutil.copytree(entry.files, local_task_root)
