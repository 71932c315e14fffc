"""KFP component ``compare_models``: the champion/challenger gate before registration."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Metrics, Model, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def compare_models(
    challenger: Input[Model],
    examples: Input[Dataset],
    decision: Output[Metrics],
    report: Output[HTML],
    champion_uri: str = "",
    use_registry: bool = False,
    project: str = "",
    location: str = "",
    model_display_name: str = "",
    metric: str = "hr_at_10",
    tolerance: float = 0.0,
    local_registry: str = "",
    registry_model: str = "",
    model_root: str = "",
    data_uri: str = "",
) -> NamedTuple("Outputs", [("blessed", bool), ("champion_model", str), ("model_line", str)]):
    """Blesses the exported challenger only if it is not worse than the champion.

    The champion is the exported model at ``champion_uri`` when given, else, with
    ``use_registry`` (the pipeline's ``register``), the default version of the registry model
    ``registry_model`` (a resource name) or, without it, of the model named
    ``model_display_name`` that carries this pipeline's label (``vertex_registry.find_champion``),
    in ``project``/``location``; else there is none and the challenger is blessed.
    ``model_display_name`` "" (the pipeline's default) is the line of ``data_uri``, one per
    dataset (training_core/serving/model_line.py); the output ``model_line`` is the name used,
    which ``register_model`` registers under ("" with neither). A registry champion is loaded
    only from under ``model_root`` (a ``gs://`` folder; empty: the bucket the challenger was
    written to, the pipeline root's). Both are ranked through their ``score`` signatures on
    ``examples``' held-out sets (training_core/evaluation/gate.py): ``metric`` (hr_at_10 or
    ndcg_at_10) decides, with an absolute ``tolerance``, on the validation split where the data
    has one (else test), and the test split's numbers are reported beside it (``decision``'s
    metadata ``split`` names the deciding one). A refused challenger is a successful step:
    ``blessed`` is False and the reason is in the log, ``decision`` and ``report``. A champion
    of another catalogue (or other users) fails the step with a message naming both models and
    ``model_display_name``, never blessing. ``champion_model`` is the registry model to add a
    version to ("" for none). ``local_registry`` (run-local): the registry is that folder
    (training_core/serving/local_registry.py) instead of Vertex AI's.
    """
    import logging

    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    first_run.at_step_start(decision.path, report.path)  # /gcs writable? docs/submit.md
    from training_core.evaluation import gate
    from training_core.serving import model_line, vertex_registry

    logging.basicConfig(level=logging.INFO)
    gate.check_choice(metric, tolerance)
    name = ""
    if model_display_name or data_uri:
        line = model_line.resolve(model_display_name, data_uri)
        name = line.name
        logging.info("model line %s (%s)", name, line.why)
    champion_dir, champion_model = None, ""
    if champion_uri:
        champion_dir = vertex_registry.mounted_path(champion_uri)
    elif use_registry and local_registry:
        from training_core.serving import local_registry as local

        found = local.find_champion(local_registry, name)
        if found is not None:
            champion_dir, champion_model = found.path, found.resource_name
    elif use_registry and project and (registry_model or name):
        root = model_root or vertex_registry.bucket_of(challenger.uri, "model_root")
        found = vertex_registry.find_champion(
            project, location, name, root, model_name=registry_model
        )
        if found is not None:
            champion_dir = vertex_registry.mounted_path(found.artifact_uri)
            champion_model = found.resource_name
    result = gate.compare(challenger.path, examples.path, champion_dir, metric, tolerance)
    for key, value in result.to_metrics().items():
        decision.log_metric(key, value)
    decision.metadata["reason"] = result.reason
    decision.metadata["split"] = result.split
    with open(report.path, "w") as f:
        f.write(gate.decision_html(result))
    return (result.blessed, champion_model, name)  # KFP takes a plain tuple for NamedTuples.
