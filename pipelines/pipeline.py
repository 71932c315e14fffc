"""The NCF pipeline: validate -> prepare -> train -> evaluate -> export (-> register).

``build_pipeline(profile)`` returns one pipeline definition for any hardware profile and for local
runs: the steps, parameters and artifacts are the same; only where each step runs differs. CPU
steps get resource setters; accelerator or multi-replica training runs as a Vertex AI custom job
(google-cloud-pipeline-components' wrapper, created here outside the pipeline function as its
docs require). ``compile_pipeline`` writes the IR YAML, with one image for every component.
"""

import copy
import os
import tempfile
from typing import Any, NamedTuple

from kfp import compiler, dsl
from kfp.dsl import Dataset, Metrics, Model

from components._image import DEFAULT_IMAGE
from components.evaluate_model import evaluate_model
from components.export_model import export_model, register_model
from components.prepare_data import prepare_data
from components.train_model import train_model
from components.validate_data import validate_data
from pipelines.profiles import Machine, Profile, eval_users_multiple, preflight

PIPELINE_NAME = "ncf-pipeline"
LOCAL_PROFILE = "cpu"
# Steps that only read their inputs and publish outputs last: safe to retry.
RETRIES = 2
BACKOFF = "60s"


class Outputs(NamedTuple):
    """What a pipeline run returns (local runs read them; Vertex shows them)."""

    exported_model: Model
    metrics: Metrics
    examples: Dataset


def _cpu_resources(task: dsl.PipelineTask, machine: Machine) -> dsl.PipelineTask:
    if machine.cpu_limit:
        task.set_cpu_limit(machine.cpu_limit)
    if machine.memory_limit:
        task.set_memory_limit(machine.memory_limit)
    return task


def _custom_job_train_op(profile: Profile):
    """``train_model`` as a Vertex AI custom job on the profile's training machine(s)."""
    from google_cloud_pipeline_components.v1.custom_job import (
        create_custom_training_job_from_component,
    )

    t = profile.train
    op = create_custom_training_job_from_component(
        train_model,
        display_name="train-model",
        replica_count=t.replica_count,
        machine_type=t.machine_type,
        accelerator_type=t.accelerator_type,
        accelerator_count=t.accelerator_count or 1,
        boot_disk_size_gb=t.boot_disk_size_gb,
        restart_job_on_worker_restart=True,
    )
    specs = copy.deepcopy(op.component_spec.inputs["worker_pool_specs"].default)
    if t.tpu_topology:
        # The wrapper has no topology argument; TPU v5e machine types need one.
        for spec in specs:
            spec["machine_spec"]["tpu_topology"] = t.tpu_topology
    return op, specs


