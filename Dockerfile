# syntax=docker/dockerfile:1.7
# The images ncf-pipelines components run in: one per accelerator family, all from uv.lock.
# docs/images.md explains the design; components/_image.py derives every tag (none is written here).
#
#   make image                                   # every variant, tagged by components/_image.py
#   docker build --target gpu -t "$(uv run python -m components._image --variant gpu)" .
#
# Stages:
#   builder      uv and a compiler; the lock and tools/ (no project sources, so the big wheel layers
#                below survive source edits)
#   wheels-<v>   the variant's locked set exported from uv.lock and turned into a hash-checked
#                wheelhouse: locked wheels downloaded, the sdist-only packages (crcmod,
#                google-apitools, kfp, kfp-server-api, pyfarmhash, cloudml-hypertune) built from
#                their locked sdists
#   project      the project's own wheel (training_core, components, pipelines,
#                vertex_emulator)
#   cpu|gpu|tpu  python:3.11-slim + a venv at /opt/venv holding exactly the wheelhouse's wheels,
#                installed offline with --no-build; no compiler, no pip, no wheel files left behind;
#                run as the unprivileged user ncf (uid 1000), who cannot change /opt/venv
#
#   dataflow     the cpu set + Beam's worker boot entrypoint (/opt/apache/beam/boot, copied from
#                the Beam SDK image of the locked apache-beam): Dataflow's worker image
#   serve        the cpu set + the serve extra (fastapi, uvicorn): a registered model's server on
#                Vertex AI endpoints (Custom Prediction Routines' server with our predictor)
#
# Every step is tools/install_locked.sh, which `make image-check` also runs (without Docker).
# Every download is checked: the base images by digest once pinned (below), uv by its PyPI
# sha256, the wheels and sdists by uv.lock's hashes (pip --require-hashes in install_locked.sh).
#
# The two base images are named by tag until `make pin-base` (Docker and a registry needed)
# appends the digest each tag names now (NAME:TAG@sha256:...): commit that, and a re-pushed tag
# changes nothing here. docs/images.md, "Pinning by digest".
# The base of the builder and of the final stages (make image-check substitutes a stand-in).
ARG PYTHON_IMAGE=python:3.11-slim
# Beam's SDK image for the Python and apache-beam versions of uv.lock, only for its boot binary
# (make image-check compares the version with uv.lock's and substitutes a stand-in).
ARG BEAM_SDK_IMAGE=apache/beam_python3.11_sdk:2.72.0

FROM ${BEAM_SDK_IMAGE} AS beam-sdk

FROM ${PYTHON_IMAGE} AS builder
# Kept equal to the Makefile's UV_VERSION (make image passes it; make image-check compares them).
ARG UV_VERSION=0.13.8
# The sha256 of uv UV_VERSION's Linux wheels on PyPI (x86_64 manylinux_2_17; aarch64
# manylinux_2_28 and manylinux_2_17), from https://pypi.org/pypi/uv/json: pip installs no other
# file. A new UV_VERSION needs its hashes here: with the old ones, pip stops the build.
ARG UV_SHA256="e18a57b8b352eb7c8feb317b9f6f533c8f0ad9673fd6cf34bbe3cf1a9f6a8984 \
5337c30bb893b4f9ce0ceb921ba2da0d13f649da644f40ad3bef84083bef0203 \
0b3e8b1a4f5e405e31e2ff33de8af4744831e9f7338539671efbd8c3c94e791d"
# A C/C++ compiler for the sdist-only packages (pyfarmhash is a C++ extension). Only here.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
# uv (exports the lock, builds the project wheel, installs the final venvs) and pip (downloads
# and builds the wheelhouse) in a venv of their own. uv from a one-line requirements file with
# its hashes: --require-hashes refuses any file whose sha256 is not one of UV_SHA256.
RUN python3 -m venv /opt/build \
    && printf 'uv==%s' "$UV_VERSION" > /tmp/uv.txt \
    && for h in $UV_SHA256; do printf ' --hash=sha256:%s' "$h" >> /tmp/uv.txt; done \
    && /opt/build/bin/pip install --no-cache-dir --disable-pip-version-check --require-hashes \
        --only-binary :all: -r /tmp/uv.txt \
    && rm /tmp/uv.txt
ENV PATH=/opt/build/bin:$PATH
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY images/tpu/pyproject.toml images/tpu/uv.lock images/tpu/
COPY tools/install_locked.sh tools/wheelhouse.py tools/verify_image.py tools/
RUN mkdir -p /stage/bin && cp /opt/build/bin/uv /stage/bin/uv && cp -r tools /stage/tools

