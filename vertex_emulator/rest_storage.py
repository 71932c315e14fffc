"""Cloud Storage and Resource Manager on the REST side: what the SDK checks of a pipeline root.

Part of the REST side of the emulator (``rest_service``)::

    GET       /storage/v1/b/BUCKET and /storage/v1/b/BUCKET/o (object listing, paged)
    GET       /v3/projects/ID (Cloud Resource Manager: the SDK checks who owns the root bucket)

Object contents are not served: tests seed the listing with ``put_object`` (``verify`` maps
``gs://`` to local files instead).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Any

import google_crc32c

from vertex_emulator.rest_checks import Request, error_response
from vertex_emulator.rest_resources import RestResources, Route


class StorageRoutes(RestResources):
    """Buckets, their objects' listing and the projects that own them: ``RestStandIn``'s part."""

    def _storage_routes(self) -> list[Route]:
        return [
            ("GET", r"/storage/v1/b/(?P<bucket>[^/]+)", self._get_bucket),
            ("GET", r"/storage/v1/b/(?P<bucket>[^/]+)/o", self._list_objects),
            ("GET", r"/v3/projects/(?P<project>[^/]+)", self._get_project),
        ]

    def put_object(self, bucket: str, name: str, data: bytes) -> dict:
        """Creates or replaces an object; every write gets a new generation, as in GCS."""
        crc = base64.b64encode(struct.pack(">I", google_crc32c.value(data))).decode()
        obj = {
            "kind": "storage#object",
            "bucket": bucket,
            "name": name,
            "generation": str(next(self._generations)),
            "size": str(len(data)),
            "crc32c": crc,
            "md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode(),
        }
        with self._lock:
            self.buckets.setdefault(bucket, {})[name] = obj
        return obj

    def add_bucket(self, bucket: str, project: str) -> None:
        """Creates an empty bucket owned by ``project``."""
        with self._lock:
            self.buckets.setdefault(bucket, {})
            self.bucket_projects[bucket] = project

    @staticmethod
    def project_number(project: str) -> str:
        """The made-up, stable project number of a project id."""
        return str(100000000000 + int(hashlib.sha256(project.encode()).hexdigest()[:8], 16))

    def _get_bucket(self, req: Request, bucket: str) -> tuple[int, dict]:
        if bucket not in self.buckets:
            return error_response(404, f"The specified bucket does not exist: {bucket}")
        owner = self.project_number(self.bucket_projects.get(bucket, "someone-else"))
        return 200, {
            "kind": "storage#bucket",
            "name": bucket,
            "id": bucket,
            "location": "US",
            "projectNumber": owner,
        }

    def _list_objects(self, req: Request, bucket: str) -> tuple[int, dict]:
        if bucket not in self.buckets:
            return error_response(404, f"The specified bucket does not exist: {bucket}")
        prefix = req.query.get("prefix", [""])[0]
        names = sorted(n for n in self.buckets[bucket] if n.startswith(prefix))
        start = int(req.query.get("pageToken", ["0"])[0])
        size = min(self.list_page_size, int(req.query.get("maxResults", ["1000"])[0]))
        page = names[start : start + size]
        body: dict[str, Any] = {
            "kind": "storage#objects",
            "items": [self.buckets[bucket][n] for n in page],
        }
        if start + size < len(names):
            body["nextPageToken"] = str(start + size)
        return 200, body

    def _get_project(self, req: Request, project: str) -> tuple[int, dict]:
        number = self.project_number(project)
        return 200, {"name": f"projects/{number}", "projectId": project, "state": "ACTIVE"}
