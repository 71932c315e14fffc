"""Deploys a registered model version to a Vertex AI endpoint, all at once or as a canary.

No TensorFlow here; ``google.cloud.aiplatform`` is imported only inside the functions that call
the service. The order is what keeps a failure harmless (docs/after-training.md,
docs/rollouts.md):

1. find the endpoint: by resource name, or the one of that display name carrying this
   pipeline's label (``vertex_registry.FAMILY_LABEL``), or create it with the label;
2. deploy the version (the prebuilt TensorFlow serving container its registry entry names).
   Rollout ``replace``: with the traffic our earlier versions had (100% unless other models
   share the endpoint: those keep their share); Vertex AI moves the traffic only once the new
   model serves, so a deploy that fails (quota, a container that does not start) leaves the
   endpoint as it was. Rollout ``canary``: with ``canary_percent`` of that share, the serving
   version keeping the rest, and nothing more: :func:`promote` or :func:`rollback` finishes it;
3. (replace) undeploy the earlier versions of the same registry model (they have 0% by then);
   other models on the endpoint are never touched;
4. (replace) make the version the model's ``default`` alias, when asked: the registry's default
   is what serves, and the next run's champion.

Run again after a failure (a retried step), a version already on the endpoint is not deployed a
second time: the traffic moves to it and the steps after 2 run.

A rollout's state is read from the service alone (:func:`read_rollout`): the versions of the
model on the endpoint, their traffic, and which one is the registry's default. The serving
version is the default; a canary is another version deployed beside it. Every step of
:func:`promote` and :func:`rollback` leaves a state that the same call (or the other one, while
both versions are deployed) finishes, so either is safe to interrupt and to run again.

Over 500 lines, for one reason: the deploy and the canary's promote and rollback are one
procedure over the same endpoint reads (``RolloutState``); the order that keeps a failure
harmless is easier to hold in one file than across three.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable

from training_core.serving import vertex_registry

log = logging.getLogger(__name__)

# An endpoint given by resource name rather than display name.
ENDPOINT_NAME = re.compile(r"projects/[^/]+/locations/[^/]+/endpoints/[^/]+")

DEFAULT_ALIAS = "default"  # Vertex AI's alias for a model's default version.
# How a deploying profile puts a new version on the endpoint (pipelines/profiles.py).
ROLLOUT_REPLACE = "replace"  # All the traffic at once, the earlier version undeployed.
ROLLOUT_CANARY = "canary"  # A share beside the serving version, until promote or rollback.
ROLLOUTS = (ROLLOUT_REPLACE, ROLLOUT_CANARY)
DEFAULT_CANARY_PERCENT = 10


@dataclasses.dataclass(frozen=True)
class Deployment:
    """What :func:`deploy` left serving."""

    endpoint: str  # projects/P/locations/L/endpoints/ID
    deployed_model_id: str
    model: str  # projects/P/locations/L/models/ID
    version_id: str
    undeployed: tuple[str, ...]  # Deployed model ids taken off the endpoint.
    created_endpoint: bool
    rollout: str = ROLLOUT_REPLACE  # ROLLOUT_CANARY: the version is a canary, not yet default.
    traffic_split: dict[str, int] = dataclasses.field(default_factory=dict)  # The endpoint's.


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


def find_endpoint(aiplatform, endpoint: str, family: str, project: str, location: str):
    """The endpoint ``endpoint`` names, or ``None``.

    A resource name, or a display name: the endpoint of that name with ``family``'s label (the
    most recently updated one).
    """
    if ENDPOINT_NAME.fullmatch(endpoint):
        return aiplatform.Endpoint(endpoint, project=project, location=location)
    found = aiplatform.Endpoint.list(
        filter=vertex_registry.family_filter(endpoint, family, "endpoint_display_name"),
        order_by="update_time desc",
        project=project,
        location=location,
    )
    if len(found) > 1:
        log.warning(
            "%d endpoints are named %r with label %s; using the most recently updated, %s",
            len(found),
            endpoint,
            vertex_registry.family_label(family),
            found[0].resource_name,
        )
    return found[0] if found else None


def _find_or_create_endpoint(aiplatform, endpoint: str, family: str, project: str, location: str):
    """The endpoint to deploy to, and whether it was created.

    :func:`find_endpoint`'s, else a new one carrying ``family``'s label.
    """
    found = find_endpoint(aiplatform, endpoint, family, project, location)
    if found is not None:
        return found, False
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


def canary_share(share: int, percent: int) -> int:
    """The canary's whole percent of ``share`` (the traffic our versions have).

    At least 1, at most ``share - 1`` so that the serving version keeps some; 0 when there is
    nothing to split.
    """
    if share < 2:
        return 0
    return min(max(round(share * percent / 100), 1), share - 1)


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
    rollout: str = ROLLOUT_REPLACE,
    canary_percent: int = DEFAULT_CANARY_PERCENT,
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
        make_default: make the version the model's default once it serves (``replace``).
        rollout: ``replace`` or ``canary`` (:data:`ROLLOUTS`). A canary needs one version of
            the model serving, the default; with none, the version takes the traffic as with
            ``replace`` (there is nothing to compare it with).
        canary_percent: the canary's share of our versions' traffic (:func:`canary_share`).

    Raises:
        ValueError: a display name that cannot go into a list filter (naming the option); an
            unknown rollout; a canary while another rollout is unfinished on the endpoint.
        Otherwise whatever the service answered; the endpoint's traffic and the registry's
        default are then as they were before the call, unless the failure came after the new
        version took the traffic (the log says which step failed).
    """
    from google.cloud import aiplatform

    if rollout not in ROLLOUTS:
        raise ValueError(f"rollout {rollout!r} is not one of {', '.join(ROLLOUTS)}")
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
    traffic = dict(endpoint.traffic_split)
    others = {i: p for i, p in traffic.items() if i not in ours and p}
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
    serving = sorted(ours - set(same))
    if rollout == ROLLOUT_CANARY and serving:
        return _deploy_canary(
            aiplatform,
            endpoint,
            registered,
            version_id,
            before,
            serving,
            same,
            others,
            share,
            canary_percent,
            created,
            machine_args(machine_type, accelerator_type, accelerator_count, replica_count),
        )
    if rollout == ROLLOUT_CANARY and not same:
        log.info(
            "no version of %s serves on %s: version %s takes the traffic at once",
            model,
            endpoint.resource_name,
            version_id,
        )
    if same:
        new_id = same[0]
        log.info("version %s of %s is already deployed as %s", version_id, model, new_id)
        wanted = {**others, new_id: share} if share else others
        if traffic != wanted:
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
        _make_default(aiplatform, model, version_id)
    return Deployment(
        endpoint=endpoint.resource_name,
        deployed_model_id=new_id,
        model=model,
        version_id=version_id,
        undeployed=tuple(old),
        created_endpoint=created,
        traffic_split=dict(endpoint.traffic_split),
    )


