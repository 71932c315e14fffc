"""How a submitted job or schedule caches its tasks: as compiled, or off.

``--cache``/``--no-cache`` set ``SubmitConfig.enable_caching``; a schedule turns caching off
unless asked (its ``data_fingerprint`` is frozen when it is created).
"""

from __future__ import annotations

import dataclasses
import logging

from pipelines.submit.request import SubmitConfig
from pipelines.submit.run_values import DATA_FINGERPRINT

_LOG = logging.getLogger(__name__)


def job_caching(config: SubmitConfig) -> bool | None:
    """What to give ``PipelineJob(enable_caching=...)``: ``False`` or ``None`` (as compiled).

    The SDK writes a ``True`` into every task's ``cachingOptions``, which would serve register,
    deploy, compare and the tuning trials' folder from Vertex AI's cache (pipelines/pipeline.py
    compiles them uncached); caching "on" is therefore the compiled settings.
    """
    return False if config.enable_caching is False else None


def scheduled_caching(config: SubmitConfig) -> SubmitConfig:
    """Turns caching off for a schedule unless asked for explicitly.

    A schedule freezes its parameter values, ``data_fingerprint`` included, so with caching on
    every scheduled run would reuse the first run's data step even after the data changed.
    """
    if config.schedule_cron and config.enable_caching is None:
        _LOG.info(
            "schedule: caching turned off so each run reads the data afresh (--cache keeps it)"
        )
        return dataclasses.replace(config, enable_caching=False)
    if config.schedule_cron and config.enable_caching:
        _LOG.warning(
            "schedule with caching on: %s is fixed when the schedule is created, so data steps "
            "may be served from cache after the data changes",
            DATA_FINGERPRINT,
        )
    return config
