"""One refusal per request rule: ``submit``'s local checks, the custom-job checks ``verify`` and
its JobService stand-in share, and what the Vertex AI stand-in refuses as the service does.

Each rule is broken alone, from a request that passes (the baselines), and the refusal must name
the option or field: a rule removed from the product code fails its own case here.

- ``pipelines.submit.request.validate_config``: every field a ``SubmitConfig`` can get wrong
  offline.
- ``pipelines.run_plan.custom_job.service_problems``: what Vertex AI's CreateCustomJob refuses that
  the proto accepts (``verify``, ``submit``'s preflight and the JobService stand-in call it).
- ``vertex_emulator/rest_service.py``: a request without ``Authorization: Bearer ...`` (or with
  a token the service never issued) is 401 UNAUTHENTICATED; pipeline parameters with unknown
  names, of the wrong type, or a required one missing, against the job's ``pipelineSpec``, are
  400 INVALID_ARGUMENT. So a client that dropped its credentials or sent a parameter the compiled
  pipeline does not take fails its test, as it would fail on Vertex AI.
"""

from __future__ import annotations

import json

import pytest
import requests
from conftest import BUCKET, NETWORK, PROJECT, REGION, SA, TOKEN, submit_config

from pipelines.run_plan import custom_job
from pipelines.submit.request import validate_config

_AUTH = {"Authorization": f"Bearer {TOKEN}"}


# --- submit: validate_config ---------------------------------------------------------------------


def test_a_config_with_every_field_well_formed_passes():
    validate_config(submit_config())  # The baseline each case below breaks once.
    validate_config(submit_config(experiment=None, schedule_cron="TZ=Europe/Paris 0 3 * * *"))


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"project": "MY_PROJECT"}, "project 'MY_PROJECT' holds the placeholder MY_PROJECT"),
        ({"project": "Ncf_Project"}, "project 'Ncf_Project' is not a project id"),
        ({"region": "europe-west44"}, "region 'europe-west44' is not a Vertex AI region"),
        ({"pipeline_root": "/tmp/root"}, "pipeline root '/tmp/root' must be a Cloud Storage"),
        ({"pipeline_root": "gs://b/root"}, "pipeline root 'gs://b/root': 'b' is not a bucket"),
        ({"service_account": "runner"}, "service account 'runner' is not an email"),
        ({"network": "ncf-vpc"}, "network 'ncf-vpc' must be a full name"),
        (
            {"network": "projects/my-project/global/networks/ncf-vpc"},
            "(the project's number, not its id",
        ),
        ({"experiment": "ncf"}, "experiment 'ncf': use 4-128 lowercase letters"),
        ({"schedule_cron": "0 3 * * *"}, "an experiment can be set for a run, not for a schedule"),
        (
            {"experiment": None, "schedule_cron": "daily"},
            "schedule 'daily' is not a 5-field cron expression",
        ),
        ({"max_concurrent_runs": 0}, "max concurrent runs (--max-concurrent-runs) must be >= 1"),
        ({"display_name": ""}, "display name must be 1-128 characters"),
        ({"display_name": "n" * 129}, "display name must be 1-128 characters"),
        ({"api_endpoint": "http://vertex.example.com"}, "api endpoint (--api-endpoint)"),
        ({"labels": {"Team": "recs"}}, "label key 'Team' is invalid"),
        ({"labels": {"team": "Recs"}}, "label team='Recs' is invalid"),
        ({"labels": {f"k{i}": "v" for i in range(65)}}, "65 labels given"),
    ],
    ids=[
        "project-placeholder",
        "project-form",
        "region",
        "root-not-gcs",
        "root-bucket-name",
        "service-account",
        "network",
        "network-project-id",
        "experiment-form",
        "experiment-with-schedule",
        "cron",
        "max-concurrent-runs",
        "display-name-empty",
        "display-name-129",
        "api-endpoint-plain-http",
        "label-key",
        "label-value",
        "label-count",
    ],
)
def test_submit_refuses_each_bad_field_naming_it(changes, expected):
    with pytest.raises(ValueError) as e:
        validate_config(submit_config(**changes))
    assert expected in str(e.value)


# --- verify: the custom-job request's service rules ----------------------------------------------


def _request(change=None):
    from google.cloud.aiplatform_v1 import types

    request = types.CreateCustomJobRequest(
        parent=f"projects/{PROJECT}/locations/{REGION}",
        custom_job=types.CustomJob(
            display_name="train-model",
            job_spec=types.CustomJobSpec(
                worker_pool_specs=[
                    types.WorkerPoolSpec(
                        replica_count=1,
                        machine_spec=types.MachineSpec(
                            machine_type="n1-standard-8",
                            accelerator_type="NVIDIA_TESLA_T4",
                            accelerator_count=1,
                        ),
                        container_spec=types.ContainerSpec(image_uri="europe-docker.pkg.dev/i"),
                    ),
                    types.WorkerPoolSpec(
                        replica_count=2,
                        machine_spec=types.MachineSpec(machine_type="n1-standard-8"),
                        container_spec=types.ContainerSpec(image_uri="europe-docker.pkg.dev/i"),
                    ),
                ],
                service_account=SA,
                network=NETWORK,
            ),
        ),
    )
    if change:
        change(request)
    return request