def _make_default(aiplatform, model: str, version_id: str) -> None:
    aiplatform.models.ModelRegistry(model).add_version_aliases([DEFAULT_ALIAS], version=version_id)


def _deploy_canary(
    aiplatform,
    endpoint,
    registered,
    version_id,
    before,
    serving,
    same,
    others,
    share,
    percent,
    created,
    machines,
) -> Deployment:
    """Step 2 of a canary: the version beside the one serving, with its share; nothing else."""
    model = registered.resource_name.split("@")[0]
    default = str(aiplatform.Model(model_name=model).version_id)
    versions = {i: before[i].model_version_id for i in serving}
    if len(serving) > 1 or versions[serving[0]] != default:
        raise ValueError(
            f"a rollout of {model} is unfinished on {endpoint.resource_name}: versions "
            f"{sorted(versions.values())} are deployed and {default} is the default; finish it "
            "first (ncf-pipelines rollout status|promote|rollback, docs/rollouts.md)"
        )
    (stable,) = serving
    if same:
        # A retried step: deployModel is one operation, so the canary got its share with it;
        # whatever the split is now (a person may have changed it) stays.
        new_id = same[0]
        log.info("version %s of %s is already deployed as a canary (%s)", version_id, model, new_id)
    else:
        canary = canary_share(share, percent)
        log.info(
            "deploying %s version %s to %s as a canary with %d%% of the traffic (version %s "
            "keeps %d%%)",
            model,
            version_id,
            endpoint.resource_name,
            canary,
            default,
            share - canary,
        )
        endpoint.deploy(
            registered,
            deployed_model_display_name=f"{registered.display_name}-v{version_id}",
            traffic_split={**others, stable: share - canary, "0": canary},
            sync=True,
            **machines,
        )
        (new_id,) = {d.id for d in endpoint.list_models()} - set(before)
    return Deployment(
        endpoint=endpoint.resource_name,
        deployed_model_id=new_id,
        model=model,
        version_id=version_id,
        undeployed=(),
        created_endpoint=created,
        rollout=ROLLOUT_CANARY,
        traffic_split=dict(endpoint.traffic_split),
    )


