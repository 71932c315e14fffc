"""``ncf-pipelines verify``: compiled pipelines executed as Vertex AI would (docs/verify.md).

Fast tests compile every built-in profile and build each custom-job request offline with GCPC's
own functions; they also check placeholder and executor-input resolution, the JobService
stand-in and the process shim on their own. Slow tests run the whole chain for a representative
set of profiles, two verifications at a time; validate and prepare come from the execution cache
after their first run, as on Vertex AI, so each profile runs its own training, evaluation and
export. Those runs are conftest's ``verified`` (once per ``make test``, over the run's shared
``verify_cache``): tests/test_documented_commands.py's docs/verify.md reads the same
gpu-a100-2workers verification from that cache, after this one ran it.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import time

import grpc
import pytest
import yaml
from conftest import (
    EVENT_PARAMS,
    EVENTS,
    FULL_CHAIN,
    RETRIED,
    chain_options,
    take_the_next_free_port,
)

import vertex_emulator
from pipelines import cli, compiled, pipeline, profiles, yaml_io
from pipelines.run_plan import placeholders, template
from training_core.data import metadata
from training_core.training.strategy import ALLOW_MISSING_ACCELERATOR_ENV, STRATEGIES
from vertex_emulator import job_service, replica_network, replicas, shim

CUSTOM_JOB_PROFILES = sorted(n for n, p in profiles.BUILTIN.items() if p.train.custom_job)
SCHEDULING_STRATEGIES = ("STANDARD", "SPOT", "FLEX_START")
PROJECT, REGION = "my-project", "europe-west4"
ACCOUNT = "runner@my-project.iam.gserviceaccount.com"
NETWORK = "projects/123456789/global/networks/ml-vpc"


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Every built-in profile, compiled as a user would (umask 022)."""
    root = tmp_path_factory.mktemp("templates")
    old = os.umask(0o022)
    try:
        return {
            name: pipeline.compile_pipeline(profile, str(root / f"{name}.yaml"))
            for name, profile in profiles.BUILTIN.items()
        }
    finally:
        os.umask(old)


@pytest.fixture(scope="module")
def requests(templates):
    """Requests-only verification of every profile, as the pipeline's own run would be."""
    return {
        name: vertex_emulator.verify(
            path,
            run_tasks=False,
            project=PROJECT,
            region=REGION,
            service_account=ACCOUNT,
            network=NETWORK,
        )
        for name, path in templates.items()
    }


def _executor_input_of(command: list[str]) -> dict:
    return json.loads(command[command.index("--executor_input") + 1])


# --- requests, built offline for every profile ---------------------------------------------


@pytest.mark.parametrize("name", sorted(profiles.BUILTIN))
def test_every_profile_builds_the_requests_vertex_would_accept(requests, name):
    report, machine = requests[name], profiles.BUILTIN[name].train
    assert report.ok, vertex_emulator.format_report(report)
    train = report.task("train-model")
    if not machine.custom_job:
        assert train.kind == "container" and train.status == vertex_emulator.PLANNED
        assert not any(t.kind == "custom_job" for t in report.tasks)
        return
    assert train.kind == "custom_job" and train.status == vertex_emulator.BUILT
    (request,) = train.requests
    pools = request.custom_job.job_spec.worker_pool_specs
    assert [p.replica_count for p in pools] == [1] + (
        [machine.replica_count - 1] if machine.replica_count > 1 else []
    )
    for pool in pools:
        assert pool.machine_spec.machine_type == machine.machine_type
        assert pool.machine_spec.accelerator_type.name == machine.accelerator_type
        assert pool.machine_spec.accelerator_count == machine.accelerator_count
        assert pool.machine_spec.tpu_topology == machine.tpu_topology
        assert pool.container_spec.image_uri.endswith("-tpu" if machine.is_tpu else "-gpu")
    strategy = request.custom_job.job_spec.scheduling.strategy.name
    assert strategy in SCHEDULING_STRATEGIES
    assert strategy.lower() not in STRATEGIES
    # No profile asks for Spot or Flex-start VMs: GCPC's default, on-demand capacity.
    assert strategy == "STANDARD"


