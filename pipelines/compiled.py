"""What a compiled ncf pipeline looks like: the names in its IR that the code reading it relies on.

``pipelines.pipeline`` builds the pipeline to this layout; ``pipelines.submit`` (and
``compile_pipeline`` itself) read a compiled spec back through it: which task trains, where its
custom job's worker pools are, what run parameter values cannot run on those machines, and which
images it names. No KFP import: reading a compiled template needs none.
"""

import json
import re
from collections.abc import Mapping
from typing import Any

from pipelines.profiles import Machine, batch_problems

TRAIN_TASK = "train-model"  # The compiled task name of train_model (KFP derives it).
# The train task's parameter holding its custom job's worker pools (google-cloud-pipeline-
# components' custom-job wrapper input); absent when training is a plain task.
WORKER_POOL_SPECS = "worker_pool_specs"


def worker_pools(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The training custom job's worker pools as compiled ([] when training is a plain task)."""
    task = spec["root"]["dag"]["tasks"][TRAIN_TASK]
    pools = task["inputs"]["parameters"].get(WORKER_POOL_SPECS)
    return pools["runtimeValue"]["constant"] if pools else []


def compiled_replicas(spec: Mapping[str, Any]) -> int:
    """Training replicas of a compiled pipeline, read from its training task as compiled."""
    pools = worker_pools(spec)
    if not pools:
        return 1  # A plain task: one CPU machine, one replica.
    ms = pools[0]["machine_spec"]
    machine = Machine(
        ms["machine_type"],
        ms.get("accelerator_type", ""),
        int(ms.get("accelerator_count", 0)) if ms.get("accelerator_type") else 0,
        replica_count=sum(int(p.get("replica_count", 1)) for p in pools),
    )
    return machine.sync_replicas


def run_problems(spec: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """What in a run's parameter values cannot run on the compiled machines.

    ``values`` override the compiled defaults; the batch sizes are checked against the training
    replicas the template was compiled for (the profile travels inside the template).
    """
    from training_core.data.plan import resolve_eval_users_per_batch

    declared = spec["root"]["inputDefinitions"]["parameters"]

    def value(name: str) -> Any:
        return values[name] if name in values else declared.get(name, {}).get("defaultValue")

    train_rows, eval_rows = value("train_batch_size"), value("eval_batch_size")
    users = None
    if eval_rows:  # 0: automatic, whole users in a multiple of the replicas.
        users = resolve_eval_users_per_batch(int(eval_rows), int(value("eval_negatives")), 1, 1)
    return batch_problems(
        compiled_replicas(spec), None if train_rows is None else int(train_rows), users
    )


def images_from(spec: Mapping[str, Any], repository: str) -> list[str]:
    """Every image of ``repository`` the compiled spec names, as ``REPOSITORY:TAG``, sorted.

    Looked for anywhere in the spec: the executors' containers, the custom job's worker pools and
    any option that carries an image (a Beam worker image), so that nothing a run pulls is missed.
    """
    text = json.dumps(spec)
    return sorted(
        set(
            re.findall(
                r"(?<![A-Za-z0-9._/-])" + re.escape(repository) + r":[A-Za-z0-9_][A-Za-z0-9_.-]*",
                text,
            )
        )
    )


# Where a compiled spec names an image besides executors and worker pools: the Beam steps'
# Dataflow worker image (their component parameter), and a Beam job's own option.
WORKER_IMAGE = "worker_image"
_WORKER_IMAGE_OPTION = re.compile(r"--(?:sdk_container_image|worker_harness_container_image)=(\S+)")


def _worker_images(node: Any) -> set[str]:
    """The constant values of every ``worker_image`` task parameter below ``node``."""
    found: set[str] = set()
    if isinstance(node, Mapping):
        constant = node.get(WORKER_IMAGE, {})
        constant = constant.get("runtimeValue", {}) if isinstance(constant, Mapping) else {}
        if isinstance(constant, Mapping) and constant.get("constant"):
            found.add(constant["constant"])
        for value in node.values():
            found |= _worker_images(value)
    elif isinstance(node, list):
        for value in node:
            found |= _worker_images(value)
    return found


def images_named(spec: Mapping[str, Any]) -> list[str]:
    """Every container image the compiled spec runs, sorted.

    The executors' containers, the custom job's worker pools and the Dataflow workers' image
    (the Beam steps' ``worker_image``, or a ``--sdk_container_image`` option).
    """
    executors = spec.get("deploymentSpec", {}).get("executors", {}).values()
    images = {e["container"]["image"] for e in executors if "container" in e}
    if TRAIN_TASK in spec.get("root", {}).get("dag", {}).get("tasks", {}):
        images |= {p["container_spec"]["image_uri"] for p in worker_pools(spec)}
    images |= _worker_images(spec.get("root", {})) | _worker_images(spec.get("components", {}))
    images |= set(_WORKER_IMAGE_OPTION.findall(json.dumps(spec)))
    return sorted(images)


def pin_images(text: str, digests: Mapping[str, str]) -> str:
    """A compiled template's text with each image tag of ``digests`` pinned.

    Each ``{tag: "REPO@sha256:..."}`` replaces the whole tag wherever it appears.

    Raises:
        ValueError: the template does not name one of the tags.
    """
    for tag, reference in digests.items():
        pattern = re.compile(r"(?<![A-Za-z0-9._/-])" + re.escape(tag) + r"(?![A-Za-z0-9_.:@-])")
        text, count = pattern.subn(reference, text)
        if not count:
            raise ValueError(f"the template names no image {tag}")
    return text
