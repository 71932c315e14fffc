"""How a message names an option: the command line's flag, or the pipeline's parameter.

The readers and the validation gate run under ``ncf-pipelines prepare-data``/``validate`` and
inside a pipeline step (``run-local``, ``verify``, Vertex AI). A message that says what to change
names the option the user can set where they are: ``--user-col`` on the command line,
``--param user_col=COLUMN`` in a pipeline. Messages call ``option("--user-col")``; a component's
body runs inside ``with hints.in_pipeline():`` (after ``training_core.common.console.setup``),
which sets ``STYLE_ENV`` so that worker processes it starts name options the same way, and puts
it back on leaving: a test that calls a component's ``python_func`` leaves its process as it was.

``PIPELINE_PARAMETERS`` is the one table from a command-line flag to its pipeline parameter;
``tests/`` holds every parameter it names to a parameter of the compiled pipeline.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

STYLE_ENV = "NCF_OPTION_STYLE"
STYLE_PIPELINE = "pipeline"

# Command-line flag -> how a pipeline run sets it (``--param NAME=VALUE``).
PIPELINE_PARAMETERS = {
    "--format": "data_format=FORMAT",
    "--user-col": "user_col=COLUMN",
    "--item-col": "item_col=COLUMN",
    "--time-col": "time_col=COLUMN",
    "--rating-col": "rating_col=COLUMN",
    "--event-col": "event_col=COLUMN",
    "--id-type": "id_type=string",
    "--min-rating": "min_rating=RATING",
    "--positive-events": "positive_events=EVENT,...",
    "--min-ratings": "min_ratings=N",
    "--warn-only": "fail_on_anomalies=false",
    "--baseline-schema": "baseline_schema_uri=URI",
    "--baseline-stats": "baseline_statistics_uri=URI",
    "--warm-start-from": "warm_start_uri=URI",
}


def in_pipeline() -> contextlib.AbstractContextManager[None]:
    """Messages from here on (and from processes started from here) name pipeline parameters.

    The style is set on the call; used as ``with in_pipeline():`` it is put back on leaving.
    """
    before = os.environ.get(STYLE_ENV)
    os.environ[STYLE_ENV] = STYLE_PIPELINE
    return _restored(before)


@contextlib.contextmanager
def _restored(before: str | None) -> Iterator[None]:
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(STYLE_ENV, None)
        else:
            os.environ[STYLE_ENV] = before


def pipeline_style() -> bool:
    """Whether this process runs as a pipeline step (``in_pipeline`` was called)."""
    return os.environ.get(STYLE_ENV) == STYLE_PIPELINE


def option(flag: str) -> str:
    """``flag`` as the user sets it here: itself, or ``--param NAME=VALUE`` in a pipeline step.

    A flag with no pipeline parameter is named as it is.
    """
    if pipeline_style() and flag in PIPELINE_PARAMETERS:
        return f"--param {PIPELINE_PARAMETERS[flag]}"
    return flag
