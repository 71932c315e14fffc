"""What a path is mounted on: whether it is on a Cloud Storage FUSE mount (``/gcs/`` on Vertex AI).

There permission bits are not what guards a bucket (IAM is), so ``output_folders`` judges
nothing there (``flock`` is not shared between machines either, and a folder cannot be renamed:
``folder_lock`` and ``atomic_writes`` find that out from the errors they get).
"""

from __future__ import annotations

import os
import re


def on_gcsfuse(path: str, mounts_file: str = "/proc/self/mounts") -> bool:
    """Whether ``path`` is on a Cloud Storage FUSE mount (by ``mounts_file``; Linux).

    gcsfuse mounts show as type ``fuse.gcsfuse`` (releases since early 2022), older ones as
    ``fuse`` whose source names gcsfuse.
    """
    real, best = os.path.realpath(path), ("", "", "")
    try:
        with open(mounts_file) as f:
            mounts = [line.split()[:3] for line in f if len(line.split()) > 2]
    except OSError:
        return False
    for source, point, kind in mounts:
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point)
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[1]):
            best = (source, point, kind)
    source, _, kind = best
    return kind.startswith("fuse.gcsfuse") or (kind == "fuse" and "gcsfuse" in source)
