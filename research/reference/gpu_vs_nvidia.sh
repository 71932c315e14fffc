#!/usr/bin/env bash
# On a lent GPU machine (PyTorch and JAX, no TensorFlow): NVIDIA's PyTorch NCF and this project's
# step in JAX (research/gpu_ceiling_jax.py) on the same card, one after the other, alternating.
#
# Here, first (needs this project's venv and checkouts of NVIDIA/DeepLearningExamples and
# NVIDIA/dllogger; .devrun/ is ignored by git and travels with `carry`):
#   uv run python -m research.gpu_ceiling_jax tf-reference .devrun/check.npz
#   python3 -m research.reference.nvidia_ncf setup --examples DLE --dllogger DLLOGGER --dest .devrun/nvidia-ncf
# There:
#   bash research/reference/gpu_vs_nvidia.sh RESULTS_DIR
# Results: RESULTS_DIR/nv.jsonl (their per-epoch throughput), gpu-jax-epoch.jsonl (ours, counted
# as theirs: whole epochs, negatives drawn and rows shuffled on the device), gpu-jax.jsonl (ours,
# steps over resident batches, per batch size: MEASURE_BATCHES), log.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
R=${1:?results folder}
mkdir -p "$R"
export PYTHONUNBUFFERED=1
DATA=${NV_DATA:-/tmp/nv-ml20m}
BATCHES=${MEASURE_BATCHES:-65536 98304 262144 1048576}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c 'import torch, jax; print("torch", torch.__version__, "jax", jax.__version__, jax.devices())'
  python3 -m research.gpu_ceiling_jax check .devrun/check.npz || echo "JAX check FAILED"
  python3 -m research.reference.nvidia_ncf data --out "$DATA" || echo "NV data FAILED"
  python3 -m research.reference.nvidia_ncf train --data "$DATA" --amp --log "$R/nv-log-amp1.json" --out "$R/nv.jsonl" || echo "NV amp FAILED"
  python3 -m research.gpu_ceiling_jax epoch --precisions float32 float16 bfloat16 --out "$R/gpu-jax-epoch.jsonl" || echo "JAX epoch FAILED"
  python3 -m research.gpu_ceiling_jax measure --batch-sizes $BATCHES --steps 200 --warmup 200 --out "$R/gpu-jax.jsonl" || echo "JAX measure FAILED"
  python3 -m research.reference.nvidia_ncf train --data "$DATA" --log "$R/nv-log-tf32.json" --out "$R/nv.jsonl" || echo "NV tf32 FAILED"
  python3 -m research.reference.nvidia_ncf train --data "$DATA" --amp --log "$R/nv-log-amp2.json" --out "$R/nv.jsonl" || echo "NV amp FAILED"
} 2>&1 | tee "$R/log.txt"
