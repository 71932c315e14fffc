"""Vertex AI's execution cache and the steps after training (issue 34, items 4 and 5).

Vertex AI serves a task from its cache when an execution with the same component spec and
inputs succeeded before, in any run, outputs and output URIs included (vertex_emulator/cache.py
says what the key holds). So: the tuning job's trial folder (``tuning_trial_spec``'s artifact)
and the steps with outside effects or outside inputs (register, deploy, compare) are compiled
with caching off, and a second tuning job over one cache starts in a clean folder. ``deploy:
true`` deploys on the default serve machine, and a GPU serve machine registers the model with
the GPU serving image. Compile-level tests assert the compiled spec; the GPU/CPU image test runs
the compiled register and deploy inputs against the Vertex AI REST stand-in; the slow tests
read one tuning profile verified twice over one ``cache_dir`` (its trials and best trial, and
the second job's clean start).
"""

# No `from __future__ import annotations`: KFP reads the component annotations at runtime.
import json
import os
import time

import pytest
from conftest import BUCKET, PROJECT, REGION
from kfp import dsl

import vertex_emulator
from pipelines import pipeline, profiles, tuning_job, yaml_io
from training_core import tune
from training_core.serving import model_line
from training_core.serving.vertex_registry import SERVING_METADATA_FILE
from vertex_emulator import cache

NEVER_CACHED = ("tuning-trial-spec", "compare-models", "register-model", "deploy-model")
CACHED = (
    "importer",
    "validate-data",
    "prepare-data",
    "hyperparameter-tuning-job",
    "best-tuning-options",
    "train-model",
    "evaluate-model",
    "export-model",
    "recommend",
)
TUNE_DEPLOY = (
    "tune-deploy:\n"
    "  train: {machine_type: g2-standard-8, accelerator_type: NVIDIA_L4, accelerator_count: 1}\n"
    "  strategy: one_device\n"
    "  tune: true\n"
    "  deploy: true\n"
)
GPU_SERVE = (
    "gpu-serve:\n"
    "  train: {machine_type: n1-standard-8, cpu_limit: 8, memory_limit: 30G}\n"
    "  deploy: true\n"
    "  serve: {machine_type: n1-standard-4, accelerator_type: NVIDIA_TESLA_T4, "
    "accelerator_count: 1}\n"
)
PLAIN_DEPLOY = (
    "plain-deploy:\n"
    "  train: {machine_type: n1-standard-8, cpu_limit: 8, memory_limit: 30G}\n"
    "  deploy: true\n"
)


def _compile(tmp_path, text: str) -> tuple[str, dict]:
    path = tmp_path / "profiles.yaml"
    path.write_text(text)
    name = text.split(":", 1)[0]
    out = pipeline.compile_pipeline(
        profiles.get_profile(name, str(path)), str(tmp_path / f"{name}.yaml")
    )
    with open(out) as f:
        return out, yaml_io.load(f)


def _tasks(spec: dict) -> dict[str, dict]:
    found = dict(spec["root"]["dag"]["tasks"])
    for comp in spec["components"].values():
        found.update(comp.get("dag", {}).get("tasks", {}))
    return found


def _caches(task: dict) -> bool:
    return bool((task.get("cachingOptions") or {}).get("enableCache"))


# --- the compiled spec ------------------------------------------------------------------------


@pytest.mark.slow
def test_trial_folder_and_steps_with_outside_effects_are_never_served_from_the_cache(tmp_path):
    _, spec = _compile(tmp_path, TUNE_DEPLOY)
    tasks = _tasks(spec)
    assert set(NEVER_CACHED) | set(CACHED) <= set(tasks)
    assert [t for t in NEVER_CACHED if _caches(tasks[t])] == []
    assert [t for t in CACHED if not _caches(tasks[t])] == []
    # The tuning job's folder is the uncached step's output, so its cache key changes with it.
    job_inputs = tasks["hyperparameter-tuning-job"]["inputs"]["parameters"]
    assert job_inputs["base_output_directory"]["taskOutputParameter"] == {
        "outputParameterKey": "base_output_directory",
        "producerTask": "tuning-trial-spec",
    }
    # best_tuning_options knows how many trials the job ran (a stale folder holds more).
    best = tasks["best-tuning-options"]["inputs"]["parameters"]
    assert best["max_trial_count"] == {"componentInputParameter": "tune_trials"}
    # A built-in profile, registering without deploying: register and compare uncached too.
    plain = pipeline.compile_pipeline(profiles.BUILTIN["cpu"], str(tmp_path / "cpu.yaml"))
    cpu = _tasks(yaml_io.load(open(plain)))
    assert not _caches(cpu["register-model"]) and not _caches(cpu["compare-models"])
    assert _caches(cpu["train-model"]) and "tuning-trial-spec" not in cpu