@pytest.mark.parametrize("name", CUSTOM_JOB_PROFILES)
def test_custom_job_runs_in_the_pipelines_region_as_its_account_on_its_network(requests, name):
    (request,) = requests[name].task("train-model").requests
    spec = request.custom_job.job_spec
    assert request.parent == f"projects/{PROJECT}/locations/{REGION}"
    assert spec.service_account == ACCOUNT
    assert spec.network == NETWORK


def test_replicas_get_the_launchers_executor_input_with_gs_artifacts_and_gcs_outputs(requests):
    report = requests["gpu-a100-2workers"]
    (request,) = report.task("train-model").requests
    pools = request.custom_job.job_spec.worker_pool_specs
    inputs = [_executor_input_of(list(p.container_spec.args)) for p in pools]
    assert inputs[0] == inputs[1]  # Every replica runs the same executor input.
    executor_input = inputs[0]
    examples = report.task("prepare-data").artifacts["examples"]["uri"]
    assert executor_input["inputs"]["artifacts"]["examples"]["artifacts"][0]["uri"] == examples
    root = vertex_emulator.DEFAULT_PIPELINE_ROOT
    outputs = executor_input["outputs"]
    assert outputs["outputFile"].startswith("/gcs/" + root[len("gs://") :] + "/")
    assert outputs["outputFile"].endswith("/executor_output.json")
    assert outputs["parameters"]["gcp_resources"]["outputFile"].startswith("/gcs/")
    for name in ("model", "metrics", "plots"):
        assert outputs["artifacts"][name]["artifacts"][0]["uri"].startswith(root + "/")
    values = executor_input["inputs"]["parameterValues"]
    assert values["distribution_strategy"] == "multi_worker_mirrored"
    assert values["epochs"] == 0 and isinstance(values["epochs"], int)  # As Vertex writes ints.
    assert "{{$" not in json.dumps({k: v for k, v in values.items() if k != "worker_pool_specs"})


def test_a_tf_strategy_name_as_scheduling_strategy_fails_request_building(templates, tmp_path):
    spec = yaml_io.load(open(templates["gpu-a100x8"]))
    inputs = spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
    inputs["strategy"] = {"runtimeValue": {"constant": "mirrored"}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(vertex_emulator.RequestError) as caught:
        vertex_emulator.custom_job_requests(str(bad))
    message = str(caught.value)
    assert "train-model" in message and "scheduling.strategy" in message
    assert "'mirrored'" in message and "STANDARD" in message


def test_compiled_templates_are_readable_by_others(templates):
    for name, path in templates.items():
        assert os.stat(path).st_mode & 0o044 == 0o044, f"{name}: {oct(os.stat(path).st_mode)}"


def test_register_branch_runs_only_when_asked_with_the_runs_project_and_region(templates):
    off = vertex_emulator.verify(templates["cpu"], run_tasks=False, project=PROJECT, region=REGION)
    condition = next(t for t in off.tasks if t.kind == "dag")
    assert condition.status == vertex_emulator.SKIPPED and "register=False" in condition.reason
    assert all(t.name != "register-model" for t in off.tasks)
    on = vertex_emulator.verify(
        templates["cpu"],
        run_tasks=False,
        project=PROJECT,
        region=REGION,
        parameter_values={"register": "true"},
    )
    register = on.task("register-model")
    assert register.status == vertex_emulator.PLANNED
    values = _executor_input_of(register.command)["inputs"]["parameterValues"]
    assert (values["project"], values["location"]) == (PROJECT, REGION)
    exported = on.task("export-model").artifacts["exported_model"]["uri"]
    artifacts = _executor_input_of(register.command)["inputs"]["artifacts"]
    assert artifacts["exported_model"]["artifacts"][0]["uri"] == exported


def test_custom_job_requests_returns_each_request_by_task(templates):
    built = vertex_emulator.custom_job_requests(
        templates["tpu-v5e-8"], project=PROJECT, region=REGION
    )
    assert sorted(built) == ["train-model"]
    assert built["train-model"].custom_job.job_spec.worker_pool_specs[0].machine_spec.tpu_topology


def test_cli_requests_only_prints_each_request_and_exits_0(templates, capsys):
    code = cli.main(["verify", templates["gpu-t4"], "--requests-only", "--region", REGION])
    out = capsys.readouterr().out
    assert code == 0
    assert f"request CreateCustomJob parent=projects/verify-project/locations/{REGION}" in out
    assert "workerpool0: 1 x n1-standard-8, 1 x NVIDIA_TESLA_T4" in out
    assert out.strip().endswith("OK")


def test_cli_exits_1_and_names_the_field_when_a_request_is_refused(templates, tmp_path, capsys):
    spec = yaml_io.load(open(templates["gpu-t4"]))
    pools = spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
    pools["worker_pool_specs"]["runtimeValue"]["constant"][0]["machine_spec"][
        "accelerator_type"
    ] = "NVIDIA_TESLA_T5"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(spec, sort_keys=False))
    code = cli.main(["verify", str(bad), "--requests-only"])
    out = capsys.readouterr().out
    assert code == 1
    assert "accelerator_type = 'NVIDIA_TESLA_T5'" in out and "NVIDIA_TESLA_T4" in out