def _pool(i):
    return lambda r: r.custom_job.job_spec.worker_pool_specs[i]


def _set(path, value):
    """A change setting ``request.<path>`` (dots; ``pools[i]`` for a worker pool)."""

    def change(request):
        *parents, last = path.split(".")
        target = request
        for part in parents:
            if part.startswith("pools["):
                target = target.custom_job.job_spec.worker_pool_specs[int(part[6:-1])]
            else:
                target = getattr(target, part)
        setattr(target, last, value)

    return change


def test_a_well_formed_custom_job_request_has_no_problems():
    assert custom_job.service_problems(_request(), REGION) == []


@pytest.mark.parametrize(
    "change, endpoint_region, expected",
    [
        (_set("parent", REGION), REGION, f"parent {REGION!r} is not projects/P/locations/L"),
        (
            None,
            "us-central1",
            "parent location 'europe-west4' differs from the endpoint's region 'us-central1'",
        ),
        (_set("custom_job.display_name", ""), REGION, "custom_job.display_name is required"),
        (
            lambda r: r.custom_job.job_spec.worker_pool_specs.clear(),
            REGION,
            "job_spec.worker_pool_specs is required",
        ),
        (
            _set("pools[0].replica_count", 2),
            REGION,
            "job_spec.worker_pool_specs[0].replica_count must be 1 (the primary pool), not 2",
        ),
        (
            _set("pools[1].machine_spec.machine_type", ""),
            REGION,
            "job_spec.worker_pool_specs[1].machine_spec.machine_type is required",
        ),
        (
            _set("pools[1].container_spec.image_uri", ""),
            REGION,
            "job_spec.worker_pool_specs[1]: a container_spec.image_uri is required",
        ),
        (
            _set("pools[0].machine_spec.accelerator_type", 0),
            REGION,
            "job_spec.worker_pool_specs[0].machine_spec: accelerator_count without "
            "accelerator_type",
        ),
        (
            _set("custom_job.job_spec.service_account", "runner"),
            REGION,
            "job_spec.service_account 'runner' is not an email",
        ),
        (
            _set("custom_job.job_spec.network", "ncf-vpc"),
            REGION,
            "job_spec.network 'ncf-vpc' is not projects/NUMBER/global/networks/NAME",
        ),
        (
            _set("custom_job.job_spec.network", "projects/my-project/global/networks/v"),
            REGION,
            "job_spec.network 'projects/my-project/global/networks/v' is not "
            "projects/NUMBER/global/networks/NAME",
        ),
    ],
    ids=[
        "parent-form",
        "parent-region",
        "display-name",
        "no-worker-pools",
        "primary-replicas",
        "machine-type",
        "image",
        "accelerator-without-type",
        "service-account",
        "network",
        "network-project-id",
    ],
)
def test_each_custom_job_rule_refuses_naming_the_field(change, endpoint_region, expected):
    assert custom_job.service_problems(_request(change), endpoint_region) == [expected]


# --- the Vertex AI stand-in: credentials and pipeline parameters ---------------------------------

_JOBS = f"/v1/projects/{PROJECT}/locations/{REGION}/pipelineJobs"
_PARAMETERS = {
    "epochs": {"parameterType": "NUMBER_INTEGER"},
    "learning_rate": {"parameterType": "NUMBER_DOUBLE", "defaultValue": 0.001, "isOptional": True},
    "data_uri": {"parameterType": "STRING"},
    "shuffle": {"parameterType": "BOOLEAN", "defaultValue": True, "isOptional": True},
    "layers": {"parameterType": "LIST", "defaultValue": [64, 32], "isOptional": True},
}


def _job(values=None, parameters=None) -> dict:
    return {
        "displayName": "ncf",
        "pipelineSpec": {
            "pipelineInfo": {"name": "ncf"},
            "root": {"inputDefinitions": {"parameters": parameters or _PARAMETERS}},
            "schemaVersion": "2.1.0",
        },
        "runtimeConfig": {
            "gcsOutputDirectory": f"gs://{BUCKET}/root",
            "parameterValues": {"epochs": 3, "data_uri": f"gs://{BUCKET}/ml-1m"}
            if values is None
            else values,
        },
    }


def _post(standin, path: str, body: dict, headers: dict | None = None) -> requests.Response:
    return requests.post(
        standin.url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **({} if headers is None else headers)},
        timeout=10,
    )


@pytest.mark.parametrize(
    "headers, expected",
    [
        ({}, "missing required authentication credential"),
        ({"Authorization": ""}, "missing required authentication credential"),
        ({"Authorization": "Bearer "}, "missing required authentication credential"),
        ({"Authorization": f"Basic {TOKEN}"}, "missing required authentication credential"),
        ({"Authorization": "Bearer someone-elses-token"}, "invalid authentication credentials"),
    ],
    ids=["no-header", "empty", "bearer-without-token", "not-bearer", "unknown-token"],
)
def test_the_standin_refuses_a_request_without_credentials(standin, headers, expected):
    response = _post(standin, _JOBS, _job(), headers)
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
    assert expected in error["message"]
    assert standin.pipeline_jobs == {}
    # Reading needs credentials too (and operations at /ui/, Resource Manager at /v3/).
    assert requests.get(standin.url + _JOBS + "/x", timeout=10).status_code == 401
    assert requests.get(standin.url + f"/v3/projects/{PROJECT}", timeout=10).status_code == 401
    assert len(standin.rejected) == 3
    standin.rejected.clear()  # Refused on purpose.


