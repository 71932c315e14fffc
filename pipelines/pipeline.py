"""The NCF pipeline: validate -> prepare -> train -> evaluate -> export (-> register).

``build_pipeline(profile)`` returns one pipeline definition for any hardware profile and for local
runs: the steps, parameters and artifacts are the same; only where each step runs differs, and
``pipelines.placement`` says where (CPU steps get resource setters; accelerator or multi-replica
training runs as a Vertex AI custom job); ``pipelines.tuning_job`` adds the tuning job of a
profile that tunes. ``compile_pipeline`` writes the IR YAML, with one image for every component;
``pipelines.compiled`` reads that layout back.

Over 500 lines, for one reason: the pipeline function's parameters (every step's options, each
defaulting to its step's own default) and the wiring of the steps that read them are one
signature; each step's wiring is its own builder function below (``_train``, ``_serve``, ...).
"""

import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any, NamedTuple

from kfp import dsl
from kfp.dsl import Dataset, Metrics, Model

from components._image import (
    DEFAULT_IMAGE,
    DEFAULT_USER,
)
from components.compare_models import compare_models
from components.deploy_model import deploy_model, promote_canary
from components.evaluate_model import evaluate_model
from components.export_model import export_model, register_model
from components.prepare_data import prepare_data
from components.recommend import recommend
from components.run_report import report_run
from components.validate_data import validate_data
from pipelines import yaml_io
from pipelines.compiled import run_problems
from pipelines.placement import Images, Placement, placement
from pipelines.profiles import (
    Profile,
    eval_users_multiple,
    preflight,
    raise_problems,
)
from pipelines.tuning_job import tuning_job
from training_core.common.not_set import kfp_default
from training_core.data import config as prepare_options
from training_core.evaluation import gate
from training_core.serving import batch_recommend as batch_options
from training_core.serving.deploy import ROLLOUT_CANARY
from training_core.training import train_config as train_options

PIPELINE_NAME = "ncf-pipeline"
# The pipeline's parameters default to the steps' own option defaults (their one home); "not set"
# is the zero value in KFP parameters (training_core.common.not_set).
PREP = prepare_options.DEFAULTS
COLUMNS = PREP["columns"]  # Each column's default ("" in KFP: detect).
TRAIN = train_options.DEFAULTS
LOCAL_PROFILE = "cpu"
# Steps that only read their inputs and publish outputs last: safe to retry.
RETRIES = 2
BACKOFF = "60s"


class Outputs(NamedTuple):
    """What a pipeline run returns (local runs read them; Vertex shows them)."""

    exported_model: Model
    metrics: Metrics
    examples: Dataset
    decision: Metrics  # The champion/challenger gate's verdict and both models' metrics.


# A pipeline parameter while the pipeline is built: a KFP channel that the tasks' inputs take.
Param = Any


@dataclasses.dataclass(frozen=True)
class _Build:
    """What ``build_pipeline``'s step groups share: the profile and where its steps run.

    Attributes:
        profile: the hardware profile.
        local: plain tasks only, for kfp.local.
        images: the images asked for (None: the profile's, in the default repository).
        local_registry: local only, the folder in the Vertex AI Model Registry's place ("": none).
        place: where each step runs (``placement(profile, local, images)``).
        worker_image: the Dataflow workers' image (local runs have no Dataflow job, so none).
    """

    profile: Profile
    local: bool
    images: Images | None
    local_registry: str
    place: Placement
    worker_image: str

    @property
    def has_registry(self) -> bool:
        """Whether a registry is at hand: Vertex AI's, or locally a local registry.

        Only then does the gate look up a registry champion and the register and recommend
        branches exist (locally run by pipelines/local_conditions.py: kfp.local runs none).
        """
        return bool(self.local_registry) or not self.local

    @property
    def deploys(self) -> bool:
        """Whether a registered version is deployed to an endpoint (Vertex AI only)."""
        return self.profile.deploy and not self.local

    def placed(
        self, task: dsl.PipelineTask, step: str, display_name: str, retry: bool = True
    ) -> dsl.PipelineTask:
        """Names a task and sizes it to its step's machine (``Placement.apply``).

        ``retry``: retry a failed attempt (``RETRIES`` times, ``BACKOFF`` apart); right for a step
        that only reads its inputs and publishes its outputs last.
        """
        task.set_display_name(display_name)
        self.place.apply(task, step)
        if retry:
            task.set_retry(RETRIES, BACKOFF)
        return task


