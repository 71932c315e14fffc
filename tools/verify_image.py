"""The checks an image's environment must pass before the image is finished.

``python3 tools/verify_image.py VARIANT`` (run by ``install_locked.sh verify``, so by every
Dockerfile stage and by ``make image-check``) with the environment's own interpreter. It exits 0
when the environment is usable and 1 on any problem.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata as md
import os
import re
import subprocess
import sys
import sysconfig

# The environment as the image gives it, before training_core (imported below) changes it on a
# host without a TPU (training_core/common/tpu_runtime.py).
IMAGE_ENV = dict(os.environ)

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

# The tpu image runs only the training step's replicas (KFP's executor and the step; their
# custom-job launcher runs in the cpu image), so that is what its environment must import.
TPU_ENTRY_MODULES = (
    "kfp.dsl.executor_main",
    "components.train_model",
    "training_core.training.loop",
    "training_core.evaluation.evaluate",
)
# What Vertex AI's "Training with TPU accelerators" page has a TensorFlow-on-v5e Dockerfile set:
# the PJRT runtime, TensorFlow loading libtpu (/lib/libtpu.so) as its pluggable TPU device.
TPU_PJRT_ENV = {
    "NEXT_PLUGGABLE_DEVICE_USE_C_API": "true",
    "TF_PLUGGABLE_DEVICE_LIBRARY_PATH": "/lib/libtpu.so",
}
# How long the no-TPU probe may take: TensorFlow's import and the refusal (seconds), against the
# minutes libtpu would wait for a metadata server if it were loaded.
NO_TPU_PROBE_TIMEOUT_S = 180

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
    if variant == "tpu":
        return check_common_tpu()
    import google_cloud_pipeline_components as gcpc
    import kfp
    import tensorflow as tf
    import tensorflow_data_validation as tfdv

    from components import _image

    check_installed(
        variant, ("training_core", "components", "pipelines", "vertex_emulator"), ENTRY_MODULES
    )
    return (
        f"tensorflow {tf.__version__}, tfdv {tfdv.__version__}, kfp {kfp.__version__}, "
        f"gcpc {gcpc.__version__}, {_image.image_for(variant)}"
    )


def check_common_tpu() -> str:
    """The tpu set's: the installed wheel, KFP's executor and the training step import."""
    # First: on a host without a TPU, training_core keeps libtpu from loading.
    importlib.import_module("training_core")
    import kfp
    import tensorflow as tf

    from components import _image

    check_installed("tpu", ("training_core", "components"), TPU_ENTRY_MODULES)
    return f"tensorflow {tf.__version__}, kfp {kfp.__version__}, {_image.image_for('tpu')}"


def check_installed(
    variant: str, packages: tuple[str, ...], entry_modules: tuple[str, ...]
) -> None:
    """What every environment must be: its own wheel, importable, and the variant it says.

    ``packages`` come from the installed wheel, ``entry_modules`` import, and the image's
    ``NCF_PIPELINES_IMAGE_VARIANT`` (if set) is ``variant``, one of components/_image.py's.
    """
    from components import _image

    for name in packages:
        module = importlib.import_module(name)
        if "site-packages" not in (module.__file__ or ""):
            raise Unusable(f"{name} is {module.__file__}, not the installed wheel")
    for name in entry_modules:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise Unusable(f"{name} cannot be imported: {error}") from error
    if variant not in _image.VARIANTS:
        raise Unusable(f"unknown variant (components/_image.py knows {_image.VARIANTS})")
    declared = os.environ.get(_image.VARIANT_ENV)
    if declared is not None and declared != variant:
        raise Unusable(f"{_image.VARIANT_ENV}={declared!r} in the {variant} environment")


def installed() -> set[str]:
    """Names of the installed distributions, normalized as PEP 503 says.

    Lower case, runs of ``-_.`` as ``-``: tensorflow-tpu 2.19's metadata says ``tensorflow_tpu``.
    """
    return {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower() for d in md.distributions()}


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
    """TensorFlow's TPU build, libtpu where TensorFlow looks, PJRT, and a clean no-TPU refusal."""
    names = installed()
    if "tensorflow-tpu" not in names:
        raise Unusable("tensorflow-tpu (TensorFlow's TPU build) is not installed")
    if "tensorflow" in names:
        raise Unusable("both tensorflow and tensorflow-tpu are installed (same files)")
    version = md.version("tensorflow-tpu")
    # TensorFlow's own loader (FindAndLoadTpuLibrary) takes $TPU_LIBRARY_PATH, else the libtpu
    # wheel's libtpu.so in site-packages; the PJRT plugin is the file the image names.
    libtpu = IMAGE_ENV.get("TPU_LIBRARY_PATH") or os.path.join(site, "libtpu", "libtpu.so")
    if not os.path.isfile(libtpu):
        raise Unusable(f"no libtpu at {libtpu}, where TensorFlow looks for it")
    for name, value in TPU_PJRT_ENV.items():
        if IMAGE_ENV.get(name) != value:
            raise Unusable(f"{name} is {IMAGE_ENV.get(name)!r}, not {value!r} (PJRT on v5e)")
    plugin = TPU_PJRT_ENV["TF_PLUGGABLE_DEVICE_LIBRARY_PATH"]
    if not (os.path.exists(plugin) and os.path.samefile(plugin, libtpu)):
        raise Unusable(f"{plugin} (the PJRT plugin TensorFlow loads) is not {libtpu}")
    refusal = no_tpu_refusal(version)
    return f"tensorflow-tpu {version}, libtpu at {libtpu} and {plugin}; no TPU here: {refusal}"


