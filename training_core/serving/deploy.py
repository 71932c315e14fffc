"""Deploys a registered model version to a Vertex AI endpoint, the old one going only after.

No TensorFlow here; ``google.cloud.aiplatform`` is imported only inside :func:`deploy`. The order
is what keeps a failure harmless (docs/after-training.md):

1. find the endpoint: by resource name, or the one of that display name carrying this
   pipeline's label (``vertex_registry.FAMILY_LABEL``), or create it with the label;
2. deploy the version (the prebuilt TensorFlow serving container its registry entry names) with
   the traffic our earlier versions had (100% unless other models share the endpoint: those keep
   their share): Vertex AI moves the traffic only once the new model serves, so a deploy that
   fails (quota, a container that does not start) leaves the endpoint as it was;
3. undeploy the earlier versions of the same registry model (they have 0% by then); other
   models on the endpoint are never touched;
4. make the version the model's ``default`` alias, when asked: the registry's default is what
   serves, and the next run's champion.

Run again after a failure (a retried step), a version already on the endpoint is not deployed a
second time: the traffic moves to it and the steps after 2 run.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from training_core.serving import vertex_registry

log = logging.getLogger(__name__)

# An endpoint given by resource name rather than display name.
ENDPOINT_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/endpoints/[^/]+")

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


def _find_or_create_endpoint(aiplatform, endpoint: str, family: str, project: str, location: str):
    """The endpoint to deploy to, and whether it was created.

    ``endpoint`` is a resource name, or a display name: then the endpoint of that name with
    ``family``'s label, else a new one carrying it.
    """
    if ENDPOINT_NAME.fullmatch(endpoint):
        return aiplatform.Endpoint(endpoint, project=project, location=location), False
    found = aiplatform.Endpoint.list(
        filter=vertex_registry.family_filter(endpoint, family, "endpoint_display_name"),
        order_by="update_time desc",
        project=project,
        location=location,
    )
    if len(found) > 1:
        log.warning(
            "%d endpoints are named %r with label %s; deploying to the most recently updated, %s",
            len(found),
            endpoint,
            vertex_registry.family_label(family),
            found[0].resource_name,
        )
    if found:
        return found[0], False
    log.info("creating endpoint %r in %s/%s", endpoint, project, location)
    created = aiplatform.Endpoint.create(
        display_name=endpoint,
        labels=vertex_registry.family_label(family),
        project=project,
        location=location,
        sync=True,
    )
    return created, True


def _model_id(name: str) -> str:
    # The service may write the project as its number or its id; the model's id is unique in
    # the endpoint's project and region.
    return name.split("@")[0].rsplit("/models/", 1)[-1]


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
        endpoint_display_name: the endpoint's resource name
            (``projects/P/locations/L/endpoints/ID``), or its display name: the endpoint of
            that name carrying this pipeline's label for the model, created (with the label)
            when there is none; empty: the registry model's display name.
        machine_type: the serving machine type (a hardware profile's ``serve`` machine).
        accelerator_type: its accelerator, if any (``NVIDIA_TESLA_T4``...).
        accelerator_count: accelerators per machine.
        replica_count: machines serving (minimum and maximum of the autoscaler).
        make_default: make the version the model's default once it serves.

    Raises:
        ValueError: a display name that cannot go into a list filter (naming the option).
        Otherwise whatever the service answered; the endpoint's traffic and the registry's
        default are then as they were before the call, unless the failure came after the new
        version took the traffic (the log says which step failed).
    """
    from google.cloud import aiplatform

    model = model.split("@")[0]
    aiplatform.init(project=project, location=location)
    registered = aiplatform.Model(model_name=model, version=version_id)
    endpoint, created = _find_or_create_endpoint(
        aiplatform,
        endpoint_display_name or registered.display_name,
        registered.display_name,
        project,
        location,
    )
    before = {d.id: d for d in endpoint.list_models()}
    # Ours: versions of this registry model. Whatever else the endpoint serves (another
    # model, another team's) keeps its deployment and its share of the traffic.
    ours = {i for i, d in before.items() if _model_id(d.model) == _model_id(model)}
    others = {i: p for i, p in endpoint.traffic_split.items() if i not in ours and p}
    share = 100 - sum(others.values())
    if not share:
        log.warning(
            "the other models on %s take all its traffic (%s): version %s of %s is deployed "
            "with none",
            endpoint.resource_name,
            others,
            version_id,
            model,
        )
    same = [i for i in ours if before[i].model_version_id == version_id]
    if same:
        new_id = same[0]
        log.info("version %s of %s is already deployed as %s", version_id, model, new_id)
        wanted = {**others, new_id: share} if share else others
        if dict(endpoint.traffic_split) != wanted:
            endpoint.update(traffic_split=wanted)
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
            traffic_split={**others, "0": share},
            sync=True,
            **machine_args(machine_type, accelerator_type, accelerator_count, replica_count),
        )
        now = {d.id for d in endpoint.list_models()}
        (new_id,) = now - set(before)
    old = sorted(ours - {new_id})
    for deployed_model_id in old:
        # 0% of the traffic since the deploy above; the SDK sends the split without it.
        log.info(
            "undeploying %s (an earlier version of %s) from %s",
            deployed_model_id,
            model,
            endpoint.resource_name,
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