def _validate_and_prepare(
    b: _Build,
    *,
    data_uri: Param,
    data_fingerprint: Param,
    data_format: Param,
    reader: dict[str, Param],
    fail_on_anomalies: Param,
    baseline_schema_uri: Param,
    baseline_statistics_uri: Param,
    beam_pipeline_args: Param,
    min_ratings: Param,
    data_epochs: Param,
    num_neg: Param,
    recency_boost: Param,
    recency_scale: Param,
    eval_negatives: Param,
    train_batch_size: Param,
    eval_batch_size: Param,
    validation_split: Param,
    preset: Param,
    epochs: Param,
    seed: Param,
) -> tuple[dsl.PipelineTask, dsl.PipelineTask, dict[str, Param]]:
    """Imports the raw interactions, gates them (TFDV) and prepares the training records.

    ``reader``: how both steps read the raw file (its columns, id type, which rows are
    positives), as the pipeline's parameters of the same names. Returns the validate and prepare
    tasks (the prepare task's ``examples`` feed every later step), and ``prepare_data``'s
    arguments (a refit prepares the same, ``_refit``).
    """
    raw = dsl.importer(artifact_uri=data_uri, artifact_class=Dataset, reimport=False)
    raw.set_display_name("Import raw interactions")

    validate = validate_data(
        raw_data=raw.output,
        data_format=data_format,
        **reader,
        fail_on_anomalies=fail_on_anomalies,
        baseline_schema_uri=baseline_schema_uri,
        baseline_statistics_uri=baseline_statistics_uri,
        data_fingerprint=data_fingerprint,
        beam_pipeline_args=beam_pipeline_args,
        worker_image=b.worker_image,
    )
    # No retry: the gate is deterministic, a blocked run would only block again.
    b.placed(validate, "validate", "Validate raw data (TFDV gate)", retry=False)

    data = dict(
        raw_data=raw.output,
        data_format=data_format,
        **reader,
        min_ratings=min_ratings,
        num_epochs=data_epochs,
        train_preset=preset,
        train_epochs=epochs,
        num_neg=num_neg,
        recency_boost=recency_boost,
        recency_scale=recency_scale,
        eval_negatives=eval_negatives,
        train_batch_size=train_batch_size,
        eval_batch_size=eval_batch_size,
        validation=validation_split,
        seed=seed,
        eval_users_multiple=eval_users_multiple(b.profile),
        data_fingerprint=data_fingerprint,
        runner=b.profile.data_runner,
        beam_pipeline_args=beam_pipeline_args,
        worker_image=b.worker_image,
    )
    prep = prepare_data(**data).after(validate)
    return validate, b.placed(prep, "prepare", "Prepare pre-batched TFRecords"), data


def _train(
    b: _Build,
    examples: Param,
    *,
    preset: Param,
    architecture: Param,
    epochs: Param,
    seed: Param,
    target_hr: Param,
    patience: Param,
    tune_trials: Param,
    tune_parallel_trials: Param,
    warm_start_uri: Param,
) -> dsl.PipelineTask:
    """Trains NeuMF on ``examples``, with the best trial's options when the profile tunes.

    Training is a plain task or a custom job, as ``placement`` decided; a tuning job runs only on
    Vertex AI (``_tuning``). ``warm_start_uri``: an export to start from ("" cold; docs/
    weekly-runs.md). Returns the train task (its ``model``).
    """
    tuned = {}
    if b.profile.tune and not b.local:
        tuned = tuning_job(b.profile, b.images, examples, preset, architecture, epochs, seed,
                        tune_trials, tune_parallel_trials)  # fmt: skip
    # The best trial's values, its architecture included, over the pipeline's own.
    tuned = {"architecture": architecture, **tuned}
    train = b.place.train_op(
        examples=examples,
        preset=preset,
        epochs=epochs,
        seed=seed,
        target_hr=target_hr,
        patience=patience,
        warm_start_uri=warm_start_uri,
        **tuned,
        **b.place.train_arguments,
    )
    # Retried: it resumes from the last checkpoint in its model folder.
    return b.placed(train, "train", f"Train NeuMF ({b.profile.name})")