# --- finishing a canary -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Served:
    """One version of the model on the endpoint."""

    deployed_model_id: str
    version_id: str
    traffic: int  # Percent of the endpoint's traffic.


@dataclasses.dataclass(frozen=True)
class RolloutState:
    """A model's versions on an endpoint, as the service tells them (:func:`read_rollout`)."""

    endpoint: str
    model: str
    default_version: str  # The registry's default alias.
    served: tuple[Served, ...]  # This model's versions on the endpoint.
    others: dict[str, int]  # Traffic of other models' deployments (kept as it is).

    @property
    def stable(self) -> Served | None:
        """The default version, when it is deployed."""
        return next((s for s in self.served if s.version_id == self.default_version), None)

    @property
    def canary(self) -> Served | None:
        """The one version deployed beside the default, if that is the state."""
        rest = [s for s in self.served if s.version_id != self.default_version]
        return rest[0] if len(rest) == 1 and self.stable else None

    @property
    def unaliased(self) -> Served | None:
        """The one version deployed, when it is not the default (a promote's last step is due)."""
        if len(self.served) == 1 and not self.stable:
            return self.served[0]
        return None

    @property
    def share(self) -> int:
        """The traffic this model's versions have between them."""
        return 100 - sum(self.others.values())

    def describe(self) -> str:
        """One readable paragraph: what serves, and what a rollout command would do."""
        where = f"{self.model} on {self.endpoint} (default version {self.default_version})"
        listed = ", ".join(
            f"version {s.version_id} ({s.deployed_model_id}) {s.traffic}%" for s in self.served
        )
        if self.canary:
            c, s = self.canary, self.stable
            return (
                f"canary: {where}: version {c.version_id} serves {c.traffic}% beside version "
                f"{s.version_id} with {s.traffic}%; promote or rollback finishes it"
            )
        if self.unaliased:
            return (
                f"promoting: {where}: version {self.unaliased.version_id} serves alone but is not "
                "the default yet; promote finishes it"
            )
        if len(self.served) == 1:
            return f"serving: {where}: {listed}; no rollout in progress"
        if not self.served:
            return f"none: {where}: no version of the model is deployed"
        return f"unknown: {where}: {listed}; not a canary beside the default (docs/rollouts.md)"


