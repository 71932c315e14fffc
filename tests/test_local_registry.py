"""The local registry (training_core/serving/local_registry.py): versions, default, kills, races.

run-local's gate registers into it; the whole pipeline's two branches through it are in
tests/test_run_local.py.
"""

import json
import os
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from training_core.serving import local_registry

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Scale(tf.Module):
    def __init__(self, factor: float):
        super().__init__()
        self.factor = tf.Variable(factor)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def __call__(self, x):
        return x * self.factor


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Two real SavedModels that answer differently."""
    out = []
    for factor in (2.0, 3.0):
        path = str(tmp_path_factory.mktemp("exports") / f"x{int(factor)}")
        tf.saved_model.save(_Scale(factor), path)
        out.append(path)
    return out


def _answer(path: str) -> float:
    return float(tf.saved_model.load(path)(tf.constant([1.0]))[0])


def test_no_champion_then_each_registration_is_a_new_default_version(exports, tmp_path):
    root = str(tmp_path / "registry")
    assert local_registry.find_champion(root, "ncf") is None
    first = local_registry.register(root, "ncf", exports[0], {"hr_at_10": "0_3000"})
    assert first.version_id == "1"
    champion = local_registry.find_champion(root, "ncf")
    assert champion == first and _answer(champion.path) == 2.0
    second = local_registry.register(root, "ncf", exports[1], {"hr_at_10": "0_3500"})
    assert second.version_id == "2" and second.resource_name == first.resource_name
    champion = local_registry.find_champion(root, "ncf")
    assert champion.version_id == "2" and _answer(champion.path) == 3.0
    # The earlier version is kept, with its labels.
    assert _answer(first.path) == 2.0
    with open(first.path + ".json") as f:
        assert json.load(f)["labels"] == {"hr_at_10": "0_3000"}
    # Models of other names are separate.
    assert local_registry.find_champion(root, "other") is None


def test_bad_names_and_folders_are_named(exports, tmp_path):
    with pytest.raises(ValueError, match="model_display_name '../up'"):
        local_registry.register(str(tmp_path), "../up", exports[0])
    with pytest.raises(FileNotFoundError, match="not an exported SavedModel"):
        local_registry.register(str(tmp_path), "ncf", str(tmp_path))
    root = str(tmp_path / "r")
    version = local_registry.register(root, "ncf", exports[0])
    os.rename(version.path, version.path + "-moved")
    with pytest.raises(FileNotFoundError, match="DEFAULT names version 1 but .* is missing"):
        local_registry.find_champion(root, "ncf")


_REGISTER = """
import sys
from training_core.serving import local_registry
v = local_registry.register(sys.argv[1], "ncf", sys.argv[2])
print(v.version_id)
"""


def test_concurrent_registrations_get_distinct_versions(exports, tmp_path):
    root = str(tmp_path / "registry")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _REGISTER, root, exports[i % 2]],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    got = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        got.append(out.strip())
    assert sorted(got) == ["1", "2", "3", "4"]
    champion = local_registry.find_champion(root, "ncf")
    assert champion.version_id == "4"
    versions = os.path.join(root, "ncf", local_registry.VERSIONS_DIR)
    assert sorted(n for n in os.listdir(versions) if n.isdigit()) == ["1", "2", "3", "4"]


_SLOW_COPY = """
import os, shutil, sys, time
from training_core.serving import local_registry

def slow_copy(src, dst, **kw):
    os.makedirs(dst)
    print("copying", flush=True)
    time.sleep(60)

shutil.copytree = slow_copy
local_registry.register(sys.argv[1], "ncf", sys.argv[2])
"""


def test_a_registration_killed_mid_copy_leaves_the_old_default(exports, tmp_path):
    root = str(tmp_path / "registry")
    local_registry.register(root, "ncf", exports[0])
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_COPY, root, exports[1]],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "copying"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    champion = local_registry.find_champion(root, "ncf")
    assert champion.version_id == "1" and _answer(champion.path) == 2.0
    versions = os.path.join(root, "ncf", local_registry.VERSIONS_DIR)
    assert [n for n in os.listdir(versions) if n.startswith("2")]  # The dead copy's folder.
    # The next registration is not blocked by the dead one, takes the next number and clears
    # what the dead one left.
    assert local_registry.register(root, "ncf", exports[1]).version_id == "2"
    assert sorted(os.listdir(versions)) == ["1", "1.json", "2", "2.json"]
    assert _answer(local_registry.find_champion(root, "ncf").path) == 3.0