# --- placeholders and conditions -----------------------------------------------------------


def test_json_escape_levels_survive_as_many_json_parses():
    text = json.dumps({"a": 'say "hi"\n', "b": [1, 2]})
    once = placeholders.json_escape(text, 1)
    assert json.loads(json.loads(f'"{once}"')) == json.loads(text)
    assert placeholders.json_escape(text, 0) == text


def test_executor_input_placeholders_resolve_as_vertex_writes_them():
    executor_input = {
        "inputs": {
            "parameterValues": {"n": 3.0, "s": "x", "spec": [{"args": ["{{$.json_escape[1]}}"]}]},
            "artifacts": {"d": {"artifacts": [{"uri": "gs://b/d", "metadata": {"k": 1.0}}]}},
        },
        "outputs": {
            "outputFile": "/gcs/b/t/executor_output.json",
            "parameters": {"p": {"outputFile": "/gcs/b/t/p"}},
        },
    }
    command = [
        "{{$.inputs.parameters['n']}}",
        "{{$.inputs.parameters['s']}}",
        "{{$.inputs.artifacts['d'].path}}",
        "{{$.inputs.artifacts['d'].metadata}}",
        "{{$.outputs.parameters['p'].output_file}}",
        "{\"spec\": {{$.inputs.parameters['spec']}}}",
    ]
    resolved = placeholders.resolve_command(command, executor_input, {})
    assert resolved[:5] == ["3", "x", "/gcs/b/d", '{"k": 1}', "/gcs/b/t/p"]
    embedded = json.loads(resolved[5])["spec"][0]["args"][0]
    assert json.loads(embedded)["outputs"]["outputFile"] == "/gcs/b/t/executor_output.json"
    with pytest.raises(placeholders.PlaceholderError):
        placeholders.resolve_command(["{{$.inputs.artifacts['nope'].uri}}"], executor_input, {})


@pytest.mark.parametrize(
    ("condition", "values", "expected"),
    [
        ("inputs.parameter_values['pipelinechannel--register'] == true", {"r": 1}, None),
        ("inputs.parameter_values['a'] == true", {"a": True}, True),
        ("inputs.parameter_values['a'] == true", {"a": False}, False),
        (
            "int(inputs.parameter_values['n']) > 5 && inputs.parameter_values['s'] == 'x'",
            {"n": 6.0, "s": "x"},
            True,
        ),
        ("!(inputs.parameter_values['a'] == true)", {"a": True}, False),
    ],
)
def test_conditions_evaluate_like_the_cel_vertex_runs(condition, values, expected):
    if expected is None:
        with pytest.raises(KeyError):
            compiled.evaluate_condition(condition, values)
    else:
        assert compiled.evaluate_condition(condition, values) is expected


def test_conditions_refuse_anything_but_comparisons():
    with pytest.raises(template.TemplateError):
        compiled.evaluate_condition("__import__('os').system('true')", {})


# --- the process shim and the JobService stand-in ------------------------------------------


@pytest.fixture
def sandbox(tmp_path):
    gcs = tmp_path / "gcs"
    (gcs / "b").mkdir(parents=True)  # A bucket: its root exists, as on the /gcs/ mount.
    shim_dir = shim.write_shim(str(tmp_path / "shim"))

    def env(write_log=None, image="", **kw):  # The stand-in's replica_env: every image here.
        return shim.process_env(dict(os.environ), shim_dir, str(gcs), write_log=write_log, **kw)

    return gcs, env


