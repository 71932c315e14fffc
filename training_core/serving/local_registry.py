"""A model registry in a local folder: versions and a default version, as Vertex AI keeps them.

``run-local`` uses it where a Vertex AI run uses the Model Registry, so that the gate's two
branches run on this machine with the same meaning: ``compare_models`` takes the default version
of ``model_display_name`` as the champion, and a blessed challenger becomes a new version and
the default (``register_model``). A refused one leaves everything as it was.

Layout of ``<root>/<display_name>/`` (one home: the names below)::

    versions/1/            a copy of an exported SavedModel folder
    versions/1.json        its labels (the challenger's metrics), source and time
    versions/2/ ...
    DEFAULT                the default version's number

A version is copied into a private folder and renamed into place, then ``DEFAULT`` is replaced
in one step (``publish``), under the model's folder lock: a kill at any moment leaves the old
default or the new one, never a version that looks complete but is not; two runs registering at
once get different numbers. Versions are never removed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time

from training_core.common import atomic_writes, folder_lock

VERSIONS_DIR = "versions"
DEFAULT_FILE = "DEFAULT"
SCHEME = "local:"  # Resource names: local:<model folder>.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclasses.dataclass(frozen=True)
class LocalVersion:
    """One version of a local registry model."""

    resource_name: str  # local:<root>/<display_name>
    version_id: str
    path: str  # The version's SavedModel folder.


def model_folder(root: str, display_name: str) -> str:
    """``<root>/<display_name>``, the name checked (it becomes a folder name)."""
    if not _NAME.match(display_name or ""):
        raise ValueError(
            f"model_display_name {display_name!r} cannot name a local registry folder; use "
            "letters, digits, '.', '_' and '-', starting with a letter or digit"
        )
    return os.path.join(os.path.abspath(root), display_name)


def find_champion(root: str, display_name: str) -> LocalVersion | None:
    """The default version of ``display_name`` in the registry at ``root``; ``None`` if none."""
    folder = model_folder(root, display_name)
    try:
        with open(os.path.join(folder, DEFAULT_FILE)) as f:
            version = f.read().strip()
    except FileNotFoundError:
        return None
    path = os.path.join(folder, VERSIONS_DIR, version)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{folder}: {DEFAULT_FILE} names version {version} but {path} is missing; restore "
            f"it or point {DEFAULT_FILE} at a version under {VERSIONS_DIR}/"
        )
    return LocalVersion(SCHEME + folder, version, path)


def register(
    root: str, display_name: str, export_dir: str, labels: dict[str, str] | None = None
) -> LocalVersion:
    """Copies ``export_dir`` in as a new version of ``display_name`` and makes it the default."""
    if not os.path.isfile(os.path.join(export_dir, "saved_model.pb")):
        raise FileNotFoundError(f"{export_dir}: not an exported SavedModel (no saved_model.pb)")
    folder = model_folder(root, display_name)
    versions = os.path.join(folder, VERSIONS_DIR)
    with folder_lock.hold(folder, f"register {display_name}", wait=True):
        os.makedirs(versions, exist_ok=True)
        numbers = [int(n) for n in os.listdir(versions) if n.isdigit()]
        version = str(max(numbers, default=0) + 1)
        target = os.path.join(versions, version)
        atomic_writes.remove_stale_partials(target)  # A copy a killed registration left.
        tmp = atomic_writes.partial_name(target)
        try:
            shutil.copytree(export_dir, tmp)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        info = {"labels": labels or {}, "source": export_dir, "created": time.time()}
        atomic_writes.write_text_atomic(
            target + ".json", json.dumps(info, indent=1, sort_keys=True)
        )
        atomic_writes.write_text_atomic(os.path.join(folder, DEFAULT_FILE), version + "\n")
    return LocalVersion(SCHEME + folder, version, target)
