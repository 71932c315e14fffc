import dataclasses

import pytest

from pipelines import cli, profiles
from pipelines.profiles import Machine, ProfileError

REQUIRED = [
    "cpu",
    "gpu-t4",
    "gpu-l4",
    "gpu-a100",
    "gpu-a100x8",
    "gpu-h100",
    "gpu-h100x8",
    "gpu-a100-2workers",
    "tpu-v5e-8",
]


def test_catalogue_has_every_required_profile_and_each_passes_preflight():
    assert set(REQUIRED) <= set(profiles.BUILTIN)
    for p in profiles.BUILTIN.values():
        profiles.preflight(p, train_batch_size=1024, eval_users_per_batch=160)
        assert not p.data.accelerator_type and not p.evaluate.accelerator_type


@pytest.mark.parametrize(
    "train, strategy, replicas, eval_multiple, batch_ok, batch_refused",
    [
        # A plain CPU task: one replica, whatever the vCPUs.
        (
            Machine("n1-standard-16", cpu_limit="16", memory_limit="60G"),
            "default",
            1,
            8,
            1026,
            None,
        ),
        (Machine("n1-standard-8", "NVIDIA_TESLA_T4", 1), "one_device", 1, 8, 1026, None),
        (Machine("a2-highgpu-8g", "NVIDIA_TESLA_A100", 8), "mirrored", 8, 8, 1024, 1026),
        # Replicas over all machines: 3 workers x 2 GPUs, 4 workers x 4 GPUs.
        (
            Machine("g2-standard-24", "NVIDIA_L4", 2, replica_count=3),
            "multi_worker_mirrored",
            6,
            24,
            1026,
            1024,
        ),
        (
            Machine("a2-highgpu-4g", "NVIDIA_TESLA_A100", 4, replica_count=4),
            "multi_worker_mirrored",
            16,
            16,
            1024,
            1026,
        ),
        # CPU workers as a custom job: one replica each.
        (
            Machine("n1-standard-16", cpu_limit="16", memory_limit="60G", replica_count=3),
            "multi_worker_mirrored",
            3,
            24,
            1026,
            1024,
        ),
        # One replica per chip (one TensorCore each on v5e).
        (
            Machine("ct5lp-hightpu-8t", "TPU_V5_LITEPOD", 8, tpu_topology="2x4"),
            "tpu",
            8,
            8,
            1024,
            1026,
        ),  # fmt: skip
    ],
    ids=["cpu-task", "1xT4", "8xA100", "3x2-L4", "4x4-A100", "3-cpu-workers", "tpu-v5e-8"],
)
def test_replicas_follow_the_training_machines(
    train, strategy, replicas, eval_multiple, batch_ok, batch_refused
):
    """Replica counts, eval-batch multiples and batch checks, on machines written out here."""
    profile = dataclasses.replace(profiles.BUILTIN["cpu"], train=train, strategy=strategy)
    assert profiles.replicas_of(profile) == replicas
    assert profiles.eval_users_multiple(profile) == eval_multiple
    profiles.preflight(profile, train_batch_size=batch_ok, eval_users_per_batch=eval_multiple * 4)
    if batch_refused is not None:
        with pytest.raises(ProfileError, match=f"does not split over {replicas} replicas"):
            profiles.preflight(profile, train_batch_size=batch_refused)


def _with_train(name, **kw):
    p = profiles.BUILTIN[name]
    return dataclasses.replace(p, train=dataclasses.replace(p.train, **kw))


