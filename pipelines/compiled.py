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
