"""Deploys a registered model version to a Vertex AI endpoint, the old one going only after.

No TensorFlow here; ``google.cloud.aiplatform`` is imported only inside :func:`deploy`. The order
is what keeps a failure harmless (docs/after-training.md):

1. find the endpoint by display name, or create it;
2. deploy the version (the prebuilt TensorFlow serving container its registry entry names) with
   100% of the traffic: Vertex AI moves the traffic only once the new model serves, so a deploy
   that fails (quota, a container that does not start) leaves the endpoint as it was;
3. undeploy the models that served before (they have 0% by then);
4. make the version the model's ``default`` alias, when asked: the registry's default is what
   serves, and the next run's champion.

Run again after a failure (a retried step), a version already on the endpoint is not deployed a
second time: the traffic moves to it and the steps after 2 run.
"""

from __future__ import annotations

import dataclasses
import logging

log = logging.getLogger(__name__)

DEFAULT_ALIAS = "default"  # Vertex AI's alias for a model's default version.


@dataclasses.dataclass(frozen=True)
class Deployment:
    """What :func:`deploy` left serving."""

    endpoint: str  # projects/P/locations/L/endpoints/ID
    deployed_model_id: str
    model: str  # projects/P/locations/L/models/ID
    version_id: str
    undeployed: tuple[str, ...]  # Deployed model ids taken off the endpoint.
    created_endpoint: bool


def machine_args(
    machine_type: str,
    accelerator_type: str = "",
    accelerator_count: int = 0,
    replica_count: int = 1,
) -> dict:
    """Keyword arguments of ``aiplatform.Endpoint.deploy`` for the serving machines.

    The machines are a hardware profile's ``serve`` machine (pipelines/profiles.py).
    """
    args: dict = {
        "machine_type": machine_type,
        "min_replica_count": max(replica_count, 1),
        "max_replica_count": max(replica_count, 1),
    }
    if accelerator_type:
        args.update(accelerator_type=accelerator_type, accelerator_count=max(accelerator_count, 1))
    return args


def _find_or_create_endpoint(aiplatform, display_name: str, project: str, location: str):
    found = aiplatform.Endpoint.list(
        filter=f'display_name="{display_name}"',
        order_by="update_time desc",
        project=project,
        location=location,
    )
    if len(found) > 1:
        log.warning(
            "%d endpoints are named %r; deploying to the most recently updated, %s",
            len(found),
            display_name,
            found[0].resource_name,
        )
    if found:
        return found[0], False
    log.info("creating endpoint %r in %s/%s", display_name, project, location)
    created = aiplatform.Endpoint.create(
        display_name=display_name, project=project, location=location, sync=True
    )
    return created, True


def deploy(
    model: str,
    version_id: str,
    project: str,
    location: str,
    endpoint_display_name: str,
    machine_type: str,
    accelerator_type: str = "",
    accelerator_count: int = 0,
    replica_count: int = 1,
    make_default: bool = True,
) -> Deployment:
    """Serves ``model@version_id`` on the endpoint named ``endpoint_display_name`` (module doc).

    Args:
        model: the registry model's resource name (``projects/P/locations/L/models/ID``).
        version_id: the version to serve.
        project: the Google Cloud project.
        location: the Vertex AI region.
        endpoint_display_name: the endpoint's name; created when no endpoint has it; empty:
            the registry model's display name.
        machine_type: the serving machine type (a hardware profile's ``serve`` machine).
        accelerator_type: its accelerator, if any (``NVIDIA_TESLA_T4``...).
        accelerator_count: accelerators per machine.
        replica_count: machines serving (minimum and maximum of the autoscaler).
        make_default: make the version the model's default once it serves.

    Raises:
        whatever the service answered; the endpoint's traffic and the registry's default are then
        as they were before the call, unless the failure came after the new version took the
        traffic (the log says which step failed).
    """
    from google.cloud import aiplatform

    model = model.split("@")[0]
    aiplatform.init(project=project, location=location)
    registered = aiplatform.Model(model_name=model, version=version_id)
    endpoint_display_name = endpoint_display_name or registered.display_name
    endpoint, created = _find_or_create_endpoint(
        aiplatform, endpoint_display_name, project, location
    )
    before = {d.id: d for d in endpoint.list_models()}
    same = [d for d in before.values() if d.model == model and d.model_version_id == version_id]
    if same:
        new_id = same[0].id
        log.info("version %s of %s is already deployed as %s", version_id, model, new_id)
        if endpoint.traffic_split.get(new_id, 0) != 100:
            endpoint.update(traffic_split={new_id: 100})
    else:
        log.info(
            "deploying %s version %s to %s on %s",
            model,
            version_id,
            endpoint.resource_name,
            machine_type,
        )
        endpoint.deploy(
            registered,
            deployed_model_display_name=f"{registered.display_name}-v{version_id}",
            traffic_percentage=100,
            sync=True,
            **machine_args(machine_type, accelerator_type, accelerator_count, replica_count),
        )
        now = {d.id for d in endpoint.list_models()}
        (new_id,) = now - set(before)
    old = [d for d in before if d != new_id]
    for deployed_model_id in old:
        # 0% of the traffic since the deploy above; the SDK sends the split without it.
        log.info(
            "undeploying %s (served before) from %s", deployed_model_id, endpoint.resource_name
        )
        endpoint.undeploy(deployed_model_id=deployed_model_id, sync=True)
    if make_default:
        aiplatform.models.ModelRegistry(model).add_version_aliases(
            [DEFAULT_ALIAS], version=version_id
        )
    return Deployment(
        endpoint=endpoint.resource_name,
        deployed_model_id=new_id,
        model=model,
        version_id=version_id,
        undeployed=tuple(old),
        created_endpoint=created,
    )