FROM builder AS wheels-cpu
RUN --mount=type=cache,target=/root/.cache/pip \
    tools/install_locked.sh requirements cpu /stage/req \
    && tools/install_locked.sh wheels cpu /stage/req /stage/wheels

FROM builder AS wheels-gpu
RUN --mount=type=cache,target=/root/.cache/pip \
    tools/install_locked.sh requirements gpu /stage/req \
    && tools/install_locked.sh wheels gpu /stage/req /stage/wheels

FROM builder AS wheels-serve
RUN --mount=type=cache,target=/root/.cache/pip \
    tools/install_locked.sh requirements serve /stage/req \
    && tools/install_locked.sh wheels serve /stage/req /stage/wheels

FROM builder AS wheels-tpu
RUN --mount=type=cache,target=/root/.cache/pip \
    tools/install_locked.sh requirements tpu /stage/req \
    && tools/install_locked.sh wheels tpu /stage/req /stage/wheels

FROM builder AS project
COPY training_core ./training_core
COPY components ./components
COPY pipelines ./pipelines
COPY vertex_emulator ./vertex_emulator
RUN tools/install_locked.sh project /dist

# What every final stage shares. python3 on PATH is the environment's (KFP lightweight
# components run `python3 -m kfp.dsl.executor_main`; Vertex custom jobs run GCPC's
# `python3 -m google_cloud_pipeline_components.container.v1.custom_job.launcher`), so no entrypoint.
# The unprivileged account the images run as: each final stage installs as root, then ends with
# `USER 1000:1000` (numeric, so a runtime that requires a non-root user can tell). Its home is
# its only folder of its own; /tmp and the mounts Vertex AI gives (/gcs, /usr/local/nvidia) are
# the rest of what it writes or reads. `--build-arg IMAGE_USER=root` builds the root variant
# (each final stage's `ARG IMAGE_USER=1000:1000`, used by its USER), for a Vertex AI whose /gcs
# or tuning metric folder refuses uid 1000 (docs/images.md, "The root variant").
FROM ${PYTHON_IMAGE} AS runtime
# /var/hypertune: where Vertex AI's tuning service has a trial write its metric
# (CLOUD_ML_HP_METRIC_FILE, cloudml-hypertune); made here, owned by ncf, because a user who is not
# root cannot create it under /var at run time.
RUN groupadd --gid 1000 ncf \
    && useradd --uid 1000 --gid 1000 --create-home --shell /usr/sbin/nologin ncf \
    && install -d -o 1000 -g 1000 -m 0755 /var/hypertune
ENV PYTHONUNBUFFERED=1 VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH

# CUDA, cuDNN, NCCL etc. come from the locked nvidia-* wheels (TensorFlow finds them through its
# RUNPATH); the NVIDIA driver (libcuda.so.1, nvidia-smi) is not in the image: Vertex AI's GPU
# nodes mount the host's under /usr/local/nvidia, which the loader does not search by itself.
# LD_LIBRARY_PATH finds it as mounted; the ld.so.conf.d entry serves runtimes that refresh the
# container's loader cache (NVIDIA's container toolkit runs ldconfig). Google's deep learning
# containers set the same paths. make image-check mounts a stand-in driver there and loads it.
FROM runtime AS gpu
ENV NCF_PIPELINES_IMAGE_VARIANT=gpu \
    PATH=$PATH:/usr/local/nvidia/bin \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib
RUN printf '%s\n' /usr/local/nvidia/lib64 /usr/local/nvidia/lib > /etc/ld.so.conf.d/nvidia.conf \
    && ldconfig
RUN --mount=type=bind,from=wheels-gpu,source=/stage,target=/stage \
    --mount=type=bind,from=project,source=/dist,target=/dist \
    UV=/stage/bin/uv /stage/tools/install_locked.sh install gpu /stage/req /stage/wheels /dist /opt/venv
ARG IMAGE_USER=1000:1000
USER ${IMAGE_USER}

