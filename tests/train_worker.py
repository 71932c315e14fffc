"""Runs ``ncf-pipelines`` in a fresh process, optionally with N logical CPU devices.

Strategy tests run training here, not in the pytest process: logical devices must be configured
before TensorFlow initializes, and multi-worker strategies must come before any other op.
Usage: ``NCF_TEST_CPU_DEVICES=2 python tests/train_worker.py train --data ...``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

devices = int(os.environ.get("NCF_TEST_CPU_DEVICES", "1"))
if devices > 1:
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * devices
    )

from pipelines.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
