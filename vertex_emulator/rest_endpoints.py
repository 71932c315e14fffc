"""Vertex AI endpoints on the REST side: deployments, their traffic split, and predictions.

Part of the REST side of the emulator (``rest_service``)::

    POST/GET  /v1/projects/P/locations/L/endpoints[/ID] (list: ``filter`` and ``order_by`` as
              for models)
    PATCH     /v1/projects/P/locations/L/endpoints/ID?updateMask=... (``Endpoint.update``:
              display_name, description, labels, traffic_split; a split adds up to 100 over
              deployed models the endpoint has, else 400; answers the Endpoint, no operation)
    POST      /v1/.../endpoints/ID:deployModel, :undeployModel (operations; the traffic rules of
              the v1 reference: a split adds up to 100, a model with traffic is not undeployed:
              400 FAILED_PRECONDITION)
    POST      /v1/.../endpoints/ID:predict, :rawPredict (answered by ``predictor``, a test's
              function that serves the deployed version's artifact the way its container does)

Not emulated for endpoints: the random split of requests by ``trafficSplit`` (every request goes
to the deployed model with the largest share), ``DeployedModel.status`` (replicas, health), the
time a deployment takes, and the prediction metrics Cloud Monitoring keeps per deployed model.
"""

from __future__ import annotations

import re
from typing import Any

from vertex_emulator.rest_checks import (
    Invalid,
    Request,
    check_display_name,
    check_labels,
    error_response,
    list_filter,
    message_to_dict,
    ordered,
    parse,
    require,
    v1_types,
)
from vertex_emulator.rest_resources import LOC, RestResources, Route, timestamp


