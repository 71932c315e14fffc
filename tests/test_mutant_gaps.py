"""Boundaries that ``make mutants`` (tools/mutants.py) found no test holding.

Each test here kills one mutant that survived the suite before it: the target HR@10 reached
exactly, eval negatives outside the catalogue, one_device on exactly 2 GPUs,
multi_worker_mirrored on one machine, data prep or evaluate with replicas, and exactly the most
labels Vertex AI takes.
"""

import dataclasses

import numpy as np
import pytest
from conftest import random_shard, submit_config

from pipelines import profiles
from pipelines.profiles import ProfileError
from pipelines.submit.request import validate_config
from training_core.data import sampling
from training_core.training import presets, results


def test_reaching_the_target_hr_exactly_stops():
    model = presets.get_preset("tiny", hr_threshold=0.5)
    history = [
        results.EpochResult(
            epoch=1, step=10, loss=0.5, hr_at_10=0.5, ndcg_at_10=0.25, examples_per_sec=1.0,
            eval_users=100,
        )
    ]  # fmt: skip
    reason = results.stop_reason(model, history)
    assert reason is not None and "HR@10 0.5000 reached the target 0.5000" in reason


@pytest.mark.parametrize("seed", [3, 4])
def test_distinct_eval_negatives_are_items_of_the_catalogue(seed):
    """The permutation path (never-seen sets of 11-40 items for 10 negatives) draws only ranks
    inside each user's never-seen set: one past it maps to an id beyond the catalogue."""
    shard = random_shard(np.random.default_rng(seed), num_items=60, max_count=55)
    assert ((shard.num_items - shard.counts > 10) & (shard.num_items - shard.counts <= 40)).any()
    ev = sampling.eval_rows(shard, sampling.split_complement(shard, "test"), 10, seed=5)
    assert ev.items.min() >= 0 and ev.items.max() < shard.num_items


def _refused(profile: profiles.Profile) -> str:
    with pytest.raises(ProfileError) as e:
        profiles.preflight(profile)
    return str(e.value)


def test_one_device_on_two_gpus_is_refused():
    p = profiles.BUILTIN["gpu-t4"]
    p = dataclasses.replace(
        p, strategy="one_device", train=dataclasses.replace(p.train, accelerator_count=2)
    )
    assert "'one_device' uses 1 device but the profile has 1 x 2 GPUs" in _refused(p)


def test_multi_worker_mirrored_on_one_machine_is_refused():
    p = dataclasses.replace(profiles.BUILTIN["cpu"], strategy="multi_worker_mirrored")
    assert "'multi_worker_mirrored' needs replica_count >= 2" in _refused(p)


@pytest.mark.parametrize("step", ["data", "evaluate"])
def test_data_and_evaluate_refuse_replicas(step):
    p = profiles.BUILTIN["cpu"]
    p = dataclasses.replace(p, **{step: dataclasses.replace(getattr(p, step), replica_count=2)})
    assert f"{step}: runs on one CPU machine; remove its accelerator/replicas" in _refused(p)


def test_submit_takes_exactly_64_labels():
    validate_config(submit_config(labels={f"k{i}": "v" for i in range(64)}))
