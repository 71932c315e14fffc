"""The checks an image's environment must pass before the image is finished.

``python3 tools/verify_image.py VARIANT`` (run by ``install_locked.sh verify``, so by every
Dockerfile stage and by ``make image-check``) with the environment's own interpreter. It exits 0
when the environment is usable, 1 on any problem, and 3 when the only problem is that the tpu
environment has no ``libtpu`` (TensorFlow would import but could never reach a TPU).
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata as md
import os
import subprocess
import sys
import sysconfig

NO_LIBTPU = 3

# What each environment must be able to run with `python3 -m`: KFP lightweight components
# (executor_main), GCPC's custom-job launcher and ours, which wraps it, GCPC's tuning-job
# launcher; and what a tuning trial imports to report its metric (cloudml-hypertune).
ENTRY_MODULES = (
    "kfp.dsl.executor_main",
    "google_cloud_pipeline_components.container.v1.custom_job.launcher",
    "components.custom_job_launcher",
    "google_cloud_pipeline_components.container.v1.hyperparameter_tuning_job.launcher",
    "hypertune",
)

# The CUDA libraries TensorFlow loads from the nvidia-* wheels (through its RUNPATH into
# site-packages/nvidia/*/lib), in an order where each one's own dependencies come first. None of
# them needs a GPU or the driver to load.
CUDA_LIBRARIES = (
    "cuda_runtime/lib/libcudart.so.12",
    "nvjitlink/lib/libnvJitLink.so.12",
    "cublas/lib/libcublasLt.so.12",
    "cublas/lib/libcublas.so.12",
    "cufft/lib/libcufft.so.11",
    "curand/lib/libcurand.so.10",
    "cusparse/lib/libcusparse.so.12",
    "cusolver/lib/libcusolver.so.11",
    "cudnn/lib/libcudnn.so.8",
    "nccl/lib/libnccl.so.2",
    "cuda_nvrtc/lib/libnvrtc.so.12",
)


class Unusable(Exception):
    """The environment cannot run what its image is for."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def check_common(variant: str) -> str:
    """Imports and metadata every variant needs; returns a one-line summary."""
    import google_cloud_pipeline_components as gcpc
    import kfp
    import tensorflow as tf
    import tensorflow_data_validation as tfdv

    import components
    import pipelines
    import training_core
    from components import _image

    for module in (training_core, components, pipelines):
        if "site-packages" not in (module.__file__ or ""):
            raise Unusable(f"{module.__name__} is {module.__file__}, not the installed wheel")
    for name in ENTRY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise Unusable(f"{name} cannot be imported: {error}") from error
    if variant not in _image.VARIANTS:
        raise Unusable(f"unknown variant (components/_image.py knows {_image.VARIANTS})")
    declared = os.environ.get(_image.VARIANT_ENV)
    if declared is not None and declared != variant:
        raise Unusable(f"{_image.VARIANT_ENV}={declared!r} in the {variant} environment")
    return (
        f"tensorflow {tf.__version__}, tfdv {tfdv.__version__}, kfp {kfp.__version__}, "
        f"gcpc {gcpc.__version__}, {_image.image_for(variant)}"
    )


def installed() -> set[str]:
    """Names of the installed distributions, lower case."""
    return {d.metadata["Name"].lower() for d in md.distributions()}


def check_cpu(site: str) -> str:
    """No accelerator packages in the CPU image."""
    extra = sorted(d for d in installed() if d.startswith("nvidia-") or d == "tensorflow-tpu")
    if extra:
        raise Unusable(f"accelerator packages in the cpu environment: {extra}")
    return "no accelerator packages"


