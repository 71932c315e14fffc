"""Vertex AI's pipeline jobs and schedules on the REST side, with the ML Metadata contexts of runs.

Part of the REST side of the emulator (``rest_service``)::

    POST/GET  /v1/projects/P/locations/L/pipelineJobs[/ID]
    POST/GET  /v1/projects/P/locations/L/schedules[/ID]
    GET       /v1/projects/P/locations/L/metadataStores/default
    POST/GET  /v1/projects/P/locations/L/metadataStores/default/contexts[/ID]
    POST      /v1/.../contexts/ID:addContextChildren

A pipeline job is kept, never run: it stays ``PIPELINE_STATE_RUNNING`` (``verify`` runs the
compiled tasks itself); its run's metadata context exists at once (Vertex AI creates it
asynchronously).
"""

from __future__ import annotations

from pipelines import vertex_names as names
from vertex_emulator.rest_checks import (
    Invalid,
    Request,
    check_create_pipeline_job,
    check_schedule,
    error_response,
    parse,
    v1_types,
)
from vertex_emulator.rest_resources import LOC, RestResources, Route, timestamp


class PipelineJobRoutes(RestResources):
    """Pipeline jobs, schedules and metadata contexts: ``RestStandIn``'s part that serves them."""

    def _pipeline_job_routes(self) -> list[Route]:
        return [
            ("POST", LOC + r"/pipelineJobs", self._create_pipeline_job),
            ("GET", LOC + r"/pipelineJobs/(?P<id>[^/:]+)", self._get_pipeline_job),
            ("POST", LOC + r"/schedules", self._create_schedule),
            ("GET", LOC + r"/schedules/(?P<id>[^/:]+)", self._get_schedule),
            ("GET", LOC + r"/metadataStores/(?P<store>[^/:]+)", self._get_metadata_store),
            ("POST", LOC + r"/metadataStores/default/contexts", self._create_context),
            ("GET", LOC + r"/metadataStores/default/contexts/(?P<id>[^/:]+)", self._get_context),
            (
                "POST",
                LOC + r"/metadataStores/default/contexts/(?P<id>[^/:]+):addContextChildren",
                self._add_context_children,
            ),
        ]

    def _create_pipeline_job(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/pipelineJobs, body "pipeline_job", ?pipelineJobId=.
        request = v1_types().CreatePipelineJobRequest(
            parent=loc,
            pipeline_job=parse(req.raw, v1_types().PipelineJob, "pipeline_job"),
            pipeline_job_id=req.query.get("pipelineJobId", [""])[0],
        )
        check_create_pipeline_job(request, "")
        job_id = request.pipeline_job_id or f"job-{next(self._ids)}"
        name = f"{loc}/pipelineJobs/{job_id}"
        if name in self.pipeline_jobs:
            return error_response(409, f"PipelineJob {name} already exists.")
        job = dict(req.body)
        job.update(name=name, state="PIPELINE_STATE_PENDING", createTime=timestamp())
        self.pipeline_jobs[name] = job
        # Vertex creates the run's metadata context asynchronously; here it exists at once.
        ctx = f"{loc}/metadataStores/default/contexts/{job_id}"
        self.contexts[ctx] = {
            "name": ctx,
            "displayName": job_id,
            "schemaTitle": "system.PipelineRun",
            "schemaVersion": "0.0.1",
        }
        return 200, job

    def _get_pipeline_job(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/pipelineJobs/{id}"
        job = self.pipeline_jobs.get(name)
        if job is None:
            return error_response(404, f"PipelineJob {name} not found.")
        job["state"] = "PIPELINE_STATE_RUNNING"
        job["jobDetail"] = {
            "pipelineRunContext": self.contexts[f"{loc}/metadataStores/default/contexts/{id}"]
        }
        return 200, job

    def _create_schedule(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/schedules, body "schedule".
        check_schedule(parse(req.raw, v1_types().Schedule, "schedule"))
        name = f"{loc}/schedules/{next(self._ids)}"
        schedule = dict(req.body)
        schedule.update(name=name, state="ACTIVE", createTime=timestamp())
        self.schedules[name] = schedule
        return 200, schedule

    def _get_schedule(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/schedules/{id}"
        if name not in self.schedules:
            return error_response(404, f"Schedule {name} not found.")
        return 200, self.schedules[name]

    def _get_metadata_store(self, req: Request, loc: str, store: str) -> tuple[int, dict]:
        return 200, {"name": f"{loc}/metadataStores/{store}", "createTime": timestamp()}

    def _create_context(self, req: Request, loc: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{parent}/contexts, body "context", ?contextId=.
        parse(req.raw, v1_types().Context, "context")
        ctx_id = req.query.get("contextId", [""])[0]
        if ctx_id and not names.EXPERIMENT.fullmatch(ctx_id):
            raise Invalid(
                f"context_id {ctx_id!r} must be 4-128 characters of [a-z0-9-], the first not '-'.",
                "context_id",
            )
        ctx_id = ctx_id or f"context-{next(self._ids)}"
        name = f"{loc}/metadataStores/default/contexts/{ctx_id}"
        if name in self.contexts:
            return error_response(409, f"Context {name} already exists.")
        ctx = dict(req.body)
        ctx.update(name=name, createTime=timestamp())
        self.contexts[name] = ctx
        return 200, ctx

    def _get_context(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        name = f"{loc}/metadataStores/default/contexts/{id}"
        if name not in self.contexts:
            return error_response(404, f"Context {name} not found.")
        return 200, self.contexts[name]

    def _add_context_children(self, req: Request, loc: str, id: str) -> tuple[int, dict]:
        # HTTP rule: POST /v1/{context}:addContextChildren, body "*".
        request = parse(req.raw, v1_types().AddContextChildrenRequest, "")
        name = f"{loc}/metadataStores/default/contexts/{id}"
        if name not in self.contexts:
            return error_response(404, f"Context {name} not found.")
        self.context_children.setdefault(name, []).extend(request.child_contexts)
        return 200, {}
