"""The Vertex AI Model Registry on the REST side: uploads, versions and their aliases.

Part of the REST side of the emulator (``rest_service``)::

    POST      /v1/projects/P/locations/L/models:upload (a new model, or a new version of
              ``parent_model``; the "default" alias moves to a version uploaded with it)
    GET       /v1/projects/P/locations/L/models[/ID[@VERSION]] (list: each model's default
              version; ``filter``: display_name="..." and labels.KEY="..." terms joined by
              AND/OR, else 400; ``order_by`` update_time desc)
    POST      /v1/projects/P/locations/L/models/ID@VERSION:mergeVersionAliases
"""

from __future__ import annotations

import re

from vertex_emulator.rest_checks import (
    Invalid,
    Request,
    check_upload_model,
    error_response,
    list_filter,
    message_to_dict,
    ordered,
    parse,
    require,
    v1_types,
)
from vertex_emulator.rest_resources import LOC, RestResources, Route, timestamp


class ModelRoutes(RestResources):
    """Models and their versions: ``RestStandIn``'s part that serves them."""

    def _model_routes(self) -> list[Route]:
        return [
            ("POST", LOC + r"/models:upload", self._upload_model),
            ("GET", LOC + r"/models", self._list_models),
            ("GET", LOC + r"/models/(?P<id>[^/:@]+)(?:@(?P<version>[^/:]+))?", self._get_model),
            (
                "POST",
                LOC + r"/models/(?P<id>[^/:@]+)@(?P<version>[^/:]+):mergeVersionAliases",
                self._merge_version_aliases,
            ),
        ]

    def _upload_model(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/models:upload, body "*"; answers an Operation.
        request = parse(req.raw, v1_types().UploadModelRequest, "")
        request.parent = loc
        check_upload_model(request)
        now = timestamp()
        fields = message_to_dict(request.model)
        if request.parent_model:
            # A new version of an existing model ("parent_model: ... the resource name of the
            # model into which to upload the version", UploadModelRequest).
            name = request.parent_model
            if name not in self.model_versions:
                return error_response(404, f"Model {name} not found.")
            versions = self.model_versions[name]
            version_id = str(len(versions) + 1)
        else:
            model_id = request.model_id or str(next(self._ids))
            name = f"{loc}/models/{model_id}"
            if name in self.models:
                return error_response(409, f"Model {name} already exists.")
            versions = self.model_versions.setdefault(name, [])
            version_id = "1"
        aliases = list(fields.pop("versionAliases", []))
        if not versions and "default" not in aliases:
            aliases.append("default")  # A model's first version is its default.
        if "default" in aliases:
            for earlier in versions:
                earlier["versionAliases"] = [a for a in earlier["versionAliases"] if a != "default"]
        if "containerSpec" in fields:
            # A model with a serving container deploys to dedicated machines (the service sets
            # this; the SDK's Endpoint.deploy reads it).
            fields.setdefault("supportedDeploymentResourcesTypes", ["DEDICATED_RESOURCES"])
        version = {
            **fields,
            "name": name,
            "versionId": version_id,
            "versionAliases": aliases,
            "createTime": versions[0]["createTime"] if versions else now,
            "updateTime": now,
            "versionCreateTime": now,
            "versionUpdateTime": now,
        }
        versions.append(version)
        self.models[name] = next(v for v in versions if "default" in v["versionAliases"])
        op = f"{name}/operations/{next(self._ids)}"
        meta = {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelOperationMetadata",
            "genericMetadata": {"createTime": now, "updateTime": now},
        }
        # Answered "not done", so the client polls the operation as it polls the service's;
        # the first poll finds it done (no wait: the client's first poll is immediate).
        self.operations[op] = {
            "name": op,
            "metadata": meta,
            "done": True,
            "response": {
                "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
                "model": name,
                "modelVersionId": version_id,
            },
        }
        return 200, {"name": op, "metadata": meta, "done": False}

    def _list_models(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: GET /v1/{parent}/models; each model once, as its default version.
        wanted = list_filter(req)
        models = [m for n, m in self.models.items() if n.startswith(f"{loc}/models/") and wanted(m)]
        return 200, {"models": ordered(req, models)}

    def _get_model(
        self, req: Request, loc: str, id: str, version: str | None = None
    ) -> tuple[int, dict]:
        name = f"{loc}/models/{id}"
        versions = self.model_versions.get(name, [])
        if version is None:
            found = self.models.get(name)
        else:
            found = next(
                (v for v in versions if version in (v["versionId"], *v["versionAliases"])), None
            )
        if found is None:
            return error_response(404, f"Model {name}{'@' + version if version else ''} not found.")
        return 200, found

    def _merge_version_aliases(
        self, req: Request, loc: str, id: str, version: str
    ) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{name=.../models/*}:mergeVersionAliases, body "*"; answers the Model.
        request = parse(req.raw, v1_types().MergeVersionAliasesRequest, "")
        name = f"{loc}/models/{id}"
        versions = self.model_versions.get(name, [])
        found = next(
            (v for v in versions if version in (v["versionId"], *v["versionAliases"])), None
        )
        if found is None:
            return error_response(404, f"Model {name}@{version} not found.")
        require(bool(request.version_aliases), "version_aliases")
        for alias in request.version_aliases:
            # "-alias" removes an alias; an alias moves from any other version that has it.
            if alias.startswith("-"):
                found["versionAliases"] = [a for a in found["versionAliases"] if a != alias[1:]]
                continue
            if not re.fullmatch(r"[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]", alias):
                raise Invalid(f"version alias {alias!r} is not [a-z][a-zA-Z0-9-]*[a-z0-9].", "")
            for other in versions:
                other["versionAliases"] = [a for a in other["versionAliases"] if a != alias]
            found["versionAliases"].append(alias)
        if "default" not in (a for v in versions for a in v["versionAliases"]):
            raise Invalid("the default version alias cannot be removed.", "version_aliases")
        found["versionUpdateTime"] = found["updateTime"] = timestamp()
        self.models[name] = next(v for v in versions if "default" in v["versionAliases"])
        return 200, found
