import dataclasses
import json
import subprocess
import sys

import pytest

from training_core.training.strategy import (
    StrategyConfig,
    resolve,
    tf_config_from_cluster_spec,
)

TWO_WORKERS = json.dumps(
    {
        "cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]},
        "task": {"type": "worker", "index": 1},
    }
)
VERTEX_SPEC = json.dumps(
    {
        "cluster": {
            "workerpool0": ["cmle-training-workerpool0-1:2222"],
            "workerpool1": ["cmle-training-workerpool1-1:2222", "cmle-training-workerpool1-2:2222"],
        },
        "environment": "cloud",
        "task": {"type": "workerpool1", "index": 1, "trial": ""},
        "job": "{}",
    }
)
AUTO = StrategyConfig()


def test_auto_no_accelerators_is_default():
    r = resolve(AUTO, {}, visible_gpus=0)
    assert r.name == "default" and "CPU" in r.reason


@pytest.mark.parametrize("gpus,name", [(1, "one_device"), (4, "mirrored")])
def test_auto_follows_gpu_count(gpus, name):
    r = resolve(AUTO, {}, visible_gpus=gpus)
    assert (r.name, r.num_gpus) == (name, gpus)
    assert str(gpus) in r.reason or "one GPU" in r.reason


def test_auto_tf_config_cluster_is_multi_worker():
    r = resolve(AUTO, {"TF_CONFIG": TWO_WORKERS}, visible_gpus=2)
    assert r.name == "multi_worker_mirrored" and r.tf_config is None
    assert "TF_CONFIG describes 2 workers" in r.reason


def test_auto_single_worker_tf_config_is_not_multi_worker():
    one = json.dumps({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}})
    assert resolve(AUTO, {"TF_CONFIG": one}, visible_gpus=0).name == "default"


def test_auto_translates_vertex_cluster_spec():
    r = resolve(AUTO, {"CLUSTER_SPEC": VERTEX_SPEC}, visible_gpus=0)
    assert r.name == "multi_worker_mirrored" and "CLUSTER_SPEC" in r.reason
    assert r.tf_config == {
        "cluster": {
            "chief": ["cmle-training-workerpool0-1:2222"],
            "worker": ["cmle-training-workerpool1-1:2222", "cmle-training-workerpool1-2:2222"],
        },
        "task": {"type": "worker", "index": 1},
    }


def test_tf_config_wins_over_cluster_spec():
    r = resolve(AUTO, {"TF_CONFIG": TWO_WORKERS, "CLUSTER_SPEC": VERTEX_SPEC}, visible_gpus=0)
    assert r.tf_config is None and "TF_CONFIG" in r.reason


def test_cluster_spec_chief_translation():
    spec = json.loads(VERTEX_SPEC)
    spec["task"] = {"type": "workerpool0", "index": 0}
    assert tf_config_from_cluster_spec(spec)["task"] == {"type": "chief", "index": 0}
    with pytest.raises(ValueError, match="unknown worker pool"):
        tf_config_from_cluster_spec(
            {"cluster": {"pool9": ["h:1"]}, "task": {"type": "workerpool0", "index": 0}}
        )


def test_auto_tpu_address_and_local_tpu():
    r = resolve(StrategyConfig(tpu_address="grpc://10.0.0.3:8470"), {}, visible_gpus=0)
    assert (r.name, r.tpu_address) == ("tpu", "grpc://10.0.0.3:8470")
    r = resolve(AUTO, {"TPU_ACCELERATOR_TYPE": "v3-8"}, visible_gpus=0)
    assert (r.name, r.tpu_address) == ("tpu", "local")
    assert resolve(AUTO, {}, visible_gpus=0, local_tpu=True).name == "tpu"
    # A TPU wins over a cluster description.
    assert resolve(AUTO, {"TF_CONFIG": TWO_WORKERS}, 0, local_tpu=True).name == "tpu"


