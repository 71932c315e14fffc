"""Where a hardware profile runs each pipeline step: the images, the machines, the custom job.

``placement(profile, local, images)`` is the one answer ``pipelines.pipeline`` builds on: plain
tasks get their machine's CPU and memory limits (``Placement.apply``), and training on an
accelerator or on several replicas runs as a Vertex AI custom job (google-cloud-pipeline-
components' wrapper, created here outside the pipeline function as its docs require), whose
worker pools name the profile's training image (``Images``).
"""

import copy
import dataclasses
from typing import Any

from kfp import dsl

from components import custom_job_launcher
from components._image import (
    DEFAULT_IMAGE,
    DEFAULT_USER,
    IMAGE_REPOSITORY,
    image_for,
    variant_for_accelerator,
)
from components.train_model import refit_model, train_model
from pipelines.compiled import TRAIN_TASK, WORKER_POOL_SPECS
from pipelines.profiles import Profile
from training_core.data import config as prepare_options
from training_core.serving.vertex_registry import SERVING_OWN

REFIT_TASK = "refit-model"  # The compiled task name of refit_model (KFP derives it).


@dataclasses.dataclass(frozen=True)
class Images:
    """The images a compiled pipeline runs: ``cpu`` for every plain step, ``train`` for training.

    ``dataflow``: the Dataflow workers' image of a profile that prepares data with Beam ("":
    none, the job's own ``--sdk_container_image`` or Beam's default). ``serve``: the image a
    registered model is served by when the profile's ``serving_image`` is ``own`` ("": Vertex
    AI's prebuilt TF Serving image).
    """

    cpu: str
    train: str
    dataflow: str = ""
    serve: str = ""

    @classmethod
    def for_profile(
        cls,
        profile: Profile,
        repository: str | None = None,
        image: str | None = None,
        user: str = DEFAULT_USER,
    ) -> "Images":
        """``image`` for everything, or the repository's tags that match the profile.

        ``image`` serves the model too when the profile serves with its own image. ``user``
        ``root``: the root variant's tags for the steps (``components._image.image_for``); the
        serving image writes nothing to /gcs and keeps its own.
        """
        own = profile.serving_image == SERVING_OWN
        if image:
            return cls(image, image, serve=image if own else "")
        repo = repository or IMAGE_REPOSITORY
        variant = variant_for_accelerator(profile.train.accelerator_type)
        beam = profile.data_runner == prepare_options.RUNNER_BEAM
        return cls(
            image_for("cpu", repo, user),
            image_for(variant, repo, user),
            image_for("dataflow", repo, user) if beam else "",
            image_for("serve", repo) if own else "",
        )


def _custom_job_train_op(
    profile: Profile,
    train_image: str,
    launcher_image: str,
    component: Any = train_model,
    display_name: str = TRAIN_TASK,
):
    """``component`` (``train_model``) as a Vertex AI custom job on the profile's training machines.

    The job runs in the pipeline's own region, as the pipeline's service account, on the
    pipeline's network (GCPC's placeholders, which Vertex AI fills in when the task runs), and its
    launcher is ours (``components.custom_job_launcher``): a retry creates a new job instead of
    re-reading the failed one.
    """
    from google_cloud_pipeline_components import _placeholders
    from google_cloud_pipeline_components.v1.custom_job import (
        create_custom_training_job_from_component,
    )

    t = profile.train
    op = create_custom_training_job_from_component(
        component,
        display_name=display_name,  # The job is named after its task.
        replica_count=t.replica_count,
        machine_type=t.machine_type,
        accelerator_type=t.accelerator_type,
        accelerator_count=t.accelerator_count or 1,
        boot_disk_size_gb=t.boot_disk_size_gb,
        restart_job_on_worker_restart=True,
        service_account=_placeholders.SERVICE_ACCOUNT_PLACEHOLDER,
        network=_placeholders.NETWORK_PLACEHOLDER,
    )
    container = op.component_spec.implementation.container
    container.image = launcher_image
    container.command = ["python3", "-u", "-m", custom_job_launcher.MODULE]
    specs = copy.deepcopy(op.component_spec.inputs[WORKER_POOL_SPECS].default)
    for spec in specs:
        spec["container_spec"]["image_uri"] = train_image
        if t.tpu_topology:
            # The wrapper has no topology argument; TPU v5e machine types need one.
            spec["machine_spec"]["tpu_topology"] = t.tpu_topology
    op.component_spec.inputs[WORKER_POOL_SPECS].default = specs  # One truth in the YAML.
    return op, specs