def test_processes_see_gcs_through_the_stand_in_and_run_offline(sandbox, tmp_path):
    gcs, env = sandbox
    log = tmp_path / "writes.txt"
    code = (
        "import os, urllib.request\n"
        "os.makedirs('/gcs/b/dir', exist_ok=True)\n"
        "open('/gcs/b/dir/x.txt', 'w').write('hi')\n"
        "assert os.path.exists('/gcs/b/dir/x.txt') and os.listdir('/gcs/b/dir') == ['x.txt']\n"
        "assert os.stat(path='/gcs/b/dir/x.txt').st_size == 2 and isinstance(os.listdir(), list)\n"
        "urllib.request.urlopen('https://aiplatform.googleapis.com', timeout=5)\n"
    )
    done = subprocess.run(
        ["python3", "-c", code], env=env(str(log)), capture_output=True, text=True, timeout=120
    )
    assert (gcs / "b" / "dir" / "x.txt").read_text() == "hi"
    assert log.read_text().split() == ["gs://b/dir/x.txt"]
    assert done.returncode != 0 and "without network access" in done.stderr


def _client(address: str):
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.aiplatform_v1.services.job_service.transports.grpc import (
        JobServiceGrpcTransport,
    )

    return JobServiceClient(
        transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address))
    )


def _job(command: list[str], replicas: tuple[int, ...], env=()):
    return {
        "display_name": "probe",
        "job_spec": {
            "worker_pool_specs": [
                {
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "replica_count": n,
                    "container_spec": {"image_uri": "img", "command": command, "env": list(env)},
                }
                for n in replicas
            ]
        },
    }


def _wait(client, name: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get_custom_job(name=name)
        if job.state.name in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"{name} did not finish")


def test_job_service_stand_in_runs_one_process_per_replica_with_its_cluster_spec(sandbox, tmp_path):
    gcs, env = sandbox
    probe = (
        "import json, os; s = json.loads(os.environ['CLUSTER_SPEC']); t = s['task'];"
        "open(f\"/gcs/b/{t['type']}-{t['index']}.json\", 'w').write(json.dumps("
        "{'spec': s, 'greeting': os.environ['GREETING']}))"
    )
    env_vars = [{"name": "WHO", "value": "replica"}, {"name": "GREETING", "value": "hi $(WHO)"}]
    with job_service.JobServiceStandIn(str(tmp_path / "jobs"), env, "123", "ALLOW") as standin:
        with _client(standin.address) as client:
            created = client.create_custom_job(
                parent="projects/p/locations/us-central1",
                custom_job=_job(["python3", "-c", probe], (1, 2), env_vars),
            )
            assert _wait(client, created.name).state.name == "JOB_STATE_SUCCEEDED"
    written = {p.name: json.loads(p.read_text()) for p in (gcs / "b").iterdir()}
    assert sorted(written) == ["workerpool0-0.json", "workerpool1-0.json", "workerpool1-1.json"]
    cluster = written["workerpool0-0.json"]["spec"]["cluster"]
    addresses = cluster["workerpool0"] + cluster["workerpool1"]
    assert len(cluster["workerpool0"]) == 1 and len(cluster["workerpool1"]) == 2
    assert len(set(addresses)) == 3 and all(a.startswith("127.0.0.1:") for a in addresses)
    for name, seen in written.items():
        assert seen["spec"]["cluster"] == cluster
        assert f"{seen['spec']['task']['type']}-{seen['spec']['task']['index']}.json" == name
        assert seen["greeting"] == "hi replica"


def test_job_service_stand_in_refuses_what_vertex_refuses(sandbox, tmp_path):
    _, env = sandbox
    from google.api_core import exceptions

    with job_service.JobServiceStandIn(str(tmp_path / "jobs"), env, "123", "ALLOW") as standin:
        with _client(standin.address) as client, pytest.raises(exceptions.InvalidArgument) as e:
            client.create_custom_job(
                parent="projects/p/locations/us-central1", custom_job=_job(["true"], (2,))
            )
    assert "replica_count must be 1" in str(e.value)
    assert not standin.jobs