# TensorFlow's TPU build with its libtpu, from a set and lock of their own (images/tpu: the
# training step's needs, TensorFlow 2.19; no data validation). Vertex AI's TPU VM jobs expect
# libtpu.so in /lib of a custom container: the wheel's copy is linked there. TensorFlow on v5e
# runs on the PJRT runtime, which Vertex AI's "Training with TPU accelerators" page has a
# Dockerfile turn on with these two variables (TensorFlow then loads /lib/libtpu.so as its
# pluggable TPU device). On a host without a TPU, training_core turns libtpu's loading off before
# TensorFlow is imported (training_core/common/tpu_runtime.py), so the step fails in one line
# instead of waiting minutes on the metadata server (docs/images.md, "TPU").
FROM runtime AS tpu
ENV NCF_PIPELINES_IMAGE_VARIANT=tpu \
    NEXT_PLUGGABLE_DEVICE_USE_C_API=true \
    TF_PLUGGABLE_DEVICE_LIBRARY_PATH=/lib/libtpu.so
# The link first (it dangles until the install), so that the install's verify sees /lib/libtpu.so.
RUN --mount=type=bind,from=wheels-tpu,source=/stage,target=/stage \
    --mount=type=bind,from=project,source=/dist,target=/dist \
    ln -s "/opt/venv/lib/$(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')/site-packages/libtpu/libtpu.so" \
        /lib/libtpu.so \
    && UV=/stage/bin/uv /stage/tools/install_locked.sh install tpu /stage/req /stage/wheels /dist /opt/venv
ARG IMAGE_USER=1000:1000
USER ${IMAGE_USER}

# Our own serving image (a registered model's server on Vertex AI endpoints when the profile's
# serving_image is `own`: docs/serving.md): the cpu set and the serve extra, started as Vertex AI's
# Custom Prediction Routines server (FastAPI on uvicorn) with our predictor, which loads the
# SavedModel at AIP_STORAGE_URI (training_core/serving/prediction_server.py). Vertex AI sets
# AIP_HTTP_PORT, AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE from the upload's container spec
# (vertex_registry.py's OWN_*); the same values are the defaults here, so the image runs alone
# too (make image-check starts it). CPU only; one server process per core
# (VERTEX_CPR_WEB_CONCURRENCY sets another count), each holding the model.
FROM runtime AS serve
ENV NCF_PIPELINES_IMAGE_VARIANT=serve \
    HANDLER_MODULE=google.cloud.aiplatform.prediction.handler \
    HANDLER_CLASS=PredictionHandler \
    PREDICTOR_MODULE=training_core.serving.prediction_server \
    PREDICTOR_CLASS=NcfPredictor \
    AIP_HTTP_PORT=8080 \
    AIP_PREDICT_ROUTE=/predict \
    AIP_HEALTH_ROUTE=/health
RUN --mount=type=bind,from=wheels-serve,source=/stage,target=/stage \
    --mount=type=bind,from=project,source=/dist,target=/dist \
    UV=/stage/bin/uv /stage/tools/install_locked.sh install serve /stage/req /stage/wheels /dist /opt/venv
ARG IMAGE_USER=1000:1000
USER ${IMAGE_USER}
ENTRYPOINT ["python3", "-m", "google.cloud.aiplatform.prediction.model_server"]

# Dataflow's worker image (--sdk_container_image): the cpu set, with Beam's boot binary as the
# entrypoint, which Dataflow runs to start the SDK worker (`python -m
# apache_beam.runners.worker.sdk_worker_main`, with this venv's python). Without
# RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT, boot would run the worker in a fresh venv of its own
# that does not see /opt/venv's packages. docs/beam.md, "The worker image".
FROM runtime AS dataflow
ENV NCF_PIPELINES_IMAGE_VARIANT=dataflow RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1
COPY --from=beam-sdk /opt/apache/beam /opt/apache/beam
RUN --mount=type=bind,from=wheels-cpu,source=/stage,target=/stage \
    --mount=type=bind,from=project,source=/dist,target=/dist \
    UV=/stage/bin/uv /stage/tools/install_locked.sh install dataflow /stage/req /stage/wheels /dist /opt/venv
# boot runs as ncf too: it writes only under its --semi_persist_dir (/tmp) and, with
# RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT, installs nothing unless the job stages packages, which
# ours do not (a job that did would need them in the image instead).
ARG IMAGE_USER=1000:1000
USER ${IMAGE_USER}
ENTRYPOINT ["/opt/apache/beam/boot"]

# Last, so that a plain `docker build .` builds the CPU image.
FROM runtime AS cpu
ENV NCF_PIPELINES_IMAGE_VARIANT=cpu
RUN --mount=type=bind,from=wheels-cpu,source=/stage,target=/stage \
    --mount=type=bind,from=project,source=/dist,target=/dist \
    UV=/stage/bin/uv /stage/tools/install_locked.sh install cpu /stage/req /stage/wheels /dist /opt/venv
ARG IMAGE_USER=1000:1000
USER ${IMAGE_USER}