def test_deploy_without_a_serve_machine_deploys_on_the_default_one(tmp_path):
    """``deploy: true`` alone compiles (the endpoint's machine is no pipeline task, so it needs
    no cpu_limit) and deploys on profiles.SERVE_MACHINE, as docs/profiles.md says."""
    _, spec = _compile(tmp_path, PLAIN_DEPLOY)
    deploy = _tasks(spec)["deploy-model"]["inputs"]["parameters"]
    constants = {k: v["runtimeValue"]["constant"] for k, v in deploy.items() if "runtimeValue" in v}
    assert constants["machine_type"] == profiles.SERVE_MACHINE.machine_type == "n1-standard-4"
    assert constants.get("accelerator_type", "") == ""
    path = tmp_path / "bad.yaml"
    path.write_text(PLAIN_DEPLOY + "  serve: {machine_type: n1-standard-4, cpu_limit: 4}\n")
    with pytest.raises(profiles.ProfileError, match="serve: cpu_limit and memory_limit size"):
        profiles.preflight(profiles.get_profile("plain-deploy", str(path)))
    path.write_text(PLAIN_DEPLOY + "  serve: {machine_type: n1-standrd-4}\n")
    with pytest.raises(profiles.ProfileError, match="serve: machine_type 'n1-standrd-4'"):
        profiles.preflight(profiles.get_profile("plain-deploy", str(path)))


# --- the compiled register and deploy inputs, run against the Vertex AI stand-in --------------


def _arguments(spec: dict, task: dict, outputs: dict) -> dict:
    """A task's parameter values as Vertex AI resolves them: constants (GCPC's project and
    location placeholders filled in), pipeline parameters at their compiled defaults, and
    ``outputs`` for what upstream tasks produce."""
    placeholders = {
        "{{$.pipeline_google_cloud_project_id}}": PROJECT,
        "{{$.pipeline_google_cloud_location}}": REGION,
    }
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    values = {}
    for name, source in task["inputs"]["parameters"].items():
        if name in outputs:
            values[name] = outputs[name]
        elif "runtimeValue" in source:
            value = source["runtimeValue"]["constant"]
            values[name] = placeholders.get(value, value) if isinstance(value, str) else value
        elif "componentInputParameter" in source:
            pipeline_parameter = source["componentInputParameter"].removeprefix("pipelinechannel--")
            values[name] = defaults[pipeline_parameter].get("defaultValue")
    return values


def _register_and_deploy(vertex, tmp_path, spec: dict):
    from google.cloud.aiplatform_v1 import types

    from components.deploy_model import deploy_model
    from components.export_model import register_model

    tasks = _tasks(spec)
    uri = f"gs://{BUCKET}/pipeline-root/run/export-model/exported_model"
    folder = tmp_path / "gcs" / uri.removeprefix("gs://")
    folder.mkdir(parents=True)
    (folder / SERVING_METADATA_FILE).write_text(json.dumps({"tensorflow_version": "2.16.2"}))
    registered = dsl.Artifact(uri=f"gs://{BUCKET}/run/vertex_model")
    # compare-models' outputs: no champion, and the model line of the run's data.
    line = model_line.of_data(f"gs://{BUCKET}/ratings/").name
    args = _arguments(spec, tasks["register-model"], {"parent_model": "", "display_name": line})
    int_params = ("epochs", "seed")
    args.update({k: int(args[k]) for k in int_params})
    register_model.python_func(
        exported_model=dsl.Model(uri=uri), vertex_model=registered, decision=None, **args
    )
    deploy_args = _arguments(spec, tasks["deploy-model"], {})
    deploy_model.python_func(
        vertex_model=registered,
        endpoint=dsl.Artifact(uri=f"gs://{BUCKET}/run/endpoint"),
        **{k: int(v) if isinstance(v, float) else v for k, v in deploy_args.items()},
    )
    (upload,) = vertex.find("POST", r"models:upload$")
    image = types.UploadModelRequest.from_json(upload.raw).model.container_spec.image_uri
    (deployed,) = vertex.find("POST", r":deployModel$")
    machine = types.DeployModelRequest.from_json(
        deployed.raw
    ).deployed_model.dedicated_resources.machine_spec
    return image, machine


