"""``ncf-pipelines submit`` end to end: the real aiplatform and storage clients, local stand-in.

Every submission here goes through ``google.cloud.aiplatform.PipelineJob`` with the REST transport
to ``vertex_emulator/rest_service.py`` on 127.0.0.1; the assertions read what the stand-in
received. The stand-in parses every Vertex AI request with the service's own message types and the
documented field rules, and answers 400 INVALID_ARGUMENT to one that fails (the ``standin`` fixture
then fails the test). The project's compiled pipeline is submitted, and ``register_model``'s own
function uploads a model to the stand-in's Model Registry route.
"""

# No `from __future__ import annotations`: KFP reads the component annotations at runtime.
import base64
import json
import logging
import re

import pytest
import requests
import yaml
from conftest import BUCKET, PROJECT, SA, TOKEN
from kfp import compiler, dsl

from pipelines import cli, fingerprint, yaml_io
from pipelines.submit.dry_run import describe
from pipelines.submit.endpoints import api_endpoint_problem
from pipelines.submit.request import VERTEX_AI_REGIONS, SubmitConfig, validate_config
from pipelines.submit.run_values import with_data_fingerprint
from pipelines.submit.service import SubmitError
from pipelines.submit.vertex import submit

REGION = "us-central1"
ROOT = f"gs://{BUCKET}/pipeline-root"
NETWORK = "projects/123456/global/networks/ml-vpc"
DATA = f"gs://{BUCKET}/ml-1m/"


@dsl.component(base_image="python:3.11-slim")
def touch_data(data_uri: str, data_fingerprint: str, epochs: int) -> str:
    return f"{data_uri}:{data_fingerprint}:{epochs}"


@dsl.pipeline(name="ncf-submit-test")
def tiny_pipeline(
    data_uri: str,
    data_fingerprint: str = "",
    epochs: int = 1,
    learning_rate: float = 0.001,
    shuffle: bool = True,
):
    touch_data(
        data_uri=data_uri, data_fingerprint=data_fingerprint, epochs=epochs
    ).set_display_name("touch-data")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("compiled") / "pipeline.yaml")
    compiler.Compiler().compile(tiny_pipeline, path)
    return path


def _config(template, standin, **kw) -> SubmitConfig:
    from google.oauth2.credentials import Credentials

    base = dict(
        template_path=template,
        project=PROJECT,
        region=REGION,
        pipeline_root=ROOT,
        service_account=SA,
        network=NETWORK,
        labels={"team": "recs", "env": "test"},
        parameter_values={"data_uri": DATA, "epochs": "3", "learning_rate": "0.01"},
        api_endpoint=standin.url,
        credentials=Credentials(token=TOKEN),
    )
    base.update(kw)
    return SubmitConfig(**base)


def _cli_args(template, standin, *extra: str, data: str = DATA) -> list[str]:
    return [
        "submit",
        "--template",
        template,
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--pipeline-root",
        ROOT,
        "--service-account",
        SA,
        "--api-endpoint",
        standin.url,
        "--param",
        f"data_uri={data}",
        *extra,
    ]


def _created_job(standin) -> dict:
    (req,) = standin.find("POST", r"/v1/projects/[^/]+/locations/[^/]+/pipelineJobs$")
    return req.body


def _vertex_requests(standin):
    return [r for r in standin.requests if r.path.startswith("/v1/")]


def test_submit_sends_spec_parameters_account_network_labels(template, standin, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    config = with_data_fingerprint(_config(template, standin, enable_caching=False))
    result = submit(config)

    job = _created_job(standin)
    spec = job["pipelineSpec"]
    assert spec["pipelineInfo"]["name"] == "ncf-submit-test"
    assert set(spec["root"]["inputDefinitions"]["parameters"]) == {
        "data_uri",
        "data_fingerprint",
        "epochs",
        "learning_rate",
        "shuffle",
    }
    runtime = job["runtimeConfig"]
    params = runtime["parameterValues"]
    assert params["data_uri"] == DATA
    assert params["epochs"] == 3 and params["learning_rate"] == 0.01
    assert params["data_fingerprint"] == fingerprint.data_fingerprint(
        DATA, storage_endpoint=standin.url
    )
    assert params["data_fingerprint"].startswith("sha256:")
    assert runtime["gcsOutputDirectory"] == ROOT
    assert job["serviceAccount"] == SA
    assert job["network"] == NETWORK
    assert job["labels"] == {"team": "recs", "env": "test"}
    assert job["displayName"] == "ncf-submit-test"
    # Vertex has no run-level caching switch: the SDK writes it into every task.
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks and all(t["cachingOptions"]["enableCache"] is False for t in tasks.values())

    assert result.kind == "pipeline_job"
    assert result.resource_name in standin.pipeline_jobs
    assert result.resource_name.startswith(f"projects/{PROJECT}/locations/{REGION}/pipelineJobs/")
    assert result.console_url.startswith(
        f"https://console.cloud.google.com/vertex-ai/locations/{REGION}/pipelines/runs/"
    )
    vertex = _vertex_requests(standin)
    assert vertex and all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in vertex)
    out, err = capsys.readouterr()
    assert TOKEN not in out + err + caplog.text + repr(config) + json.dumps(describe(config))


def test_caching_left_as_compiled_by_default(template, standin):
    submit(_config(template, standin))
    tasks = _created_job(standin)["pipelineSpec"]["root"]["dag"]["tasks"]
    assert all(t["cachingOptions"]["enableCache"] is True for t in tasks.values())


@dsl.pipeline(name="ncf-submit-test-effects")
def pipeline_with_an_effect(data_uri: str, data_fingerprint: str = "", epochs: int = 1):
    touch_data(data_uri=data_uri, data_fingerprint=data_fingerprint, epochs=epochs)
    effect = touch_data(data_uri=data_uri, data_fingerprint="effect", epochs=epochs)
    effect.set_caching_options(False)  # As pipelines/pipeline.py compiles register and deploy.


def test_cache_on_keeps_uncached_steps_uncached(standin, tmp_path):
    path = str(tmp_path / "effects.yaml")
    compiler.Compiler().compile(pipeline_with_an_effect, path)
    submit(_config(path, standin, enable_caching=True, parameter_values={"data_uri": DATA}))
    tasks = _created_job(standin)["pipelineSpec"]["root"]["dag"]["tasks"]
    # The SDK's enable_caching=True would write True into every task, the effect's included.
    assert tasks["touch-data"]["cachingOptions"]["enableCache"] is True
    assert tasks["touch-data-2"]["cachingOptions"].get("enableCache", False) is False


