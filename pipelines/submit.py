"""Submit a compiled pipeline to Vertex AI Pipelines, as a run or as a schedule.

``describe(config)`` says what would be sent without any network call (``--dry-run``);
``submit(config)`` sends it through ``google.cloud.aiplatform.PipelineJob``. Inputs are checked
before any request: labels against Vertex AI's rules, parameters against the template's root
inputs (and converted to their declared types), and no value may hold a placeholder from the
docs (``pipelines.placeholder_values``). Errors from the service become a
``SubmitError`` whose message carries the service's own words and what to check.

The REST transport is used for every call, so what the tests exercise against the local
stand-in (``pipelines/verify/rest_service.py``) is the code path used against Vertex AI.

A template may be a URL in Artifact Registry (``https://LOCATION-kfp.pkg.dev/...``,
``pipelines.template_registry``): ``fetched_template`` downloads it once, every check reads the
local copy, and the job is created from that copy with the URL as its ``template_uri``, as
aiplatform does when it downloads a registry template itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import ipaddress
import logging
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pipelines import placeholder_values
from pipelines import vertex_names as names
from pipelines.compiled import (
    DATA_URI,
    Parameter,
    Template,
    coerce_parameters,
    coerce_value,
    load_template,
)

_LOG = logging.getLogger(__name__)

DATA_FINGERPRINT = "data_fingerprint"
BEAM_PIPELINE_ARGS = "beam_pipeline_args"
# Dataflow's option for the account its workers run as (default: Compute Engine's default one).
DATAFLOW_ACCOUNT_OPTION = "--service_account_email"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


# The regions Vertex AI runs in (docs: "Vertex AI locations"; the same list as
# google-cloud-aiplatform's own SUPPORTED_REGIONS, less "global", which runs no pipelines).
VERTEX_AI_REGIONS = frozenset(
    {
        *("us-central1", "us-east1", "us-east4", "us-east5", "us-east7", "us-south1"),
        *("us-west1", "us-west2", "us-west3", "us-west4", "us-west8"),
        *("northamerica-northeast1", "northamerica-northeast2"),
        *("southamerica-east1", "southamerica-west1"),
        *("europe-west1", "europe-west2", "europe-west3", "europe-west4", "europe-west6"),
        *("europe-west8", "europe-west9", "europe-west12", "europe-central2"),
        *("europe-north1", "europe-north2", "europe-southwest1"),
        *("asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2", "asia-northeast3"),
        *("asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2"),
        *("australia-southeast1", "australia-southeast2"),
        *("me-central1", "me-central2", "me-west1", "africa-south1"),
    }
)


class SubmitError(Exception):
    """The service (or the way to it) refused the submission; ``str()`` says what to check."""

    def __init__(self, message: str, *, code: int | None = None, service_message: str = ""):
        super().__init__(message)
        self.code = code
        self.service_message = service_message


@dataclasses.dataclass(frozen=True)
class SubmitConfig:
    """Everything a submission needs; built once by the CLI (or a caller) and passed down.

    Attributes:
        template_path: a compiled pipeline (KFP IR YAML, from ``ncf-pipelines compile``); a
            registry URL until ``fetched_template`` replaces it with the local copy.
        project: Google Cloud project id.
        region: Vertex AI region, e.g. ``us-central1``.
        pipeline_root: ``gs://`` folder for the run's artifacts.
        service_account: the run's service account (default: the Compute Engine default one).
        network: VPC to peer with, ``projects/NUMBER/global/networks/NAME``.
        labels: Vertex AI labels for the run.
        enable_caching: ``None`` or ``True`` keep the compiled per-task settings (the steps
            with outside effects and the tuning trials' folder are compiled uncached, and the
            SDK's ``enable_caching=True`` would turn them on: :func:`job_caching`); ``False``
            turns caching off for every task.
        experiment: Vertex AI Experiment to associate the run with (runs only).
        parameter_values: pipeline parameters; strings are converted to the declared types.
        display_name: run (or schedule) display name (default: the pipeline's name).
        schedule_cron: when set, create a schedule with this cron instead of one run.
        schedule_name: display name of the schedule (default: display name + ``-schedule``).
        max_concurrent_runs: runs a schedule may have going at once.
        api_endpoint: Vertex AI endpoint other than the regional default (a private endpoint,
            or ``http://127.0.0.1:PORT`` for the test stand-in). Plain ``http://`` only to
            loopback (``api_endpoint_problem``): every request carries a bearer token.
        credentials: ``google.auth`` credentials; ``None`` means Application Default
            Credentials. Never printed or logged.
        template_uri: the Artifact Registry URL ``template_path`` was downloaded from
            (``fetched_template`` sets it); the job records it as its ``template_uri``.
        registry_endpoint: where Artifact Registry requests go instead of the kfp.pkg.dev host
            and artifactregistry.googleapis.com (``http://127.0.0.1:PORT``: the test stand-in);
            plain http only to loopback, as ``api_endpoint``.
    """

    template_path: str
    project: str
    region: str
    pipeline_root: str
    service_account: str | None = None
    network: str | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    enable_caching: bool | None = None
    experiment: str | None = None
    parameter_values: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    display_name: str | None = None
    schedule_cron: str | None = None
    schedule_name: str | None = None
    max_concurrent_runs: int = 1
    api_endpoint: str | None = None
    credentials: Any = dataclasses.field(default=None, repr=False, compare=False)
    template_uri: str | None = None
    registry_endpoint: str | None = None


@dataclasses.dataclass(frozen=True)
class SubmitResult:
    """What was created: a pipeline job, or a schedule."""

    kind: str  # "pipeline_job" or "schedule"
    resource_name: str
    console_url: str
    display_name: str
    parameter_values: Mapping[str, Any]


def parse_assignments(items: Sequence[str], what: str = "--param") -> dict[str, str]:
    """``["a=1", "b=x=y"]`` to ``{"a": "1", "b": "x=y"}``.

    Raises:
        ValueError: an item without ``=`` or with an empty name, or a name given twice.
    """
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{what} {item!r}: expected NAME=VALUE")
        if name in out:
            raise ValueError(f"{what} {name!r} given twice")
        out[name] = value
    return out


# --- validation --------------------------------------------------------------------------------


def validate_labels(labels: Mapping[str, str]) -> None:
    """Checks labels against Vertex AI's rules.

    At most 64 labels; keys start with a lowercase letter; keys and values are at most 63
    lowercase letters, digits, ``_`` or ``-``.

    Raises:
        ValueError: naming the offending label and the rule.
    """
    if len(labels) > names.MAX_LABELS:
        raise ValueError(f"{len(labels)} labels given; Vertex AI allows at most {names.MAX_LABELS}")
    for key, value in labels.items():
        if not isinstance(key, str) or not names.LABEL_KEY.fullmatch(key):
            raise ValueError(
                f"label key {key!r} is invalid: keys are 1-63 characters, start with a lowercase "
                "letter, and use only lowercase letters, digits, '_' and '-'"
            )
        if not isinstance(value, str) or not names.LABEL_VALUE.fullmatch(value):
            raise ValueError(
                f"label {key}={value!r} is invalid: values are at most 63 characters of "
                "lowercase letters, digits, '_' and '-'"
            )


def validate_config(config: SubmitConfig) -> None:
    """Checks every field that can be checked locally.

    Raises:
        ValueError: with the field, the value and the expected form.
    """
    placeholder_values.check_placeholders(
        {
            "project": (config.project, "project"),
            "pipeline root": (config.pipeline_root, "bucket"),
            "service account": (config.service_account, "service account"),
            "network": (config.network, "network"),
        }
    )
    if not names.PROJECT_ID.fullmatch(config.project or ""):
        raise ValueError(
            f"project {config.project!r} is not a project id (6-30 lowercase letters, digits "
            "and '-', starting with a letter)"
        )
    problem = region_problem(config.region, "region")
    if problem:
        raise ValueError(problem)
    if not config.pipeline_root.startswith("gs://"):
        raise ValueError(
            f"pipeline root {config.pipeline_root!r} must be a Cloud Storage folder, "
            "gs://BUCKET/PATH (Vertex AI cannot write anywhere else)"
        )
    bucket = config.pipeline_root[len("gs://") :].split("/", 1)[0]
    if not names.BUCKET.fullmatch(bucket):
        raise ValueError(
            f"pipeline root {config.pipeline_root!r}: {bucket!r} is not a bucket name "
            "(3-63 lowercase letters, digits, '-', '_' and '.')"
        )
    if config.service_account is not None and not names.SERVICE_ACCOUNT.fullmatch(
        config.service_account
    ):
        raise ValueError(
            f"service account {config.service_account!r} is not an email such as "
            "NAME@PROJECT.iam.gserviceaccount.com"
        )
    if config.network is not None and not names.NETWORK.fullmatch(config.network):
        raise ValueError(
            f"network {config.network!r} must be a full name: "
            "projects/PROJECT_NUMBER/global/networks/NAME (the project's number, not its id: "
            "gcloud projects describe PROJECT --format='value(projectNumber)')"
        )
    if config.experiment is not None:
        if not names.EXPERIMENT.fullmatch(config.experiment):
            raise ValueError(
                f"experiment {config.experiment!r}: use 4-128 lowercase letters, digits and '-'"
            )
        if config.schedule_cron:
            raise ValueError("an experiment can be set for a run, not for a schedule")
    if config.schedule_cron is not None:
        cron = re.sub(r"^(CRON_TZ|TZ)=\S+\s+", "", config.schedule_cron.strip())
        if len(cron.split()) != 5:
            raise ValueError(
                f"schedule {config.schedule_cron!r} is not a 5-field cron expression such as "
                "'0 3 * * *' (optionally prefixed with 'TZ=Area/City ')"
            )
    if config.max_concurrent_runs < 1:
        raise ValueError(
            f"max concurrent runs (--max-concurrent-runs) must be >= 1, got "
            f"{config.max_concurrent_runs}"
        )
    if config.display_name is not None and not 0 < len(config.display_name) <= 128:
        raise ValueError("display name must be 1-128 characters")
    for endpoint, what in (
        (config.api_endpoint, API_ENDPOINT),
        (config.registry_endpoint, REGISTRY_ENDPOINT),
    ):
        problem = api_endpoint_problem(endpoint, what)
        if problem:
            raise ValueError(problem)
    validate_labels(config.labels)


API_ENDPOINT = "api endpoint (--api-endpoint)"
REGISTRY_ENDPOINT = "registry endpoint (--registry-endpoint)"

# The one plain-http form allowed: no user info, backslash, space, control character,
# percent-escape, query or fragment can hide another host from one of the URL parsers.
_PLAIN_HTTP = re.compile(
    r"http://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?"
    r"(?P<path>/[A-Za-z0-9._~/-]*)?"
)
_NOT_PLAIN = (
    ("@", "user info '@'"),
    ("\\", "a backslash"),
    ("%", "a percent-escape"),
    ("?", "a query '?'"),
    ("#", "a fragment '#'"),
)


def _loopback_host(host: str) -> bool:
    """Whether ``host`` (as written in the URL) is ``localhost`` or a loopback IP literal."""
    if host.lower() == "localhost":
        return True
    literal = host[1:-1] if host.startswith("[") else host
    try:  # Dotted decimal only: ipaddress refuses 0177.0.0.1, 127.1 and 2130706433.
        return ipaddress.ip_address(literal).is_loopback
    except ValueError:
        return False


def _plain_http_problem(endpoint: str) -> str | None:
    """What keeps ``endpoint`` from being plain http to loopback, in a few words, or None.

    The strict form must also agree with urllib3's parser, which is what requests uses to pick
    the host it connects to (it ends a host at a backslash, where ``urllib.parse`` does not).
    """
    from urllib3.util import parse_url

    try:
        parsed = parse_url(endpoint.lstrip())
    except ValueError:  # urllib3's LocationParseError.
        parsed = None
    sent_to = parsed.host if parsed else None
    where = f"requests would send it to {sent_to}" if sent_to else "no host requests can use"
    match = _PLAIN_HTTP.fullmatch(endpoint)
    if not match:
        odd = [why for char, why in _NOT_PLAIN if char in endpoint]
        if any(char.isspace() or not char.isprintable() for char in endpoint):
            odd.append("a space or control character")
        if not odd and sent_to and not _loopback_host(sent_to):
            return f"to {sent_to}"
        has = f"it has {' and '.join(odd)}; " if odd else ""
        return f"but not in the form http://HOST[:PORT][/PATH] ({has}{where})"
    host, port = match["host"], match["port"] and int(match["port"])
    if not _loopback_host(host):
        return f"to {host}"
    if port is not None and not 0 < port < 65536:
        return f"to port {port} (ports are 1-65535)"
    split = urllib.parse.urlsplit(endpoint)
    readings = {(sent_to, parsed and parsed.port), (split.hostname, split.port)}
    if any(
        (h or "").strip("[]").lower() != host.strip("[]").lower() or p != port for h, p in readings
    ):
        return f"to {host} by one URL parser but not by another ({where})"
    return None


def api_endpoint_problem(endpoint: str | None, what: str = API_ENDPOINT) -> str | None:
    """Why ``endpoint`` would send the credentials in the clear, or None.

    Every request carries the caller's OAuth bearer token in its ``Authorization`` header, so
    plain ``http://`` is allowed only to this machine's loopback (127.0.0.0/8, ::1,
    ``localhost``: a local stand-in), and only written plainly as ``http://HOST[:PORT][/PATH]``,
    since URL parsers disagree on anything trickier. No scheme or ``https://`` is TLS (the
    aiplatform REST transport adds ``https://`` to a bare host). Every command that takes an
    endpoint checks it here.
    """
    if not endpoint:
        return None
    # Anything a client could read as scheme http: spaces and control characters left out.
    squeezed = "".join(c for c in endpoint if c.isprintable() and not c.isspace())
    if not squeezed.lower().startswith("http:"):
        return None
    problem = _plain_http_problem(endpoint)
    if problem is None:
        return None
    return (
        f"{what} {endpoint!r} is plain http {problem}: every request carries your OAuth bearer "
        "token, which anyone on the way could read and reuse. Use https:// (or the host alone), "
        "or plain http only to a stand-in on this machine (127.0.0.1, ::1 or localhost), "
        "written as http://HOST[:PORT][/PATH]"
    )


def region_problem(region: str | None, what: str = "region") -> str | None:
    """Why ``region`` is not a Vertex AI region (with the nearest one), or None if it is one.

    Args:
        region: the region as given.
        what: where it came from, for the message (``--region``, ``GOOGLE_CLOUD_REGION``).
    """
    if region in VERTEX_AI_REGIONS:
        return None
    regions = sorted(VERTEX_AI_REGIONS)
    close = difflib.get_close_matches(str(region).lower(), regions, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (
        f"{what} {region!r} is not a Vertex AI region; {hint}Vertex AI runs in {', '.join(regions)}"
    )


# --- the ncf pipeline's parameter values -------------------------------------------------------

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


# --- data fingerprint --------------------------------------------------------------------------


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


def job_caching(config: SubmitConfig) -> bool | None:
    """What to give ``PipelineJob(enable_caching=...)``: ``False`` or ``None`` (as compiled).

    The SDK writes a ``True`` into every task's ``cachingOptions``, which would serve register,
    deploy, compare and the tuning trials' folder from Vertex AI's cache (pipelines/pipeline.py
    compiles them uncached); caching "on" is therefore the compiled settings.
    """
    return False if config.enable_caching is False else None


def new_job_id(pipeline_name: str) -> str:
    """A new run's pipeline job ID: the SDK's own (``NAME-YYYYmmddHHMMSS``) and 4 random hex digits.

    The SDK's ID changes once a second, and Vertex AI refuses a second job of one ID (409
    ALREADY_EXISTS): a script that submits several runs at once would lose all but the first.
    """
    import datetime
    import secrets

    name = re.sub("[^-0-9a-z]+", "-", pipeline_name.lower()).strip("-")
    now = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
    return f"{name}-{now}-{secrets.token_hex(2)}"


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


# --- describe and submit -----------------------------------------------------------------------


@contextlib.contextmanager
def fetched_template(config: SubmitConfig) -> Iterator[SubmitConfig]:
    """``config`` with a registry template downloaded; a local template passes unchanged.

    ``template_path`` becomes the local copy (kept while the context is open), ``template_uri``
    the URL. The download uses ``config.credentials``, else Application Default Credentials.

    Raises:
        ValueError: a malformed registry URL or endpoint, before any request.
        SubmitError: the registry refused (an unknown tag names the repository's tags).
    """
    import tempfile

    from pipelines import template_registry

    if not template_registry.is_registry_url(config.template_path):
        yield config
        return
    ref = template_registry.parse_template(config.template_path)
    problem = api_endpoint_problem(config.registry_endpoint, REGISTRY_ENDPOINT)
    if problem:
        raise ValueError(problem)
    credentials = config.credentials or default_credentials()
    with tempfile.TemporaryDirectory(prefix="ncf-template-") as folder:
        try:
            got = template_registry.download(
                ref,
                os.path.join(folder, f"{ref.package}.yaml"),
                credentials=credentials,
                endpoint=config.registry_endpoint,
            )
        except template_registry.TemplateRegistryError as e:
            raise SubmitError(str(e)) from e
        _LOG.info("template %s is version %s", ref.url, got.version)
        yield dataclasses.replace(config, template_path=got.path, template_uri=ref.url)


def custom_jobs(config: SubmitConfig, values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every custom-job request the run would create, built offline and checked, by task.

    Built as Vertex AI and the launcher build them (``pipelines.run_plan``, which verify builds
    on: placeholders filled with this submission's project, region, service account and network;
    GCPC's own payload steps; the aiplatform ``CreateCustomJobRequest``), so a request the
    service would refuse is found before the run is sent, not after the pipeline queue.

    Raises:
        ValueError: a request that would be refused, naming the task and the field.
    """
    from pipelines import run_plan

    try:
        requests = run_plan.custom_job_requests(
            config.template_path,
            values,
            project=config.project,
            region=config.region,
            service_account=config.service_account,
            network=config.network,
            pipeline_root=config.pipeline_root,
        )
    except run_plan.RequestError as e:
        raise ValueError(f"{config.template_path} would fail on Vertex AI: {e}") from None
    out = {}
    for task, request in requests.items():
        spec = request.custom_job.job_spec
        out[task] = {
            "parent": request.parent,
            "service_account": spec.service_account,
            "network": spec.network or None,
            "worker_pools": [
                f"{p.replica_count} x {p.machine_spec.machine_type}"
                + (
                    f" + {p.machine_spec.accelerator_count} x "
                    f"{p.machine_spec.accelerator_type.name}"
                    if p.machine_spec.accelerator_count
                    else ""
                )
                + f" ({p.container_spec.image_uri})"
                for p in spec.worker_pool_specs
            ],
        }
    return out


def describe(config: SubmitConfig) -> dict[str, Any]:
    """What ``submit`` would send, as a JSON-able dict; makes no network call.

    Raises:
        ValueError, FileNotFoundError: the same input errors ``submit`` raises.
    """
    config = scheduled_caching(config)
    template, values = prepare(config)
    display_name = config.display_name or template.pipeline_name
    jobs = custom_jobs(config, values)
    out: dict[str, Any] = {
        "action": "create schedule" if config.schedule_cron else "create pipeline job",
        "project": config.project,
        "region": config.region,
        "api_endpoint": config.api_endpoint or f"https://{config.region}-aiplatform.googleapis.com",
        "template": config.template_uri or config.template_path,
        "pipeline_name": template.pipeline_name,
        "display_name": display_name,
        "pipeline_root": config.pipeline_root,
        "parameter_values": values,
        "labels": dict(config.labels),
        "service_account": config.service_account
        or "(the project's Compute Engine default account, "
        f"{placeholder_values.DEFAULT_COMPUTE_SERVICE_ACCOUNT})",
        "network": config.network,
        "enable_caching": (
            "(as compiled)" if job_caching(config) is None else config.enable_caching
        ),
        "experiment": config.experiment,
        # Where, as whom and on which network each training custom job runs.
        "custom_jobs": jobs,
        "credentials": (
            "Application Default Credentials"
            if config.credentials is None
            else type(config.credentials).__name__
        ),
    }
    if config.template_uri:
        from pipelines import template_registry

        out["template_uri"] = config.template_uri
        out["template_version"] = template_registry.file_version(config.template_path)
    if config.schedule_cron:
        out["schedule"] = {
            "cron": config.schedule_cron,
            "display_name": config.schedule_name or f"{display_name}-schedule",
            "max_concurrent_run_count": config.max_concurrent_runs,
        }
    return out


def default_credentials() -> Any:
    """Application Default Credentials with the cloud-platform scope.

    Raises:
        SubmitError: none are set up, with the command that sets them up.
    """
    import google.auth
    from google.auth import exceptions as auth_exceptions

    try:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except auth_exceptions.DefaultCredentialsError as e:
        raise SubmitError(
            "no Google Cloud credentials found: run `gcloud auth application-default login`, "
            "or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file"
        ) from e
    return credentials


def submit(config: SubmitConfig) -> SubmitResult:
    """Creates the pipeline job (or the schedule) on Vertex AI.

    Raises:
        ValueError, FileNotFoundError: bad input, found before any request.
        SubmitError: the service or the network refused; the message says what to check.
    """
    config = scheduled_caching(config)
    template, values = prepare(config)
    custom_jobs(config, values)  # A request the service would refuse stops here, unsent.
    credentials = config.credentials or default_credentials()
    display_name = config.display_name or template.pipeline_name

    with service_errors(config, "creating the schedule" if config.schedule_cron else "submitting"):
        from google.cloud import aiplatform

        # init() is process-wide in the SDK; PipelineJob has no per-call endpoint or transport.
        aiplatform.init(
            project=config.project,
            location=config.region,
            credentials=credentials,
            api_transport="rest",
            **({"api_endpoint": config.api_endpoint} if config.api_endpoint else {}),
        )
        job = aiplatform.PipelineJob(
            display_name=display_name,
            job_id=new_job_id(template.pipeline_name),
            template_path=config.template_path,
            pipeline_root=config.pipeline_root,
            parameter_values=values,
            enable_caching=job_caching(config),
            labels=dict(config.labels) or None,
            project=config.project,
            location=config.region,
            credentials=credentials,
        )
        if config.template_uri:
            # What PipelineJob's constructor records when it downloads a registry URL itself.
            # Built from our copy instead: the job runs the very bytes checked above (a tag can
            # move between two downloads), and the same code reaches a stand-in. The SDK has no
            # public setter, and `gca_resource` refuses until the job is created.
            job._gca_resource.template_uri = config.template_uri
        if config.schedule_cron:
            schedule = job.create_schedule(
                cron=config.schedule_cron,
                display_name=config.schedule_name or f"{display_name}-schedule",
                max_concurrent_run_count=config.max_concurrent_runs,
                service_account=config.service_account,
                network=config.network,
            )
            name = schedule.resource_name
            return SubmitResult("schedule", name, _console_url(name), display_name, values)
        job.submit(
            service_account=config.service_account,
            network=config.network,
            experiment=config.experiment,
        )
        name = job.resource_name
        return SubmitResult("pipeline_job", name, _console_url(name), display_name, values)


def _console_url(resource_name: str) -> str:
    m = re.fullmatch(
        r"projects/([^/]+)/locations/([^/]+)/(pipelineJobs|schedules)/([^/]+)", resource_name
    )
    if not m:
        return ""
    project, location, kind, rid = m.groups()
    page = "runs" if kind == "pipelineJobs" else "schedules"
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{location}/pipelines/"
        f"{page}/{rid}?project={project}"
    )


# --- errors ------------------------------------------------------------------------------------


@contextlib.contextmanager
def service_errors(config: SubmitConfig, doing: str, service: str = "vertex") -> Iterator[None]:
    """Turns errors from Google APIs and the network into a ``SubmitError`` with advice.

    Args:
        config: the submission, for the names the advice mentions.
        doing: what was being done, e.g. ``"submitting"``.
        service: ``"vertex"`` (Vertex AI) or ``"storage"`` (Cloud Storage), for the advice.
    """
    import requests
    from google.api_core import exceptions as api_exceptions
    from google.auth import exceptions as auth_exceptions

    try:
        yield
    except api_exceptions.GoogleAPICallError as e:
        raise _api_error(e, config, doing, service) from e
    except RuntimeError as e:
        # The SDK wraps experiment (metadata) failures in RuntimeError.
        if isinstance(e.__cause__, api_exceptions.GoogleAPICallError):
            raise _api_error(e.__cause__, config, f"{doing} ({e})", service) from e
        raise
    except api_exceptions.RetryError as e:
        raise SubmitError(f"{doing}: gave up after retries: {e.message}") from e
    except auth_exceptions.RefreshError as e:
        raise SubmitError(
            f"{doing}: the credentials could not be refreshed ({e.args[0] if e.args else e}); "
            "run `gcloud auth application-default login` again"
        ) from e
    except auth_exceptions.DefaultCredentialsError as e:
        raise SubmitError(
            "no Google Cloud credentials found: run `gcloud auth application-default login`"
        ) from e
    except requests.exceptions.ConnectionError as e:
        endpoint = (
            "Cloud Storage"
            if service == "storage"
            else config.api_endpoint or f"{config.region}-aiplatform.googleapis.com"
        )
        raise SubmitError(
            f"{doing}: could not connect to {endpoint}; check the network, proxy settings "
            "and --api-endpoint"
        ) from e


def _api_error(e: Any, config: SubmitConfig, doing: str, service: str) -> SubmitError:
    from google.api_core import exceptions as api_exceptions

    sa = config.service_account or "the Compute Engine default service account"
    if isinstance(e, api_exceptions.Unauthorized):
        hint = (
            "the credentials were rejected: run `gcloud auth application-default login`, or "
            "check GOOGLE_APPLICATION_CREDENTIALS"
        )
    elif isinstance(e, api_exceptions.Forbidden) and service == "storage":
        hint = "you need to be able to list objects in that bucket (roles/storage.objectViewer)"
    elif isinstance(e, api_exceptions.NotFound) and service == "storage":
        hint = f"the bucket name in {DATA_URI}"
    elif isinstance(e, api_exceptions.Forbidden):
        hint = (
            f"you need roles/aiplatform.user on project {config.project!r} and permission to act "
            f"as {sa} (roles/iam.serviceAccountUser); that account needs read/write access to "
            f"{config.pipeline_root}; and the Vertex AI API must be enabled"
        )
    elif isinstance(e, api_exceptions.NotFound):
        hint = (
            f"the project id {config.project!r} and region {config.region!r}, and that the "
            "Vertex AI API (aiplatform.googleapis.com) is enabled in the project"
        )
    elif isinstance(e, api_exceptions.BadRequest):
        hint = (
            "the request was rejected as invalid: the parameter, label, network, service "
            "account or pipeline root named in the message"
        )
    elif isinstance(e, api_exceptions.Conflict):
        hint = "a resource with this name already exists: choose another display name or job"
    elif isinstance(e, api_exceptions.TooManyRequests):
        hint = "a quota or rate limit was hit: wait and retry, or ask for more quota"
    else:
        hint = "the service failed: retry later, and check https://status.cloud.google.com"
    status_name, message = _service_words(e)
    who = "Cloud Storage" if service == "storage" else "Vertex AI"
    return SubmitError(
        f"{who} refused {doing} ({e.code} {status_name}): {message}\n  What to check: {hint}",
        code=e.code,
        service_message=message,
    )


def _service_words(e: Any) -> tuple[str, str]:
    """The service's own status name and message (REST: from the JSON error body)."""
    status = getattr(getattr(e, "grpc_status_code", None), "name", "") or type(e).__name__
    message = e.message or str(e)
    response = getattr(e, "response", None)
    if response is not None:
        try:
            error = response.json().get("error", {})
        except (ValueError, AttributeError, TypeError):
            error = {}
        if isinstance(error, dict):
            status = error.get("status") or status
            message = error.get("message") or message
    return status, message
