"""The images against what their nodes give them (issue 34): fast checks of the Dockerfile's
stages as ``make image-check`` executes them, of that check's own probes, of the kernels
TensorFlow carries for the GPU profiles, of the Dataflow worker image the Beam profile compiles
with, and of the TPU image's blocker at compile and submit.

``make image-check`` (tools/image_check.py, root, no Docker) is the full proof: it builds each
stage in a clean root and mounts a stand-in driver where Vertex AI mounts the real one."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

import cuda_kernels  # noqa: E402
import image_check  # noqa: E402

from components import _image  # noqa: E402

STAGES = image_check.dockerfile_stages(REPO / "Dockerfile")


def stage_env(variant: str) -> dict[str, str]:
    """A final stage's environment, as image_check's chroot engine applies its ENV lines."""
    env = {"PATH": image_check.DEFAULT_PATH}
    for stage in image_check.stage_chain(STAGES, variant):
        for keyword, text in stage["instructions"]:
            if keyword == "ENV":
                image_check.apply_env(env, text)
    return env


def stage_runs(variant: str) -> list[str]:
    return [t for k, t in STAGES[variant]["instructions"] if k == "RUN"]


# --- GPU: the driver Vertex AI mounts at /usr/local/nvidia -------------------------------------


def test_the_gpu_stage_puts_the_mounted_driver_on_the_loader_path():
    env = stage_env("gpu")
    assert f"{image_check.DRIVER_MOUNT}/lib64" in env["LD_LIBRARY_PATH"].split(":")
    path = env["PATH"].split(":")
    assert f"{image_check.DRIVER_MOUNT}/bin" in path
    assert path[0] == "/opt/venv/bin"  # python3 stays the venv's.
    conf = [r for r in stage_runs("gpu") if "/etc/ld.so.conf.d/" in r]
    assert conf and f"{image_check.DRIVER_MOUNT}/lib64" in conf[0] and "ldconfig" in conf[0]
    # Only the gpu image: the others have no driver to find.
    assert "LD_LIBRARY_PATH" not in stage_env("cpu")


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (image-check's too)")
def test_the_stand_in_driver_is_found_only_through_the_loader_path(tmp_path):
    """The stand-in image-check mounts: found through LD_LIBRARY_PATH (reporting its version),
    missing without it; the checker accepts only that pattern."""
    driver = image_check.stub_driver(tmp_path)
    probe = (
        "import ctypes\ntry:\n lib = ctypes.CDLL('libcuda.so.1')\n"
        "except OSError:\n print('missing')\n"
        "else:\n v = ctypes.c_int(); lib.cuDriverGetVersion(ctypes.byref(v)); print(v.value)"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    run = [sys.executable, "-c", probe]
    assert subprocess.run(run, env=env, capture_output=True, text=True).stdout.strip() == "missing"
    env["LD_LIBRARY_PATH"] = str(driver / "lib64")
    found = subprocess.run(run, env=env, capture_output=True, text=True).stdout.strip()
    assert found == str(image_check.STUB_DRIVER_VERSION)
    assert os.access(driver / "bin" / "nvidia-smi", os.X_OK)
    ctypes.CDLL(str(driver / "lib64" / "libcuda.so.1"))  # A real shared object.

    good = "\n".join([
        f"as-mounted found-{image_check.STUB_DRIVER_VERSION}",
        "without-ld-library-path missing",
        f"after-ldconfig found-{image_check.STUB_DRIVER_VERSION}",
        f"nvidia-smi {image_check.DRIVER_MOUNT}/bin/nvidia-smi",
        "tensorflow 1",
    ])  # fmt: skip
    assert "TensorFlow called its cuInit" in image_check.check_driver_probe(good)
    # What the image before the fix gives: nothing finds the mounted driver.
    old = "as-mounted missing\nwithout-ld-library-path missing\nafter-ldconfig missing\n"
    with pytest.raises(SystemExit, match="driver mounted at /usr/local/nvidia"):
        image_check.check_driver_probe(old + "nvidia-smi \ntensorflow 0")


def test_tensorflow_carries_sass_for_every_gpu_profile():
    """TF 2.16.2 (the wheel both the cpu and gpu images install) has SASS for sm_50..sm_90 and
    PTX for compute_90 only: an H100 (sm_90) runs the SASS, no PTX JIT at start-up."""
    import importlib.util

    package = Path(importlib.util.find_spec("tensorflow").origin).parent  # Not imported: slow.
    found = cuda_kernels.kernels(package / "libtensorflow_cc.so.2")
    sass = {arch for kind, arch in found if kind == "SASS"}
    ptx = {arch for kind, arch in found if kind == "PTX"}
    assert sass == {50, 60, 70, 80, 90} and ptx == {90}
    assert found[("SASS", 90)] == found[("SASS", 80)] > 200  # Every fat binary, not a few.
    # What TensorFlow's build info calls it: "compute_90" is SASS and PTX in its clang build.
    build_info = (package / "python" / "platform" / "build_info.py").read_text()
    assert "['sm_50', 'sm_60', 'sm_70', 'sm_80', 'compute_90']" in build_info
    # The H100 profiles' descriptions say it.
    from pipelines.profiles import BUILTIN

    for name in ("gpu-h100", "gpu-h100x8"):
        assert "sm_90" in BUILTIN[name].description


# --- Dataflow: Beam's boot entrypoint ----------------------------------------------------------


def test_the_dataflow_stage_is_a_worker_image_dataflow_can_start():
    instructions = STAGES["dataflow"]["instructions"]
    entry = [json.loads(t) for k, t in instructions if k == "ENTRYPOINT"]
    assert entry == [[_image.BEAM_BOOT]]
    copies = [t for k, t in instructions if k == "COPY"]
    assert copies == ["--from=beam-sdk /opt/apache/beam /opt/apache/beam"]
    assert STAGES["beam-sdk"]["parent"] == "${BEAM_SDK_IMAGE}"
    assert stage_env("dataflow")["RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT"] == "1"
    assert "install_locked.sh install dataflow" in stage_runs("dataflow")[0]
    # The Beam SDK image is the locked apache-beam's, and a drift is named.
    dockerfile, lock = (REPO / "Dockerfile").read_text(), (REPO / "uv.lock").read_text()
    assert image_check.beam_sdk_image_problem(dockerfile, lock) is None
    beam = 'name = "apache-beam"\nversion = "'
    drifted = lock.replace(beam, beam + "9")
    assert "needs apache/beam_python3.11_sdk:9" in image_check.beam_sdk_image_problem(
        dockerfile, drifted
    )
    # Its Python set is the cpu image's (one wheelhouse, one lock set).
    done = subprocess.run(
        [str(REPO / "tools" / "install_locked.sh"), "verify", "nonsense"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "cpu, gpu, tpu or dataflow" in done.stderr
    assert "dataflow" in _image.VARIANTS


def test_the_entrypoint_check_refuses_an_image_without_beams_boot():
    image_check.check_entrypoint(["/opt/apache/beam/boot"], "dataflow")
    with pytest.raises(SystemExit, match="Dataflow runs"):
        image_check.check_entrypoint(None, "dataflow")  # The cpu image: no entrypoint.


@pytest.mark.parametrize(
    ("args", "added"),
    [
        (["--runner=DataflowRunner", "--project=p"], True),
        (["--runner", "dataflow"], True),
        (["--runner=DataflowRunner", "--sdk_container_image=mine"], False),
        (["--runner=DataflowRunner", "--worker_harness_container_image=mine"], False),
        (["--direct_num_workers=2"], False),
        ([], False),
    ],
)
def test_a_dataflow_job_gets_the_worker_image_unless_it_names_one(args, added):
    out = _image.with_worker_image(args, "REPO:1-dataflow")
    assert out == args + ["--sdk_container_image=REPO:1-dataflow"] * added


@pytest.mark.slow
def test_the_dataflow_profile_compiles_with_the_worker_image(tmp_path):
    """The prepare-data task's compiled input, with a run's Dataflow options as the step
    combines them, is the worker image Beam's own option parser reads."""
    from apache_beam.options.pipeline_options import PipelineOptions, WorkerOptions

    from pipelines import pipeline, profiles

    def worker_image(profile: str, **kwargs) -> str:
        path = pipeline.compile_pipeline(
            profiles.BUILTIN[profile], str(tmp_path / f"{profile}.yaml"), **kwargs
        )
        spec = yaml.safe_load(open(path))
        dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
        tasks = {name: t for dag in dags for name, t in dag["tasks"].items()}
        # Every step that runs a Beam job with the run's options: validate, prepare, recommend.
        images = {
            name: tasks[name]["inputs"]["parameters"]["worker_image"]["runtimeValue"]["constant"]
            for name in ("validate-data", "prepare-data", "recommend")
        }
        assert len(set(images.values())) == 1, images
        return images["prepare-data"]

    compiled = worker_image("gpu-a100x8-dataflow", image_repository="europe-docker.pkg.dev/p/r/n")
    assert compiled == "europe-docker.pkg.dev/p/r/n:" + _image.package_version() + "-dataflow"
    run_args = ["--runner=DataflowRunner", "--project=p", "--region=europe-west4",
                "--temp_location=gs://b/tmp"]  # fmt: skip
    options = PipelineOptions(_image.with_worker_image(run_args, compiled))
    assert options.view_as(WorkerOptions).sdk_container_image == compiled
    # Profiles that prepare on one machine pull no worker image (make push builds none).
    assert worker_image("gpu-a100") == ""


