"""Hardware profiles: which machine runs each pipeline step, and the training strategy that follows.

A profile maps every step to a Vertex AI machine: the data steps (validate, prepare) and the
evaluate/export steps to CPU machines sized for the data, training to the accelerator. Training on
an accelerator always runs as a Vertex AI custom job (exact machine type, accelerator, replicas,
TPU topology); CPU steps use the task's resource setters. ``preflight`` rejects combinations that
cannot run before anything is compiled or sent, and says what to choose instead.

``Profile``, ``Machine`` and ``Rollout`` are pydantic dataclasses: their fields are the YAML keys,
their types the checks, so a new key is one field (plus its use). Custom profiles come from YAML
(see ``docs/profiles.md``)::

    my-profile:
      description: two L4 workers
      train: {machine_type: g2-standard-8, accelerator_type: NVIDIA_L4, accelerator_count: 1,
              replica_count: 2}
      strategy: multi_worker_mirrored

Over 500 lines, for one reason: the built-in catalogue (``BUILTIN``) and the machine tables
preflight checks against (``_CPU_SIZES``, ``_FIXED_GPU``, ``_TPU``) are data the models and
preflight's rules are read beside; each concern is its own block (models, catalogue, machine
rules, preflight, the YAML loader).
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Annotated, Any

import pydantic
from pydantic import BeforeValidator, StrictBool, StrictInt, StrictStr

from training_core.data.config import RUNNER_BEAM, RUNNER_LOCAL
from training_core.data.config import RUNNERS as DATA_RUNNERS
from training_core.serving.deploy import (
    DEFAULT_CANARY_PERCENT,
    ROLLOUT_CANARY,
    ROLLOUT_REPLACE,
    ROLLOUTS,
)
from training_core.serving.vertex_registry import SERVING_IMAGES, SERVING_OWN, SERVING_PREBUILT
from training_core.training.strategy import STRATEGIES

# Pydantic dataclasses, not BaseModels: still built positionally (``Machine("n1-standard-8",
# "NVIDIA_TESLA_T4", 1)``) and changed with ``dataclasses.replace``, which validates again. YAML
# reads ``cpu_limit: 16`` or ``machine_type: 16`` as a number: a text field keeps its text.
_config = pydantic.dataclasses.dataclass(
    frozen=True, config=pydantic.ConfigDict(extra="forbid", coerce_numbers_to_str=True)
)


@_config
class Machine:
    """One step's machine."""

    machine_type: str
    accelerator_type: str = ""
    accelerator_count: StrictInt = 0
    replica_count: StrictInt = 1
    tpu_topology: str = ""
    cpu_limit: str = ""  # For steps placed through resource setters ("8" vCPUs).
    memory_limit: str = ""  # "30G".
    boot_disk_size_gb: StrictInt = 100

    @property
    def is_tpu(self) -> bool:
        """Whether the accelerator is a TPU."""
        return self.accelerator_type.startswith("TPU_")

    @property
    def replicas(self) -> int:
        """Model replicas in sync training over all machines (TPU: one per core)."""
        return self.replica_count * max(self.accelerator_count, 1)

    @property
    def custom_job(self) -> bool:
        """Whether the step must run as a Vertex AI custom job rather than a plain task."""
        return bool(self.accelerator_type) or self.replica_count > 1

    @property
    def sync_replicas(self) -> int:
        """Replicas a training batch is split over on this machine (1 for a plain CPU task)."""
        return self.replicas if self.custom_job else 1


# The endpoint's machine when a profile deploys (``deploy``) and names no ``serve`` machine: the
# prebuilt TensorFlow serving container on 4 vCPUs answers NCF's small requests in milliseconds.
SERVE_MACHINE = Machine("n1-standard-4")