def test_a_gpu_serve_machine_registers_the_gpu_serving_image(vertex, tmp_path):
    _, spec = _compile(tmp_path, GPU_SERVE)
    image, machine = _register_and_deploy(vertex, tmp_path, spec)
    assert "/prediction/tf2-gpu." in image, image
    assert machine.machine_type == "n1-standard-4"
    assert (machine.accelerator_type.name, machine.accelerator_count) == ("NVIDIA_TESLA_T4", 1)


def test_a_cpu_serve_machine_registers_the_cpu_serving_image(vertex, tmp_path):
    _, spec = _compile(tmp_path, PLAIN_DEPLOY)
    image, machine = _register_and_deploy(vertex, tmp_path, spec)
    assert "/prediction/tf2-cpu." in image, image
    assert machine.machine_type == "n1-standard-4" and machine.accelerator_count == 0


# --- best_trial_folder and the cache stand-in ----------------------------------------------------


def test_a_folder_with_more_trials_than_the_job_ran_is_refused(tmp_path):
    for trial_id in ("1", "2", "3"):
        (tmp_path / "trials" / trial_id / "model").mkdir(parents=True)
    space = tune.load_search_space()
    with pytest.raises(RuntimeError, match=r"holds 3 trial folders \(1, 2, 3\) but the tuning"):
        tune.best_trial_folder(str(tmp_path / "trials"), space, max_trials=2)
    # Within the count the folder is read (here no trial finished an epoch).
    with pytest.raises(RuntimeError, match="no trial under .* finished an epoch"):
        tune.best_trial_folder(str(tmp_path / "trials"), space, max_trials=3)


def test_cache_key_holds_what_vertex_ai_keys_and_not_the_run():
    executor = {"container": {"image": "img", "command": ["python3"], "args": ["-m", "x"]}}
    executor_input = {
        "inputs": {
            "parameterValues": {"seed": 1},
            "artifacts": {"examples": {"artifacts": [{"uri": "gs://b/e", "type": {}}]}},
        },
        "outputs": {
            "artifacts": {"model": {"artifacts": [{"uri": "gs://b/run-1/m", "type": {"a": 1}}]}},
            "outputFile": "/gcs/b/run-1/executor_output.json",
        },
    }
    base = cache.key(executor, executor_input, "data", "ncf-pipeline")
    # The run (its output URIs and files) is not in the key.
    other_run = json.loads(json.dumps(executor_input))
    other_run["outputs"]["artifacts"]["model"]["artifacts"][0]["uri"] = "gs://b/run-2/m"
    other_run["outputs"]["outputFile"] = "/gcs/b/run-2/executor_output.json"
    assert cache.key(executor, other_run, "data", "ncf-pipeline") == base
    # The pipeline's name, the environment, the inputs and the outputs' types are.
    with_env = {"container": {**executor["container"], "env": [{"name": "A", "value": "1"}]}}
    changed_input = json.loads(json.dumps(executor_input))
    changed_input["inputs"]["parameterValues"]["seed"] = 2
    other_type = json.loads(json.dumps(executor_input))
    other_type["outputs"]["artifacts"]["model"]["artifacts"][0]["type"] = {"a": 2}
    others = {
        cache.key(executor, executor_input, "data", "another-pipeline"),
        cache.key(with_env, executor_input, "data", "ncf-pipeline"),
        cache.key(executor, changed_input, "data", "ncf-pipeline"),
        cache.key(executor, other_type, "data", "ncf-pipeline"),
    }
    assert base not in others and len(others) == 4