# The pipeline's steps (``Placement.apply``), by the profile's machine each runs on.
STEP_MACHINES = {
    "validate": "data",
    "prepare": "data",
    "train": "train",
    "refit": "train",
    "evaluate": "evaluate",
    "export": "evaluate",
    "compare": "evaluate",
    "recommend": "evaluate",
}


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where a profile runs the pipeline's steps (``placement``), for Vertex AI or kfp.local.

    Attributes:
        profile: the hardware profile (its machines size the plain tasks).
        train_op: ``train_model``, or the custom-job wrapper of it.
        worker_pool_specs: the custom job's worker pools; None when training is a plain task.
        refit_op: ``refit_model``, placed as ``train_op`` is (docs/training.md, "Refit").
        refit_worker_pool_specs: its custom job's worker pools, as ``worker_pool_specs``.
        strategy: the training distribution strategy's name.
        tpu_address: the TPU the trainer connects to ("" off TPUs).
        expect_accelerator: the accelerator type training must find ("": none expected).
        expect_accelerator_count: how many of them (0 when none is expected).
    """

    profile: Profile
    train_op: Any
    worker_pool_specs: list[dict[str, Any]] | None
    refit_op: Any
    refit_worker_pool_specs: list[dict[str, Any]] | None
    strategy: str
    tpu_address: str
    expect_accelerator: str
    expect_accelerator_count: int

    @property
    def train_arguments(self) -> dict[str, Any]:
        """The train op's arguments that follow from where it runs."""
        args: dict[str, Any] = dict(
            distribution_strategy=self.strategy,
            tpu_address=self.tpu_address,
            expect_accelerator=self.expect_accelerator,
            expect_accelerator_count=self.expect_accelerator_count,
        )
        if self.worker_pool_specs is not None:
            args[WORKER_POOL_SPECS] = self.worker_pool_specs
        return args

    @property
    def refit_arguments(self) -> dict[str, Any]:
        """The refit op's arguments that follow from where it runs (its own worker pools)."""
        args = self.train_arguments
        if self.refit_worker_pool_specs is not None:
            args[WORKER_POOL_SPECS] = self.refit_worker_pool_specs
        return args

    def apply(self, task: dsl.PipelineTask, step: str) -> dsl.PipelineTask:
        """Sizes a plain task (``step``: a key of ``STEP_MACHINES``) to its machine's limits.

        A custom-job train task is left alone: its worker pools are its machines.
        """
        machine = getattr(self.profile, STEP_MACHINES[step])
        if step in ("train", "refit") and self.worker_pool_specs is not None:
            return task
        if machine.cpu_limit:
            task.set_cpu_limit(machine.cpu_limit)
        if machine.memory_limit:
            task.set_memory_limit(machine.memory_limit)
        return task


def placement(profile: Profile, local: bool = False, images: Images | None = None) -> Placement:
    """Where ``profile`` runs each step; ``local``: plain tasks only, on this machine's CPU.

    ``images`` names the training image baked into the custom job's worker pools (default: the
    profile's family in the default repository); plain tasks are swapped by ``compile_pipeline``.
    """
    t = profile.train
    if local or not t.custom_job:
        train_op, worker_pool_specs = train_model, None
        refit_op, refit_specs = refit_model, None
    else:
        images = images or Images.for_profile(profile)
        train_op, worker_pool_specs = _custom_job_train_op(profile, images.train, DEFAULT_IMAGE)
        refit_op, refit_specs = _custom_job_train_op(
            profile, images.train, DEFAULT_IMAGE, refit_model, REFIT_TASK
        )
    expect = "" if local else t.accelerator_type
    return Placement(
        profile=profile,
        train_op=train_op,
        worker_pool_specs=worker_pool_specs,
        refit_op=refit_op,
        refit_worker_pool_specs=refit_specs,
        strategy="default" if local else profile.strategy,
        tpu_address="local" if t.is_tpu and not local else "",
        expect_accelerator=expect,
        expect_accelerator_count=t.accelerator_count if expect else 0,
    )