def test_a_failing_replica_fails_the_job_with_its_last_output(sandbox, tmp_path):
    _, env = sandbox
    command = ["python3", "-c", "import sys; sys.exit('no usable TPU here')"]
    with job_service.JobServiceStandIn(str(tmp_path / "jobs"), env, "123", "ALLOW") as standin:
        with _client(standin.address) as client:
            created = client.create_custom_job(
                parent="projects/p/locations/us-central1", custom_job=_job(command, (1,))
            )
            job = _wait(client, created.name)
    assert job.state.name == "JOB_STATE_FAILED"
    assert "workerpool0-0" in job.error.message and "no usable TPU here" in job.error.message


def test_a_port_taken_before_the_replica_binds_it_starts_the_job_again(
    sandbox, tmp_path, monkeypatch
):
    """The ports in CLUSTER_SPEC are chosen before the replicas start; where the replicas share
    this machine's loopback (no network namespace), one taken in between (here by a socket this
    test holds) fails the bind, and the job is run again on fresh ports."""
    _, env = sandbox
    taken = take_the_next_free_port(monkeypatch)
    bind = (  # What a TF server does with its CLUSTER_SPEC address (its gRPC error on failure).
        "import json, os, socket, sys; s = json.loads(os.environ['CLUSTER_SPEC']);"
        "host, port = s['cluster']['workerpool0'][0].split(':'); b = socket.socket();\n"
        "try: b.bind((host, int(port)))\n"
        f"except OSError: sys.exit('{replicas.ADDRESS_IN_USE} (port ' + port + ')')"
    )
    shared = replica_network.Guard(replica_network.NONE)  # One replica: it runs unguarded.
    standin = job_service.JobServiceStandIn(
        str(tmp_path / "jobs"), env, "1", "A", replica_guard=shared
    )
    with taken, standin:
        with _client(standin.address) as client:
            created = client.create_custom_job(
                parent="projects/p/locations/us-central1",
                custom_job=_job(["python3", "-c", bind], (1,)),
            )
            job = _wait(client, created.name)
        record = standin.jobs[created.name]
    assert job.state.name == "JOB_STATE_SUCCEEDED", job.error.message
    assert len(record.notes) == 1 and "started again on fresh ports" in record.notes[0]
    assert [r.returncode for r in record.replicas] == [0]


def test_objects_written_by_two_replicas_are_named(tmp_path):
    records = []
    for name, lines in (
        ("workerpool0-0", ["gs://b/plots", "gs://b/a"]),
        ("workerpool1-0", ["gs://b/plots"]),
    ):
        log = tmp_path / f"{name}.txt"
        log.write_text("\n".join(lines) + "\n")
        records.append(vertex_emulator.ProcessRecord(name, [], {}, write_log=str(log)))
    assert replicas.shared_writes(records) == [("gs://b/plots", ["workerpool0-0", "workerpool1-0"])]


# --- whole pipelines, executed ----------------------------------------------------------------


@pytest.fixture(scope="module")
def full_runs(verified):
    """Every FULL_CHAIN profile verified end to end, sharing an execution cache.

    The first profile fills the cache with validate and prepare (unless another verification of
    the embedded sample did); the others then run two at a time (each runs its own training,
    evaluation and export). Each is conftest's ``verified`` run, computed here or by another
    worker's test that asked first; none is served training from the cache, as nothing else
    verifies these templates with these parameters before asking for ``verified``.
    """

    def run(name):
        # RETRIED's first custom job fails as a preempted one would; EVENTS runs on the sample
        # as an event table (string ids, its columns named with parameters).
        return verified(name, **chain_options(name))

    first, *rest = FULL_CHAIN
    runs = {first: run(first)}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(run, name) for name in rest}
        runs.update({name: future.result() for name, future in futures.items()})
    return runs


def _local(report, uri: str) -> str:
    return os.path.join(report.work_dir, "gcs", uri[len("gs://") :])


