"""The pipeline's Vertex AI hyperparameter tuning job: its StudySpec and its trials' command.

``tuning_job`` adds the job to the pipeline being built (a profile with ``tune: true``): the
trial spec task, GCPC's ``HyperparameterTuningJobRunOp`` over the profile's search space
(``training_core/search_space.yaml`` or its own), and the best trial's options, which the
training task then takes (docs/training.md, "Tuning").
"""

from typing import TYPE_CHECKING, Any

from components.tuning import best_tuning_options, tuning_trial_spec
from pipelines.placement import Images

if TYPE_CHECKING:  # The search space is read inside the builder, off the import path.
    from training_core.tune import SearchSpace

TUNE_TASK = "ncf-tuning"  # The tuning job's display name.


def vertex_parameter_spec(space: "SearchSpace") -> list[dict[str, Any]]:
    """The StudySpec parameters, as GCPC's ``HyperparameterTuningJobRunOp`` takes them.

    Built by ``hyperparameter_tuning_job.serialize_parameters`` over the SDK's parameter specs.
    """
    from google.cloud.aiplatform import hyperparameter_tuning as hpt
    from google_cloud_pipeline_components.v1 import hyperparameter_tuning_job

    scale = {"linear": "linear", "log": "log"}
    specs = {}
    for p in space.parameters:
        if p.type == "double":
            specs[p.name] = hpt.DoubleParameterSpec(min=p.min, max=p.max, scale=scale[p.scale])
        elif p.type == "integer":
            specs[p.name] = hpt.IntegerParameterSpec(
                min=int(p.min), max=int(p.max), scale=scale[p.scale]
            )
        elif p.type == "discrete":
            specs[p.name] = hpt.DiscreteParameterSpec(values=list(p.values), scale="linear")
        else:
            specs[p.name] = hpt.CategoricalParameterSpec(values=list(p.values))
    return hyperparameter_tuning_job.serialize_parameters(specs)


def vertex_metric_spec(space: "SearchSpace") -> list[dict[str, Any]]:
    """The StudySpec metric (maximised), as GCPC's op takes it."""
    from google_cloud_pipeline_components.v1 import hyperparameter_tuning_job

    return hyperparameter_tuning_job.serialize_metrics({space.metric: "maximize"})


def tuning_job(profile, images, examples, preset, architecture, epochs, seed, trials, parallel):
    """A Vertex AI tuning job over the profile's search space.

    Returns ``train_model``'s arguments from its best trial (docs/training.md, "Tuning").
    """
    from google_cloud_pipeline_components import _placeholders
    from google_cloud_pipeline_components.v1.hyperparameter_tuning_job import (
        HyperparameterTuningJobRunOp,
    )

    from training_core import tune

    space = tune.load_search_space(profile.search_space or None)
    with open(space.path) as f:
        space_text = f.read()
    t = profile.train
    images = images or Images.for_profile(profile)
    spec = tuning_trial_spec(
        examples=examples,
        image=images.train,
        machine_type=t.machine_type,
        accelerator_type=t.accelerator_type,
        accelerator_count=t.accelerator_count,
        preset=preset,
        architecture=architecture,
        epochs=epochs,
        seed=seed,
        metric=space.metric,
    )
    spec.set_display_name("Tuning trials' machine and command")
    # Never from the cache: its artifact's URI is the tuning job's base_output_directory, so a
    # cached spec would hand a new tuning job an earlier job's trial folders (a run resubmitted
    # after a failed job, or with another trial count). Run each time, it gives every job a
    # fresh folder; the job's own cache key holds that folder, so a job is reused only together
    # with its own trials.
    spec.set_caching_options(False)
    job = HyperparameterTuningJobRunOp(
        display_name=TUNE_TASK,
        base_output_directory=spec.outputs["base_output_directory"],
        worker_pool_specs=spec.outputs["worker_pool_specs"],
        study_spec_metrics=vertex_metric_spec(space),
        study_spec_parameters=vertex_parameter_spec(space),
        max_trial_count=trials,
        parallel_trial_count=parallel,
        location=_placeholders.LOCATION_PLACEHOLDER,
        project=_placeholders.PROJECT_ID_PLACEHOLDER,
        service_account=_placeholders.SERVICE_ACCOUNT_PLACEHOLDER,
        network=_placeholders.NETWORK_PLACEHOLDER,
    )
    job.set_display_name("Tune (Vertex AI hyperparameter tuning job)")
    best = best_tuning_options(
        gcp_resources=job.outputs["gcp_resources"],
        trials=spec.outputs["trials"],
        search_space=space_text,
        max_trial_count=trials,
    )
    best.set_display_name("Best trial's options")
    return {name: best.outputs[name] for name in tune.TUNABLE}
