#!/usr/bin/env bash
# Create research/.reference-venv: the TF Model Garden NCF reference, installed from PyPI.
#
# The reference is never copied into this repo; it is installed here so the bench scripts
# in research/reference/ can run it side by side with ours. tf-models-official 2.15 is the
# last release whose official.recommendation NCF still imports; it needs TensorFlow 2.15
# (Python <= 3.11) and pandas < 3. The pins below are the set that resolved and ran.
# Idempotent: does nothing when the venv already imports the reference modules.
#
# Usage (from anywhere):  bash research/reference/setup_reference_env.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=research/.reference-venv
PY="$VENV/bin/python"
CHECK='import official.recommendation.ncf_keras_main, official.recommendation.create_ncf_data'

if [ -x "$PY" ] && CUDA_VISIBLE_DEVICES= TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c "$CHECK" 2>/dev/null; then
  echo "reference env ready: $VENV"
  exit 0
fi

command -v uv >/dev/null || python3 -m pip install uv
[ -x "$PY" ] || uv venv -p 3.11 "$VENV"
uv pip install --python "$VENV" \
  'tf-models-official==2.15.0' 'tensorflow==2.15.1' 'tf-keras==2.15.1' \
  'tensorflow-text==2.15.0' 'numpy==1.26.4' 'pandas==2.3.3' 'protobuf==4.25.9'
CUDA_VISIBLE_DEVICES= TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c "$CHECK"
echo "reference env ready: $VENV"