def test_a_cache_hit_finds_what_later_tasks_wrote_under_its_outputs(tmp_path):
    """As on Cloud Storage: a cached task's folder holds what the earlier run wrote there after
    the task (a tuning job's trials); the snapshot serves once that run's folder is gone."""
    source = tmp_path / "run-1" / "gcs" / "b" / "task"
    (source / "trials").mkdir(parents=True)
    cache.store(str(tmp_path / "cache"), "k", "gs://b/task", str(source), {}, {})
    (source / "trials" / "1").mkdir()  # Written later, by the tuning job.
    entry = cache.load(str(tmp_path / "cache"), "k")
    cache.restore(entry, str(tmp_path / "run-2" / "task"))
    assert os.listdir(tmp_path / "run-2" / "task" / "trials") == ["1"]
    import shutil

    shutil.rmtree(tmp_path / "run-1")
    cache.restore(entry, str(tmp_path / "run-3" / "task"))
    assert os.listdir(tmp_path / "run-3" / "task" / "trials") == []


def test_a_trial_that_fails_is_infeasible_and_a_job_whose_trials_all_fail_fails(tmp_path):
    """verify's tuning-job stand-in: a trial without a metric (it failed, or it resumed a
    finished model in a reused folder) is INFEASIBLE, Vertex AI's state for it (Trial.State has
    no FAILED), and the job fails when every trial did."""
    import grpc
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.aiplatform_v1.services.job_service.transports.grpc import (
        JobServiceGrpcTransport,
    )

    from vertex_emulator import job_service, shim

    (tmp_path / "gcs").mkdir()
    shim_dir = shim.write_shim(str(tmp_path / "shim"))

    def env(write_log=None, image="", **kw):  # The stand-in's replica_env: every image here.
        return shim.process_env(
            dict(os.environ), shim_dir, str(tmp_path / "gcs"), write_log=write_log
        )

    space = tune.load_search_space()
    job = {
        "display_name": "tune",
        "study_spec": {
            "metrics": tuning_job.vertex_metric_spec(space),
            "parameters": tuning_job.vertex_parameter_spec(space),
        },
        "max_trial_count": 1,
        "parallel_trial_count": 1,
        "trial_job_spec": {
            "worker_pool_specs": tune.trial_worker_pool_specs(
                ["python3", "-c", "raise SystemExit(3)"], "img", "n1-standard-4"
            )
        },
    }
    with job_service.JobServiceStandIn(str(tmp_path / "jobs"), env, "123", "ALLOW") as standin:
        channel = grpc.insecure_channel(standin.address)
        with JobServiceClient(transport=JobServiceGrpcTransport(channel=channel)) as client:
            created = client.create_hyperparameter_tuning_job(
                parent="projects/p/locations/us-central1", hyperparameter_tuning_job=job
            )
            for _ in range(600):
                done = client.get_hyperparameter_tuning_job(name=created.name)
                if done.state.name in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"):
                    break
                time.sleep(0.2)
    assert done.state.name == "JOB_STATE_FAILED", done
    assert "every trial failed" in done.error.message
    (trial,) = done.trials
    assert trial.state.name == "INFEASIBLE" and trial.infeasible_reason


# --- a tuning profile verified twice over one cache -------------------------------------------


def _trial_folders(report) -> tuple[str, list[str]]:
    uri = report.task("tuning-trial-spec").parameters["base_output_directory"]
    local = os.path.join(report.work_dir, "gcs", uri.removeprefix("gs://"))
    return uri, sorted(os.listdir(local)) if os.path.isdir(local) else []


@pytest.fixture(scope="module")
def tuning_runs(tmp_path_factory, verify_cache):
    """A profile with tune: true and deploy: true verified twice over one cache_dir, the second
    time with another tune_trials (as a resubmitted run): ``(spec, first, second)``.

    Both tests below only read these reports, so the two verifications run once for both. The
    cache is the run's shared one (conftest's ``verify_cache``): the first verification's
    validate and prepare come from it when another verification of the embedded sample ran
    them first (they have the same spec and inputs in every profile's template); nothing after
    them can (this profile's tuning job and the tasks after it are its own).
    """
    tmp_path = tmp_path_factory.mktemp("tuning")
    template, spec = _compile(tmp_path, TUNE_DEPLOY)
    cache_dir = verify_cache
    reports = []
    for run, trials in (("run-1", 2), ("run-2", 1)):
        with vertex_emulator.Verification(
            template,
            work_dir=str(tmp_path / run),
            cache_dir=cache_dir,
            parameter_values={"tune_trials": trials},
        ) as verification:
            reports.append(verification.run())
    return spec, *reports


