"""Whether this host has a TPU, and keeping libtpu from loading where it has none.

TensorFlow's TPU build loads ``libtpu`` while ``import tensorflow`` runs: through
``TF_PLUGGABLE_DEVICE_LIBRARY_PATH`` (the PJRT plugin the tpu image names, as Vertex AI asks for
v5e) or by itself when the ``libtpu`` package is installed. On a machine without a TPU, libtpu
then asks the Compute Engine metadata server for the TPU's topology, 30 tries per variable: the
import took 7 min 48 s on a CPU machine here before training could even start (or, with the PJRT
plugin and ``TPU_LOAD_LIBRARY=0``, TensorFlow aborts with a C++ stack trace). ``keep_libtpu_off``
runs before TensorFlow is imported (``training_core/__init__.py``): where libtpu is installed
but this host has no TPU device, it turns the loading off, so TensorFlow imports in seconds on
the CPU and a step that asked for a TPU fails in one line naming the missing device
(``training.strategy``), or trains on the CPU where that is allowed (``ncf-pipelines verify``).
A remote TPU (a TPU node reached by address) needs no libtpu in this process either.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import MutableMapping

# Where a TPU VM exposes its chips: /dev/accel* (v2-v4, v5p) or VFIO groups (v5e, v6e).
DEVICE_PATTERNS = ("/dev/accel*", "/dev/vfio/[0-9]*")
# The PCI vendor id of Google's TPU chips, as sysfs shows it (JAX's TPU detection reads the same).
GOOGLE_PCI_VENDOR = "0x1ae0"
# TensorFlow's own switch: "0" keeps FindAndLoadTpuLibrary from loading libtpu.
LOAD_LIBRARY_ENV = "TPU_LOAD_LIBRARY"
# The PJRT plugin variables the tpu image sets (Dockerfile, tpu stage).
PJRT_ENV = ("TF_PLUGGABLE_DEVICE_LIBRARY_PATH", "NEXT_PLUGGABLE_DEVICE_USE_C_API")
# Set by keep_libtpu_off to say what it did (read by the strategy's message and by tests).
OFF_ENV = "NCF_LIBTPU_OFF"


def tpu_devices(root: str = "/") -> list[str]:
    """The TPU device nodes and Google TPU PCI functions this host has (``[]``: none)."""
    found = []
    for pattern in DEVICE_PATTERNS:
        found += sorted(glob.glob(os.path.join(root, pattern.lstrip("/"))))
    for vendor in sorted(glob.glob(os.path.join(root, "sys/bus/pci/devices/*/vendor"))):
        try:
            with open(vendor) as f:
                if f.read().strip() == GOOGLE_PCI_VENDOR:
                    found.append(os.path.dirname(vendor))
        except OSError:
            continue
    return found


def libtpu_installed() -> bool:
    """Whether the ``libtpu`` package (the tpu image's) is importable here."""
    return importlib.util.find_spec("libtpu") is not None


def keep_libtpu_off(env: MutableMapping[str, str] | None = None, root: str = "/") -> bool:
    """Turns libtpu's loading off where it is installed and this host has no TPU device.

    Leaves everything as it is where libtpu is not installed, where the host has a TPU, or where
    ``TPU_LOAD_LIBRARY`` was set by someone (their choice wins). Must run before TensorFlow is
    imported; idempotent.

    Returns:
        Whether it turned the loading off.
    """
    env = os.environ if env is None else env
    if env.get(OFF_ENV) == "1":
        return True
    if LOAD_LIBRARY_ENV in env or not libtpu_installed() or tpu_devices(root):
        return False
    env[LOAD_LIBRARY_ENV] = "0"
    for name in PJRT_ENV:
        env.pop(name, None)
    env[OFF_ENV] = "1"
    return True