@pytest.mark.parametrize(
    "profile,message",
    [
        (
            _with_train("gpu-t4", accelerator_type="NVIDIA_TESLA_A100"),
            "NVIDIA_TESLA_A100 is not offered on n1 machines; use a2-highgpu",
        ),
        (
            _with_train("gpu-a100", accelerator_count=2),
            "a2-highgpu-1g has exactly 1 x NVIDIA_TESLA_A100",
        ),
        (_with_train("gpu-l4", accelerator_count=2), "for 2 use g2-standard-24"),
        (_with_train("gpu-t4", accelerator_count=3), "counts (1, 2, 4), not 3"),
        (
            _with_train("gpu-h100", machine_type="a2-highgpu-1g"),
            "a2-highgpu-1g comes with NVIDIA_TESLA_A100, not NVIDIA_H100_80GB",
        ),
        (
            _with_train("tpu-v5e-8", accelerator_count=4),
            "ct5lp-hightpu-8t has 8 TPU_V5_LITEPOD cores",
        ),
        (
            _with_train("tpu-v5e-8", machine_type="n1-standard-8"),
            "TPU_V5_LITEPOD runs on ct5lp-hightpu-1t, ct5lp-hightpu-4t, ct5lp-hightpu-8t",
        ),
        (
            _with_train("tpu-v5e-8", machine_type="ct5lp-hightpu-4t", accelerator_count=4),
            "ct5lp-hightpu-4t has topology 2x2, not 2x4 (a slice over several TPU VMs",
        ),
        (
            _with_train("tpu-v5e-8", machine_type="cloud-tpu", accelerator_type="TPU_V3"),
            "cloud-tpu (TPU v2/v3) is refused: the tpu image runs TensorFlow 2.19",
        ),
        (
            dataclasses.replace(profiles.BUILTIN["tpu-v5e-8"], strategy="mirrored"),
            "a TPU trains only with strategy 'tpu'",
        ),
        (
            dataclasses.replace(profiles.BUILTIN["gpu-a100x8"], strategy="one_device"),
            "'one_device' uses 1 device but the profile has 1 x 8 GPUs; use 'mirrored'",
        ),
        (
            dataclasses.replace(profiles.BUILTIN["gpu-a100-2workers"], strategy="mirrored"),
            "2 training machines need strategy 'multi_worker_mirrored'",
        ),
        (
            dataclasses.replace(profiles.BUILTIN["cpu"], strategy="tpu"),
            "strategy 'tpu' needs a TPU machine",
        ),
        (
            _with_train(
                "cpu",
                machine_type="n2-standard-8",
                accelerator_type="NVIDIA_L4",
                accelerator_count=1,
            ),
            "n2-standard-8 takes no accelerators; use n1-",
        ),
    ],
)
def test_preflight_rejects_impossible_combinations_with_a_fix(profile, message):
    with pytest.raises(ProfileError) as exc:
        profiles.preflight(profile)
    assert message in str(exc.value)


def test_preflight_checks_batches_against_replicas():
    with pytest.raises(
        ProfileError, match="train_batch_size 1001 does not split over 8 replicas; use 1000 or 1008"
    ):
        profiles.preflight(profiles.BUILTIN["gpu-a100x8"], train_batch_size=1001)
    with pytest.raises(
        ProfileError, match=r"100 eval users per batch \(eval_batch_size\) do not split over 8"
    ):
        profiles.preflight(profiles.BUILTIN["tpu-v5e-8"], eval_users_per_batch=100)
    profiles.preflight(profiles.BUILTIN["cpu"], train_batch_size=1000, eval_users_per_batch=100)