def test_explicit_names():
    assert resolve(StrategyConfig(name="off"), {}, visible_gpus=2).name == "default"
    assert resolve(StrategyConfig(name="mirrored", num_gpus=0), {}, 2).num_gpus == 0
    r = resolve(StrategyConfig(name="multi_worker_mirrored"), {"CLUSTER_SPEC": VERTEX_SPEC}, 0)
    assert r.tf_config["cluster"]["chief"]


def test_impossible_requests_say_what_to_change():
    with pytest.raises(ValueError, match="num_gpus must be 0 or more"):
        StrategyConfig(num_gpus=-1)
    with pytest.raises(ValueError, match="use the mirrored strategy"):
        resolve(StrategyConfig(name="one_device", num_gpus=2), {}, visible_gpus=2)
    with pytest.raises(ValueError, match="2 are visible"):
        resolve(StrategyConfig(name="mirrored", num_gpus=4), {}, visible_gpus=2)
    with pytest.raises(ValueError, match="unknown strategy"):
        StrategyConfig(name="parameter_server")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        resolve(AUTO, {"TF_CONFIG": "{oops"}, 0)


@pytest.mark.slow
def test_tpu_requested_where_none_exists_fails_clearly():
    # In a fresh process: TPU initialization must not touch the test process's runtime.
    code = (
        "from training_core.training.strategy import StrategyConfig, build_strategy\n"
        "try:\n"
        "    build_strategy(StrategyConfig(name='tpu'))\n"
        "except ValueError as e:\n"
        "    print('ERROR:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "ERROR: no usable TPU at 'local'" in out.stdout, out.stderr[-2000:]
    assert "choose another strategy" in out.stdout


def test_missing_gpu_fails_instead_of_training_on_the_cpu():
    want = StrategyConfig(
        name="mirrored", expect_accelerator="NVIDIA_TESLA_A100", expect_accelerator_count=8
    )
    env = {"NCF_PIPELINES_IMAGE_VARIANT": "cpu"}
    with pytest.raises(ValueError) as exc:
        resolve(want, env, visible_gpus=0)
    message = str(exc.value)
    assert "compiled for 8 x NVIDIA_TESLA_A100" in message and "found 0 GPU(s)" in message
    assert "image variant: cpu" in message and "'gpu' image" in message
    with pytest.raises(ValueError, match="found 4 GPU"):  # Half the GPUs paid for: refused too.
        resolve(want, env, visible_gpus=4)
    assert resolve(want, env, visible_gpus=8).num_gpus == 8
    # One GPU, one_device: the GPU it was compiled for is there.
    one = StrategyConfig(
        name="one_device", expect_accelerator="NVIDIA_L4", expect_accelerator_count=1
    )
    assert resolve(one, {}, visible_gpus=1).num_gpus == 1
    # Only when a local check asks for it does the step train on the CPU.
    # The strategy asked for stays (a multi-worker replica still joins its cluster).
    allowed = dataclasses.replace(want, allow_missing_accelerator=True)
    assert (resolve(allowed, env, visible_gpus=0).name, resolve(allowed, env, 0).num_gpus) == (
        "mirrored",
        0,
    )
    workers = dataclasses.replace(allowed, name="multi_worker_mirrored")
    assert resolve(workers, {"CLUSTER_SPEC": VERTEX_SPEC}, 0).tf_config["task"] == {
        "type": "worker",
        "index": 1,
    }


def test_missing_tpu_fails_unless_the_host_has_one():
    want = StrategyConfig(
        name="tpu", tpu_address="local", expect_accelerator="TPU_V3", expect_accelerator_count=8
    )
    with pytest.raises(ValueError, match="compiled for 8 x TPU_V3, but found no TPU device"):
        resolve(want, {}, visible_gpus=0)
    assert resolve(want, {"TPU_ACCELERATOR_TYPE": "v3-8"}, visible_gpus=0).name == "tpu"
    assert resolve(want, {}, visible_gpus=0, local_tpu=True).name == "tpu"
    allowed = dataclasses.replace(want, allow_missing_accelerator=True)
    assert resolve(allowed, {}, visible_gpus=0).name == "default"
    # No expectation (a plain CPU step): nothing is checked.
    assert resolve(StrategyConfig(name="default"), {}, visible_gpus=0).name == "default"