class EndpointRoutes(RestResources):
    """Endpoints, deployments and predictions: ``RestStandIn``'s part that serves them."""

    def _endpoint_routes(self) -> list[Route]:
        return [
            ("POST", LOC + r"/endpoints", self._create_endpoint),
            ("GET", LOC + r"/endpoints", self._list_endpoints),
            ("GET", LOC + r"/endpoints/(?P<id>[^/:]+)", self._get_endpoint),
            ("PATCH", LOC + r"/endpoints/(?P<id>[^/:]+)", self._update_endpoint),
            ("POST", LOC + r"/endpoints/(?P<id>[^/:]+):deployModel", self._deploy_model),
            ("POST", LOC + r"/endpoints/(?P<id>[^/:]+):undeployModel", self._undeploy_model),
            ("POST", LOC + r"/endpoints/(?P<id>[^/:]+):predict", self._predict),
            ("POST", LOC + r"/endpoints/(?P<id>[^/:]+):rawPredict", self._raw_predict),
        ]

    def _create_endpoint(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/endpoints, body "endpoint", ?endpointId=.
        endpoint = parse(req.raw, v1_types().Endpoint, "endpoint")
        check_display_name(endpoint.display_name, "endpoint.display_name", required=True)
        check_labels(endpoint.labels, "endpoint.labels")
        name = f"{loc}/endpoints/{req.query.get('endpointId', [''])[0] or next(self._ids)}"
        if name in self.endpoints:
            return error_response(409, f"Endpoint {name} already exists.")
        now = timestamp()
        self.endpoints[name] = {
            **message_to_dict(endpoint),
            "name": name,
            "createTime": now,
            "updateTime": now,
            "etag": now,
        }
        response = {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.Endpoint"}
        response.update(self.endpoints[name])
        return 200, self._operation(name, "CreateEndpoint", response)

    def _list_endpoints(self, req: Request, loc: str) -> tuple[int, dict]:
        wanted = list_filter(req)
        found = [
            e for n, e in self.endpoints.items() if n.startswith(f"{loc}/endpoints/") and wanted(e)
        ]
        return 200, {"endpoints": ordered(req, found)}

    def _get_endpoint(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/endpoints/{id}"
        if name not in self.endpoints:
            return error_response(404, f"Endpoint {name} not found.")
        return 200, self.endpoints[name]

    def _update_endpoint(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # HTTP rule: PATCH /v1/{endpoint.name=projects/*/locations/*/endpoints/*}, body
        # "endpoint", ?updateMask= (required). UpdateEndpoint answers the Endpoint itself.
        # Endpoint.traffic_split: "If a DeployedModel's ID is not listed in this map, then it
        # receives no traffic. The traffic percentage values must add up to 100, or map must be
        # empty if the Endpoint is to not accept any traffic at a moment."
        request = parse(req.raw, v1_types().Endpoint, "endpoint")
        name = f"{loc}/endpoints/{id}"
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return error_response(404, f"Endpoint {name} not found.")
        paths = [
            re.sub(r"[A-Z]", lambda c: "_" + c.group().lower(), p.strip())
            for mask in req.query.get("updateMask", [])
            for p in mask.split(",")
            if p.strip()
        ]
        require(bool(paths), "update_mask")
        for path in paths:
            if path not in ("display_name", "description", "labels", "traffic_split"):
                raise Invalid(f"update_mask path {path!r} cannot be updated.", "update_mask")
        fields = message_to_dict(request)
        if "display_name" in paths:
            check_display_name(request.display_name, "endpoint.display_name", required=True)
            endpoint["displayName"] = request.display_name
        if "description" in paths:
            endpoint["description"] = request.description
        if "labels" in paths:
            check_labels(request.labels, "endpoint.labels")
            endpoint["labels"] = fields.get("labels", {})
        if "traffic_split" in paths:
            split = dict(request.traffic_split)
            deployed = sorted(d["id"] for d in endpoint.get("deployedModels", []))
            unknown = sorted(set(split) - set(deployed))
            if unknown:
                raise Invalid(
                    f"endpoint.traffic_split names deployed models {unknown} that endpoint "
                    f"{name} does not have (it has {deployed}).",
                    "endpoint.traffic_split",
                )
            if split and sum(split.values()) != 100:
                raise Invalid(
                    f"endpoint.traffic_split {split} must add up to 100, not "
                    f"{sum(split.values())} (or be empty: no traffic).",
                    "endpoint.traffic_split",
                )
            endpoint["trafficSplit"] = {k: v for k, v in split.items() if v}
        endpoint["updateTime"] = endpoint["etag"] = timestamp()
        return 200, endpoint

    def _deploy_model(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{endpoint}:deployModel, body "*". DeployModelRequest.traffic_split:
        # "the DeployedModel being deployed ... is referred to as 0 ... values must add up to 100".
        request = parse(req.raw, v1_types().DeployModelRequest, "")
        name = f"{loc}/endpoints/{id}"
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return error_response(404, f"Endpoint {name} not found.")
        deployed = request.deployed_model
        require(bool(deployed.model), "deployed_model.model")
        model_name, _, version = deployed.model.partition("@")
        versions = self.model_versions.get(model_name, [])
        found = next(
            (
                v
                for v in versions
                if (version or "default") in (v["versionId"], *v["versionAliases"])
            ),
            None,
        )
        if found is None:
            return error_response(404, f"Model {deployed.model} not found.")
        resources = deployed.dedicated_resources
        require(deployed._pb.HasField("dedicated_resources"), "deployed_model.dedicated_resources")
        require(
            bool(resources.machine_spec.machine_type),
            "deployed_model.dedicated_resources.machine_spec.machine_type",
        )
        if resources.min_replica_count < 1:
            raise Invalid(
                "deployed_model.dedicated_resources.min_replica_count must be at least 1.",
                "deployed_model.dedicated_resources.min_replica_count",
            )
        split = dict(request.traffic_split)
        current = {d["id"] for d in endpoint.get("deployedModels", [])}
        if split:
            unknown = set(split) - current - {"0"}
            if unknown or sum(split.values()) != 100:
                raise Invalid(
                    f"traffic_split {split} must add up to 100 over the endpoint's deployed "
                    f"models {sorted(current)} and 0 (the one being deployed).",
                    "traffic_split",
                )
        if self.deploy_failure:
            message, self.deploy_failure = self.deploy_failure, ""
            return 200, self._operation(name, "DeployModel", None, error=message)
        new_id = str(next(self._ids) * 1000003)
        record = {
            **message_to_dict(deployed),
            "id": new_id,
            "model": model_name,
            "modelVersionId": found["versionId"],
            "createTime": timestamp(),
        }
        endpoint.setdefault("deployedModels", []).append(record)
        if split:
            endpoint["trafficSplit"] = {
                (new_id if k == "0" else k): v for k, v in split.items() if v
            }
        endpoint["updateTime"] = endpoint["etag"] = timestamp()
        response = {
            "@type": "type.googleapis.com/google.cloud.aiplatform.v1.DeployModelResponse",
            "deployedModel": record,
        }
        return 200, self._operation(name, "DeployModel", response)

    def _undeploy_model(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # UndeployModelRequest: "A DeployedModel will be successfully undeployed only if it
        # doesn't have any traffic assigned to it when this method executes, or if this field
        # unassigns any traffic to it."
        request = parse(req.raw, v1_types().UndeployModelRequest, "")
        name = f"{loc}/endpoints/{id}"
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return error_response(404, f"Endpoint {name} not found.")
        gone = request.deployed_model_id
        models = endpoint.get("deployedModels", [])
        if gone not in {d["id"] for d in models}:
            return error_response(404, f"DeployedModel {gone} not found on {name}.")
        split = dict(request.traffic_split) or dict(endpoint.get("trafficSplit", {}))
        remaining = [d for d in models if d["id"] != gone]
        if split.get(gone) and remaining:
            # FAILED_PRECONDITION (400): the request is well formed, the endpoint's state is not.
            raise Invalid(
                f"DeployedModel {gone} still receives {split[gone]}% of the traffic; move it "
                "to the other deployed models first.",
                "traffic_split",
                status="FAILED_PRECONDITION",
            )
        endpoint["deployedModels"] = remaining
        endpoint["trafficSplit"] = {k: v for k, v in split.items() if k != gone and v}
        endpoint["updateTime"] = endpoint["etag"] = timestamp()
        response = {"@type": "type.googleapis.com/google.cloud.aiplatform.v1.UndeployModelResponse"}
        return 200, self._operation(name, "UndeployModel", response)

    def _serving(self, loc: str, id: str) -> tuple[dict, dict]:
        """The deployed model that takes the request (the highest traffic share) and its version."""
        name = f"{loc}/endpoints/{id}"
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            raise LookupError(f"Endpoint {name} not found.")
        split = endpoint.get("trafficSplit", {})
        if not split:
            raise Invalid(f"Endpoint {name} has no deployed model receiving traffic.", "")
        chosen = max(split, key=split.get)
        deployed = next(d for d in endpoint["deployedModels"] if d["id"] == chosen)
        version = next(
            v
            for v in self.model_versions[deployed["model"]]
            if v["versionId"] == deployed["modelVersionId"]
        )
        return deployed, version

    def _predict(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{endpoint}:predict, body "*". The container receives
        # {"instances": [...], "parameters": ...}; the response adds the deployed model's ids.
        request = parse(req.raw, v1_types().PredictRequest, "")
        require(len(request.instances) > 0, "instances")
        try:
            deployed, version = self._serving(loc, id)
        except LookupError as e:
            return error_response(404, str(e))
        # PredictRequest.instances are google.protobuf.Value s, whose numbers are doubles: the
        # Python client writes 1 as 1.0. The service hands them to the container as JSON written
        # by protobuf's C++ printer, which writes a whole double without a fraction (1.0 -> 1):
        # how an int64 input of a TensorFlow model gets an integer it accepts.
        body = {"instances": _whole_numbers(req.body["instances"])}
        if "parameters" in req.body:
            body["parameters"] = _whole_numbers(req.body["parameters"])
        answer = self._call_predictor(deployed, version, body)
        if "error" in answer:
            return error_response(400, str(answer["error"]))
        return 200, {
            "predictions": answer["predictions"],
            "deployedModelId": deployed["id"],
            "model": deployed["model"],
            "modelVersionId": deployed["modelVersionId"],
            "modelDisplayName": version.get("displayName", ""),
        }

    def _raw_predict(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # The body goes to the container as it is (rawPredict: "HttpBody"); its answer comes back.
        try:
            deployed, version = self._serving(loc, id)
        except LookupError as e:
            return error_response(404, str(e))
        if not isinstance(req.body, dict):
            raise Invalid("the stand-in's containers take JSON bodies.", "http_body")
        answer = self._call_predictor(deployed, version, req.body)
        return (400 if "error" in answer else 200), answer

    def _call_predictor(self, deployed: dict, version: dict, body: dict) -> dict:
        if self.predictor is None:
            raise Invalid("The stand-in has no predictor for this test.", "")
        return self.predictor(deployed, version, body)


def _whole_numbers(value: Any) -> Any:
    """JSON as protobuf's C++ printer writes a Value: whole doubles as integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    return value