@pytest.mark.slow
def test_a_tuning_profile_runs_its_trials_and_trains_with_the_best(tuning_runs):
    """A profile with tune: true, verified end to end: GCPC's tuning-job launcher against the
    JobService stand-in, each trial a process running the compiled trial command with the
    values appended and its metric file, the best trial's values reaching train-model.

    (Moved here from tests/test_verify.py, where it verified a profile of its own that differs
    from ``TUNE_DEPLOY`` only in ``deploy: true``, whose branch is skipped without register:
    it now reads the first verification of ``tuning_runs`` instead of running one more.)
    """
    _, report, _ = tuning_runs
    assert report.ok, vertex_emulator.format_report(report)
    tuning = report.task("hyperparameter-tuning-job")
    assert tuning.kind == "tuning_job"
    (job,) = tuning.jobs
    assert job.state == "JOB_STATE_SUCCEEDED"
    assert len(job.trials) == 2  # The first verification's tune_trials (verify's small-run one).
    measured = {}
    for trial_job, trial in job.trials:
        assert trial.state.name == "SUCCEEDED"
        (replica,) = trial_job.replicas
        values = {p.parameter_id: p.value for p in trial.parameters}
        command = replica.command
        assert command[:2] == ["ncf-pipelines", "train"] and "--hypertune-metric" in command
        assert f"--learning_rate={values['learning_rate']}" in command
        assert replica.env["CLOUD_ML_TRIAL_ID"] == trial.id
        measured[trial.id] = (trial.final_measurement.metrics[0].value, values)
    best_id = max(measured, key=lambda k: measured[k][0])
    best = report.task("best-tuning-options")
    assert best.artifacts["tuned"]["metadata"]["trial"] == best_id
    assert best.parameters["learning_rate"] == pytest.approx(measured[best_id][1]["learning_rate"])
    # The final training ran with the best trial's values: the same data, seed and options give
    # the same first epoch as that trial's.
    train = report.task("train-model").artifacts["metrics"]["metadata"]
    # (each trial's metric is the validation split's: the data has one).
    assert train["validation_hr_at_10"] == pytest.approx(measured[best_id][0])


@pytest.mark.slow
def test_a_second_tuning_job_over_one_cache_starts_clean_trials(tuning_runs):
    """A profile with tune: true and deploy: true verified twice over one cache_dir, the second
    time with another tune_trials (as a resubmitted run): validate and prepare come from the
    cache, the trial folder does not, so the second job's trials start in an empty folder and
    its best trial is its own. The register branch (off by default) is not served either."""
    spec, first, second = tuning_runs
    assert first.ok, vertex_emulator.format_report(first)
    assert second.ok, vertex_emulator.format_report(second)
    for name in ("validate-data", "prepare-data"):
        assert second.task(name).reason.startswith("cached:"), second.task(name).reason
    for name in ("tuning-trial-spec", "compare-models"):  # Caching off: they ran again.
        assert second.task(name).process is not None, second.task(name).reason
    first_uri, first_trials = _trial_folders(first)
    second_uri, second_trials = _trial_folders(second)
    assert first_trials == ["1", "2"]
    assert second_uri != first_uri
    # Only the second job's one trial is in its folder: nothing of the first job's.
    assert second_trials == ["1"]
    (job,) = second.task("hyperparameter-tuning-job").jobs
    ((trial_job, trial),) = job.trials
    (replica,) = trial_job.replicas
    logs = [p for p in (replica.stdout_path, replica.stderr_path) if p]
    assert logs and not any("resumed from" in open(p).read() for p in logs)  # A fresh start.
    best = second.task("best-tuning-options").artifacts["tuned"]["metadata"]
    assert best["trial"] == trial.id and best["job"] == job.name
    assert best[tune.load_search_space().metric] == pytest.approx(
        trial.final_measurement.metrics[0].value
    )
    # The register/deploy branch: not asked for here (register false), and never cached.
    tasks = _tasks(spec)
    assert not _caches(tasks["register-model"]) and not _caches(tasks["deploy-model"])
    (branch,) = [t for t in second.tasks if t.display_name == "register-requested"]
    assert branch.kind == "dag" and branch.status == vertex_emulator.SKIPPED
