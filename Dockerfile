# The one image every ncf-pipelines component runs in (components/_image.py names its default tag;
# `ncf-pipelines compile --image ...` points a pipeline at yours).
#
#   docker build -t REGION-docker.pkg.dev/PROJECT/REPO/ncf-pipelines:0.1.0 .
#   docker build --build-arg VARIANT=gpu -t REGION-docker.pkg.dev/PROJECT/REPO/ncf-pipelines:0.1.0-gpu .
#
# CPU variant: python:3.11-slim. GPU variant: NVIDIA's CUDA 12.3 base image (TensorFlow 2.16 is
# built against CUDA 12.3 and cuDNN 8.9); the CUDA/cuDNN libraries themselves come from the
# `tensorflow[and-cuda]` extra's pip packages. The environment is the committed uv.lock, so the image runs
# exactly the versions the tests ran.
ARG VARIANT=cpu

FROM python:3.11-slim AS base-cpu
FROM nvidia/cuda:12.3.2-base-ubuntu22.04 AS base-gpu
RUN apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv \
        python3-pip && rm -rf /var/lib/apt/lists/* \
    && ln -sf /usr/bin/python3.11 /usr/local/bin/python3

FROM base-${VARIANT}
ARG VARIANT
ENV PYTHONUNBUFFERED=1 UV_PROJECT_ENVIRONMENT=/opt/venv PATH=/opt/venv/bin:$PATH
RUN python3 -m pip install --no-cache-dir "uv==0.13.8"
WORKDIR /app
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --no-install-project
COPY training_core ./training_core
COPY components ./components
COPY pipelines ./pipelines
RUN uv sync --frozen --no-dev \
    && if [ "$VARIANT" = "gpu" ]; then uv pip install "tensorflow[and-cuda]==2.16.2"; fi \
    && python3 -c "import training_core, components, pipelines, tensorflow_data_validation"
# KFP lightweight components run `python3 -m kfp.dsl.executor_main`; no entrypoint needed.