def check_gpu(site: str) -> str:
    """TensorFlow's CUDA build, with its CUDA libraries (from the nvidia-* wheels) loadable."""
    import tensorflow as tf

    nvidia = sorted(d for d in installed() if d.startswith("nvidia-"))
    if not nvidia:
        raise Unusable("no nvidia-* CUDA wheels installed")
    info = tf.sysconfig.get_build_info()
    if not info.get("is_cuda_build") or not info.get("cuda_version"):
        raise Unusable(f"TensorFlow is not a CUDA build: {dict(info)}")
    for relative in CUDA_LIBRARIES:
        path = os.path.join(site, "nvidia", relative)
        if not os.path.exists(path):
            raise Unusable(f"{path} is missing")
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as error:
            raise Unusable(f"cannot load {path}: {error}") from error
    # XLA compiles GPU kernels with ptxas, which TensorFlow finds in the nvidia-cuda-nvcc wheel.
    ptxas = os.path.join(site, "nvidia", "cuda_nvcc", "bin", "ptxas")
    run = subprocess.run([ptxas, "--version"], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise Unusable(f"{ptxas} does not run: {run.stderr.strip()}")
    return (
        f"CUDA {info['cuda_version']}, cuDNN {info['cudnn_version']}, {len(nvidia)} nvidia wheels, "
        f"{len(CUDA_LIBRARIES)} CUDA libraries load, ptxas runs"
    )


def check_tpu(site: str) -> str:
    """TensorFlow's TPU build instead of the standard one, and libtpu where TensorFlow looks."""
    names = installed()
    if "tensorflow-tpu" not in names:
        raise Unusable("tensorflow-tpu (TensorFlow's TPU build) is not installed")
    if "tensorflow" in names:
        raise Unusable("both tensorflow and tensorflow-tpu are installed (same files)")
    version = md.version("tensorflow-tpu")
    # TensorFlow loads libtpu.so from $TPU_LIBRARY_PATH, else from the libtpu wheel.
    libtpu = os.environ.get("TPU_LIBRARY_PATH") or os.path.join(site, "libtpu", "libtpu.so")
    if not os.path.exists(libtpu):
        raise Unusable(
            f"no libtpu at {libtpu}. tensorflow-tpu {version} requires libtpu==2.16.0rc0, which "
            "is not on PyPI (only on Google's libtpu-tf-releases index), so uv.lock cannot hold "
            "it; without it TensorFlow cannot reach a TPU. See docs/images.md, 'TPU'.",
            code=NO_LIBTPU,
        )
    return f"tensorflow-tpu {version}, libtpu at {libtpu}"


def check_dataflow(site: str) -> str:
    """The cpu set, and what Beam's boot entrypoint needs to start a Dataflow worker here.

    boot runs ``python -m apache_beam.runners.worker.sdk_worker_main`` (``python``, not
    ``python3``, from PATH) in the default environment when RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT
    is set; otherwise in a new venv of its own that would not see this one's packages.
    """
    from components import _image

    check_cpu(site)
    boot = _image.BEAM_BOOT
    if not (os.path.isfile(boot) and os.access(boot, os.X_OK)):
        raise Unusable(f"no executable Beam boot entrypoint at {boot}")
    if os.environ.get("RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT") != "1":
        raise Unusable(
            "RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT is not 1: Beam's boot would start the worker in "
            "a new venv without this environment's packages"
        )
    workers = (
        "apache_beam.runners.worker.sdk_worker_main",
        "apache_beam.runners.worker.worker_pool_main",
        "training_core.data.prepare_beam",  # The DoFns the workers unpickle.
    )
    run = subprocess.run(
        ["python", "-c", "import sys, " + ", ".join(workers) + "; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0 or run.stdout.strip() != sys.prefix:
        raise Unusable(
            f"`python` on PATH (what boot runs) is not this environment or cannot import the "
            f"worker modules: prefix {run.stdout.strip()!r}, {run.stderr.strip()[-500:]}"
        )
    return f"{boot}, `python` on PATH imports Beam's worker and training_core.data.prepare_beam"


CHECKS = {"cpu": check_cpu, "gpu": check_gpu, "tpu": check_tpu, "dataflow": check_dataflow}


def main(argv: list[str]) -> int:
    """Runs the checks of one variant; prints a summary or the reason it is unusable."""
    if len(argv) != 1 or argv[0] not in CHECKS:
        print(f"usage: verify_image.py {{{','.join(CHECKS)}}}", file=sys.stderr)
        return 2
    variant = argv[0]
    site = sysconfig.get_paths()["purelib"]
    try:
        summary = check_common(variant)
        detail = CHECKS[variant](site)
    except Unusable as problem:
        print(f"image variant {variant!r} is NOT usable: {problem}", file=sys.stderr)
        return problem.code
    print(f"{variant}: OK: {summary}; {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