def test_schedule_is_created_with_cron_and_caching_off(template, standin):
    config = _config(
        template, standin, schedule_cron="TZ=Europe/Paris 0 3 * * *", max_concurrent_runs=2
    )
    result = submit(with_data_fingerprint(config))

    assert result.kind == "schedule" and result.resource_name in standin.schedules
    (req,) = standin.find("POST", r"/schedules$")
    body = req.body
    assert body["cron"] == "TZ=Europe/Paris 0 3 * * *"
    assert body["displayName"] == "ncf-submit-test-schedule"
    assert int(body["maxConcurrentRunCount"]) == 2
    job = body["createPipelineJobRequest"]["pipelineJob"]
    assert job["serviceAccount"] == SA and job["network"] == NETWORK
    assert job["runtimeConfig"]["parameterValues"]["epochs"] == 3
    assert job["runtimeConfig"]["parameterValues"]["data_fingerprint"].startswith("sha256:")
    # The fingerprint is frozen into a schedule, so caching is off unless asked for.
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    assert all(t["cachingOptions"]["enableCache"] is False for t in tasks.values())
    assert not standin.find("POST", r"/pipelineJobs$")


def test_two_runs_submitted_in_one_second_get_their_own_job_ids(template, standin):
    # The SDK's ID (NAME-YYYYmmddHHMMSS) repeats within a second; the stand-in, as Vertex AI,
    # refuses a second job of one ID (409), so both being created shows the IDs differ.
    first = submit(_config(template, standin))
    second = submit(_config(template, standin))
    ids = [r.resource_name.rsplit("/", 1)[1] for r in (first, second)]
    assert ids[0] != ids[1]
    sent = [req.query["pipelineJobId"][0] for req in standin.find("POST", r"/pipelineJobs$")]
    assert sent == ids
    assert all(re.fullmatch(r"[a-z][-a-z0-9]*-\d{14}-[0-9a-f]{4}", i) for i in ids), ids


def test_experiment_is_created_and_the_run_added_to_it(template, standin):
    result = submit(_config(template, standin, experiment="ncf-tuning"))
    exp = f"projects/{PROJECT}/locations/{REGION}/metadataStores/default/contexts/ncf-tuning"
    assert standin.contexts[exp]["schemaTitle"] == "system.Experiment"
    job_id = result.resource_name.rsplit("/", 1)[1]
    assert standin.context_children[exp] == [exp.rsplit("/", 1)[0] + "/" + job_id]


def test_experiment_name_follows_the_context_id_rule(template, standin):
    """An Experiment is the metadata Context named after it, and CreateContextRequest.context_id
    must be 4-128 characters: a 3-character name passed the local check, then the service (here
    the stand-in) refused it after the bucket checks. Now it is refused before any request."""
    with pytest.raises(ValueError, match="experiment 'abc': use 4-128 lowercase letters"):
        submit(_config(template, standin, experiment="abc"))
    assert standin.requests == []
    submit(_config(template, standin, experiment="abcd"))
    assert f"projects/{PROJECT}/locations/{REGION}/metadataStores/default/contexts/abcd" in (
        standin.contexts
    )