@pytest.mark.slow
@pytest.mark.parametrize("name", FULL_CHAIN)
def test_whole_pipeline_runs_task_by_task_as_vertex_would(full_runs, name):
    report, machine = full_runs[name], profiles.BUILTIN[name].train
    assert report.ok, vertex_emulator.format_report(report)
    ran = [t.name for t in report.tasks if t.status == vertex_emulator.SUCCEEDED]
    for task in ("importer", "validate-data", "prepare-data", "train-model", "evaluate-model"):
        assert task in ran
    assert "export-model" in ran
    assert next(t for t in report.tasks if t.kind == "dag").status == vertex_emulator.SKIPPED
    exported = report.task("export-model").artifacts["exported_model"]["uri"]
    assert os.path.exists(os.path.join(_local(report, exported), "saved_model.pb"))
    metrics = report.task("evaluate-model").artifacts["metrics"]["metadata"]
    assert 0.0 < metrics["hr_at_10"] <= 1.0
    train = report.task("train-model")
    assert train.process is not None and train.process.returncode == 0  # Never from the cache.
    assert train.artifacts["metrics"]["metadata"]["epochs"] == 1
    if not machine.custom_job:
        assert train.kind == "container" and not train.jobs
        return
    (job,) = train.jobs
    assert job.state == "JOB_STATE_SUCCEEDED"
    assert len(job.replicas) == machine.replica_count
    for replica in job.replicas:
        assert replica.returncode == 0
        task = json.loads(replica.env["CLUSTER_SPEC"])["task"]
        assert f"{task['type']}-{task['index']}" == replica.name
        assert replica.env[ALLOW_MISSING_ACCELERATOR_ENV] == "1"
    assert any(machine.accelerator_type in note for note in job.notes)


@pytest.mark.slow
def test_dataflow_profile_prepares_with_the_beam_runner(full_runs):
    prepare = full_runs["gpu-a100x8-dataflow"].task("prepare-data")
    assert prepare.process is not None and prepare.process.returncode == 0
    values = _executor_input_of(prepare.process.command)["inputs"]["parameterValues"]
    assert values["runner"] == "beam"
    # The event table's columns and id kind reached the step as pipeline parameters.
    assert {k: values[k] for k in EVENT_PARAMS} == EVENT_PARAMS
    examples = prepare.artifacts["examples"]["uri"]
    prepared = metadata.read_metadata(_local(full_runs[EVENTS], examples))
    assert (prepared.user_id_type, prepared.item_id_type) == ("string", "string")
    # Beam writes what the local path writes, byte for byte: its log shows it ran.
    logs = [p for p in (prepare.process.stdout_path, prepare.process.stderr_path) if p]
    assert any("Beam data prep of" in open(p).read() for p in logs), logs


@pytest.mark.slow
def test_two_worker_replicas_train_together_over_loopback(full_runs):
    (job,) = full_runs["gpu-a100-2workers"].task("train-model").jobs
    for replica in job.replicas:
        log = open(replica.stdout_path).read()
        chosen = [line for line in log.splitlines() if "distribution strategy:" in line]
        assert "MultiWorkerMirroredStrategy" in log and "num_workers = 2" in log, (
            f"{replica.name} did not join a 2-worker cluster: {chosen}"
        )


@pytest.mark.slow
def test_non_chief_replicas_publish_no_outputs(full_runs):
    report = full_runs["gpu-a100-2workers"]
    train = report.task("train-model")
    (job,) = train.jobs
    chief, worker = job.replicas
    executor_output = train.artifacts["model"]["uri"].rsplit("/", 1)[0] + "/executor_output.json"
    published = {train.artifacts[n]["uri"] for n in ("plots", "metrics")} | {executor_output}
    assert executor_output in chief.writes()
    written = sorted(published & set(worker.writes()))
    assert not written, f"{worker.name} (not the chief) wrote {written}"


@pytest.mark.slow
def test_a_retry_after_a_failed_custom_job_creates_a_new_job(full_runs):
    train = full_runs[RETRIED].task("train-model")
    (first,) = train.earlier
    assert first.status == vertex_emulator.FAILED and "preempted" in first.reason
    (failed_job,) = first.jobs
    assert failed_job.state == "JOB_STATE_FAILED"
    assert train.status == vertex_emulator.SUCCEEDED
    new_job = train.jobs[-1]
    assert new_job.name != failed_job.name and new_job.state == "JOB_STATE_SUCCEEDED"


# A tuning profile verified end to end (its trials, the best trial's values reaching
# train-model): tests/test_cache_and_effects.py::test_a_tuning_profile_runs_its_trials_and_trains_
# with_the_best, which reads the tuning verification that file's cache test runs anyway.