class _Gated(NamedTuple):
    """The evaluation, export and gate tasks (``_evaluate_export_and_gate``)."""

    evaluate: dsl.PipelineTask
    export: dsl.PipelineTask
    compare: dsl.PipelineTask
    model: Param  # The held-out model the gate judged (the train task's).
    top_k: Param  # The export's top_k, for a refit's export (``_refit``).
    warm_start_uri: Param  # What the held-out model started from; its refit starts there too.


def _evaluate_export_and_gate(
    b: _Build,
    examples: Param,
    model: Param,
    *,
    top_k: Param,
    warm_start_uri: Param,
    champion_uri: Param,
    register: Param,
    model_display_name: Param,
    data_uri: Param,
    gate_metric: Param,
    gate_tolerance: Param,
) -> _Gated:
    """Evaluates the trained model, exports it for serving and compares it with the champion.

    The champion: ``champion_uri`` when given, else (when registering) the registry's default
    version of the model line: ``model_display_name``, or unset the line of ``data_uri``
    (training_core/serving/model_line.py, applied by the compare step, whose ``model_line``
    output registration uses); Vertex AI's registry, or locally the local registry.
    """
    from google_cloud_pipeline_components import _placeholders

    evaluate = evaluate_model(examples=examples, model=model)
    b.placed(evaluate, "evaluate", "Evaluate HR@10 / NDCG@10")

    export = export_model(model=model, examples=examples, top_k=top_k).after(evaluate)
    b.placed(export, "export", "Export serving SavedModel")

    compare = compare_models(
        challenger=export.outputs["exported_model"],
        examples=examples,
        champion_uri=champion_uri,
        use_registry=register if b.has_registry else False,
        project="" if b.local else _placeholders.PROJECT_ID_PLACEHOLDER,
        location="" if b.local else _placeholders.LOCATION_PLACEHOLDER,
        model_display_name=model_display_name,
        data_uri=data_uri,
        metric=gate_metric,
        tolerance=gate_tolerance,
        local_registry=b.local_registry,
    )
    # Never from the cache: with use_registry it reads the registry's default version now,
    # which no cache key sees (a cached verdict would be against an earlier champion).
    compare.set_caching_options(False)
    b.placed(compare, "compare", "Compare with the champion")
    return _Gated(evaluate, export, compare, model, top_k, warm_start_uri)


class _Serving(NamedTuple):
    """The pipeline parameters that say what is done with a blessed model (``_serve``)."""

    register: Param
    batch_recommend: Param
    endpoint_display_name: Param
    data_fingerprint: Param
    preset: Param
    architecture: Param
    epochs: Param
    seed: Param
    recommend_format: Param
    beam_pipeline_args: Param


def _serve(
    b: _Build,
    examples: Param,
    gated: _Gated,
    data: dict[str, Param],
    serving: _Serving,
    *,
    refit: Param,
) -> None:
    """Registers (and deploys) and recommends from the model that passed the gate, when asked.

    With the ``refit`` parameter off, the held-out model itself: inside the conditions
    ``register`` (or ``batch_recommend``) set, the gate blessed the challenger, no refit. With it
    on, a refit of the same configuration on every interaction (``_refit``) is what is
    registered, deployed and recommended from, inside the conditions: refit set, the gate
    blessed. The gate, the evaluation and the report stay the held-out model's either way
    (docs/training.md, "Refit"). ``data``: ``prepare_data``'s arguments, for the refit's own.
    """
    blessed = gated.compare.outputs["blessed"]
    held_out = gated.export.outputs["exported_model"]
    with dsl.If(serving.register == True, name="register-requested"):  # noqa: E712 (KFP)
        with dsl.If(blessed == True, name="challenger-blessed"):  # noqa: E712
            with dsl.If(refit == False, name="held-out-model-served"):  # noqa: E712
                _register_and_deploy(b, gated, held_out, serving)
    with dsl.If(serving.batch_recommend == True, name="recommend-requested"):  # noqa: E712
        with dsl.If(blessed == True, name="recommend-blessed"):  # noqa: E712
            with dsl.If(refit == False, name="held-out-model-recommends"):  # noqa: E712
                _recommend(b, examples, held_out, serving)
    with dsl.If(refit == True, name="refit-requested"):  # noqa: E712
        with dsl.If(blessed == True, name="refit-blessed"):  # noqa: E712
            refit_export = _refit(b, gated, data)
            with dsl.If(serving.register == True, name="register-refit"):  # noqa: E712
                _register_and_deploy(b, gated, refit_export, serving)
            with dsl.If(serving.batch_recommend == True, name="recommend-refit"):  # noqa: E712
                _recommend(b, examples, refit_export, serving)


