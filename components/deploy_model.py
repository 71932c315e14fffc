"""KFP components ``deploy_model`` and ``promote_canary``: a registered version onto an endpoint.

The logic (find this pipeline's endpoint or create it, deploy with our earlier versions' traffic
or as a canary beside them, undeploy those earlier versions of the same model and nothing else,
make the version the registry's default; promote a canary that still serves after a wait) lives
in ``training_core.serving.deploy``; see docs/after-training.md and docs/rollouts.md. KFP embeds
only the function's source in the container, so the imports stay inside the body.
"""

from kfp import dsl
from kfp.dsl import Artifact, Input, Output

from components._image import DEFAULT_IMAGE


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def deploy_model(
    vertex_model: Input[Artifact],
    endpoint: Output[Artifact],
    project: str,
    location: str,
    endpoint_display_name: str,
    machine_type: str,
    accelerator_type: str = "",
    accelerator_count: int = 0,
    replica_count: int = 1,
    make_default: bool = True,
    rollout: str = "replace",
    canary_percent: int = 10,
):
    """Serves ``register_model``'s version on the endpoint ``endpoint_display_name`` names.

    A resource name (``projects/P/locations/L/endpoints/ID``) is used as it is; a display name
    (empty: the model's) finds the endpoint of that name carrying this pipeline's label, or
    creates it. ``rollout`` ``replace``: the previous version keeps serving until the new one
    takes its traffic, and is then undeployed; other models on the endpoint keep theirs.
    ``make_default`` makes the version the model's default only after that, so a failed
    deployment leaves the registry's default and the endpoint as they were. ``canary``: the
    version serves ``canary_percent`` of that traffic beside the previous one, which stays the
    default until a promote.
    """
    from training_core.common import console, first_run

    console.setup()  # First: the cloud libraries' import warnings stay quiet.
    first_run.at_step_start(endpoint.path)  # /gcs writable? docs/submit.md
    from training_core.serving import deploy

    done = deploy.deploy(
        model=vertex_model.metadata["resourceName"],
        version_id=str(vertex_model.metadata["versionId"]),
        project=project,
        location=location,
        endpoint_display_name=endpoint_display_name,
        machine_type=machine_type,
        accelerator_type=accelerator_type,
        accelerator_count=accelerator_count,
        replica_count=replica_count,
        make_default=make_default,
        rollout=rollout,
        canary_percent=canary_percent,
    )
    endpoint.uri = f"https://{location}-aiplatform.googleapis.com/v1/{done.endpoint}"
    endpoint.metadata.update(
        {
            "resourceName": done.endpoint,
            "deployedModelId": done.deployed_model_id,
            "model": done.model,
            "versionId": done.version_id,
            "undeployed": list(done.undeployed),
            "createdEndpoint": done.created_endpoint,
            "rollout": done.rollout,
            "trafficSplit": done.traffic_split,
        }
    )


@dsl.component(base_image=DEFAULT_IMAGE, install_kfp_package=False)
def promote_canary(
    endpoint: Input[Artifact],
    project: str,
    location: str,
    wait_minutes: float,
) -> str:
    """Waits ``wait_minutes``, then promotes ``deploy_model``'s canary if it still serves.

    Promote: all the model's traffic to the canary, the previous version undeployed, the
    registry's default moved to it. A canary rolled back during the wait is left so (the
    outcome says ``rolled-back-meanwhile``); any other state fails the step, unchanged. What
    "still serves" can mean through the Vertex AI API, and what it cannot: docs/rollouts.md.
    """
    from training_core.common import console

    console.setup()
    from training_core.serving import deploy

    return deploy.promote_after(
        endpoint_name=endpoint.metadata["resourceName"],
        model=endpoint.metadata["model"],
        version_id=str(endpoint.metadata["versionId"]),
        project=project,
        location=location,
        wait_minutes=wait_minutes,
    )
