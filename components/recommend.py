"""KFP component ``recommend``: every user's top-k items from the exported model, in bulk.

The logic lives in ``training_core.serving.batch_recommend`` (Beam RunInference over the SavedModel:
in process on the task's machine, or on Dataflow when ``beam_pipeline_args`` say so). KFP embeds
only the function's source in the container, so the imports stay inside the body.
"""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def recommend(
    exported_model: Input[Model],
    examples: Input[Dataset],
    recommendations: Output[Dataset],
    output_format: str = "parquet",
    top_k: int = 0,
    exclude_seen: bool = True,
    batch_size: int = 1024,
    beam_pipeline_args: list = None,
    worker_image: str = "",
):
    """Writes each user's top-k raw item ids and scores (Parquet or JSON Lines).

    The options are ``training_core.serving.batch_recommend.RecommendConfig``'s, with its defaults;
    ``top_k`` 0 is the export's. ``recommendations`` gets the folder (its ``manifest.json``
    lists the files) and the counts as artifact metadata. ``worker_image`` (the compiled
    Dataflow worker image) becomes the job's ``--sdk_container_image`` on Dataflow unless the
    options name one.
    """
    from training_core.common import console, first_run

    console.setup()  # First: TensorFlow's start-up stays quiet only if set before its import.
    first_run.at_step_start(recommendations.path)  # /gcs writable? docs/submit.md
    from components._image import with_worker_image
    from training_core.common import faults
    from training_core.serving import batch_recommend

    with faults.reported():  # A full disk or too little memory: one paragraph.
        result = batch_recommend.recommend(
            batch_recommend.RecommendConfig(
                export_dir=exported_model.path,
                data_dir=examples.path,
                output_dir=recommendations.path,
                output_format=output_format,
                top_k=top_k,
                exclude_seen=exclude_seen,
                batch_size=batch_size,
                pipeline_args=tuple(with_worker_image(beam_pipeline_args or (), worker_image)),
            )
        )
    print(
        f"top {result.top_k} items for {result.num_users} users in {result.seconds:.1f}s "
        f"({result.users_per_second:,.0f} users/s): {', '.join(result.files)}"
    )
    recommendations.metadata.update(
        {
            "format": output_format,
            "files": list(result.files),
            "num_users": result.num_users,
            "top_k": result.top_k,
            "exclude_seen": exclude_seen,
        }
    )