@_config
class Rollout:
    """How a new version reaches the endpoint: a deploying profile's ``rollout`` (docs/rollouts.md).

    ``canary_percent``: the canary's share of the traffic our versions have.
    ``promote_after_minutes``: with a canary, a pipeline step that waits this long and then
    promotes it if it still serves (``deploy.promote_after``); 0: promote or roll back by hand
    (``ncf-pipelines rollout``).
    """

    strategy: StrictStr = ROLLOUT_REPLACE
    canary_percent: StrictInt = DEFAULT_CANARY_PERCENT
    promote_after_minutes: StrictInt = 0

    def problems(self) -> list[str]:
        """What is wrong with the choice, each with what to write instead."""
        out = []
        if self.strategy not in ROLLOUTS:
            out.append(f"rollout: strategy {self.strategy!r} is not one of {', '.join(ROLLOUTS)}")
        if not 1 <= self.canary_percent <= 99:
            out.append(
                f"rollout: canary_percent {self.canary_percent} must be 1 to 99 (the canary's "
                "share of the traffic; 100 is rollout replace)"
            )
        if self.promote_after_minutes < 0:
            out.append("rollout: promote_after_minutes must be >= 0 (0: promote by hand)")
        if self.promote_after_minutes and self.strategy != ROLLOUT_CANARY:
            out.append(
                "rollout: promote_after_minutes promotes a canary; use strategy canary or remove it"
            )
        return out


def _rollout_shorthand(value: Any) -> Any:
    """``rollout: canary`` for ``rollout: {strategy: canary}``."""
    if isinstance(value, str):
        return {"strategy": value}
    if not isinstance(value, dict | Rollout):
        raise ValueError(f"expected replace, canary or a mapping, got {value!r}")
    return value


@_config
class Profile:
    """A named hardware setup for a whole pipeline run."""

    name: str
    description: str
    data: Machine  # validate_data, prepare_data.
    train: Machine
    evaluate: Machine  # evaluate_model, export_model.
    strategy: str
    data_runner: str = RUNNER_LOCAL  # prepare_data on one machine, or Beam (Dataflow at scale).
    # Deploy a blessed, registered model to an endpoint (deploy_model); off by default.
    deploy: StrictBool = False
    serve: Machine = SERVE_MACHINE  # The endpoint's machines (replica_count: how many serve).
    # How a new version takes the endpoint's traffic: at once, or as a canary (docs/rollouts.md).
    rollout: Annotated[Rollout, BeforeValidator(_rollout_shorthand)] = Rollout()
    # Which image serves a registered model: Vertex AI's prebuilt TF Serving image (prebuilt, while
    # Google offers 2.15: until 2027-01-14) or our own CPU serve image (own); docs/serving.md.
    serving_image: str = SERVING_PREBUILT
    # Tune before the final training (a Vertex AI tuning job, each trial on one `train` machine);
    # search_space: a search-space file, "" for training_core/search_space.yaml.
    tune: StrictBool = False
    search_space: str = ""

    def catalogue_row(self) -> str:
        """One line for ``ncf-pipelines profiles``."""
        t = self.train
        acc = f"{t.accelerator_count} x {t.accelerator_type}" if t.accelerator_type else "CPU"
        topo = f" ({t.tpu_topology})" if t.tpu_topology else ""
        data = "Beam/Dataflow" if self.data_runner == RUNNER_BEAM else self.data.machine_type
        return (
            f"{self.name:20s} {t.replica_count} x {t.machine_type:18s} {acc + topo:28s} "
            f"{self.strategy:22s} {data:15s} {self.description}"
        )


def _cpu(machine_type: str, cpus: int, mem_gb: int) -> Machine:
    return Machine(machine_type, cpu_limit=str(cpus), memory_limit=f"{mem_gb}G")


_DATA = _cpu("n1-highmem-8", 8, 52)  # ml-20m prep peaks at a few GiB; room for 10x that.
_EVAL = _cpu("n1-standard-8", 8, 30)

