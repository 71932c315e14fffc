"""Content fingerprints of a dataset location, so pipeline caching follows the data, not the path.

Vertex AI caches a step on its component and its input values. A data step that only sees
``data_uri`` is served from cache after the files behind that path were replaced. Passing
``data_fingerprint(data_uri)`` as an extra input makes the cache key change with the content.

Local files and folders are hashed by content. ``gs://`` locations are hashed from the object
listing (name, generation, size and checksums), which changes whenever any object is rewritten,
without downloading anything.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

# Bumped when the hashing scheme changes, so old and new fingerprints never compare equal.
_SCHEME = "v1"


def data_fingerprint(
    uri: str,
    *,
    project: str | None = None,
    credentials: Any = None,
    storage_endpoint: str | None = None,
) -> str:
    """A short, stable content hash of the data at ``uri``.

    Args:
        uri: a local file or folder, ``gs://bucket/prefix``, or the Cloud Storage FUSE form
            ``/gcs/bucket/prefix`` (hashed as the ``gs://`` location it mounts).
        project: the project billed for the Cloud Storage listing (default: from credentials).
        credentials: ``google.auth`` credentials for Cloud Storage (default: Application Default
            Credentials).
        storage_endpoint: a Cloud Storage JSON API endpoint other than the default (a private
            endpoint or a local stand-in). ``STORAGE_EMULATOR_HOST`` is honoured as well.

    Returns:
        ``"sha256:<hex>"``; equal for equal content, different when any file changes.

    Raises:
        FileNotFoundError: a local path, or a ``gs://`` prefix with no objects.
    """
    if uri.startswith("/gcs/"):
        uri = "gs://" + uri[len("/gcs/") :]
    if uri.startswith("gs://"):
        digest = _gcs_digest(uri, project, credentials, storage_endpoint)
    else:
        digest = local_digest(uri)
    return f"sha256:{digest}"


def local_digest(path: str) -> str:
    """sha256 over (relative name, size, content hash) of every file under ``path``, sorted."""
    from training_core.data.input_files import file_sha256

    if not os.path.exists(path):
        raise FileNotFoundError(f"data location {path!r} does not exist")
    if os.path.isfile(path):
        files = [(os.path.basename(path), path)]
    else:
        files = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames.sort()
            for name in filenames:
                full = os.path.join(dirpath, name)
                files.append((os.path.relpath(full, path).replace(os.sep, "/"), full))
        if not files:
            raise FileNotFoundError(f"data location {path!r} holds no files")
    h = hashlib.sha256(f"ncf-data-fingerprint/{_SCHEME}/local\n".encode())
    for rel, full in sorted(files):
        h.update(f"{rel}\0{os.path.getsize(full)}\0{file_sha256([full])}\n".encode())
    return h.hexdigest()


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` to ``("bucket", "some/prefix")``."""
    if not uri.startswith("gs://"):
        raise ValueError(f"not a gs:// location: {uri!r}")
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"no bucket in {uri!r}; expected gs://BUCKET/PATH")
    return bucket, prefix


def _gcs_digest(
    uri: str, project: str | None, credentials: Any, storage_endpoint: str | None
) -> str:
    from google.cloud import storage

    bucket, prefix = split_gcs_uri(uri)
    client_options = {"api_endpoint": storage_endpoint} if storage_endpoint else None
    client = storage.Client(project=project, credentials=credentials, client_options=client_options)
    # Only the listing is read: a new generation means a rewritten object, whatever its bytes.
    fields = "items(name,generation,size,crc32c,md5Hash),nextPageToken"
    folder = prefix.rstrip("/") + "/" if prefix else ""
    rows = []
    for blob in client.list_blobs(bucket, prefix=prefix or None, fields=fields):
        if blob.name == prefix and not prefix.endswith("/"):
            rel = blob.name.rsplit("/", 1)[-1]  # The location is a single object.
        elif blob.name.startswith(folder) and not blob.name.endswith("/"):
            rel = blob.name[len(folder) :]  # Skips "gs://b/data-old/" when asked for "gs://b/data".
        else:
            continue  # A sibling sharing the prefix, or a folder placeholder object.
        rows.append(
            f"{rel}\0{blob.generation}\0{blob.size}\0{blob.crc32c or ''}\0{blob.md5_hash or ''}\n"
        )
    if not rows:
        raise FileNotFoundError(f"no objects under {uri}")
    h = hashlib.sha256(f"ncf-data-fingerprint/{_SCHEME}/gcs\n".encode())
    for row in sorted(rows):
        h.update(row.encode())
    return h.hexdigest()
