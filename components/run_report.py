"""KFP component ``report_run``: the run's report page (pipelines/run_report.py) as HTML."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Model, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def report_run(
    anomalies: Input[Artifact],
    examples: Input[Dataset],
    model: Input[Model],
    training_metrics: Input[Metrics],
    metrics: Input[Metrics],
    exported_model: Input[Model],
    decision: Input[Metrics],
    report: Output[HTML],
    register: bool = False,
    deploys: bool = False,
    sample_users: int = 3,
    run_name: str = "",
):
    """One page of what the run did, from the steps' artifacts; Vertex AI's console shows it.

    The inputs are validate_data's ``anomalies``, prepare_data's ``examples``, train_model's
    ``model`` and ``metrics`` (``training_metrics``), evaluate_model's ``metrics``,
    export_model's ``exported_model`` and compare_models' ``decision``. The register and deploy
    steps run inside the gate's conditions, which a later step cannot wait on: ``register`` and
    ``deploys`` (the pipeline's) say what the run does with a blessed model. ``sample_users``:
    how many users' histories and recommendations to show (0: none). ``run_name``: the page's
    heading (the pipeline job's name). Docs: docs/run-report.md.
    """
    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    first_run.at_step_start(report.path)  # /gcs writable? docs/submit.md
    from pipelines import run_report

    given = {
        "validation": anomalies,
        "examples": examples,
        "model": model,
        "training": training_metrics,
        "metrics": metrics,
        "exported_model": exported_model,
        "decision": decision,
    }
    artifacts = {role: run_report.Artifact(a.path, dict(a.metadata)) for role, a in given.items()}
    samples, why = run_report.try_sample_users(exported_model.path, examples.path, sample_users)
    facts = run_report.RunFacts(
        title=run_name or "NCF pipeline run",
        artifacts=artifacts,
        samples=samples,
        samples_note=why,
        registration=run_report.pipeline_registration(dict(decision.metadata), register, deploys),
        where=exported_model.uri,
    )
    run_report.write(facts, report.path)