BUILTIN: dict[str, Profile] = {
    p.name: p
    for p in [
        Profile(
            "cpu",
            "everything on CPU machines",
            _DATA,
            _cpu("n1-standard-16", 16, 60),
            _EVAL,
            "default",
        ),
        Profile(
            "gpu-t4",
            "one NVIDIA T4",
            _DATA,
            Machine("n1-standard-8", "NVIDIA_TESLA_T4", 1),
            _EVAL,
            "one_device",
        ),
        Profile(
            "gpu-l4",
            "one NVIDIA L4",
            _DATA,
            Machine("g2-standard-8", "NVIDIA_L4", 1),
            _EVAL,
            "one_device",
        ),
        Profile(
            "gpu-a100",
            "one NVIDIA A100 40GB",
            _DATA,
            Machine("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1),
            _EVAL,
            "one_device",
        ),
        Profile(
            "gpu-a100x8",
            "eight NVIDIA A100 40GB in one machine",
            _DATA,
            Machine("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8),
            _EVAL,
            "mirrored",
        ),
        Profile(
            "gpu-h100",
            "one NVIDIA H100 80GB (TF 2.16 has sm_90 SASS: no PTX JIT at start; driver R525+)",
            _DATA,
            Machine("a3-highgpu-1g", "NVIDIA_H100_80GB", 1),
            _EVAL,
            "one_device",
        ),
        Profile(
            "gpu-h100x8",
            "eight NVIDIA H100 80GB in one machine (TF 2.16 has sm_90 SASS: no PTX JIT; R525+)",
            _DATA,
            Machine("a3-highgpu-8g", "NVIDIA_H100_80GB", 8),
            _EVAL,
            "mirrored",
        ),
        Profile(
            "gpu-a100-2workers",
            "two machines with one A100 each (multi-worker)",
            _DATA,
            Machine("a2-highgpu-1g", "NVIDIA_TESLA_A100", 1, replica_count=2),
            _EVAL,
            "multi_worker_mirrored",
        ),
        Profile(
            "tpu-v5e-8",
            "a TPU v5e-8 VM (2x4 topology)",
            _DATA,
            Machine("ct5lp-hightpu-8t", "TPU_V5_LITEPOD", 8, tpu_topology="2x4"),
            _EVAL,
            "tpu",
        ),
        Profile(
            "gpu-a100x8-dataflow",
            "data prep as a Beam job (Dataflow), eight A100 for training",
            _cpu("n1-standard-4", 4, 15),  # Only launches the Beam jobs.
            Machine("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8),
            _EVAL,
            "mirrored",
            data_runner=RUNNER_BEAM,
        ),
    ]
}

# The machine types Vertex AI offers for custom training (docs: "Configure compute resources for
# custom training"): the one list every machine type is checked against (``MACHINE_TYPES``), built
# from the tables below, which also say what each accelerator family carries.
_CPU_SIZES: dict[str, tuple[int, ...]] = {  # CPU family -> vCPU sizes (the name's suffix)
    "n1-standard": (2, 4, 8, 16, 32, 64, 96),
    "n1-highmem": (2, 4, 8, 16, 32, 64, 96),
    "n1-highcpu": (2, 4, 8, 16, 32, 64, 96),
    "n2-standard": (2, 4, 8, 16, 32, 48, 64, 80),
    "n2-highmem": (2, 4, 8, 16, 32, 48, 64, 80),
    "n2-highcpu": (2, 4, 8, 16, 32, 48, 64, 80),
    "n2d-standard": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
    "n2d-highmem": (2, 4, 8, 16, 32, 48, 64, 80, 96),
    "n2d-highcpu": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
    "e2-standard": (2, 4, 8, 16, 32),
    "e2-highmem": (2, 4, 8, 16),
    "e2-highcpu": (2, 4, 8, 16, 32),
    "c2-standard": (4, 8, 16, 30, 60),
    "c2d-standard": (2, 4, 8, 16, 32, 56, 112),
    "c2d-highmem": (2, 4, 8, 16, 32, 56, 112),
    "c2d-highcpu": (2, 4, 8, 16, 32, 56, 112),
    "m1-ultramem": (40, 80, 160),
    "m1-megamem": (96,),
}
# What each machine family offers: accelerator type -> allowed counts (None: any listed count).
_N1_GPUS = {
    "NVIDIA_TESLA_T4": (1, 2, 4),
    "NVIDIA_TESLA_V100": (1, 2, 4, 8),
    "NVIDIA_TESLA_P100": (1, 2, 4),
    "NVIDIA_TESLA_P4": (1, 2, 4),
}
_FIXED_GPU = {  # family -> (its GPU, the counts offered: FAMILY-{count}g)
    "a2-highgpu": ("NVIDIA_TESLA_A100", (1, 2, 4, 8)),
    "a2-megagpu": ("NVIDIA_TESLA_A100", (16,)),
    "a2-ultragpu": ("NVIDIA_A100_80GB", (1, 2, 4, 8)),
    "a3-highgpu": ("NVIDIA_H100_80GB", (1, 2, 4, 8)),
    "a3-megagpu": ("NVIDIA_H100_MEGA_80GB", (8,)),
    "a3-ultragpu": ("NVIDIA_H200_141GB", (8,)),
    "a4-highgpu": ("NVIDIA_B200", (8,)),
}
_G2_L4 = {
    "g2-standard-4": 1,
    "g2-standard-8": 1,
    "g2-standard-12": 1,
    "g2-standard-16": 1,
    "g2-standard-32": 1,
    "g2-standard-24": 2,
    "g2-standard-48": 4,
    "g2-standard-96": 8,
}
_TPU = {  # machine type -> (accelerator, cores, topology): one TPU VM each (docs/profiles.md)
    "ct5lp-hightpu-1t": (("TPU_V5_LITEPOD",), (1,), "1x1"),
    "ct5lp-hightpu-4t": (("TPU_V5_LITEPOD",), (4,), "2x2"),
    "ct5lp-hightpu-8t": (("TPU_V5_LITEPOD",), (8,), "2x4"),
}
# TPU machines Vertex AI offers that the tpu image cannot be shown to run on, and why.
_REFUSED_TPU = {
    "cloud-tpu": (
        "cloud-tpu (TPU v2/v3) is refused: the tpu image runs TensorFlow 2.19 with libtpu 0.0.10 "
        "on the PJRT runtime, which Vertex AI documents for TPU v5e (TensorFlow 2.15+), not for "
        "v2/v3 (Google builds their TensorFlow separately, and recommends moving off v3); use a "
        "v5e machine, ct5lp-hightpu-1t/4t/8t (profile tpu-v5e-8; docs/profiles.md, 'TPU')"
    ),
}
_REFUSED_TPU_TYPES = ("TPU_V2", "TPU_V3")
_CPU_FAMILIES = tuple(f"{family}-" for family in _CPU_SIZES)
_ACCELERATOR_MACHINES = frozenset(
    [f"{family}-{n}g" for family, (_, counts) in _FIXED_GPU.items() for n in counts]
    + list(_G2_L4)
    + list(_TPU)
    + list(_REFUSED_TPU)
)
MACHINE_TYPES: frozenset[str] = _ACCELERATOR_MACHINES | {
    f"{family}-{n}" for family, sizes in _CPU_SIZES.items() for n in sizes
}
"""Every machine type a profile may name: what Vertex AI offers for custom training."""
_SERIES = {  # For messages: the machine series, by what they carry.
    kind: ", ".join(dict.fromkeys(f.split("-")[0] + "-" for f in families))
    for kind, families in (("CPU", _CPU_SIZES), ("GPU", [*_FIXED_GPU, *_G2_L4]))
}


class ProfileError(ValueError):
    """A profile or a run configuration that cannot run; the message says what to choose."""


def machine_type_problem(machine_type: Any) -> str | None:
    """Why ``machine_type`` is not a Vertex AI training machine type (with the nearest), or None."""
    if isinstance(machine_type, str) and machine_type in MACHINE_TYPES:
        return None
    text = str(machine_type)
    family = text.rpartition("-")[0]
    if family in _CPU_SIZES:
        sizes = ", ".join(f"{family}-{n}" for n in _CPU_SIZES[family])
        return f"machine_type {text!r} does not exist; {family} comes as {sizes}"
    close = difflib.get_close_matches(text.lower(), sorted(MACHINE_TYPES), n=1, cutoff=0.6)
    if close:
        return (
            f"machine_type {text!r} is not one Vertex AI offers for training; did you mean "
            f"{close[0]!r}? (the list: docs/profiles.md)"
        )
    return (
        f"machine_type {text!r} is not one Vertex AI offers for training; use a CPU type "
        f"({_SERIES['CPU']}), a GPU type ({_SERIES['GPU']}) or a TPU type "
        f"({', '.join(_TPU)}) (the list: docs/profiles.md)"
    )


def _machine_problems(step: str, m: Machine, pipeline_task: bool = True) -> list[str]:
    """What is wrong with one machine; ``pipeline_task`` false for the endpoint's (``serve``).

    A plain pipeline task is sized by ``cpu_limit``/``memory_limit``; an endpoint's machine is
    its ``machine_type`` (Vertex AI's prediction service starts it), and takes no limits.
    """
    out = []
    mt, acc, n = m.machine_type, m.accelerator_type, m.accelerator_count
    unknown = machine_type_problem(mt)
    if unknown:
        return [f"{step}: {unknown}"]  # The checks below would only guess at what was meant.
    if m.replica_count < 1:
        out.append(f"{step}: replica_count must be >= 1")
    if n < 0:
        out.append(f"{step}: accelerator_count must be >= 0")
    if not acc:
        if n:
            out.append(f"{step}: accelerator_count {n} without an accelerator_type")
        if mt in _ACCELERATOR_MACHINES:
            out.append(f"{step}: {mt} is an accelerator machine; name its accelerator_type")
        elif pipeline_task and not m.custom_job and not (m.cpu_limit or m.memory_limit):
            # A plain task gets its machine from these limits; its machine_type goes nowhere.
            vcpus = mt.rpartition("-")[2]
            out.append(
                f"{step}: runs as a plain pipeline task, which Vertex AI sizes by cpu_limit and "
                f"memory_limit, not by machine_type; set them for {mt} (cpu_limit: {vcpus})"
            )
        return out
    if acc and n < 1:
        out.append(f"{step}: {acc} needs accelerator_count >= 1")
        return out
    if mt in _REFUSED_TPU or acc in _REFUSED_TPU_TYPES:
        out.append(f"{step}: {_REFUSED_TPU['cloud-tpu']}")
        return out
    if mt in _TPU:
        accs, counts, topo = _TPU[mt]
        if acc not in accs:
            out.append(f"{step}: {mt} offers {' or '.join(accs)}, not {acc}")
        elif n not in counts:
            out.append(
                f"{step}: {mt} has {counts[0]} {acc} cores; set accelerator_count {counts[0]}"
            )
        if topo and m.tpu_topology and m.tpu_topology != topo:
            out.append(
                f"{step}: {mt} has topology {topo}, not {m.tpu_topology} (a slice over several "
                "TPU VMs is not supported: training runs on one TPU VM, ct5lp-hightpu-8t at most)"
            )
        return out
    if acc.startswith("TPU_"):
        choices = ", ".join(k for k, v in _TPU.items() if acc in v[0])
        out.append(f"{step}: {acc} runs on {choices}, not {mt}")
        return out
    for family, (gpu, _) in _FIXED_GPU.items():
        match = re.fullmatch(rf"{family}-(\d+)g", mt)
        if match:
            count = int(match.group(1))
            if acc != gpu:
                out.append(f"{step}: {mt} comes with {gpu}, not {acc}")
            elif n != count:
                out.append(
                    f"{step}: {mt} has exactly {count} x {gpu}; set accelerator_count "
                    f"{count} or pick the {gpu} machine with {n} GPUs"
                )
            return out
    if mt in _G2_L4:
        if acc != "NVIDIA_L4":
            out.append(f"{step}: {mt} comes with NVIDIA_L4, not {acc}")
        elif n != _G2_L4[mt]:
            fits = [k for k, v in _G2_L4.items() if v == n]
            out.append(
                f"{step}: {mt} has {_G2_L4[mt]} x NVIDIA_L4; for {n} use "
                f"{', '.join(fits) or 'no g2 machine'}"
            )
        return out
    if mt.startswith("n1-"):
        if acc not in _N1_GPUS:
            where = (
                "a2-highgpu-*g"
                if "A100" in acc
                else "a3-highgpu-*g"
                if "H100" in acc
                else "g2-standard-*"
                if "L4" in acc
                else "another machine family"
            )
            out.append(f"{step}: {acc} is not offered on n1 machines; use {where}")
        elif n not in _N1_GPUS[acc]:
            out.append(f"{step}: {acc} on n1 comes in counts {_N1_GPUS[acc]}, not {n}")
        return out
    if mt.startswith(_CPU_FAMILIES):
        out.append(
            f"{step}: {mt} takes no accelerators; use n1-* (T4/V100), g2-* (L4), "
            "a2-* (A100) or a3-* (H100)"
        )
    return out


def preflight(
    profile: Profile, train_batch_size: int | None = None, eval_users_per_batch: int | None = None
) -> None:
    """Rejects a profile (and batch sizes) that cannot run, listing every problem and its fix.

    Args:
        profile: the hardware profile.
        train_batch_size: the global training batch (pre-batch rows), if known.
        eval_users_per_batch: users per eval record, if known (auto data prep picks a multiple of
            the replica count it is told).
    """
    problems = []
    for step, m in (
        ("data", profile.data),
        ("train", profile.train),
        ("evaluate", profile.evaluate),
    ):
        problems += _machine_problems(step, m)
    for step, m in (("data", profile.data), ("evaluate", profile.evaluate)):
        if m.accelerator_type or m.replica_count > 1:
            problems.append(f"{step}: runs on one CPU machine; remove its accelerator/replicas")
    if profile.tune and (profile.train.is_tpu or profile.train.replica_count > 1):
        problems.append(
            "tune: each tuning trial trains on one CPU or GPU machine; use tune with a "
            "one-machine GPU or CPU profile (tune there, then train at scale with the options "
            "it found)"
        )
    if profile.deploy:
        problems += _machine_problems("serve", profile.serve, pipeline_task=False)
        if profile.serve.cpu_limit or profile.serve.memory_limit:
            problems.append(
                "serve: cpu_limit and memory_limit size pipeline tasks; the endpoint runs on its "
                "machine_type, so remove them"
            )
        if profile.serve.is_tpu:
            problems.append(
                "serve: the prebuilt TensorFlow serving container runs on CPU or GPU machines; "
                "remove the TPU"
            )
        elif profile.serve.accelerator_type and profile.serving_image == SERVING_OWN:
            problems.append(
                f"serve: our own serving image (serving_image: {SERVING_OWN}) is CPU-only, so "
                f"{profile.serve.accelerator_type} would sit idle; remove the accelerator, or "
                f"serve on the GPU with serving_image: {SERVING_PREBUILT}"
            )
        problems += profile.rollout.problems()
    elif profile.rollout != Rollout():
        problems.append(
            "rollout: only a deploying profile rolls out; set deploy: true or remove it"
        )
    if profile.serving_image not in SERVING_IMAGES:
        problems.append(
            f"serving_image {profile.serving_image!r} is unknown; use {' or '.join(SERVING_IMAGES)}"
        )
    if profile.data_runner not in DATA_RUNNERS:
        problems.append(
            f"data_runner {profile.data_runner!r} is unknown; use one of {', '.join(DATA_RUNNERS)}"
        )
    t, s = profile.train, profile.strategy
    if s not in STRATEGIES:
        problems.append(f"strategy {s!r} is unknown; use one of {', '.join(STRATEGIES)}")
    if t.is_tpu and s not in ("tpu", "auto"):
        problems.append(f"a TPU trains only with strategy 'tpu' (or 'auto'), not {s!r}")
    if s == "tpu" and not t.is_tpu:
        problems.append("strategy 'tpu' needs a TPU machine (e.g. profile tpu-v5e-8)")
    gpus = t.accelerator_count if t.accelerator_type and not t.is_tpu else 0
    if s == "one_device" and (gpus > 1 or t.replica_count > 1):
        problems.append(
            f"strategy 'one_device' uses 1 device but the profile has "
            f"{t.replica_count} x {gpus} GPUs; use 'mirrored' or "
            "'multi_worker_mirrored'"
        )
    if t.replica_count > 1 and s not in ("multi_worker_mirrored", "auto"):
        problems.append(
            f"{t.replica_count} training machines need strategy 'multi_worker_mirrored' (or 'auto')"
        )
    if s == "multi_worker_mirrored" and t.replica_count < 2:
        problems.append(
            "strategy 'multi_worker_mirrored' needs replica_count >= 2; use "
            "'mirrored' for one machine"
        )
    problems += batch_problems(t.sync_replicas, train_batch_size, eval_users_per_batch)
    raise_problems(profile.name, problems)


def batch_problems(
    replicas: int, train_batch_size: int | None, eval_users_per_batch: int | None
) -> list[str]:
    """Batch sizes that do not split over ``replicas``, each with the sizes that would."""
    problems = []
    if train_batch_size is not None and train_batch_size % replicas:
        lo = train_batch_size // replicas * replicas
        problems.append(
            f"train_batch_size {train_batch_size} does not split over {replicas} "
            f"replicas; use {lo or replicas} or {lo + replicas}"
        )
    if eval_users_per_batch is not None and eval_users_per_batch % replicas:
        problems.append(
            f"{eval_users_per_batch} eval users per batch (eval_batch_size) do not split over "
            f"{replicas} replicas; pick an eval_batch_size of a multiple of {replicas} users "
            "(or 0: automatic)"
        )
    return problems


def raise_problems(name: str, problems: list[str]) -> None:
    """Raises one ``ProfileError`` listing every problem, if there are any."""
    if problems:
        raise ProfileError(f"profile {name!r} cannot run:\n  - " + "\n  - ".join(problems))


def replicas_of(profile: Profile) -> int:
    """Training replicas of a profile (1 on CPU)."""
    return profile.train.sync_replicas


def eval_users_multiple(profile: Profile) -> int:
    """What auto eval batches must be a multiple of (users) for this profile."""
    return math.lcm(8, replicas_of(profile))


_PROFILE = pydantic.TypeAdapter(Profile)
# Pydantic's type errors, in the words the YAML loader has always used.
_EXPECTED = {
    "bool_type": "true or false",
    "int_type": "int",
    "string_type": "str",
    "dataclass_type": "a mapping",
}


def load_profiles(path: str) -> dict[str, Profile]:
    """Reads custom profiles from YAML; steps left out take the ``cpu`` profile's machines."""
    from pipelines import yaml_io

    with open(path) as f:
        try:
            raw = yaml_io.load(f) or {}
        except yaml_io.YAMLError as e:
            raise ProfileError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(raw, dict):
        raise ProfileError(f"{path}: expected a mapping of profile names to profiles")
    base = BUILTIN["cpu"]
    left_out = {
        "description": "custom profile",
        "data": base.data,
        "evaluate": base.evaluate,
        "strategy": "auto",
    }
    out = {}
    for name, spec in raw.items():
        where = f"{path}: profile {name!r}"
        if not isinstance(spec, dict) or "train" not in spec:
            raise ProfileError(f"{where}: needs at least a 'train' machine")
        if "name" in spec:  # The mapping's key names the profile.
            raise ProfileError(_unknown_keys(where, ["name"], Profile))
        try:
            out[str(name)] = _PROFILE.validate_python({**left_out, **spec, "name": name})
        except pydantic.ValidationError as e:
            raise ProfileError(_first_problem(e, where)) from None
    return out


def _first_problem(error: pydantic.ValidationError, where: str) -> str:
    """A profile's first problem in ``error`` (unknown keys first), at its ``where.key.key``."""
    problems = error.errors()
    unknown = [p for p in problems if p["type"] == "unexpected_keyword_argument"]
    if unknown:
        loc = min((p["loc"][:-1] for p in unknown), key=len)
        model = Profile
        for key in loc:
            model = model.__pydantic_fields__[key].annotation
        keys = sorted(str(p["loc"][-1]) for p in unknown if p["loc"][:-1] == loc)
        return _unknown_keys(_at(where, loc), keys, model)
    p = problems[0]
    if p["type"] == "missing":
        return f"{_at(where, p['loc'][:-1])}: {p['loc'][-1]} is required"
    if p["type"] == "value_error":
        return f"{_at(where, p['loc'])}: {p['ctx']['error']}"
    if p["type"] in _EXPECTED:
        return f"{_at(where, p['loc'])}: expected {_EXPECTED[p['type']]}, got {p['input']!r}"
    return f"{_at(where, p['loc'])}: {p['msg']}"


def _at(where: str, loc: tuple) -> str:
    return where + "".join(f".{key}" for key in loc)


def _unknown_keys(where: str, keys: list[str], model: type) -> str:
    """Unknown keys, the known ones (a profile's name is its mapping key), the nearest names."""
    known = sorted(set(model.__pydantic_fields__) - {"name"})
    text = f"{where}: unknown keys {', '.join(keys)}; known: {', '.join(known)}"
    near = [(key, difflib.get_close_matches(key, known, n=1)) for key in keys]
    hints = [
        f"{close[0]!r}" + (f" for {key!r}" if len(keys) > 1 else "") for key, close in near if close
    ]
    return text + (f"; did you mean {', '.join(hints)}?" if hints else "")


def get_profile(name: str, custom_file: str | None = None) -> Profile:
    """A built-in profile, or one from ``custom_file``; unknown names list the choices."""
    catalogue = dict(BUILTIN)
    if custom_file:
        catalogue.update(load_profiles(custom_file))
    if name not in catalogue:
        raise ProfileError(
            f"unknown profile {name!r}; choose one of {', '.join(catalogue)} "
            "(see `ncf-pipelines profiles`)"
        )
    return catalogue[name]


def catalogue(custom_file: str | None = None) -> str:
    """The readable table ``ncf-pipelines profiles`` prints."""
    profiles = dict(BUILTIN)
    if custom_file:
        profiles.update(load_profiles(custom_file))
    head = (
        f"{'profile':20s} {'training machine(s)':22s} {'accelerator':28s} "
        f"{'strategy':22s} {'data machine':15s} description"
    )
    return "\n".join([head, "-" * len(head)] + [p.catalogue_row() for p in profiles.values()])
