"""Vertex AI's hyperparameter tuning jobs here: their checks, trials drawn, metrics read back.

Part of the JobService stand-in (``job_service``), which serves the tuning job's RPCs: a tuning job
runs its trials one after another, each as a custom job of its trial spec with the trial's values
appended as ``--NAME=VALUE``, sampled from the study spec with a fixed seed (Vertex AI's Vizier
decides there, several at a time); each trial's metric is read from the file
``cloudml-hypertune`` writes, its best measurement kept. ``tuning_problems`` is what
CreateHyperparameterTuningJob refuses beyond the trial spec's custom-job rules.
"""

from __future__ import annotations

import json
import os

from vertex_emulator.replicas import Replicas
from vertex_emulator.verify_report import JobRecord


def tuning_problems(job) -> list[str]:
    """What Vertex AI's CreateHyperparameterTuningJob would reject beyond the trial spec."""
    problems = []
    if job.max_trial_count < 1:
        problems.append("max_trial_count must be at least 1")
    if job.parallel_trial_count < 1:
        problems.append("parallel_trial_count must be at least 1")
    if not job.study_spec.metrics:
        problems.append("study_spec.metrics is required")
    if not job.study_spec.parameters:
        problems.append("study_spec.parameters is required")
    for p in job.study_spec.parameters:
        kinds = [
            k
            for k in ("double_value_spec", "integer_value_spec", "categorical_value_spec",
                      "discrete_value_spec")
            if p._pb.HasField(k)
        ]  # fmt: skip
        if len(kinds) != 1:
            problems.append(f"parameter {p.parameter_id!r} needs exactly one value spec")
    return problems


def sample_trial(study, rng) -> dict:
    """A trial's values from the study spec's parameters (uniform, log-uniform on LOG scale)."""
    import math

    from google.cloud.aiplatform_v1 import types

    log = types.StudySpec.ParameterSpec.ScaleType.UNIT_LOG_SCALE
    values = {}
    for p in study.parameters:
        if p._pb.HasField("double_value_spec"):
            lo, hi = p.double_value_spec.min_value, p.double_value_spec.max_value
            if p.scale_type == log:
                values[p.parameter_id] = math.exp(rng.uniform(math.log(lo), math.log(hi)))
            else:
                values[p.parameter_id] = rng.uniform(lo, hi)
        elif p._pb.HasField("integer_value_spec"):
            values[p.parameter_id] = rng.randint(
                p.integer_value_spec.min_value, p.integer_value_spec.max_value
            )
        elif p._pb.HasField("discrete_value_spec"):
            value = rng.choice(list(p.discrete_value_spec.values))
            values[p.parameter_id] = int(value) if float(value).is_integer() else value
        else:
            values[p.parameter_id] = rng.choice(list(p.categorical_value_spec.values))
    return values


def read_measurements(path: str, metric_ids: list[str]) -> list:
    """The measurements a trial reported (cloudml-hypertune's file: one JSON object a line)."""
    from google.cloud.aiplatform_v1 import types

    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            metrics = [
                types.Measurement.Metric(metric_id=m, value=float(row[m]))
                for m in metric_ids
                if m in row
            ]
            if metrics:
                out.append(
                    types.Measurement(step_count=int(row.get("global_step", 0)), metrics=metrics)
                )
    return out


def run_trials(record: JobRecord, replicas: Replicas) -> None:
    """Runs a tuning job's trials one after another, each a custom job, and ends its record."""
    import random

    from google.cloud.aiplatform_v1 import types

    job = record.request.hyperparameter_tuning_job
    study = job.study_spec
    metric_ids = [m.metric_id for m in study.metrics]
    base = job.trial_job_spec.base_output_directory.output_uri_prefix.rstrip("/")
    best_only = study.measurement_selection_type != (
        types.StudySpec.MeasurementSelectionType.LAST_MEASUREMENT
    )
    failed = 0
    for number in range(1, job.max_trial_count + 1):
        if record.state != "JOB_STATE_RUNNING":
            return  # Cancelled.
        trial_id = str(number)
        values = sample_trial(study, random.Random(number))
        spec = types.CustomJobSpec(job.trial_job_spec)
        if base:
            spec.base_output_directory.output_uri_prefix = f"{base}/{trial_id}"
        for pool in spec.worker_pool_specs:
            pool.container_spec.args.extend(f"--{k}={v}" for k, v in values.items())
        trial_name = f"{record.name}-trial-{trial_id}"
        metric_file = os.path.join(replicas.work_dir, f"{trial_name.rsplit('/', 1)[-1]}.metrics")
        trial_job = JobRecord(
            name=trial_name,
            endpoint=record.endpoint,
            request=types.CreateCustomJobRequest(
                parent=record.request.parent,
                custom_job=types.CustomJob(display_name=trial_name, job_spec=spec),
            ),
            state="JOB_STATE_RUNNING",
            extra_env={"CLOUD_ML_HP_METRIC_FILE": metric_file, "CLOUD_ML_TRIAL_ID": trial_id},
        )
        trial = types.Trial(
            id=trial_id,
            state=types.Trial.State.ACTIVE,
            parameters=[types.Trial.Parameter(parameter_id=k, value=v) for k, v in values.items()],
        )
        record.trials.append((trial_job, trial))
        replicas.run(trial_job)
        measurements = read_measurements(metric_file, metric_ids)
        if trial_job.state == "JOB_STATE_SUCCEEDED" and measurements:
            chosen = measurements[-1]
            if best_only:
                chosen = max(measurements, key=lambda m: m.metrics[0].value)
            trial.measurements = measurements
            trial.final_measurement = chosen
            trial.state = types.Trial.State.SUCCEEDED
        else:
            failed += 1
            trial.state = types.Trial.State.INFEASIBLE  # Trial.State has no FAILED.
            trial.infeasible_reason = trial_job.error or "no metric was reported"
    if failed == job.max_trial_count:
        replicas.finish(record, "JOB_STATE_FAILED", "every trial failed; see their logs")
    else:
        replicas.finish(record, "JOB_STATE_SUCCEEDED")