def _refit(b: _Build, gated: _Gated, data: dict[str, Param]) -> Param:
    """The gate's configuration trained again on every interaction; returns its export.

    The same raw data and options prepared with ``refit`` (each user's held-out interactions
    become training positives), trained with the held-out run's model folder as
    ``evaluated_model`` (its hyperparameters, for the epochs it kept), and exported as the
    held-out model was. Nothing here is evaluated: the gate's evidence is about the
    configuration, and the refit model's held-out numbers would measure items it trained on.
    """
    what = "Refit on all interactions"
    prep = prepare_data(**data, refit=True)
    prep = b.placed(prep, "prepare", f"{what}: prepare every interaction for training")
    examples = prep.outputs["examples"]
    train = b.place.refit_op(
        examples=examples,
        evaluated_model=gated.model,
        seed=data["seed"],
        warm_start_uri=gated.warm_start_uri,
        **b.place.refit_arguments,
    )
    b.placed(train, "refit", f"{what}: train ({b.profile.name})")
    export = export_model(model=train.outputs["model"], examples=examples, top_k=gated.top_k)
    b.placed(export, "export", f"{what}: export serving SavedModel")
    return export.outputs["exported_model"]


def _register_and_deploy(
    b: _Build, gated: _Gated, exported_model: Param, serving: _Serving
) -> None:
    """Registers ``exported_model``, and deploys it on deploying profiles (``_serve``'s branch).

    It becomes a new version of the champion's registry model, recording the gate's decision.
    """
    from google_cloud_pipeline_components import _placeholders

    # Our own serve image, when the profile asks for it (else the prebuilt one, chosen when the
    # step runs from the export's TensorFlow version); local runs register in a folder.
    serving_image = "" if b.local else (b.images or Images.for_profile(b.profile)).serve
    own = {"serving_image": serving_image, "own_serving_image": True} if serving_image else {}
    reg = register_model(
        exported_model=exported_model,
        project="" if b.local else _placeholders.PROJECT_ID_PLACEHOLDER,
        location="" if b.local else _placeholders.LOCATION_PLACEHOLDER,
        display_name=gated.compare.outputs["model_line"],  # The line the gate looked up.
        parent_model=gated.compare.outputs["champion_model"],
        decision=gated.compare.outputs["decision"],
        local_registry=b.local_registry,
        make_default=not b.deploys,
        # The serving image for the endpoint's machine (a GPU one for a GPU).
        gpu=b.deploys and bool(b.profile.serve.accelerator_type),
        data_fingerprint=serving.data_fingerprint,
        preset=serving.preset,
        architecture=serving.architecture,
        epochs=serving.epochs,
        seed=serving.seed,
        **own,
    )
    reg.set_display_name(f"Register in the {'local' if b.local else 'Vertex AI'} Model Registry")
    # Outside effects (an upload; the default version moves): never from the cache, or
    # a resubmitted run would show a registration it never made.
    reg.set_caching_options(False)
    if b.deploys:
        _deploy(b, reg.outputs["vertex_model"], serving.endpoint_display_name)


