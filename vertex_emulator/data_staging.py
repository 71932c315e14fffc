"""The local data behind ``data_uri``, staged in the ``/gcs/`` stand-in.

The parameters themselves are planned by ``pipelines.run_plan.parameters``.
"""

from __future__ import annotations

import os
import shutil


def stage(source: str, uri: str, local_path: str) -> str:
    """Copies local data to the stand-in file(s) behind ``uri``; returns where it went.

    A folder URI (ending in ``/``) receives a file by its name, or a folder's content.
    """
    target = local_path
    if uri.endswith("/") and os.path.isfile(source):
        target = os.path.join(local_path, os.path.basename(source))
    os.makedirs(os.path.dirname(target.rstrip("/")), exist_ok=True)
    if os.path.isdir(source):
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copyfile(source, target)
    return target