def test_dry_run_prints_what_would_be_sent_and_sends_nothing(template, standin, capsys):
    args = [*_cli_args(template, standin), "--param", "epochs=7", "--label", "team=recs"]
    assert cli.main([*args, "--no-cache", "--experiment", "ncf-tuning", "--dry-run"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["action"] == "create pipeline job"
    assert shown["parameter_values"] == {
        "data_uri": DATA,
        "epochs": 7,
        "data_fingerprint": f"(computed at submit time from {DATA})",
    }
    assert shown["labels"] == {"team": "recs"} and shown["enable_caching"] is False
    assert shown["pipeline_name"] == "ncf-submit-test" and shown["pipeline_root"] == ROOT
    assert shown["service_account"] == SA and shown["experiment"] == "ncf-tuning"
    assert shown["credentials"] == "Application Default Credentials"

    assert cli.main([*args, "--schedule", "0 3 * * *", "--dry-run"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["action"] == "create schedule"
    assert shown["schedule"] == {
        "cron": "0 3 * * *",
        "display_name": "ncf-submit-test-schedule",
        "max_concurrent_run_count": 1,
    }
    assert shown["enable_caching"] is False
    assert standin.requests == []


def test_local_fingerprint_follows_content_not_path(tmp_path):
    f = tmp_path / "ratings.csv"
    f.write_text("1,2,3\n")
    first = fingerprint.data_fingerprint(str(f))
    assert fingerprint.data_fingerprint(str(f)) == first
    f.write_text("1,2,4\n")  # Same path, same size, new content.
    changed = fingerprint.data_fingerprint(str(f))
    assert changed != first

    folder = tmp_path / "ml-1m"
    folder.mkdir()
    (folder / "ratings.dat").write_text("1::2::5::9\n")
    (folder / "sub").mkdir()
    (folder / "sub" / "movies.dat").write_text("2::Toy Story\n")
    before = fingerprint.data_fingerprint(str(folder))
    (folder / "sub" / "movies.dat").write_text("2::Toy Story 2\n")
    assert fingerprint.data_fingerprint(str(folder)) != before
    (folder / "sub" / "movies.dat").write_text("2::Toy Story\n")
    assert fingerprint.data_fingerprint(str(folder)) == before
    (folder / "sub" / "movies.dat").rename(folder / "movies.dat")
    assert fingerprint.data_fingerprint(str(folder)) != before
    with pytest.raises(FileNotFoundError):
        fingerprint.data_fingerprint(str(tmp_path / "missing"))


def test_gcs_fingerprint_follows_generations_through_the_listing(standin):
    standin.list_page_size = 1  # Make the client follow nextPageToken.
    standin.put_object(BUCKET, "ml-1m-old/ratings.dat", b"not part of ml-1m/")
    fp = fingerprint.data_fingerprint(DATA, storage_endpoint=standin.url)
    assert fp == fingerprint.data_fingerprint(DATA.rstrip("/"), storage_endpoint=standin.url)
    assert fp == fingerprint.data_fingerprint(f"/gcs/{BUCKET}/ml-1m", storage_endpoint=standin.url)
    listings = standin.find("GET", rf"/storage/v1/b/{BUCKET}/o$")
    assert len(listings) >= 3 and any("pageToken" in r.query for r in listings)
    assert all(r.body is None for r in standin.requests)  # Listings only; nothing downloaded.

    standin.put_object(BUCKET, "ml-1m/ratings.dat", b"1::1193::5::978300760\n")  # Same bytes.
    assert fingerprint.data_fingerprint(DATA, storage_endpoint=standin.url) != fp

    with pytest.raises(FileNotFoundError, match="no objects under"):
        fingerprint.data_fingerprint(f"gs://{BUCKET}/nothing/", storage_endpoint=standin.url)


@pytest.mark.parametrize(
    "status, message, hint",
    [
        (
            403,
            "Permission 'aiplatform.pipelineJobs.create' denied on resource",
            "roles/aiplatform.user",
        ),
        (404, "Project ncf-test-project not found or Vertex AI API not enabled.", "enabled"),
        (400, "Invalid label value for key 'team'.", "rejected as invalid"),
    ],
)
def test_service_errors_reach_the_user_clearly(
    template, standin, adc, capsys, status, message, hint
):
    standin.fail_next(status, message, path_contains="/pipelineJobs")
    code = cli.main(_cli_args(template, standin))
    captured = capsys.readouterr()
    assert code == 2
    assert "ncf-pipelines submit: error: Vertex AI refused submitting" in captured.err
    assert message in captured.err and hint in captured.err
    name = {403: "PERMISSION_DENIED", 404: "NOT_FOUND", 400: "INVALID_ARGUMENT"}[status]
    assert f"({status} {name}): {message}" in captured.err
    assert "Traceback" not in captured.err
    assert standin.pipeline_jobs == {}


def test_storage_error_while_fingerprinting_is_clear(template, standin, adc, capsys):
    standin.fail_next(403, "caller does not have storage.objects.list access", "/o")
    assert cli.main(_cli_args(template, standin)) == 2
    err = capsys.readouterr().err
    assert "Cloud Storage refused listing" in err and "storage.objects.list" in err
    assert "roles/storage.objectViewer" in err
    assert _vertex_requests(standin) == []


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--label", "Team=recs"], "label key 'Team' is invalid"),
        (["--label", "team=Recs Team"], "label team='Recs Team' is invalid"),
        (["--label", "k=" + "x" * 64], "is invalid"),
        (["--param", "epoch=3"], "unknown parameter 'epoch' (did you mean 'epochs'?)"),
        (["--param", "epochs=three"], "parameter 'epochs' expects an integer, got 'three'"),
        (["--param", "shuffle=maybe"], "parameter 'shuffle' expects true or false"),
        (["--network", "ml-vpc"], "projects/PROJECT_NUMBER/global/networks/NAME"),
        (["--schedule", "every day"], "5-field cron"),
        (["--schedule", "0 3 * * *", "--experiment", "ncf-e"], "not for a schedule"),
        (["--experiment", "ncf"], "experiment 'ncf': use 4-128 lowercase letters"),
        (["--param", "data_uri=gs://b/x"], "--param 'data_uri' given twice"),
    ],
)
def test_bad_input_is_rejected_before_any_request(template, standin, adc, capsys, extra, expected):
    assert cli.main([*_cli_args(template, standin), *extra]) == 2
    err = capsys.readouterr().err
    assert expected in err
    if "unknown parameter" in expected:
        assert "takes: data_fingerprint, data_uri, epochs, learning_rate, shuffle" in err
    assert standin.requests == []


def test_local_data_uri_is_refused_for_vertex(template, standin, adc, capsys):
    assert cli.main(_cli_args(template, standin, data="/tmp/ml-1m")) == 2
    err = capsys.readouterr().err
    assert "Vertex AI cannot read local files" in err and "gcloud storage cp -r /tmp/ml-1m" in err
    assert standin.requests == []


def test_missing_required_parameter_and_bad_root(template, standin):
    with pytest.raises(ValueError, match=r"missing required parameter\(s\): data_uri"):
        describe(_config(template, standin, parameter_values={}))
    with pytest.raises(ValueError, match="must be a Cloud Storage folder"):
        describe(_config(template, standin, pipeline_root="/tmp/root"))
    with pytest.raises(ValueError, match="not a compiled KFP pipeline"):
        describe(_config(__file__, standin))
    assert standin.requests == []


def test_unreachable_endpoint_is_a_clear_error(template, standin):
    config = _config(template, standin, api_endpoint="http://127.0.0.1:9")
    with pytest.raises(SubmitError, match="could not connect to http://127.0.0.1:9"):
        submit(config)


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://vertex.example.com",
        "http://10.1.2.3:8080",
        "HTTP://vertex.example.com",
        "http://127.0.0.1@vertex.example.com",  # user info: the host is the one after '@'.
        "http://localhost.example.com",
    ],
)
def test_plain_http_endpoint_off_this_machine_is_refused(template, standin, endpoint):
    """The bearer token goes in every request's Authorization header: plain http to another
    host would send it in the clear. Refused before any request, naming the option."""
    with pytest.raises(ValueError, match=r"--api-endpoint.*plain http.*127\.0\.0\.1, ::1"):
        describe(_config(template, standin, api_endpoint=endpoint))
    with pytest.raises(ValueError, match="bearer token"):
        submit(_config(template, standin, api_endpoint=endpoint))
    assert standin.requests == []


@pytest.mark.parametrize(
    "endpoint",
    [
        None,
        "us-central1-aiplatform.googleapis.com",  # the transport adds https://
        "https://vertex.example.com",
        "http://127.0.0.1:8080",
        "http://127.0.0.2",
        "http://[::1]:8080",
        "http://localhost:8080",
    ],
)
def test_tls_and_loopback_endpoints_are_allowed(endpoint):
    assert api_endpoint_problem(endpoint) is None


