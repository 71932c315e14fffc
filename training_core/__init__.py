"""training_core."""

# Before anything here can import TensorFlow: in the tpu image on a host without a TPU, keep
# libtpu from loading (it would wait minutes for a metadata server; common/tpu_runtime.py).
from training_core.common import tpu_runtime as _tpu_runtime

_tpu_runtime.keep_libtpu_off()