# Run in a fresh process with the image's environment: TensorFlow imports, then the training
# step's strategy for a v5e-8 is built, which must refuse in one line naming the missing device.
NO_TPU_PROBE = """
import os, sys
import training_core
import tensorflow as tf
from training_core.training import strategy as st
print("tensorflow", tf.__version__, "libtpu-off", os.environ.get("NCF_LIBTPU_OFF"), flush=True)
try:
    st.build_strategy(st.strategy_config(
        name="tpu", expect_accelerator="TPU_V5_LITEPOD", expect_accelerator_count=8))
except st.MissingAccelerator as e:
    print("refused", e)
else:
    print("built a TPU strategy without a TPU")
"""


def no_tpu_refusal(version: str) -> str:
    """On this host (no TPU): TensorFlow imports at once and a TPU step refuses in one line."""
    env = {k: v for k, v in IMAGE_ENV.items() if k != "NCF_LIBTPU_OFF"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    try:
        run = subprocess.run(
            [sys.executable, "-c", NO_TPU_PROBE],
            capture_output=True,
            text=True,
            env=env,
            timeout=NO_TPU_PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise Unusable(
            f"without a TPU, TensorFlow's import and the TPU step's refusal took over "
            f"{NO_TPU_PROBE_TIMEOUT_S} s (libtpu waiting for a metadata server?): "
            f"{(e.stderr or b'')[-1500:]!r}"
        ) from e
    lines = run.stdout.splitlines()
    expected = f"tensorflow {version} libtpu-off 1"
    if run.returncode != 0 or not lines or lines[0] != expected:
        raise Unusable(
            f"the no-TPU probe did not import TensorFlow {version} with libtpu off: exit "
            f"{run.returncode}, {run.stdout[-500:]!r} {run.stderr[-1500:]!r}"
        )
    refusal = lines[1:]
    one_line = len(refusal) == 1 and refusal[0].startswith("refused ")
    if not one_line or "no TPU device" not in refusal[0]:
        raise Unusable(f"without a TPU the TPU step did not refuse in one line: {refusal!r}")
    return refusal[0][len("refused ") :]


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
        # The launcher, importing prepare_beam_{read,clean,write}: the DoFns workers unpickle.
        "training_core.data.prepare_beam",
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


def check_serve(site: str) -> str:
    """The cpu set, and the model server: CPR's server, its web stack, and our predictor.

    The classes the image's environment names (``HANDLER_*``, ``PREDICTOR_*``; else what
    ``prediction_server.SERVER_ENV`` says it should) must resolve, as the server resolves them.
    """
    check_cpu(site)
    from training_core.serving import prediction_server

    server = "google.cloud.aiplatform.prediction.model_server"
    for name in ("fastapi", "starlette", "uvicorn", server):
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise Unusable(f"{name} cannot be imported: {error}") from error
    env = {k: os.environ.get(k, v) for k, v in prediction_server.SERVER_ENV.items()}
    for kind in ("HANDLER", "PREDICTOR"):
        module, cls = env[f"{kind}_MODULE"], env[f"{kind}_CLASS"]
        try:
            getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError) as error:
            raise Unusable(f"{kind}_MODULE/{kind}_CLASS {module}.{cls}: {error}") from error
    if env != prediction_server.SERVER_ENV:
        raise Unusable(f"the server's environment is {env}, not {prediction_server.SERVER_ENV}")
    predictor = f"{env['PREDICTOR_MODULE']}.{env['PREDICTOR_CLASS']}"
    return f"CPR's model server imports; predictor {predictor}"


CHECKS = {
    "cpu": check_cpu,
    "gpu": check_gpu,
    "tpu": check_tpu,
    "dataflow": check_dataflow,
    "serve": check_serve,
}


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