def open_rollout(
    project: str, location: str, endpoint: str = "", model: str = "", model_display_name: str = ""
):
    """The endpoint (an ``aiplatform.Endpoint``) and the registry model a rollout is about.

    ``model``: a resource name, else the model named ``model_display_name`` (a run's model
    line, training_core/serving/model_line.py) carrying this pipeline's label (the most
    recently updated); one of the two is needed. ``endpoint``: a resource name, else a display
    name (empty: the model's) with the label, as :func:`deploy` finds it.

    Raises:
        ValueError: no such model or endpoint (naming what was looked for), or a name that
            cannot go into a filter.
    """
    from google.cloud import aiplatform

    if not (model or model_display_name):
        raise ValueError(
            "which model? give --model (a resource name), --model-display-name (the run's "
            "model_display_name) or --data (the run's data_uri, whose model line it is)"
        )
    aiplatform.init(project=project, location=location)
    name = model_display_name
    if model:
        registered = aiplatform.Model(model_name=model.split("@")[0])
    else:
        found = aiplatform.Model.list(
            filter=vertex_registry.family_filter(name, name, "--model-display-name"),
            order_by="update_time desc",
        )
        if not found:
            raise ValueError(
                f"no registry model named {name!r} with label "
                f"{vertex_registry.family_label(name)} in {project}/{location}; give --model"
            )
        registered = found[0]
    family = registered.display_name
    found_endpoint = find_endpoint(aiplatform, endpoint or family, family, project, location)
    if found_endpoint is None:
        raise ValueError(
            f"no endpoint named {endpoint or family!r} with label "
            f"{vertex_registry.family_label(family)} in {project}/{location}; give --endpoint"
        )
    return found_endpoint, registered.resource_name.split("@")[0]


def read_rollout(endpoint, model: str) -> RolloutState:
    """The state of ``model``'s rollout on ``endpoint`` (an ``aiplatform.Endpoint``)."""
    from google.cloud import aiplatform

    model = model.split("@")[0]
    deployed = endpoint.list_models()  # Fetches the endpoint: the split below is as fresh.
    traffic = dict(endpoint.traffic_split)
    ours = [d for d in deployed if _model_id(d.model) == _model_id(model)]
    default = str(aiplatform.Model(model_name=model).version_id)
    return RolloutState(
        endpoint=endpoint.resource_name,
        model=model,
        default_version=default,
        served=tuple(
            Served(d.id, str(d.model_version_id), traffic.get(d.id, 0))
            for d in sorted(ours, key=lambda d: d.id)
        ),
        others={i: p for i, p in traffic.items() if p and i not in {d.id for d in ours}},
    )


def _set_traffic(endpoint, state: RolloutState, to: Served) -> None:
    """All of our share to ``to`` (others' shares unchanged): one endpoint update, or none."""
    wanted = {**state.others, to.deployed_model_id: state.share}
    now = {i: p for i, p in endpoint.traffic_split.items() if p}
    if now != wanted:
        log.info("traffic of %s: %s -> %s", endpoint.resource_name, now, wanted)
        endpoint.update(traffic_split=wanted)


def promote(endpoint, model: str, version_id: str = "") -> RolloutState:
    """Finishes a canary: all our traffic to it, the serving version undeployed, its alias moved.

    Each step leaves a state this call reads back and goes on from: traffic moved (still a
    canary, now with all the traffic), the old version undeployed (``unaliased``), alias moved
    (``serving``). ``version_id``: the canary expected; a state where it already is the default
    serving alone is then done (a retry after the last step), not an error.

    Raises:
        ValueError: no canary to promote (the state is described), or not ``version_id``'s.
    """
    from google.cloud import aiplatform

    state = read_rollout(endpoint, model)
    if version_id and _finished(state, version_id, promoted=True):
        log.info("version %s already serves alone as the default: promoted", version_id)
        return state
    target = state.canary or state.unaliased
    if target is None:
        raise ValueError(f"no canary to promote: {state.describe()}")
    if version_id and target.version_id != version_id:
        raise ValueError(f"the canary is not version {version_id}: {state.describe()}")
    if state.canary:
        _set_traffic(endpoint, state, target)
        old = state.stable.deployed_model_id
        log.info(
            "undeploying %s (version %s) from %s",
            old,
            state.default_version,
            endpoint.resource_name,
        )
        endpoint.undeploy(deployed_model_id=old, sync=True)
    log.info("making version %s the default of %s", target.version_id, state.model)
    _make_default(aiplatform, state.model, target.version_id)
    return read_rollout(endpoint, model)