def test_custom_profiles_from_yaml(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(
        "two-l4:\n"
        "  description: two L4 machines\n"
        "  train: {machine_type: g2-standard-8, accelerator_type: NVIDIA_L4,"
        " accelerator_count: 1, replica_count: 2}\n"
        "  strategy: multi_worker_mirrored\n"
    )
    p = profiles.get_profile("two-l4", str(f))
    assert p.train == Machine("g2-standard-8", "NVIDIA_L4", 1, replica_count=2)
    assert p.data == profiles.BUILTIN["cpu"].data
    profiles.preflight(p, train_batch_size=1024)
    assert "two-l4" in profiles.catalogue(str(f))
    bad = tmp_path / "bad.yaml"
    bad.write_text("x:\n  train: {machine_type: n1-standard-4, gpus: 2}\n")
    with pytest.raises(ProfileError, match="unknown keys gpus"):
        profiles.load_profiles(str(bad))
    with pytest.raises(ProfileError, match="unknown profile 'nope'; choose one of cpu"):
        profiles.get_profile("nope")


def test_profiles_command_prints_the_catalogue(capsys):
    assert cli.main(["profiles"]) == 0
    out = capsys.readouterr().out
    for name in REQUIRED:
        assert name in out
    assert "NVIDIA_H100_80GB" in out and "2x4" in out


@pytest.mark.parametrize(
    "machine,message",
    [
        (
            # A typo used to pass preflight, and the step went without its machine.
            Machine("n1-standrd-16", cpu_limit="16", memory_limit="60G"),
            "train: machine_type 'n1-standrd-16' is not one Vertex AI offers for training; "
            "did you mean 'n1-standard-16'?",
        ),
        (
            Machine("n1-standard-12", cpu_limit="12"),
            "train: machine_type 'n1-standard-12' does not exist; n1-standard comes as "
            "n1-standard-2, n1-standard-4, n1-standard-8, n1-standard-16",
        ),
        (
            Machine("a2-highgpu-3g", "NVIDIA_TESLA_A100", 3),
            "did you mean 'a2-highgpu-8g'?",
        ),
        (Machine("big-box", cpu_limit="8"), "use a CPU type (n1-, n2-, n2d-, e2-, c2-, c2d-, m1-)"),
        (
            # Spelt right, but a plain task takes its machine from the limits alone.
            Machine("n1-standard-16"),
            "train: runs as a plain pipeline task, which Vertex AI sizes by cpu_limit and "
            "memory_limit, not by machine_type; set them for n1-standard-16 (cpu_limit: 16)",
        ),
    ],
)
def test_preflight_rejects_machine_types_vertex_ai_does_not_offer(machine, message):
    profile = dataclasses.replace(profiles.BUILTIN["cpu"], train=machine)
    with pytest.raises(ProfileError) as exc:
        profiles.preflight(profile)
    assert message in str(exc.value)


def test_every_machine_type_in_one_list():
    """Built-in profiles, the accelerator tables and the check all read ``MACHINE_TYPES``."""
    for p in profiles.BUILTIN.values():
        for m in (p.data, p.train, p.evaluate):
            assert m.machine_type in profiles.MACHINE_TYPES
            assert profiles.machine_type_problem(m.machine_type) is None
    for name in ("n1-highmem-96", "e2-standard-32", "c2-standard-60", "m1-ultramem-160"):
        assert name in profiles.MACHINE_TYPES
    for name in ("a2-megagpu-16g", "a2-ultragpu-8g", "a3-megagpu-8g", "g2-standard-96"):
        assert name in profiles.MACHINE_TYPES
    assert {"cloud-tpu", "ct5lp-hightpu-4t"} <= profiles.MACHINE_TYPES
    assert "n1-standard-17" not in profiles.MACHINE_TYPES


def test_custom_profile_machine_types_are_checked(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text(
        "typo:\n  train: {machine_type: n2-standrad-8, cpu_limit: 8}\n  strategy: default\n"
        "number:\n  train: {machine_type: 16, cpu_limit: 16}\n  strategy: default\n"
    )
    loaded = profiles.load_profiles(str(f))
    with pytest.raises(ProfileError, match="did you mean 'n2-standard-8'"):
        profiles.preflight(loaded["typo"])
    assert loaded["number"].train.machine_type == "16"  # YAML's number, kept as text.
    with pytest.raises(ProfileError, match="machine_type '16' is not one Vertex AI offers"):
        profiles.preflight(loaded["number"])
    # The listing still prints it (its own row: a built-in row holds "16" too).
    (row,) = [r for r in profiles.catalogue(str(f)).splitlines() if r.split()[:1] == ["number"]]
    assert row.split()[1:4] == ["1", "x", "16"]