def _deploy(b: _Build, vertex_model: Param, endpoint_display_name: Param) -> None:
    """Deploys a registered version to a Vertex AI endpoint on the profile's ``serve`` machines.

    The version becomes the default once it serves (deploy_model), so a failed deployment leaves
    the registry's default serving. With the profile's rollout ``canary`` it serves its share
    beside the default version; with ``promote_after_minutes``, a step then waits that long and
    promotes it if it still serves (docs/rollouts.md).
    """
    from google_cloud_pipeline_components import _placeholders

    serve, rollout = b.profile.serve, b.profile.rollout
    dep = deploy_model(
        vertex_model=vertex_model,
        project=_placeholders.PROJECT_ID_PLACEHOLDER,
        location=_placeholders.LOCATION_PLACEHOLDER,
        endpoint_display_name=endpoint_display_name,
        machine_type=serve.machine_type,
        accelerator_type=serve.accelerator_type,
        accelerator_count=serve.accelerator_count,
        replica_count=serve.replica_count,
        rollout=rollout.strategy,
        canary_percent=rollout.canary_percent,
    )
    dep.set_display_name(
        f"Deploy to a Vertex AI endpoint ({rollout.canary_percent}% canary)"
        if rollout.strategy == ROLLOUT_CANARY
        else "Deploy to a Vertex AI endpoint"
    )
    dep.set_caching_options(False)  # Outside effects, as register's.
    dep.set_retry(RETRIES, BACKOFF)  # Resumes: a deployed version stays.
    if rollout.strategy == ROLLOUT_CANARY and rollout.promote_after_minutes:
        promote = promote_canary(
            endpoint=dep.outputs["endpoint"],
            project=_placeholders.PROJECT_ID_PLACEHOLDER,
            location=_placeholders.LOCATION_PLACEHOLDER,
            wait_minutes=float(rollout.promote_after_minutes),
        )
        promote.set_display_name(
            f"Promote the canary after {rollout.promote_after_minutes} minutes"
        )
        promote.set_caching_options(False)
        promote.set_retry(RETRIES, BACKOFF)  # Resumes from what the endpoint shows.


def _recommend(b: _Build, examples: Param, exported_model: Param, serving: _Serving) -> None:
    """Recommendations for every user from ``exported_model`` (``_serve``'s branch)."""
    rec = recommend(
        exported_model=exported_model,
        examples=examples,
        output_format=serving.recommend_format,
        beam_pipeline_args=serving.beam_pipeline_args,
        worker_image=b.worker_image,
    )
    b.placed(rec, "recommend", "Recommend for every user (batch)")


def _report(b: _Build, validate, prep, train, gated: _Gated, *, register: Param) -> None:
    """The run's report page (components/run_report.py): the last step, after the gate.

    The register, deploy and recommend steps run inside the gate's conditions, which a step
    outside them cannot wait on; the page says what the run does with a blessed model.
    """
    report = report_run(
        anomalies=validate.outputs["anomalies"],
        examples=prep.outputs["examples"],
        model=train.outputs["model"],
        training_metrics=train.outputs["metrics"],
        metrics=gated.evaluate.outputs["metrics"],
        exported_model=gated.export.outputs["exported_model"],
        decision=gated.compare.outputs["decision"],
        register=register,
        deploys=b.deploys,
        run_name=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
    )
    b.placed(report, "evaluate", "Report the run (HTML page)")