def rollback(endpoint, model: str, version_id: str = "") -> RolloutState:
    """Ends a canary: all our traffic back to the default version, the canary undeployed.

    The registry's default is never touched. After the traffic moved the state is still a
    canary (with none of the traffic), which this call finishes again. ``version_id``: the
    canary expected; when it is no longer deployed and the default serves alone, it is done.

    Raises:
        ValueError: no canary to roll back (the state is described): nothing, one version
            serving, or one a promote already left alone (run promote to finish that).
    """
    state = read_rollout(endpoint, model)
    if version_id and _finished(state, version_id, promoted=False):
        log.info("version %s is no longer deployed: rolled back", version_id)
        return state
    canary = state.canary
    if canary is None:
        hint = (
            "; the earlier version was undeployed by a promote: run promote to finish it, or "
            "deploy the earlier version again"
            if state.unaliased
            else ""
        )
        raise ValueError(f"no canary to roll back: {state.describe()}{hint}")
    if version_id and canary.version_id != version_id:
        raise ValueError(f"the canary is not version {version_id}: {state.describe()}")
    _set_traffic(endpoint, state, state.stable)
    log.info(
        "undeploying the canary %s (version %s) from %s",
        canary.deployed_model_id,
        canary.version_id,
        endpoint.resource_name,
    )
    endpoint.undeploy(deployed_model_id=canary.deployed_model_id, sync=True)
    return read_rollout(endpoint, model)


def _finished(state: RolloutState, version_id: str, promoted: bool) -> bool:
    """Whether the state is the end of promoting (or rolling back) ``version_id``."""
    stable = state.stable
    alone = len(state.served) == 1 and stable is not None
    if promoted:
        return alone and stable.version_id == version_id
    return alone and stable.version_id != version_id


# Outcomes of :func:`promote_after`.
PROMOTED = "promoted"
ROLLED_BACK_MEANWHILE = "rolled-back-meanwhile"


def promote_after(
    endpoint_name: str,
    model: str,
    version_id: str,
    project: str,
    location: str,
    wait_minutes: float,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Waits, then promotes the canary ``version_id`` if it still serves: the pipeline's step.

    What the check sees is what the Vertex AI API tells of a deployment: after the wait the
    canary must still be deployed beside the default with some traffic (nobody rolled it back,
    its replicas were not taken down). Its error rate is in Cloud Monitoring, which this step
    does not read (docs/rollouts.md). Returns :data:`PROMOTED`, or :data:`ROLLED_BACK_MEANWHILE`
    when the canary is gone and the default serves alone (then nothing is changed).

    Raises:
        ValueError: any other state (the canary has no traffic left, or the endpoint holds
            something else): nothing is changed, a person decides.
    """
    from google.cloud import aiplatform

    aiplatform.init(project=project, location=location)
    endpoint = aiplatform.Endpoint(endpoint_name, project=project, location=location)
    if _finished(read_rollout(endpoint, model), version_id, promoted=True):
        return PROMOTED  # A retry after the promote's last step: no second wait.
    log.info("waiting %s minutes before promoting version %s", wait_minutes, version_id)
    sleep(wait_minutes * 60)
    state = read_rollout(endpoint, model)
    if _finished(state, version_id, promoted=False):
        log.info("the canary was rolled back during the wait: %s", state.describe())
        return ROLLED_BACK_MEANWHILE
    canary = state.canary or state.unaliased
    if canary is None or canary.version_id != version_id:
        raise ValueError(f"not promoting version {version_id}: {state.describe()}")
    if state.canary and not canary.traffic and state.stable.traffic:
        raise ValueError(
            f"not promoting version {version_id}: it has no traffic left (a rollback begun?): "
            f"{state.describe()}"
        )
    promote(endpoint, model, version_id)
    return PROMOTED
