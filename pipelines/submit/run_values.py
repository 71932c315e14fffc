"""The run's parameter values: typed, checked against what the pipeline runs, and completed.

Values are converted to the template's declared types, held to the training presets and data
prep's ranges (``parameter_problems``, which compile and run-local use too) and to the replicas the
template was compiled for; ``data_fingerprint`` is computed from the data, and Dataflow's workers
are made to run as the run's service account.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import logging
import os
from collections.abc import Mapping
from typing import Any

from pipelines import placeholder_values
from pipelines.compiled import (
    DATA_URI,
    Parameter,
    Template,
    coerce_parameters,
    coerce_value,
    load_template,
)
from pipelines.submit.request import SubmitConfig, validate_config
from pipelines.submit.service import service_errors

_LOG = logging.getLogger(__name__)

DATA_FINGERPRINT = "data_fingerprint"
BEAM_PIPELINE_ARGS = "beam_pipeline_args"
# Dataflow's option for the account its workers run as (default: Compute Engine's default one).
DATAFLOW_ACCOUNT_OPTION = "--service_account_email"

# Pipeline parameters that data prep takes as they are (components/prepare_data.py), by the
# ``training_core.data.config.PrepareConfig`` field they set: their ranges are its check's.
_PREPARE_FIELDS = {
    "min_ratings": "min_ratings",
    "data_epochs": "num_epochs",  # 0 (not set): as many as training runs.
    "num_neg": "num_neg",
    "recency_boost": "recency_boost",
    "recency_scale": "recency_scale",
    "eval_negatives": "eval_negatives",
    "train_batch_size": "train_batch_size",
    "eval_batch_size": "eval_batch_size",  # 0 (not set, training_core.common.not_set): automatic.
}
# Text parameters that data prep takes as they are, checked by the same rules.
_PREPARE_TEXT_FIELDS = ("id_type", "positive_events")
_PRESET = "preset"
_EPOCHS = "epochs"  # 0 (not set, training_core.common.not_set): the preset's epochs.


@functools.cache
def preset_names() -> tuple[str, ...]:
    """The names of the training presets (``training_core.training.presets``: no TensorFlow)."""
    from training_core.training.presets import PRESET_NAMES

    return PRESET_NAMES


def parameter_problems(values: Mapping[str, Any]) -> list[str]:
    """What in values for the ncf pipeline's parameters cannot run, naming each parameter.

    ``preset`` must name a training preset; the data-prep parameters are held to
    ``PrepareConfig.check``'s ranges; ``epochs`` must be >= 0. 0 is "not set" (the step's
    default; training_core.common.not_set). Other names are not looked at. Strings (from a command
    line) are converted first.

    Raises:
        ValueError: a value that is not an integer where one is needed.
    """
    from training_core.common.not_set import from_kfp
    from training_core.data.config import DEFAULTS, PrepareConfig

    problems = []
    for name, value in values.items():
        if name == _PRESET:
            presets = preset_names()
            if value not in presets:
                close = difflib.get_close_matches(str(value), presets, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(
                    f"parameter {name!r}: unknown preset {value!r}{hint}; choose one of "
                    f"{', '.join(presets)}"
                )
        elif name in _PREPARE_TEXT_FIELDS:
            config = PrepareConfig("", "", **from_kfp({name: str(value)}, DEFAULTS))
            problems += [
                f"parameter {name!r} {rule}, got {value!r}" for _, rule in config.problems()
            ]
        elif name in _PREPARE_FIELDS or name == _EPOCHS:
            number = coerce_value(Parameter(name, "NUMBER_INTEGER"), value)
            if name == _EPOCHS:
                if number < 0:
                    problems.append(
                        f"parameter {name!r} must be >= 0 (0: the preset's), got {number}"
                    )
                continue
            field = _PREPARE_FIELDS[name]
            config = PrepareConfig("", "", **from_kfp({field: number}, DEFAULTS))
            for _, rule in config.problems():
                note = {
                    "eval_batch_size": " (0: automatic)",
                    "data_epochs": " (0: not set)",
                }.get(name, "")
                problems.append(f"parameter {name!r} {rule}, got {number}{note}")
    return problems


def check_parameter_values(values: Mapping[str, Any]) -> None:
    """``parameter_problems`` as one error.

    Raises:
        ValueError: listing every value that cannot run, with the parameter and what it takes.
    """
    problems = parameter_problems(values)
    if len(problems) == 1:
        raise ValueError(problems[0])
    if problems:
        raise ValueError("parameter values that cannot run:\n  - " + "\n  - ".join(problems))


def prepare(config: SubmitConfig) -> tuple[Template, dict[str, Any]]:
    """Validates the config and returns the template and the typed parameter values."""
    validate_config(config)
    template = load_template(config.template_path)
    values = coerce_parameters(template, config.parameter_values)
    check_run_values(template, values)
    warning = reused_negatives(template, values)
    if warning:
        _LOG.warning("%s", warning)
    values = with_dataflow_account(values, config.service_account)
    data_uri = values.get(DATA_URI)
    if isinstance(data_uri, str):
        placeholder_values.check_placeholders({DATA_URI: (data_uri, "bucket")})
    if isinstance(data_uri, str) and not data_uri.startswith("gs://"):
        raise ValueError(
            f"{DATA_URI} {data_uri!r} is not in Cloud Storage; Vertex AI cannot read local "
            f"files: upload it (gcloud storage cp -r {data_uri} gs://BUCKET/PATH) and pass "
            f"--param {DATA_URI}=gs://BUCKET/PATH"
        )
    return template, values


def with_dataflow_account(values: dict[str, Any], account: str | None) -> dict[str, Any]:
    """The run's values with Dataflow's workers running as the run's service account.

    Dataflow starts its workers as the project's Compute Engine default account (usually an
    Editor) unless the job names another, whatever account launched it. When the run has a
    service account and its ``beam_pipeline_args`` choose Dataflow's runner without naming a
    worker account, ``--service_account_email=ACCOUNT`` is added (docs/security.md).
    """
    from components._image import names_option, runs_on_dataflow

    args = values.get(BEAM_PIPELINE_ARGS)
    if not account or not isinstance(args, list) or not runs_on_dataflow(args):
        return values
    if names_option(args, DATAFLOW_ACCOUNT_OPTION):
        return values
    _LOG.info("Dataflow's workers will run as %s (%s)", account, DATAFLOW_ACCOUNT_OPTION)
    return {**values, BEAM_PIPELINE_ARGS: [*args, f"{DATAFLOW_ACCOUNT_OPTION}={account}"]}


def reused_negatives(template: Template, values: Mapping[str, Any]) -> str | None:
    """A warning when the run prepares fewer epochs of negatives than it trains, else None.

    ``data_epochs`` 0 (the default) prepares as many as training runs: no warning. The training
    epochs are ``epochs``, else the preset's (for ``auto``, the fewest of the presets it can
    pick: the warning holds for any data size).
    """
    from training_core.training.presets import PRESETS, possible_presets
    from training_core.training.train_config import reused_negatives_consequence

    def value(name: str) -> Any:
        if name in values:
            return values[name]
        parameter = template.parameters.get(name)
        return parameter.default if parameter else None

    data_epochs, epochs, preset = value("data_epochs"), value("epochs"), value("preset")
    if not isinstance(data_epochs, int | float) or not isinstance(preset, str):
        return None  # Not an ncf-pipelines template.
    # The IR keeps integer defaults as JSON numbers (1.0).
    data_epochs, epochs = int(data_epochs), int(epochs or 0)
    if not data_epochs:
        return None
    if not epochs:
        names = possible_presets(preset)
        if not all(n in PRESETS for n in names):
            return None
        epochs = min(PRESETS[n].epochs for n in names)
    if epochs <= data_epochs:
        return None
    return (
        f"data_epochs={data_epochs} but training runs {epochs} epochs or more: "
        f"{reused_negatives_consequence(data_epochs)}; pass --param data_epochs={epochs} (or the "
        "epochs you train)"
    )


def check_run_values(template: Template, values: Mapping[str, Any]) -> None:
    """The compile-time checks again, on the values of this run.

    First the values themselves (``parameter_problems``: the preset, the ranges), then the batch
    sizes against the replicas the template was compiled for.

    Raises:
        ValueError: naming each bad value, or listing what does not fit the compiled machines
            and what would.
    """
    from pipelines import compiled

    if compiled.TRAIN_TASK not in template.spec.get("root", {}).get("dag", {}).get("tasks", {}):
        return  # Not an ncf-pipelines template: nothing of ours to check.
    check_parameter_values(values)
    problems = compiled.run_problems(template.spec, values)
    if problems:
        raise ValueError(
            f"these parameter values cannot run on the machines {template.path} was compiled "
            "for:\n  - " + "\n  - ".join(problems)
        )


def with_data_fingerprint(config: SubmitConfig, *, offline: bool = False) -> SubmitConfig:
    """Sets ``data_fingerprint`` from the content behind ``data_uri``.

    Only when the template declares ``data_fingerprint`` and the caller did not set it. With
    ``offline`` (for a dry run), a ``gs://`` location is not listed and a placeholder says so.
    """
    from pipelines import fingerprint

    template = load_template(config.template_path)
    if DATA_FINGERPRINT not in template.parameters or DATA_FINGERPRINT in config.parameter_values:
        return config
    uri = config.parameter_values.get(DATA_URI)
    if uri is None and DATA_URI in template.parameters:
        uri = template.parameters[DATA_URI].default
    if not uri:
        raise ValueError(
            f"the pipeline takes {DATA_FINGERPRINT!r} but no {DATA_URI!r} to compute it from; "
            f"pass --param {DATA_URI}=... or --param {DATA_FINGERPRINT}=..."
        )
    uri = str(uri)
    if offline and not os.path.exists(uri):
        value = f"(computed at submit time from {uri})"
    else:
        with service_errors(config, f"listing {uri} for {DATA_FINGERPRINT}", service="storage"):
            value = fingerprint.data_fingerprint(
                uri, project=config.project, credentials=config.credentials
            )
        _LOG.info("%s of %s: %s", DATA_FINGERPRINT, uri, value)
    return dataclasses.replace(
        config, parameter_values={**config.parameter_values, DATA_FINGERPRINT: value}
    )