def build_pipeline(
    profile: Profile,
    local: bool = False,
    images: Images | None = None,
    local_registry: str = "",
):
    """The pipeline function for a profile (``local``: plain tasks only, for kfp.local).

    Where each step runs is ``placement(profile, local, images)``'s; here are the steps and how
    their inputs and outputs connect: one helper per group of steps, called from the pipeline
    function (KFP records the tasks created while it runs) in the order the tasks are created.
    ``local_registry`` (local only): the folder that stands in for the Vertex AI Model Registry
    (training_core/serving/local_registry.py); without it a local run compares only with
    ``champion_uri`` and its register branch cannot register.
    """
    if local_registry and not local:
        raise ValueError("local_registry is for local runs; Vertex AI runs use its Model Registry")
    b = _Build(
        profile=profile,
        local=local,
        images=images,
        local_registry=local_registry,
        place=placement(profile, local, images),
        worker_image="" if local else (images or Images.for_profile(profile)).dataflow,
    )

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
        data_format: str = PREP["format"],
        user_col: str = kfp_default(COLUMNS.user, str),
        item_col: str = kfp_default(COLUMNS.item, str),
        time_col: str = kfp_default(COLUMNS.timestamp, str),
        rating_col: str = kfp_default(COLUMNS.rating, str),
        event_col: str = kfp_default(COLUMNS.event, str),
        id_type: str = PREP["id_type"],
        min_rating: float = kfp_default(PREP["min_rating"], float),
        positive_events: str = PREP["positive_events"],
        min_ratings: int = PREP["min_ratings"],
        data_epochs: int = kfp_default(PREP["num_epochs"], int),
        num_neg: int = PREP["num_neg"],
        recency_boost: float = PREP["recency_boost"],
        recency_scale: float = PREP["recency_scale"],
        eval_negatives: int = PREP["eval_negatives"],
        train_batch_size: int = PREP["train_batch_size"],
        eval_batch_size: int = kfp_default(PREP["eval_batch_size"], int),
        validation_split: bool = PREP["validation"],
        preset: str = TRAIN["preset"],
        architecture: str = kfp_default(TRAIN["architecture"], str),
        epochs: int = kfp_default(TRAIN["epochs"], int),
        target_hr: float = kfp_default(TRAIN["target_hr"], float),
        patience: int = kfp_default(TRAIN["patience"], int),
        seed: int = PREP["seed"],
        fail_on_anomalies: bool = True,
        baseline_schema_uri: str = "",
        baseline_statistics_uri: str = "",
        beam_pipeline_args: list = [],  # noqa: B006 (a KFP parameter default, never mutated)
        top_k: int = 10,
        register: bool = False,
        model_display_name: str = "",  # "": the line of data_uri (model_line.py).
        endpoint_display_name: str = "",
        tune_trials: int = 20,
        tune_parallel_trials: int = 4,
        batch_recommend: bool = False,
        recommend_format: str = batch_options.DEFAULT_FORMAT,
        champion_uri: str = "",
        warm_start_uri: str = kfp_default(TRAIN["warm_start_uri"], str),
        gate_metric: str = gate.DEFAULT_METRIC,
        gate_tolerance: float = gate.DEFAULT_TOLERANCE,
        refit: bool = b.deploys,
    ) -> Outputs:
        # No docstring: KFP would read it into the template (the parameters' descriptions).
        validate, prep, data = _validate_and_prepare(
            b,
            data_uri=data_uri,
            data_fingerprint=data_fingerprint,
            data_format=data_format,
            reader=dict(
                user_col=user_col,
                item_col=item_col,
                time_col=time_col,
                rating_col=rating_col,
                event_col=event_col,
                id_type=id_type,
                min_rating=min_rating,
                positive_events=positive_events,
            ),
            fail_on_anomalies=fail_on_anomalies,
            baseline_schema_uri=baseline_schema_uri,
            baseline_statistics_uri=baseline_statistics_uri,
            beam_pipeline_args=beam_pipeline_args,
            min_ratings=min_ratings,
            data_epochs=data_epochs,
            num_neg=num_neg,
            recency_boost=recency_boost,
            recency_scale=recency_scale,
            eval_negatives=eval_negatives,
            train_batch_size=train_batch_size,
            eval_batch_size=eval_batch_size,
            validation_split=validation_split,
            preset=preset,
            epochs=epochs,
            seed=seed,
        )
        examples = prep.outputs["examples"]
        train = _train(
            b,
            examples,
            preset=preset,
            architecture=architecture,
            epochs=epochs,
            seed=seed,
            target_hr=target_hr,
            patience=patience,
            tune_trials=tune_trials,
            tune_parallel_trials=tune_parallel_trials,
            warm_start_uri=warm_start_uri,
        )
        gated = _evaluate_export_and_gate(
            b,
            examples,
            train.outputs["model"],
            top_k=top_k,
            warm_start_uri=warm_start_uri,
            champion_uri=champion_uri,
            register=register,
            model_display_name=model_display_name,
            data_uri=data_uri,
            gate_metric=gate_metric,
            gate_tolerance=gate_tolerance,
        )
        if b.has_registry:
            serving = _Serving(
                register=register,
                batch_recommend=batch_recommend,
                endpoint_display_name=endpoint_display_name,
                data_fingerprint=data_fingerprint,
                preset=preset,
                architecture=architecture,
                epochs=epochs,
                seed=seed,
                recommend_format=recommend_format,
                beam_pipeline_args=beam_pipeline_args,
            )
            _serve(b, examples, gated, data, serving, refit=refit)
        if not b.local:  # run-local writes a fuller page itself (step times, the version).
            _report(b, validate, prep, train, gated, register=register)
        return Outputs(
            exported_model=gated.export.outputs["exported_model"],
            metrics=gated.evaluate.outputs["metrics"],
            examples=examples,
            decision=gated.compare.outputs["decision"],
        )

    return ncf_pipeline