def build_pipeline(profile: Profile, local: bool = False):
    """The pipeline function for a profile (``local``: plain tasks only, for kfp.local)."""
    train_op, worker_pool_specs = (
        (train_model, None)
        if local or not profile.train.custom_job
        else _custom_job_train_op(profile)
    )
    strategy = "default" if local else profile.strategy
    tpu_address = "local" if profile.train.is_tpu and not local else ""
    multiple = eval_users_multiple(profile)

    @dsl.pipeline(
        name=PIPELINE_NAME,
        description=(
            f"NCF from raw interactions to a served NeuMF model (profile {profile.name}: "
            f"{profile.description})."
        ),
    )
    def ncf_pipeline(
        data_uri: str,
        data_fingerprint: str = "",
        data_format: str = "auto",
        min_ratings: int = 20,
        data_epochs: int = 1,
        num_neg: int = 4,
        eval_negatives: int = 999,
        train_batch_size: int = 1024,
        eval_batch_size: int = 0,
        preset: str = "ml-1m",
        epochs: int = 0,
        target_hr: float = -1.0,
        seed: int = 0,
        fail_on_anomalies: bool = True,
        baseline_schema_uri: str = "",
        baseline_statistics_uri: str = "",
        beam_pipeline_args: list = [],  # noqa: B006 (a KFP parameter default, never mutated)
        top_k: int = 10,
        register: bool = False,
        project: str = "",
        location: str = "us-central1",
        model_display_name: str = "ncf-neumf",
    ) -> Outputs:
        raw = dsl.importer(artifact_uri=data_uri, artifact_class=Dataset, reimport=False)
        raw.set_display_name("Import raw interactions")

        validate = validate_data(
            raw_data=raw.output,
            data_format=data_format,
            fail_on_anomalies=fail_on_anomalies,
            baseline_schema_uri=baseline_schema_uri,
            baseline_statistics_uri=baseline_statistics_uri,
            data_fingerprint=data_fingerprint,
            beam_pipeline_args=beam_pipeline_args,
        )
        validate.set_display_name("Validate raw data (TFDV gate)")
        # No retry: the gate is deterministic, a blocked run would only block again.
        _cpu_resources(validate, profile.data)

        prep = prepare_data(
            raw_data=raw.output,
            data_format=data_format,
            min_ratings=min_ratings,
            num_epochs=data_epochs,
            num_neg=num_neg,
            eval_negatives=eval_negatives,
            train_batch_size=train_batch_size,
            eval_batch_size=eval_batch_size,
            seed=seed,
            eval_users_multiple=multiple,
            data_fingerprint=data_fingerprint,
            runner=profile.data_runner,
            beam_pipeline_args=beam_pipeline_args,
        ).after(validate)
        prep.set_display_name("Prepare pre-batched TFRecords")
        _cpu_resources(prep, profile.data).set_retry(RETRIES, BACKOFF)

        train_args: dict[str, Any] = dict(
            examples=prep.outputs["examples"],
            preset=preset,
            epochs=epochs,
            seed=seed,
            strategy=strategy,
            tpu_address=tpu_address,
            target_hr=target_hr,
        )
        if worker_pool_specs is not None:
            train_args.update(worker_pool_specs=worker_pool_specs, location=location)
        train = train_op(**train_args)
        train.set_display_name(f"Train NeuMF ({profile.name})")
        train.set_retry(RETRIES, BACKOFF)  # Resumes from the last checkpoint in its model folder.
        if worker_pool_specs is None:
            _cpu_resources(train, profile.train)

        evaluate = evaluate_model(examples=prep.outputs["examples"], model=train.outputs["model"])
        evaluate.set_display_name("Evaluate HR@10 / NDCG@10")
        _cpu_resources(evaluate, profile.evaluate).set_retry(RETRIES, BACKOFF)

        export = export_model(
            model=train.outputs["model"], examples=prep.outputs["examples"], top_k=top_k
        )
        export.set_display_name("Export serving SavedModel").after(evaluate)
        _cpu_resources(export, profile.evaluate).set_retry(RETRIES, BACKOFF)

        if not local:  # kfp.local runs no conditions, and registering needs Vertex AI anyway.
            with dsl.If(register == True, name="register-requested"):  # noqa: E712 (KFP condition)
                reg = register_model(
                    exported_model=export.outputs["exported_model"],
                    project=project,
                    location=location,
                    display_name=model_display_name,
                )
                reg.set_display_name("Register in Vertex AI Model Registry")

        return Outputs(
            exported_model=export.outputs["exported_model"],
            metrics=evaluate.outputs["metrics"],
            examples=prep.outputs["examples"],
        )

    return ncf_pipeline


def _replace_image(node: Any, image: str) -> Any:
    if isinstance(node, dict):
        return {k: _replace_image(v, image) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace_image(v, image) for v in node]
    if node == DEFAULT_IMAGE:
        return image
    return node


def compile_pipeline(
    profile: Profile,
    output_path: str,
    image: str | None = None,
    train_batch_size: int | None = None,
    eval_users_per_batch: int | None = None,
) -> str:
    """Preflights the profile and compiles the pipeline to ``output_path`` (IR YAML).

    Every component runs in ``image`` (default: ``components._image.DEFAULT_IMAGE``), the custom
    job's worker pools included. The file is written under a temporary name and renamed last.
    """
    import yaml

    preflight(profile, train_batch_size=train_batch_size, eval_users_per_batch=eval_users_per_batch)
    pipeline_func = build_pipeline(profile)
    directory = os.path.dirname(os.path.abspath(output_path))
    os.makedirs(directory, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=directory, delete=False) as tmp:
        tmp_path = tmp.name
    try:
        compiler.Compiler().compile(pipeline_func, tmp_path)
        if image and image != DEFAULT_IMAGE:
            with open(tmp_path) as f:
                docs = list(yaml.safe_load_all(f))
            docs = [_replace_image(d, image) for d in docs]
            with open(tmp_path, "w") as f:
                yaml.safe_dump_all(docs, f, sort_keys=False)
        os.replace(tmp_path, output_path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.remove(tmp_path)
        raise
    return output_path
