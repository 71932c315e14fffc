"""What only a first real Vertex AI run can tell, checked at a step's start and said in one line.

The images run as an unprivileged user (uid 1000, the Dockerfile's ``USER``). Two things it needs
cannot be known before a real run:

- **The tuning metric file** (:func:`check_metric_file`). A tuning trial reports its metric with
  ``cloudml-hypertune``, which writes to ``$CLOUD_ML_HP_METRIC_FILE`` (where Vertex AI points it;
  undocumented) or to ``/tmp/hypertune/output.metrics``. Its constructor ``os.makedirs`` the
  file's folder when missing (a ``PermissionError`` if it cannot), and only the first report,
  after an epoch, opens the file: a folder that exists but refuses writes would fail the trial
  after hours of training.
- **Writes to Cloud Storage FUSE** (:func:`check_outputs`). Every step writes its outputs under
  ``/gcs/`` (KFP maps ``gs://`` artifact URIs there); whether Vertex AI's mount accepts writes
  from uid 1000 is not documented.

Each check probes as the current user what the step will do (create the folder, create and remove
a file in it) and removes what it made; a failure raises :class:`FirstRunError` (a
``faults.MachineFault``, so the CLI prints it as one line) naming the path, the uid, the errno
text and :data:`SWITCH`, the root image variant (docs/images.md, "The root variant").
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable

from training_core.common.faults import MachineFault

# Where Vertex AI mounts Cloud Storage in a step's container; tests point it at a local folder.
GCS_MOUNT = "/gcs/"
METRIC_FILE_ENV = "CLOUD_ML_HP_METRIC_FILE"
# cloudml-hypertune's own default (hypertune/hypertune.py, _DEFAULT_METRIC_PATH).
DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"
SWITCH = (
    "The switch: the root image variant, make push ... IMAGE_USER=root, then compile "
    "--image-user root (docs/images.md, 'The root variant')"
)
_PROBE_PREFIX = ".ncf-first-run-"


class FirstRunError(MachineFault):
    """A first-run check failed; the message is one line: the path, the uid, the cause, the fix."""


def check_metric_file(path: str | None) -> None:
    """The trial's metric file can be written as cloudml-hypertune will write it.

    Args:
        path: ``$CLOUD_ML_HP_METRIC_FILE`` as the trial sees it (None or "": unset, so
            cloudml-hypertune's default).

    Raises:
        FirstRunError: its folder cannot be created or written, or the file exists and is not
            writable.
    """
    where = f"{METRIC_FILE_ENV}={path}" if path else f"unset: the default {DEFAULT_METRIC_FILE}"
    path = path or DEFAULT_METRIC_FILE
    folder = os.path.dirname(path)
    if not folder:
        raise FirstRunError(
            f"tuning metric file ({where}): no folder in the path, which cloudml-hypertune "
            "cannot create (makedirs of ''); set it to an absolute path"
        )
    problem = _probe(folder, create=True)
    if problem is None and os.path.exists(path) and not os.access(path, os.W_OK):
        problem = f"the file is not writable ({_strerror(errno.EACCES)})"
    if problem:
        raise FirstRunError(
            f"tuning metric file ({where}) cannot be written as uid {os.geteuid()}: {problem}; "
            f"the trial would fail reporting its metric. {SWITCH}"
        )


def check_outputs(paths: Iterable[str], mount: str | None = None) -> None:
    """Each output under the Cloud Storage FUSE mount can be written there as this user.

    Only paths under ``mount`` (default :data:`GCS_MOUNT`) are probed, in the nearest existing
    folder of each one's parent (KFP's executor has already made an artifact's parent); a path
    elsewhere (a local run, a ``gs://`` URI) costs nothing.

    Raises:
        FirstRunError: creating a file there failed.
    """
    mount = mount or GCS_MOUNT
    root = os.path.normpath(mount)
    probed = set()
    for path in paths:
        path = os.fspath(path)
        if not path or not os.path.normpath(path).startswith(root + os.sep):
            continue
        folder = _existing(os.path.dirname(os.path.normpath(path)))
        if folder == root or not folder.startswith(root + os.sep) or folder in probed:
            continue  # The bucket itself is not visible: the step's own write will say so.
        probed.add(folder)
        problem = _probe(folder, create=False)
        if problem:
            raise FirstRunError(
                f"Cloud Storage FUSE at {root} refuses writes from uid {os.geteuid()} in "
                f"{folder} (for {path}): {problem}. {SWITCH}"
            )


def at_step_start(*paths: str) -> None:
    """A component's first call: :func:`check_outputs`, ending the process with its one line."""
    try:
        check_outputs(paths)
    except FirstRunError as e:
        raise SystemExit(f"error: {e}") from None


def _probe(folder: str, create: bool) -> str | None:
    """Creates ``folder`` (when ``create``) and a file in it, then removes both; what failed."""
    made = []
    try:
        if create and not os.path.isdir(folder):
            missing = folder
            while not os.path.isdir(os.path.dirname(missing)) and missing != os.path.dirname(
                missing
            ):
                missing = os.path.dirname(missing)
            try:
                os.makedirs(folder)
            except OSError as e:
                return f"creating folder {e.filename or folder} failed ({_strerror(e.errno)})"
            made = _created(missing, folder)
        try:
            fd, probe = tempfile.mkstemp(prefix=_PROBE_PREFIX, dir=folder)
        except OSError as e:
            return f"creating a file in {folder} failed ({_strerror(e.errno)})"
        os.close(fd)
        os.unlink(probe)
        return None
    finally:
        for created in reversed(made):
            try:
                os.rmdir(created)
            except OSError:
                break  # Someone wrote there meanwhile: leave it.


def _created(top: str, folder: str) -> list[str]:
    """The folders from ``top`` down to ``folder`` (those one ``makedirs`` made)."""
    made = [folder]
    while made[-1] != top and os.path.dirname(made[-1]) != made[-1]:
        made.append(os.path.dirname(made[-1]))
    return made[::-1]


def _existing(path: str) -> str:
    """``path`` or its nearest existing folder."""
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _strerror(code: int | None) -> str:
    """``[Errno 13] Permission denied (EACCES)``."""
    if code is None:
        return "no errno"
    return f"[Errno {code}] {os.strerror(code)} ({errno.errorcode.get(code, '?')})"