def test_the_standin_takes_its_token_or_a_signed_jwt(standin):
    assert _post(standin, _JOBS, _job(), _AUTH).status_code == 200
    jwt = {"Authorization": "Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0.c2ln"}
    assert _post(standin, _JOBS, _job(), jwt).status_code == 200
    # Cloud Storage is exempt: with STORAGE_EMULATOR_HOST its client is anonymous by design.
    assert requests.get(f"{standin.url}/storage/v1/b/{BUCKET}/o", timeout=10).status_code == 200
    assert len(standin.pipeline_jobs) == 2


def test_a_client_that_sends_no_credentials_is_refused(standin):
    """The real client with credentials that add no header (a client bug): the call fails with
    the service's 401, as on Vertex AI, instead of passing unnoticed."""
    from google.api_core import exceptions
    from google.auth import credentials
    from google.cloud import aiplatform

    class DroppedHeader(credentials.Credentials):
        def refresh(self, request):
            self.token = TOKEN  # A token it has, but never sends.

        def apply(self, headers, token=None):
            pass

    aiplatform.init(
        project=PROJECT,
        location=REGION,
        api_endpoint=standin.url,
        api_transport="rest",
        credentials=DroppedHeader(),
    )
    with pytest.raises(exceptions.Unauthorized, match="authentication credential"):
        aiplatform.Endpoint.list()
    assert "authorization" not in standin.requests[-1].headers
    standin.rejected.clear()  # Refused on purpose.


@pytest.mark.parametrize(
    "values, expected",
    [
        ({"epochs": 3, "data_uri": "d", "epoch": 3}, "no input parameter 'epoch' (it takes: "),
        ({"epochs": "3", "data_uri": "d"}, "input parameter 'epochs' is NUMBER_INTEGER, got \"3\""),
        ({"epochs": 2.5, "data_uri": "d"}, "input parameter 'epochs' is NUMBER_INTEGER, got 2.5"),
        ({"epochs": 3, "data_uri": 7}, "input parameter 'data_uri' is STRING, got 7"),
        ({"epochs": 3, "data_uri": "d", "shuffle": "true"}, "'shuffle' is BOOLEAN"),
        (
            {"epochs": 3, "data_uri": "d", "learning_rate": "0.1"},
            "'learning_rate' is NUMBER_DOUBLE",
        ),
        ({"epochs": 3, "data_uri": "d", "layers": "[64]"}, "'layers' is LIST"),
        ({"epochs": 3, "data_uri": None}, "'data_uri' is STRING, got null"),
        ({"epochs": 3}, "the required input parameter 'data_uri' is missing"),
    ],
    ids=[
        "unknown-name",
        "string-for-integer",
        "fraction-for-integer",
        "number-for-string",
        "string-for-boolean",
        "string-for-double",
        "string-for-list",
        "null-for-string",
        "required-missing",
    ],
)
def test_the_standin_refuses_parameters_the_pipeline_does_not_take(standin, values, expected):
    response = _post(standin, _JOBS, _job(values), _AUTH)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert expected in error["message"]
    assert "pipeline_job.runtime_config.parameter_values" in error["message"]
    assert standin.pipeline_jobs == {}
    standin.rejected.clear()  # Refused on purpose.


def test_the_standin_checks_a_schedules_parameters_too(standin):
    schedule = {
        "displayName": "ncf-schedule",
        "cron": "0 3 * * *",
        "maxConcurrentRunCount": "1",
        "createPipelineJobRequest": {
            "parent": f"projects/{PROJECT}/locations/{REGION}",
            "pipelineJob": _job({"epochs": 3, "data_uri": "d", "epoch": 3}),
        },
    }
    path = f"/v1/projects/{PROJECT}/locations/{REGION}/schedules"
    response = _post(standin, path, schedule, _AUTH)
    assert response.status_code == 400, response.text
    assert (
        "schedule.create_pipeline_job_request.pipeline_job.runtime_config.parameter_values: "
        "the pipeline has no input parameter 'epoch'"
    ) in response.json()["error"]["message"]
    standin.rejected.clear()  # Refused on purpose.
    schedule["createPipelineJobRequest"]["pipelineJob"] = _job()
    assert _post(standin, path, schedule, _AUTH).status_code == 200


def test_the_standin_takes_parameters_of_the_declared_types(standin):
    values = {
        "epochs": 3.0,  # A protobuf Value's numbers are doubles: a whole one is an integer.
        "data_uri": "gs://b/d",
        "learning_rate": 1,
        "shuffle": False,
        "layers": [128, 64],
    }
    assert _post(standin, _JOBS, _job(values), _AUTH).status_code == 200
