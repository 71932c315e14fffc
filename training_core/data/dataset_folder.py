"""The prepared-dataset folder: its layout, when it may be reused, and how a build is published.

Layout (``docs/data-format.md``)::

    <output>/metadata.json   the published dataset: every file below is named in it
    <output>/_SUCCESS        written after the first metadata.json
    <output>/data-<build>/   one build: train/epoch_NNN/*.tfrecord, eval/*.tfrecord,
                             validation/*.tfrecord (unless --no-validation), vocab/*.txt,
                             seen_only/*.tfrecord (rows that are no positive, if any)
    <output>/.lock           held by the one writer (training_core.common.folder_lock.hold)

A run builds into its own ``data-<build>`` folder, which nothing names until it is complete, and
publishes by replacing ``metadata.json`` in one step: readers see the previous complete dataset or
the new one, never a mix. Only then are other builds removed. ``<build>`` is a hash of the source
content, the options and the code version, so the same run always writes the same folder, byte for
byte: rebuilding a damaged dataset in place rewrites each file with its own content.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil

from training_core.common.atomic_writes import is_partial, write_text_atomic
from training_core.common.folder_lock import LOCK_FILE, hold
from training_core.common.process_lifetime import terminate_as_exit
from training_core.data.metadata import (
    EVAL_DIR,
    FORMAT_VERSION,
    METADATA_FILE,
    SUCCESS_FILE,
    TRAIN_DIR,
    VOCAB_DIR,
    DatasetMetadata,
    ShardFile,
    build_folders,
    read_metadata,
)

log = logging.getLogger(__name__)

BUILD_PREFIX = "data-"
# Names older versions of this package wrote at the top of the folder (one build, no prefix).
LEGACY_NAMES = (TRAIN_DIR, EVAL_DIR, VOCAB_DIR, ".in-progress", ".beam-staging")
# The Beam path stages per-shard results here until metadata.json is written.
BEAM_STAGING = ".beam-staging"
# Bookkeeping that never counts as content.
_BOOKKEEPING = (LOCK_FILE,)
# What a publish or a cleanup never removes.
_KEEP_ALWAYS = (METADATA_FILE, SUCCESS_FILE, LOCK_FILE)


def build_name(source_sha: str, options: dict, code_version: str) -> str:
    """``data-<hash>``: the folder one run writes, a function of what decides its bytes."""
    key = json.dumps(
        {"v": FORMAT_VERSION, "source": source_sha, "options": options, "code": code_version},
        sort_keys=True,
    )
    return BUILD_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]


def _ours(name: str) -> bool:
    return (
        name.startswith(BUILD_PREFIX)
        or name in LEGACY_NAMES
        or name in (METADATA_FILE, SUCCESS_FILE, BEAM_STAGING)
        or name in _BOOKKEEPING
        or is_partial(name)
    )


def record_files(meta: DatasetMetadata) -> list[ShardFile]:
    """A dataset's TFRecord files: each epoch's training files, eval, validation, seen only."""
    files = [f for fs in meta.train_files.values() for f in fs]
    return files + list(meta.eval_files) + list(meta.validation_files) + list(meta.seen_only_files)


def published_roots(meta: DatasetMetadata) -> set[str]:
    """Top-level names a dataset's files live under (``data-<build>``, or legacy folders)."""
    paths = [f.path for f in record_files(meta)] + [meta.user_vocab, meta.item_vocab]
    return {p.replace("\\", "/").split("/", 1)[0] for p in paths}


def published(out: str) -> DatasetMetadata | None:
    """The complete dataset ``out`` holds (metadata.json and _SUCCESS), or None."""
    return read_metadata(out) if is_published(out) else None


def is_published(out: str) -> bool:
    """Whether ``out`` has a published dataset (complete or not, readable or not)."""
    return os.path.exists(os.path.join(out, METADATA_FILE)) and os.path.exists(
        os.path.join(out, SUCCESS_FILE)
    )


def problems(out: str, meta: DatasetMetadata) -> list[str]:
    """What does not match ``meta``: missing files, files of another size, short vocabularies.

    Sizes are checked for every file (a stat each); record checksums are checked by the reader
    as it reads (each TFRecord frame carries CRC32Cs).
    """
    found = []
    for f in record_files(meta):
        path = os.path.join(out, f.path)
        try:
            size = os.path.getsize(path)
        except OSError:
            found.append(f"{f.path} is missing")
            continue
        if size != f.bytes:
            found.append(f"{f.path} has {size} bytes, metadata.json says {f.bytes}")
    for rel, count in ((meta.user_vocab, meta.num_users), (meta.item_vocab, meta.num_items)):
        path = os.path.join(out, rel)
        try:
            with open(path, "rb") as fh:
                lines = fh.read().count(b"\n")
        except OSError:
            found.append(f"{rel} is missing")
            continue
        if lines != count:
            found.append(f"{rel} has {lines} ids, metadata.json says {count}")
    return found