def _set_images(spec: dict[str, Any], cpu_image: str) -> None:
    for executor in spec["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container and container.get("image") == DEFAULT_IMAGE:
            container["image"] = cpu_image


def _set_defaults(spec: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    from pipelines.compiled import coerce_parameters, template_from_spec

    declared = spec["root"]["inputDefinitions"]["parameters"]
    template = template_from_spec(spec, "(being compiled)")
    for name, value in coerce_parameters(template, defaults, require_all=False).items():
        declared[name]["defaultValue"] = value


def compiled_documents(pipeline_func) -> list[dict]:
    """The documents ``kfp.compiler.Compiler().compile(pipeline_func, path)`` writes, as dicts.

    The pipeline spec and, where the pipeline has platform-specific settings, the platform spec:
    what KFP's compiler writes (its ``pipeline_spec_builder.write_pipeline_spec_to_file``:
    ``MessageToDict`` of each, keys sorted) without writing YAML and reading it back, which took
    most of a compile's time with PyYAML's pure-Python classes. tests/test_pipeline_compile.py
    holds the two equal.
    """
    from google.protobuf import json_format

    documents = [json_format.MessageToDict(pipeline_func.pipeline_spec)]
    if pipeline_func.platform_spec.platforms:
        documents.append(json_format.MessageToDict(pipeline_func.platform_spec))
    return json.loads(json.dumps(documents, sort_keys=True))  # KFP's key order: sorted.


def compile_pipeline(
    profile: Profile,
    output_path: str,
    image: str | None = None,
    image_repository: str | None = None,
    defaults: Mapping[str, Any] | None = None,
    image_user: str = DEFAULT_USER,
) -> str:
    """Preflights the profile and compiles the pipeline to ``output_path`` (IR YAML).

    Plain steps run in the repository's CPU image and training in the image of the profile's
    accelerator family (``Images.for_profile``); ``image`` puts every step in one image.
    ``defaults`` become the compiled defaults of pipeline parameters (converted to their declared
    types); the batch sizes among them are checked against the training replicas. The file is
    written under a temporary name and renamed last, with the permissions of any new file.

    Raises:
        ProfileError: the profile, or the defaults on its machines, cannot run.
    """
    preflight(profile)
    images = Images.for_profile(profile, image_repository, image, image_user)
    directory = os.path.dirname(os.path.abspath(output_path))
    os.makedirs(directory, exist_ok=True)
    spec, *rest = compiled_documents(build_pipeline(profile, images=images))
    _set_images(spec, images.cpu)
    _set_defaults(spec, defaults or {})
    raise_problems(profile.name, run_problems(spec, {}))
    with tempfile.TemporaryDirectory(dir=directory, prefix=".compile-") as scratch:
        tmp = os.path.join(scratch, "out.yaml")
        with open(tmp, "x") as f:  # Mode 0666 less the umask, like any file the user writes.
            yaml_io.dump_all([spec, *rest], f, sort_keys=False)
        # Not publish.atomic_output: its fixed <path>.partial would be shared by two compiles to
        # one path; this scratch folder is private to the call.
        os.replace(tmp, output_path)
    return output_path