# --- TPU: the image that cannot be built yet ---------------------------------------------------


@pytest.mark.slow
def test_compile_and_submit_say_the_tpu_image_cannot_be_built(tmp_path, caplog):
    from pipelines import cli

    tpu, gpu = tmp_path / "tpu.yaml", tmp_path / "gpu.yaml"
    with caplog.at_level(logging.WARNING, logger="ncf-pipelines"):
        assert cli.main(["compile", "--profile", "tpu-v5e-8", "--output", str(tpu)]) == 0
    warned = [r.getMessage() for r in caplog.records if "libtpu" in r.getMessage()]
    assert len(warned) == 1
    assert _image.image_for("tpu") in warned[0] and "docs/images.md" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ncf-pipelines"):
        assert cli.main(["compile", "--profile", "gpu-a100", "--output", str(gpu)]) == 0
    assert not [r for r in caplog.records if "libtpu" in r.getMessage()]
    caplog.clear()
    submit = ["submit", "--project", "my-proj", "--region", "europe-west4",
              "--pipeline-root", "gs://bucket/root", "--param", "data_uri=gs://bucket/ml-1m/",
              "--dry-run"]  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="ncf-pipelines"):
        assert cli.main([*submit, "--template", str(tpu)]) == 0
    assert [r for r in caplog.records if "cannot be built yet" in r.getMessage()]
    # One image for every step (--image) is the user's own: no word about ours.
    assert _image.unbuildable_images(f"image: {_image.image_for('cpu')}") == []