def test_cli_refuses_a_plain_http_endpoint_with_the_option_named(template, standin, adc, capsys):
    args = _cli_args(template, standin)
    args[args.index("--api-endpoint") + 1] = "http://vertex.example.com"
    assert cli.main([*args, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "(--api-endpoint) 'http://vertex.example.com' is plain http to vertex.example.com" in err
    assert standin.requests == []


def test_cli_submit_via_adc_never_shows_credentials(
    template, standin, adc, private_key_pem, capsys, caplog
):
    caplog.set_level(logging.DEBUG)
    code = cli.main(
        [
            "-v",
            *_cli_args(template, standin),
            "--param",
            "epochs=2",
            "--label",
            "team=recs",
            "--network",
            NETWORK,
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    job = _created_job(standin)
    assert job["runtimeConfig"]["parameterValues"]["epochs"] == 2
    assert job["labels"] == {"team": "recs"} and job["serviceAccount"] == SA
    assert "Submitted pipeline job projects/" in out and "Console: https://" in out

    # The clients really authenticated: google-auth exchanged a signed JWT at the token endpoint
    # for TOKEN (used by Cloud Storage); the Vertex AI (GAPIC) clients sign their own JWTs.
    (refresh,) = standin.find("POST", "^/token$")
    assert (
        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" in refresh.raw.decode()
    )
    sent = {
        r.headers["authorization"].removeprefix("Bearer ")
        for r in standin.requests
        if "authorization" in r.headers
    }
    assert TOKEN in sent
    vertex = {r.headers["authorization"].removeprefix("Bearer ") for r in _vertex_requests(standin)}
    for jwt in vertex - {TOKEN}:
        claims = json.loads(base64.urlsafe_b64decode(jwt.split(".")[1] + "=="))
        assert claims["iss"] == SA
    # ... and no credential shows up anywhere a person or a log collector would see it.
    with open(template, encoding="utf-8") as f:
        compiled = f.read()
    secrets = sent | {private_key_pem.splitlines()[5]}
    for secret in secrets:
        for where, text in (("stdout", out), ("stderr", err), ("logs", caplog.text)):
            assert secret not in text, f"a credential leaked to {where}"
        assert secret not in compiled
    assert "credentials" not in repr(SubmitConfig("t", "p", "r", "gs://b", credentials=object()))


def test_submit_help_shows_an_example(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["submit", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Example:" in out and "ncf-pipelines submit --template" in out and "--dry-run" in out


@pytest.mark.slow
def test_real_pipeline_dry_run_fills_location_and_fingerprint(tmp_path, capsys):
    from pipelines import pipeline, profiles

    path = tmp_path / "ncf.yaml"
    pipeline.compile_pipeline(profiles.BUILTIN["gpu-a100-2workers"], str(path))
    code = cli.main(
        [
            "submit",
            "--template",
            str(path),
            "--project",
            "my-proj",
            "--region",
            "europe-west4",
            "--pipeline-root",
            "gs://bucket/root",
            "--param",
            "data_uri=gs://bucket/ml-1m/",
            "--dry-run",
        ]
    )
    assert code == 0
    shown = json.loads(capsys.readouterr().out)
    # The custom job's region comes from the pipeline job itself, not from a parameter, and the
    # dry run shows the request built as Vertex AI would build it.
    assert "location" not in shown["parameter_values"]
    job = shown["custom_jobs"]["train-model"]
    assert job["parent"] == "projects/my-proj/locations/europe-west4"
    assert len(job["worker_pools"]) == 2 and "NVIDIA_TESLA_A100" in job["worker_pools"][0]
    assert shown["parameter_values"]["data_fingerprint"].startswith("(computed at submit time")
    assert shown["pipeline_name"] == pipeline.PIPELINE_NAME


@pytest.mark.slow
def test_submit_preflights_the_submitted_batch_sizes_against_the_compiled_replicas(
    tmp_path, capsys
):
    """The profile travels in the template: 1001 rows cannot split over gpu-a100x8's 8 GPUs."""
    from pipelines import pipeline, profiles

    path = tmp_path / "ncf.yaml"
    pipeline.compile_pipeline(profiles.BUILTIN["gpu-a100x8"], str(path))
    base = ["submit", "--template", str(path), "--project", "my-proj", "--region", "us-east1"]
    base += ["--pipeline-root", "gs://bucket/root", "--param", "data_uri=gs://bucket/ml-1m/"]
    assert cli.main([*base, "--param", "train_batch_size=1001", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "train_batch_size 1001 does not split over 8 replicas; use 1000 or 1008" in err
    # Not only in a dry run: a real submission stops before credentials or any request.
    assert cli.main([*base, "--param", "train_batch_size=1001"]) == 2
    assert "does not split over 8 replicas" in capsys.readouterr().err
    assert cli.main([*base, "--param", "train_batch_size=1008", "--dry-run"]) == 0
    # The CPU template trains on one replica: any batch runs.
    cpu = tmp_path / "cpu.yaml"
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(cpu))
    base[2] = str(cpu)
    assert cli.main([*base, "--param", "train_batch_size=1001", "--dry-run"]) == 0


@pytest.mark.slow
def test_custom_job_runs_as_the_submitted_account_on_the_submitted_network(tmp_path, capsys):
    from pipelines import pipeline, profiles

    path = tmp_path / "ncf.yaml"
    pipeline.compile_pipeline(profiles.BUILTIN["gpu-t4"], str(path))
    args = ["submit", "--template", str(path), "--project", "my-proj", "--region", "asia-east1"]
    args += ["--pipeline-root", "gs://bucket/root", "--param", "data_uri=gs://bucket/d/"]
    args += ["--service-account", "runner@my-proj.iam.gserviceaccount.com"]
    args += ["--network", "projects/123/global/networks/vpc", "--dry-run"]
    assert cli.main(args) == 0
    job = json.loads(capsys.readouterr().out)["custom_jobs"]["train-model"]
    assert job["parent"] == "projects/my-proj/locations/asia-east1"
    assert job["service_account"] == "runner@my-proj.iam.gserviceaccount.com"
    assert job["network"] == "projects/123/global/networks/vpc"
    assert job["worker_pools"][0].startswith("1 x n1-standard-8 + 1 x NVIDIA_TESLA_T4")


@pytest.fixture(scope="module")
def ncf_template(tmp_path_factory) -> str:
    from pipelines import pipeline, profiles

    path = str(tmp_path_factory.mktemp("ncf") / "ncf.yaml")
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], path)
    return path


def _ncf_dry_run(template, *extra: str, region: str | None = "us-central1") -> list[str]:
    args = ["submit", "--template", template, "--project", "my-proj"]
    args += ["--pipeline-root", "gs://bucket/root", "--param", "data_uri=gs://bucket/ml-1m/"]
    return [*args, *(["--region", region] if region else []), *extra, "--dry-run"]


@pytest.mark.parametrize(
    "extra, expected",
    [
        (
            ["--param", "preset=nosuch"],
            "parameter 'preset': unknown preset 'nosuch'; choose one of auto, reference, tiny, "
            "quick, ml-100k, ml-1m, ml-20m",
        ),
        (["--param", "preset=ml1m"], "unknown preset 'ml1m' (did you mean 'ml-1m'?)"),
        (["--param", "eval_negatives=-5"], "parameter 'eval_negatives' must be >= 0, got -5"),
        (["--param", "num_neg=-1"], "parameter 'num_neg' must be >= 0, got -1"),
        (
            ["--param", "data_epochs=-1"],
            "parameter 'data_epochs' must be >= 1 (or not set: as many as training runs), got -1 "
            "(0: not set)",
        ),
        (["--param", "min_ratings=-2"], "parameter 'min_ratings' must be >= 0"),
        (["--param", "train_batch_size=0"], "parameter 'train_batch_size' must be >= 1, got 0"),
        (
            ["--param", "eval_batch_size=-1"],
            "parameter 'eval_batch_size' must be >= 1 (or auto), got -1 (0: automatic)",
        ),
        (["--param", "epochs=-3"], "parameter 'epochs' must be >= 0 (0: the preset's), got -3"),
    ],
)
def test_ncf_parameter_values_are_checked_naming_the_parameter(
    ncf_template, capsys, extra, expected
):
    assert cli.main(_ncf_dry_run(ncf_template, *extra)) == 2
    assert expected in capsys.readouterr().err


def test_several_bad_parameter_values_are_listed_together(ncf_template, capsys):
    extra = ["--param", "preset=nosuch", "--param", "eval_negatives=-5"]
    assert cli.main(_ncf_dry_run(ncf_template, *extra)) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'nosuch'" in err and "'eval_negatives' must be >= 0, got -5" in err


def test_good_ncf_parameter_values_pass(ncf_template, capsys):
    extra = ["--param", "preset=tiny", "--param", "eval_negatives=0", "--param", "epochs=0"]
    extra += ["--param", "eval_batch_size=0"]
    assert cli.main(_ncf_dry_run(ncf_template, *extra)) == 0
    assert json.loads(capsys.readouterr().out)["parameter_values"]["preset"] == "tiny"


def test_region_must_be_a_vertex_ai_region(ncf_template, capsys, monkeypatch):
    assert cli.main(_ncf_dry_run(ncf_template, region="mars-north1")) == 2
    err = capsys.readouterr().err
    assert "--region 'mars-north1' is not a Vertex AI region" in err and "us-central1" in err
    assert cli.main(_ncf_dry_run(ncf_template, region="europe-wset4")) == 2
    assert "did you mean 'europe-west4'?" in capsys.readouterr().err
    # From the environment, the message names the variable.
    monkeypatch.setenv("GOOGLE_CLOUD_REGION", "us-centrl1")
    assert cli.main(_ncf_dry_run(ncf_template, region=None)) == 2
    err = capsys.readouterr().err
    assert "GOOGLE_CLOUD_REGION 'us-centrl1' is not a Vertex AI region" in err
    assert "did you mean 'us-central1'?" in err
    # The library checks it too.
    with pytest.raises(ValueError, match="region 'mars-north1' is not a Vertex AI region"):
        validate_config(SubmitConfig(ncf_template, PROJECT, "mars-north1", ROOT))


def test_regions_are_the_ones_the_vertex_ai_client_accepts():
    from google.cloud.aiplatform.constants import base

    assert VERTEX_AI_REGIONS == base.SUPPORTED_REGIONS - {"global"}


# --- what the stand-in refuses -------------------------------------------------------------------

LOCATION = f"/v1/projects/{PROJECT}/locations/{REGION}"
SERVING_IMAGE = "us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"


def _good_job() -> dict:
    return {
        "displayName": "ncf",
        "pipelineSpec": {
            "pipelineInfo": {"name": "ncf"},
            "root": {
                "inputDefinitions": {"parameters": {"epochs": {"parameterType": "NUMBER_INTEGER"}}}
            },
            "schemaVersion": "2.1.0",
        },
        "runtimeConfig": {"gcsOutputDirectory": ROOT, "parameterValues": {"epochs": 3}},
        "labels": {"team": "recs"},
        "network": NETWORK,
        "serviceAccount": SA,
    }


def _good_schedule() -> dict:
    return {
        "displayName": "ncf-schedule",
        "cron": "TZ=Europe/Paris 0 3 * * *",
        "maxConcurrentRunCount": "1",
        "createPipelineJobRequest": {
            "parent": f"projects/{PROJECT}/locations/{REGION}",
            "pipelineJob": _good_job(),
        },
    }


def _good_upload() -> dict:
    return {
        "model": {
            "displayName": "ncf-neumf",
            "artifactUri": f"gs://{BUCKET}/model",
            "containerSpec": {"imageUri": SERVING_IMAGE},
            "labels": {"team": "recs"},
        }
    }


_AUTH = {"Authorization": f"Bearer {TOKEN}"}  # What the stand-in, as the service, requires.


def _post(standin, path: str, body, **query: str) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **_AUTH}
    return requests.post(standin.url + path, data=data, params=query, headers=headers, timeout=10)


def _with(make, change):
    body = make()
    change(body)
    return body


_JOBS, _SCHEDULES, _UPLOAD = "/pipelineJobs", "/schedules", "/models:upload"
_CONTEXTS = "/metadataStores/default/contexts"


def test_standin_accepts_well_formed_requests(standin):
    """The baselines of the refusals below: each changes one thing in one of these."""
    assert _post(standin, LOCATION + _JOBS, _good_job(), pipelineJobId="ncf-1").status_code == 200
    assert _post(standin, LOCATION + _SCHEDULES, _good_schedule()).status_code == 200
    op = _post(standin, LOCATION + _UPLOAD, _good_upload())
    assert op.status_code == 200 and op.json()["done"] is False
    operation = requests.get(standin.url + "/v1/" + op.json()["name"], headers=_AUTH, timeout=10)
    assert operation.json()["done"]
    context = {"displayName": "e", "schemaTitle": "system.Experiment"}
    assert _post(standin, LOCATION + _CONTEXTS, context, contextId="ncf-e").status_code == 200
    assert len(standin.pipeline_jobs) == len(standin.schedules) == len(standin.models) == 1


@pytest.mark.parametrize(
    "path, body, query, expected",
    [
        (_JOBS, b"{not json", {}, "Invalid JSON payload received"),
        (
            _JOBS,
            _with(_good_job, lambda b: b.update(displayNme="x")),
            {},
            'has no field named "displayNme"',
        ),
        (_JOBS, _with(_good_job, lambda b: b.update(labels=["team"])), {}, "labels field"),
        (
            _JOBS,
            _with(_good_job, lambda b: b["runtimeConfig"].update(gcsOutputDir=ROOT)),
            {},
            'no field named "gcsOutputDir"',
        ),
        (
            _JOBS,
            _with(_good_job, lambda b: b.pop("pipelineSpec")),
            {},
            "pipeline_job.pipeline_spec is required",
        ),
        (
            _JOBS,
            _with(_good_job, lambda b: b["pipelineSpec"]["root"].update(dagg={})),
            {},
            "not a valid PipelineSpec: Failed to parse root field: Message type "
            '"ml_pipelines.ComponentSpec" has no field named "dagg"',
        ),
        (
            _JOBS,
            _with(_good_job, lambda b: b["runtimeConfig"].pop("gcsOutputDirectory")),
            {},
            "pipeline_job.runtime_config.gcs_output_directory is required",
        ),
        (
            _JOBS,
            _with(_good_job, lambda b: b["runtimeConfig"].update(gcsOutputDirectory="/tmp/r")),
            {},
            "must be a Cloud Storage path",
        ),
        (_JOBS, _good_job(), {"pipelineJobId": "Ncf_1"}, "pipeline_job_id 'Ncf_1'"),
        (_JOBS, _with(_good_job, lambda b: b.update(labels={"Team": "r"})), {}, "invalid label"),
        (_JOBS, _with(_good_job, lambda b: b.update(labels={"t": "R"})), {}, "invalid label"),
        (
            _JOBS,
            _with(_good_job, lambda b: b.update(displayName="x" * 129)),
            {},
            "display_name must be at most 128 characters",
        ),
        (
            _JOBS,
            _with(_good_job, lambda b: b.update(network="projects/p/global/networks/v")),
            {},
            "PROJECT_NUMBER",
        ),
        (
            _SCHEDULES,
            _with(_good_schedule, lambda b: b.pop("maxConcurrentRunCount")),
            {},
            "schedule.max_concurrent_run_count is required",
        ),
        (
            _SCHEDULES,
            _with(_good_schedule, lambda b: b.pop("displayName")),
            {},
            "schedule.display_name is required",
        ),
        (
            _SCHEDULES,
            _with(_good_schedule, lambda b: b["createPipelineJobRequest"].pop("parent")),
            {},
            "schedule.create_pipeline_job_request.parent is required",
        ),
        (
            _SCHEDULES,
            _with(
                _good_schedule,
                lambda b: b["createPipelineJobRequest"]["pipelineJob"].pop("pipelineSpec"),
            ),
            {},
            "schedule.create_pipeline_job_request.pipeline_job.pipeline_spec is required",
        ),
        (_UPLOAD, {}, {}, "model is required"),
        (
            _UPLOAD,
            _with(_good_upload, lambda b: b["model"].pop("displayName")),
            {},
            "model.display_name is required",
        ),
        (
            _UPLOAD,
            _with(_good_upload, lambda b: b["model"]["containerSpec"].pop("imageUri")),
            {},
            "model.container_spec.image_uri is required",
        ),
        (
            _UPLOAD,
            _with(_good_upload, lambda b: b["model"].update(artifactURI="gs://b/m")),
            {},
            'no field named "artifactURI"',
        ),
        (_UPLOAD, _with(_good_upload, lambda b: b.update(modelId="1ncf")), {}, "model_id '1ncf'"),
        (
            _UPLOAD,
            _with(_good_upload, lambda b: b["model"].update(labels={"team": "Recs"})),
            {},
            "invalid label",
        ),
        (_CONTEXTS, {"displayName": "e"}, {"contextId": "e"}, "context_id 'e'"),
        (_CONTEXTS, {"displayName": "e", "schema": "x"}, {}, 'no field named "schema"'),
    ],
    ids=[
        "job-not-json",
        "job-unknown-field",
        "job-labels-not-a-map",
        "job-unknown-runtime-field",
        "job-no-spec",
        "job-spec-not-a-pipelinespec",
        "job-no-output-dir",
        "job-output-dir-not-gcs",
        "job-id-chars",
        "label-key-uppercase",
        "label-value-uppercase",
        "job-display-name-129",
        "network-project-id",
        "schedule-no-max-concurrent",
        "schedule-no-display-name",
        "schedule-request-no-parent",
        "schedule-job-no-spec",
        "upload-no-model",
        "upload-no-display-name",
        "upload-no-image",
        "upload-unknown-field",
        "upload-model-id-digit",
        "upload-label-uppercase",
        "context-id-short",
        "context-unknown-field",
    ],
)
def test_standin_refuses_malformed_requests_as_the_service_does(
    standin, path, body, query, expected
):
    response = _post(standin, LOCATION + path, body, **query)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and error["code"] == 400
    assert expected in error["message"]
    assert [why for _, why in standin.rejected] == [error["message"]]
    assert standin.pipeline_jobs == standin.schedules == standin.models == {}
    standin.rejected.clear()  # Refused on purpose.


def test_a_spec_the_service_cannot_parse_fails_the_submission(template, standin, tmp_path):
    """Through the real client: a tampered template reaches the stand-in and is refused there."""
    with open(template, encoding="utf-8") as f:
        spec = yaml_io.load(f)
    task = spec["root"]["dag"]["tasks"]["touch-data"]
    task["cachingOption"] = {"enableCache": True}  # A misspelt field in the pipeline spec.
    tampered = tmp_path / "tampered.yaml"
    tampered.write_text(yaml.safe_dump(spec))
    with pytest.raises(SubmitError, match=r"\(400 INVALID_ARGUMENT\).*valid PipelineSpec"):
        submit(_config(str(tampered), standin))
    ((req, why),) = standin.rejected
    assert req.path.endswith("/pipelineJobs") and 'no field named "cachingOption"' in why
    assert standin.pipeline_jobs == {}
    standin.rejected.clear()  # Refused on purpose.


# --- the real pipeline, submitted ----------------------------------------------------------------

_JSON_TYPES = {
    "STRING": (str,),
    "NUMBER_INTEGER": (int, float),
    "NUMBER_DOUBLE": (int, float),
    "BOOLEAN": (bool,),
    "LIST": (list,),
    "STRUCT": (dict,),
}


@pytest.mark.slow
def test_dataflow_workers_run_as_the_runs_service_account(ncf_template, standin):
    """Dataflow starts its workers as the Compute Engine default account (usually an Editor)
    unless the job names one: the request carries the run's account for them, and an account the
    user named for the workers is kept."""
    dataflow = '["--runner=DataflowRunner", "--project=p", "--region=us-central1"]'
    given = {"data_uri": DATA, "beam_pipeline_args": dataflow}
    config = _config(ncf_template, standin, parameter_values=given)
    submit(with_data_fingerprint(config))
    sent = standin.find("POST", r"/pipelineJobs$")[-1].body["runtimeConfig"]["parameterValues"]
    assert sent["beam_pipeline_args"] == [
        "--runner=DataflowRunner",
        "--project=p",
        "--region=us-central1",
        f"--service_account_email={SA}",
    ]
    named = (
        '["--runner", "dataflow", "--service_account_email", "workers@p.iam.gserviceaccount.com"]'
    )
    config = _config(
        ncf_template, standin, parameter_values={"data_uri": DATA, "beam_pipeline_args": named}
    )
    submit(with_data_fingerprint(config))
    sent = standin.find("POST", r"/pipelineJobs$")[-1].body["runtimeConfig"]["parameterValues"]
    assert sent["beam_pipeline_args"] == json.loads(named)


def test_real_ncf_pipeline_is_submitted_as_compiled(ncf_template, standin):
    """The project's own pipeline (cpu profile), through ``submit``: the stand-in receives a
    valid PipelineJob whose spec is the compiled YAML and whose values have the declared types."""
    given = {
        "data_uri": DATA,
        "epochs": "3",
        "target_hr": "0.25",
        "register": "true",
        "fail_on_anomalies": "no",
        "beam_pipeline_args": '["--direct_num_workers=2"]',
        "preset": "tiny",
        "model_display_name": "ncf-test",
        "train_batch_size": "512",
    }
    config = _config(ncf_template, standin, parameter_values=given, labels={"team": "recs"})
    result = submit(with_data_fingerprint(config))

    (req,) = standin.find("POST", r"/pipelineJobs$")
    assert req.path == f"{LOCATION}/pipelineJobs" and result.resource_name in standin.pipeline_jobs
    job = req.body
    with open(ncf_template, encoding="utf-8") as f:
        compiled = yaml_io.load(f)
    assert job["pipelineSpec"] == compiled  # As compiled: caching and everything else untouched.
    assert job["displayName"] == compiled["pipelineInfo"]["name"]
    assert job["serviceAccount"] == SA and job["network"] == NETWORK
    assert job["labels"] == {"team": "recs"}
    runtime = job["runtimeConfig"]
    assert runtime["gcsOutputDirectory"] == ROOT
    values = runtime["parameterValues"]
    fp = fingerprint.data_fingerprint(DATA, storage_endpoint=standin.url)
    assert values == {
        "data_uri": DATA,
        "epochs": 3,
        "target_hr": 0.25,
        "register": True,
        "fail_on_anomalies": False,
        "beam_pipeline_args": ["--direct_num_workers=2"],
        "preset": "tiny",
        "model_display_name": "ncf-test",
        "train_batch_size": 512,
        "data_fingerprint": fp,
    }
    # `==` lets True equal 1 and 3.0 equal 3: hold each JSON value to its declared type.
    declared = compiled["root"]["inputDefinitions"]["parameters"]
    for name, value in values.items():
        kind = declared[name]["parameterType"]
        assert isinstance(value, _JSON_TYPES[kind]), (name, kind, value)
        if kind.startswith("NUMBER"):
            assert not isinstance(value, bool), (name, value)
        if kind == "NUMBER_INTEGER":
            assert float(value).is_integer(), (name, value)
    # And the request, as the stand-in saw it, is a valid CreatePipelineJobRequest body.
    from google.cloud.aiplatform_v1 import types

    parsed = types.PipelineJob.from_json(req.raw, ignore_unknown_fields=False)
    assert parsed.runtime_config.parameter_values["register"] is True
    assert parsed.runtime_config.parameter_values["epochs"] == 3.0


# --- register_model, run against the stand-in ----------------------------------------------------


def test_register_model_uploads_to_the_model_registry(standin, adc, tmp_path, monkeypatch):
    """The component's own function, run as Vertex AI runs it: the exported model's folder
    under the /gcs/ mount (here a temporary folder), credentials from ADC. Its
    ``aiplatform.init(project, location)`` keeps the endpoint and REST transport set here (the
    test-only substitution; on Vertex AI the client goes to REGION-aiplatform.googleapis.com)."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform_v1 import types
    from kfp.dsl.types import artifact_types

    from components.export_model import register_model
    from training_core.serving.vertex_registry import SERVING_METADATA_FILE

    monkeypatch.setattr(artifact_types, "_GCS_LOCAL_MOUNT_PREFIX", f"{tmp_path}/gcs/")
    model_uri = f"gs://{BUCKET}/pipeline-root/run-1/export-model/exported_model"
    folder = tmp_path / "gcs" / model_uri.removeprefix("gs://")
    folder.mkdir(parents=True)
    (folder / SERVING_METADATA_FILE).write_text(json.dumps({"tensorflow_version": "2.16.2"}))
    aiplatform.init(api_endpoint=standin.url, api_transport="rest")

    exported = dsl.Model(uri=model_uri)
    vertex_model = dsl.Artifact(uri=f"gs://{BUCKET}/pipeline-root/run-1/register/vertex_model")
    register_model.python_func(
        exported_model=exported,
        vertex_model=vertex_model,
        project=PROJECT,
        location="europe-west4",
        display_name="ncf-neumf",
    )

    (upload,) = standin.find("POST", r"/models:upload$")
    assert upload.path == f"/v1/projects/{PROJECT}/locations/europe-west4/models:upload"
    request = types.UploadModelRequest.from_json(upload.raw, ignore_unknown_fields=False)
    model = request.model
    assert model.display_name == "ncf-neumf"
    assert model.artifact_uri == model_uri
    assert model.container_spec.image_uri == (
        "europe-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest"
    )
    # No decision, no metrics: only the training seed (its default, 0) is a fact to label.
    assert dict(model.labels) == {"seed": "0", "ncf_pipelines_model": "ncf-neumf"}
    assert not request.model_id and not request.parent_model  # A new model, id by the service.
    # The client waited for the operation and read the model back, as with the service.
    (name,) = standin.models
    assert standin.find("GET", r"/models/[^/]+/operations/[^/]+$")
    assert standin.find("GET", rf"^/v1/{name}(@1)?$")
    assert vertex_model.uri == f"https://europe-west4-aiplatform.googleapis.com/v1/{name}"
    assert vertex_model.metadata == {
        "resourceName": name,
        "versionId": "1",
        "serving_image": model.container_spec.image_uri,
    }
    # Authenticated as the ADC service account (the GAPIC client signs its own JWT).
    jwt = upload.headers["authorization"].removeprefix("Bearer ")
    assert json.loads(base64.urlsafe_b64decode(jwt.split(".")[1] + "=="))["iss"] == SA


def test_a_blessed_challenger_becomes_the_new_default_version(standin, adc, tmp_path, monkeypatch):
    """The champion is found by display name through the SDK's own list call; the challenger
    goes up as a new version of that model (parent_model), with its metrics as labels, and is
    then the default version the next lookup finds."""
    from google.cloud import aiplatform
    from google.cloud.aiplatform_v1 import types
    from kfp.dsl.types import artifact_types

    from components.export_model import register_model
    from training_core.serving import vertex_registry
    from training_core.serving.vertex_registry import SERVING_METADATA_FILE

    monkeypatch.setattr(artifact_types, "_GCS_LOCAL_MOUNT_PREFIX", f"{tmp_path}/gcs/")
    aiplatform.init(api_endpoint=standin.url, api_transport="rest")
    location = "europe-west4"

    def exported(run):
        uri = f"gs://{BUCKET}/pipeline-root/{run}/export-model/exported_model"
        folder = tmp_path / "gcs" / uri.removeprefix("gs://")
        folder.mkdir(parents=True)
        (folder / SERVING_METADATA_FILE).write_text(json.dumps({"tensorflow_version": "2.16.2"}))
        return dsl.Model(uri=uri)

    root = f"gs://{BUCKET}/"
    assert (
        vertex_registry.find_champion(PROJECT, location, "ncf-neumf", root) is None
    )  # First: none.
    first = exported("run-1")
    register_model.python_func(
        exported_model=first,
        vertex_model=dsl.Artifact(uri=f"gs://{BUCKET}/r1/vertex_model"),
        project=PROJECT,
        location=location,
        display_name="ncf-neumf",
    )
    champion = vertex_registry.find_champion(PROJECT, location, "ncf-neumf", root)
    (name,) = standin.models
    assert (champion.resource_name, champion.version_id) == (name, "1")
    assert champion.artifact_uri == first.uri
    listed = standin.find("GET", rf"^/v1/projects/{PROJECT}/locations/{location}/models$")[-1]
    ours = 'display_name="ncf-neumf" AND labels.ncf_pipelines_model="ncf-neumf"'
    assert listed.query["filter"] == [ours]

    decision = dsl.Metrics(uri=f"gs://{BUCKET}/r2/decision")
    decision.metadata.update(
        {"blessed": 1.0, "challenger_hr_at_10": 0.31, "challenger_ndcg_at_10": 0.1725}
    )
    second = exported("run-2")
    vertex_model = dsl.Artifact(uri=f"gs://{BUCKET}/r2/vertex_model")
    register_model.python_func(
        exported_model=second,
        vertex_model=vertex_model,
        project=PROJECT,
        location=location,
        display_name="ncf-neumf",
        parent_model=champion.resource_name,
        decision=decision,
        data_fingerprint="sha256:0123abcdEF",
        preset="ml-1m",
        architecture="",  # The preset's: left out.
        epochs=3,
        seed=7,
    )
    upload = standin.find("POST", r"/models:upload$")[-1]
    request = types.UploadModelRequest.from_json(upload.raw, ignore_unknown_fields=False)
    assert request.parent_model == name
    assert "default" in request.model.version_aliases
    assert dict(request.model.labels) == {
        "hr_at_10": "0_3100",
        "ndcg_at_10": "0_1725",
        "data_fingerprint": "sha256_0123abcdef",
        "preset": "ml-1m",
        "epochs": "3",
        "seed": "7",
        "ncf_pipelines_model": "ncf-neumf",
    }
    assert [v["versionId"] for v in standin.model_versions[name]] == ["1", "2"]
    assert vertex_model.metadata["versionId"] == "2"
    now = vertex_registry.find_champion(PROJECT, location, "ncf-neumf", root)
    assert (now.resource_name, now.version_id, now.artifact_uri) == (name, "2", second.uri)
    assert "default" not in standin.model_versions[name][0]["versionAliases"]


@pytest.mark.parametrize(
    "extra, expected",
    [
        # The defaults: data_epochs 0, as many as training runs.
        ([], None),
        (["--param", "preset=ml-100k"], None),
        # One epoch set by hand, the preset's epochs (auto: 14 at the fewest, ml-20m's).
        (["--param", "data_epochs=1"], "data_epochs=1 but training runs 14 epochs or more"),
        (
            ["--param", "preset=ml-100k", "--param", "data_epochs=1"],
            "data_epochs=1 but training runs 20 epochs or more",
        ),
        (["--param", "epochs=6", "--param", "data_epochs=3"], "pass --param data_epochs=6"),
        (["--param", "data_epochs=20"], None),
        (["--param", "epochs=3", "--param", "data_epochs=3"], None),
    ],
)
def test_submit_warns_when_training_would_reuse_the_prepared_negatives(
    ncf_template, capsys, caplog, extra, expected
):
    """The compiled template's defaults and the run's values, as the submission resolves them."""
    assert cli.main(_ncf_dry_run(ncf_template, *extra)) == 0
    warned = [
        r.getMessage() for r in caplog.records if "reuse the same negatives" in r.getMessage()
    ]
    if expected is None:
        assert not warned
    else:
        assert len(warned) == 1 and expected in warned[0]