def decide(
    out: str, fingerprints: tuple[str, ...], build: str, overwrite: bool
) -> DatasetMetadata | None:
    """The complete, intact dataset to reuse, or None to build ``build``; refuses foreign folders.

    Reused: a published dataset whose fingerprint is one of ``fingerprints`` or whose files are
    ``build``'s, and that passes :func:`problems`. A damaged one is rebuilt (it says so); a
    different one is replaced only with ``overwrite``, and only once the new one is complete.

    Raises:
        FileExistsError: ``out`` is a file, holds other files, or holds a different dataset.
    """
    if not os.path.isdir(out):
        if os.path.exists(out):
            raise FileExistsError(f"{out} is a file; --output must be a folder")
        return None
    entries = [e for e in os.listdir(out) if e not in _BOOKKEEPING]
    foreign = sorted(e for e in entries if not _ours(e))
    if foreign:
        raise FileExistsError(
            f"{out} is not empty and holds no prepared dataset ({', '.join(foreign[:5])}"
            f"{'...' if len(foreign) > 5 else ''}); choose an empty or new --output folder"
        )
    try:
        meta = published(out)
    except ValueError as e:
        log.warning("%s: %s; preparing the dataset again", out, e)
        return None
    if meta is None:
        return None
    same = meta.fingerprint in fingerprints or published_roots(meta) == {build}
    if same and overwrite:
        log.warning("%s: preparing this dataset again (--overwrite)", out)
        return None
    if same:
        damage = problems(out, meta)
        if not damage:
            return meta
        log.warning(
            "%s holds this dataset, but damaged (%s%s); preparing it again",
            out,
            "; ".join(damage[:3]),
            f"; {len(damage) - 3} more" if len(damage) > 3 else "",
        )
        return None
    if not overwrite:
        raise FileExistsError(
            f"{out} already holds a different prepared dataset (source "
            f"{meta.source.get('path')}, fingerprint {meta.fingerprint[:12]}). Choose another "
            "--output, or pass --overwrite to replace it (it stays in place until the new one "
            "is complete)."
        )
    log.warning("%s: the dataset there is replaced once the new one is complete (--overwrite)", out)
    return None


def begin(out: str, build: str, num_epochs: int = 0, validation: bool = True) -> str:
    """Makes ``out/build`` and its folders, after removing what no published dataset names.

    ``num_epochs``: the epoch folders to make now; an engine that learns the epochs only later
    (Beam, in the job) leaves it 0 and makes each as it writes. ``validation``: whether the
    build has a validation split (``PrepareConfig.validation``). Call while holding ``out``
    (``folder_lock.hold``). Returns the build folder's path.
    """
    keep = _kept(out)
    stale = sorted(e for e in os.listdir(out) if _ours(e) and e not in keep + _KEEP_ALWAYS)
    if stale:
        log.warning(
            "%s holds an interrupted run's partial output (%s); removing it", out, ", ".join(stale)
        )
        for name in stale:
            _remove(os.path.join(out, name))
    root = os.path.join(out, build)
    for dirpath, _, names in os.walk(root):  # A killed run's half-written files.
        for name in names:
            if is_partial(name):
                os.remove(os.path.join(dirpath, name))
    for sub in build_folders(num_epochs, validation):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    return root


def publish(out: str, meta: DatasetMetadata) -> None:
    """Replaces metadata.json in one step, marks the folder complete, then drops other builds."""
    write_text_atomic(os.path.join(out, METADATA_FILE), meta.to_json())
    if not os.path.exists(os.path.join(out, SUCCESS_FILE)):
        write_text_atomic(os.path.join(out, SUCCESS_FILE), "")
    keep = published_roots(meta)
    for name in os.listdir(out):
        if (
            _ours(name)
            and name not in keep
            and name not in (METADATA_FILE, SUCCESS_FILE, LOCK_FILE)
        ):
            _remove(os.path.join(out, name))


def discard(out: str, build: str) -> None:
    """Removes a failed run's build folder, unless it is the published one (left as found)."""
    if build not in _kept(out):
        _remove(os.path.join(out, build))


@contextlib.contextmanager
def holding(out: str):
    """``out`` held by this run (waiting for another writer), SIGTERM cleaning up on the way out.

    A folder this run created is removed again if the run fails before publishing.
    """
    created = not os.path.exists(out)
    try:
        with terminate_as_exit(), hold(out, "prepare-data", wait=True):
            yield
    except BaseException:
        if created and not is_published(out):
            shutil.rmtree(out, ignore_errors=True)
        raise


@contextlib.contextmanager
def building(out: str, build: str, num_epochs: int = 0, validation: bool = True):
    """Makes the build folder (:func:`begin`); a run that fails leaves ``out`` as it found it.

    Yields the build folder. Wrap the decision to reuse in :func:`holding` first.
    """
    root = begin(out, build, num_epochs, validation)
    try:
        yield root
    except BaseException:
        discard(out, build)
        raise


def _kept(out: str) -> tuple[str, ...]:
    try:
        meta = published(out)
    except ValueError:
        return ()
    return tuple(sorted(published_roots(meta))) if meta else ()


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)
