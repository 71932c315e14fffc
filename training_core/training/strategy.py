"""One factory for every ``tf.distribute`` strategy, and the pure ``auto`` resolution behind it.

``resolve(config, env, ...)`` decides which strategy to build from the request, an environment
mapping and device counts; it imports nothing heavy, so every runtime (Vertex AI cluster, TPU VM,
multi-GPU host) can be unit-tested by passing a dict. ``build_strategy`` then builds it. Build the
strategy first thing in a process: ``MultiWorkerMirroredStrategy`` must exist before any other
TensorFlow op runs, and a TPU system must be initialized before variables are created.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "off", "default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
ALL_REDUCE_ALGS = ("nccl", "hierarchical_copy")
# Set to "1" to train on the CPU when the expected accelerator is missing (``ncf-pipelines verify``
# runs accelerator profiles' replicas on a CPU machine this way); never set in the cloud.
ALLOW_MISSING_ACCELERATOR_ENV = "NCF_ALLOW_MISSING_ACCELERATOR"
# Set by each image's Dockerfile stage (components/_image.py: VARIANT_ENV).
IMAGE_VARIANT_ENV = "NCF_PIPELINES_IMAGE_VARIANT"

# Vertex AI names worker pools; TF_CONFIG names task types (Vertex AI's own translation).
_VERTEX_POOL_TO_TASK = {
    "workerpool0": "chief",
    "workerpool1": "worker",
    "workerpool2": "ps",
    "workerpool3": "evaluator",
}
# Set on Cloud TPU VMs (what a Vertex AI TPU worker runs on): Vertex AI documents TPU_NODE_NAME and
# TPU_CONFIG for its TPU VM workers; the rest are Cloud TPU VM and GKE names.
_LOCAL_TPU_ENV = (
    "TPU_NODE_NAME",
    "TPU_CONFIG",
    "TPU_ACCELERATOR_TYPE",
    "TPU_WORKER_HOSTNAMES",
    "TPU_WORKER_ID",
)


@dataclasses.dataclass(frozen=True)
class StrategyConfig:
    """What strategy to run under.

    Attributes:
        name: one of ``STRATEGIES``; ``auto`` reads the runtime.
        num_gpus: GPUs to use; ``None`` uses every visible GPU.
        tpu_address: TPU name or ``grpc://`` address; ``"local"`` (or ``""``) for the TPU attached
            to this host. ``None`` means no TPU was asked for.
        all_reduce_alg: cross-device all-reduce for ``mirrored`` (``nccl`` or
            ``hierarchical_copy``); ``None`` lets TensorFlow choose.
        num_packs: gradient packs for that all-reduce.
        expect_accelerator: the accelerator the machine was asked for (a Vertex AI accelerator
            type such as ``NVIDIA_TESLA_A100`` or ``TPU_V3``); ``None``: none expected. When it
            is missing, building the strategy fails instead of quietly training on the CPU.
        expect_accelerator_count: how many of them (GPUs must all be visible).
        allow_missing_accelerator: train on the CPU anyway, with a warning (local checks only).
    """

    name: str = "auto"
    num_gpus: int | None = None
    tpu_address: str | None = None
    all_reduce_alg: str | None = None
    num_packs: int = 1
    expect_accelerator: str | None = None
    expect_accelerator_count: int = 0
    allow_missing_accelerator: bool = False

    def __post_init__(self) -> None:
        if self.name not in STRATEGIES:
            raise ValueError(
                f"unknown strategy {self.name!r}; choose one of {', '.join(STRATEGIES)}"
            )
        if self.num_gpus is not None and self.num_gpus < 0:
            raise ValueError(
                f"num_gpus must be 0 or more (got {self.num_gpus}); pass 0 to train on CPU or "
                "leave it unset to use every visible GPU"
            )
        if self.all_reduce_alg is not None and self.all_reduce_alg not in ALL_REDUCE_ALGS:
            raise ValueError(
                f"unknown all_reduce_alg {self.all_reduce_alg!r}; choose "
                f"{' or '.join(ALL_REDUCE_ALGS)}, or leave it unset"
            )
        if self.num_packs < 1:
            raise ValueError(f"num_packs must be 1 or more (got {self.num_packs})")


def strategy_config(**options: Any) -> StrategyConfig:
    """The one way options become a ``StrategyConfig`` (the CLI and the train_model component).

    ``None`` and ``""`` are "not set" (the field's default). Whether training may go on without
    the expected accelerator is read from ``ALLOW_MISSING_ACCELERATOR_ENV``, here only.
    """
    given = {k: v for k, v in options.items() if v is not None and v != ""}
    given.setdefault(
        "allow_missing_accelerator", os.environ.get(ALLOW_MISSING_ACCELERATOR_ENV) == "1"
    )
    return StrategyConfig(**given)


class MissingAccelerator(ValueError):
    """The step was compiled for an accelerator this machine does not have (one line)."""


@dataclasses.dataclass(frozen=True)
class Resolution:
    """The strategy to build and why.

    Attributes:
        name: a concrete strategy name (never ``auto`` or ``off``).
        reason: one line for the log.
        num_gpus: GPUs the strategy uses.
        tpu_address: for ``tpu``.
        tf_config: a ``TF_CONFIG`` to export before building (translated from ``CLUSTER_SPEC``).
    """

    name: str
    reason: str
    num_gpus: int = 0
    tpu_address: str | None = None
    tf_config: dict[str, Any] | None = None


def tf_config_from_cluster_spec(cluster_spec: Mapping[str, Any]) -> dict[str, Any]:
    """Translates Vertex AI's ``CLUSTER_SPEC`` into a ``TF_CONFIG``.

    ``workerpool0`` is the chief, ``workerpool1`` the workers, ``workerpool2`` parameter servers and
    ``workerpool3`` the evaluator, as Vertex AI documents for TensorFlow.
    """
    try:
        cluster = cluster_spec["cluster"]
        task = cluster_spec["task"]
        task_type = _VERTEX_POOL_TO_TASK[task["type"]]
        index = int(task["index"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"CLUSTER_SPEC is not a Vertex AI cluster spec ({e!r}): {cluster_spec}"
        ) from e
    tf_cluster = {}
    for pool, hosts in cluster.items():
        if pool not in _VERTEX_POOL_TO_TASK:
            raise ValueError(f"CLUSTER_SPEC names an unknown worker pool {pool!r}")
        if hosts:
            tf_cluster[_VERTEX_POOL_TO_TASK[pool]] = list(hosts)
    return {"cluster": tf_cluster, "task": {"type": task_type, "index": index}}


def _cluster_workers(tf_config: Mapping[str, Any]) -> int:
    cluster = tf_config.get("cluster", {})
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def _load_json(env: Mapping[str, str], key: str) -> dict[str, Any] | None:
    raw = env.get(key, "").strip()
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{key} is not valid JSON ({e}): {raw[:200]}") from e
    if not isinstance(value, dict):
        raise ValueError(f"{key} must hold a JSON object, got: {raw[:200]}")
    return value


def _missing_accelerator(
    config: StrategyConfig, env: Mapping[str, str], visible_gpus: int, local_tpu: bool
) -> str | None:
    """What is wrong when the expected accelerator is not visible (``None``: all there)."""
    want = config.expect_accelerator
    if not want:
        return None
    count = max(config.expect_accelerator_count, 1)
    image = env.get(IMAGE_VARIANT_ENV) or "unknown (not one of the ncf-pipelines images)"
    if want.startswith("TPU_"):
        remote = config.tpu_address not in (None, "", "local")
        if remote or local_tpu or any(k in env for k in _LOCAL_TPU_ENV):
            return None
        found = (
            "no TPU device (/dev/accel*, /dev/vfio/*, a Google TPU PCI device) and no TPU VM "
            "variables"
        )
        needed = "tpu"
    else:
        if visible_gpus >= count:
            return None
        found = f"{visible_gpus} GPU(s) visible to TensorFlow"
        needed = "gpu"
    return (
        f"this training step was compiled for {count} x {want}, but found {found}; image "
        f"variant: {image}. Check that the machine has the accelerator, that the step runs the "
        f"'{needed}' image (`ncf-pipelines compile` picks it for the profile; --image overrides "
        "it), and that the drivers are loaded. Refusing to train on the CPU instead."
    )


def resolve(
    config: StrategyConfig,
    env: Mapping[str, str],
    visible_gpus: int,
    local_tpu: bool = False,
) -> Resolution:
    """Decides which strategy to build (pure: no TensorFlow, no real environment).

    Args:
        config: the request.
        env: environment variables (``TF_CONFIG``, ``CLUSTER_SPEC``, TPU VM variables).
        visible_gpus: GPUs TensorFlow can see.
        local_tpu: whether a TPU device node is attached to this host.

    Raises:
        MissingAccelerator: the expected accelerator is not here.
        ValueError: the request cannot be met here; the message says what to change.
    """
    missing = _missing_accelerator(config, env, visible_gpus, local_tpu)
    if missing and not config.allow_missing_accelerator:
        raise MissingAccelerator(missing)
    if missing:
        log.warning(
            "%s; %s=1, so training goes on on the CPU", missing, ALLOW_MISSING_ACCELERATOR_ENV
        )
        if config.expect_accelerator.startswith("TPU_"):  # TPUStrategy needs a TPU.
            return Resolution("default", f"no TPU here ({ALLOW_MISSING_ACCELERATOR_ENV})")
        # Otherwise the requested strategy on the CPU: mirrored over CPU devices, multi-worker
        # still joins its cluster.
    num_gpus = visible_gpus if config.num_gpus is None else config.num_gpus
    if num_gpus > visible_gpus:
        raise ValueError(
            f"asked for {num_gpus} GPUs but {visible_gpus} are visible; lower num_gpus "
            f"(or leave it unset) or run on a machine with {num_gpus} GPUs"
        )
    name = config.name
    if name == "off":
        name = "default"

    if name == "auto":
        tf_config = _load_json(env, "TF_CONFIG")
        cluster_spec = _load_json(env, "CLUSTER_SPEC")
        translated = None
        if tf_config is None and cluster_spec is not None:
            translated = tf_config_from_cluster_spec(cluster_spec)
            tf_config = translated
        if config.tpu_address not in (None, "", "local"):
            return Resolution(
                "tpu",
                f"a TPU address was given ({config.tpu_address})",
                tpu_address=config.tpu_address,
            )
        if config.tpu_address is not None or local_tpu or any(k in env for k in _LOCAL_TPU_ENV):
            return Resolution("tpu", "a local TPU is attached to this host", tpu_address="local")
        if tf_config is not None and _cluster_workers(tf_config) > 1:
            source = "CLUSTER_SPEC (translated to TF_CONFIG)" if translated else "TF_CONFIG"
            return Resolution(
                "multi_worker_mirrored",
                f"{source} describes {_cluster_workers(tf_config)} workers",
                num_gpus=num_gpus,
                tf_config=translated,
            )
        if num_gpus > 1:
            return Resolution("mirrored", f"{num_gpus} GPUs are visible", num_gpus=num_gpus)
        if num_gpus == 1:
            return Resolution("one_device", "one GPU is visible", num_gpus=1)
        return Resolution("default", "no TPU, no cluster and no GPU: one CPU device")

    if name == "one_device" and num_gpus > 1:
        raise ValueError(
            f"one_device runs on a single device but num_gpus is {num_gpus}; pass num_gpus 1, "
            f"or use the mirrored strategy to train on {num_gpus} GPUs"
        )
    if name == "tpu":
        address = "local" if config.tpu_address in (None, "") else config.tpu_address
        return Resolution("tpu", "asked for", tpu_address=address)
    if name == "multi_worker_mirrored":
        translated = None
        if _load_json(env, "TF_CONFIG") is None:
            cluster_spec = _load_json(env, "CLUSTER_SPEC")
            if cluster_spec is not None:
                translated = tf_config_from_cluster_spec(cluster_spec)
        return Resolution(name, "asked for", num_gpus=num_gpus, tf_config=translated)
    return Resolution(name, "asked for", num_gpus=num_gpus)


def _has_local_tpu_device() -> bool:
    from training_core.common.tpu_runtime import tpu_devices

    return bool(tpu_devices())


def build_strategy(config: StrategyConfig, env: Mapping[str, str] | None = None):
    """Builds the strategy ``config`` asks for, logging what it chose and why.

    Args:
        config: the request.
        env: the environment to read (``os.environ`` when ``None``). A ``TF_CONFIG`` translated
            from ``CLUSTER_SPEC`` is exported to ``os.environ`` so TensorFlow's resolver sees it.

    Returns:
        A ``tf.distribute.Strategy``.
    """
    import tensorflow as tf

    env = os.environ if env is None else env
    # Listing physical devices does not initialize the runtime, so multi-worker set-up still comes
    # before any other op.
    visible_gpus = len(tf.config.list_physical_devices("GPU"))
    resolution = resolve(config, env, visible_gpus, local_tpu=_has_local_tpu_device())
    log.info("distribution strategy: %s (%s)", resolution.name, resolution.reason)

    if resolution.name == "tpu":
        return _tpu_strategy(resolution.tpu_address or "local")
    if resolution.name == "multi_worker_mirrored":
        if resolution.tf_config is not None:
            os.environ["TF_CONFIG"] = json.dumps(resolution.tf_config)
        return tf.distribute.MultiWorkerMirroredStrategy()
    if resolution.name == "mirrored":
        if resolution.num_gpus:
            devices = [f"/device:GPU:{i}" for i in range(resolution.num_gpus)]
        else:
            # Every CPU device: one unless logical CPU devices were configured (as tests do).
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(
            devices=devices,
            cross_device_ops=_cross_device_ops(config.all_reduce_alg, config.num_packs),
        )
    if resolution.name == "one_device":
        device = "/device:GPU:0" if resolution.num_gpus else "/device:CPU:0"
        return tf.distribute.OneDeviceStrategy(device)
    return tf.distribute.get_strategy()


def _cross_device_ops(all_reduce_alg: str | None, num_packs: int):
    import tensorflow as tf

    if all_reduce_alg is None:
        return None
    if all_reduce_alg == "nccl":
        return tf.distribute.NcclAllReduce(num_packs=num_packs)
    return tf.distribute.HierarchicalCopyAllReduce(num_packs=num_packs)


def _tpu_strategy(address: str):
    """Connects to (only when remote), initializes and wraps a TPU, as the reference does."""
    import tensorflow as tf

    tpu = "" if address == "local" else address
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "local")
        if address not in ("", "local"):
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        raise ValueError(
            f"no usable TPU at {address!r} ({type(e).__name__}: {str(e).strip()[:300]}). "
            "Pass the TPU's name or grpc:// address, run on a TPU VM, or choose another "
            "strategy (auto, mirrored, one_device)."
        ) from e
    return tf.distribute.TPUStrategy(resolver)


def is_multi_worker_or_tpu(strategy) -> bool:
    """Whether ``strategy`` spans hosts or TPUs (the ones preemption handling covers)."""
    import tensorflow as tf

    return isinstance(
        strategy, tf.distribute.MultiWorkerMirroredStrategy | tf.distribute.TPUStrategy
    )
