"""``ncf-pipelines run-local``: the whole pipeline on this machine with kfp.local."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import sys
import time
from typing import TYPE_CHECKING

from pipelines.commands._shared import add_param_option, example_epilog

if TYPE_CHECKING:
    from pipelines.compiled import Template
    from training_core.serving.model_line import ModelLine

# What a local run changes from the pipeline's defaults: it registers a blessed model in the
# local registry (--registry), so that the next run has a champion to beat, and writes the batch
# recommendations, both from a refit on every interaction (the pipeline's refit: on where it
# registers or recommends; --param refit=false serves the held-out model); on the embedded
# sample it also trains small and short (minutes on 2 CPU cores). On --data the pipeline's own
# model defaults apply: the preset for the data's size (auto) with its epochs, what a
# submission would train.
# Either way the prepare step prepares as many epochs as training runs (the pipeline's
# data_epochs 0), so that each epoch draws fresh negatives.
LOCAL_DEFAULTS = {"register": True, "batch_recommend": True, "refit": True}
SAMPLE_DEFAULTS = {"preset": "quick", "epochs": 4}
DEFAULT_REGISTRY = "out/registry"


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "run-local",
        help="run the whole pipeline on this machine (kfp.local), on the sample data by default",
        description=(
            "Run validate -> prepare -> train -> evaluate -> export -> compare (-> register and "
            "recommend for every user when blessed) with kfp.local's subprocess runner on this "
            "machine's CPU, each step in its own process as on Vertex AI, the gate's branches "
            "included. Without --data the embedded sample is used (preset quick, 4 epochs: a "
            "few minutes); with --data the pipeline's own defaults train (the preset for the "
            "data's size and its epochs; --param preset=... and epochs=... override; a table "
            "whose columns have other names: --param user_col=COLUMN, and item_col, time_col "
            "alike, as prepare-data's --user-col, --item-col, --time-col). Each dataset has "
            "its own model line in the registry (the sample's ncf-sample; --data's named after "
            "its path), unless --param model_display_name=NAME names one; a champion of another "
            "catalogue there is refused before any step runs. Prints "
            "where each artifact is, HR@10 and NDCG@10 beside the popularity baseline's, the "
            "gate's decision and the exported model's path; the last line names the run's report, "
            "one HTML page of all of it with pictures (docs/run-report.md)."
        ),
        epilog=example_epilog(
            "ncf-pipelines run-local",
            "ncf-pipelines run-local --data ml-100k/u.data",
            "ncf-pipelines run-local --data ml-1m/ --param epochs=3",
            "ncf-pipelines run-local --data events.csv --param user_col=customer_id "
            "--param item_col=product_id --param time_col=event_time",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", help="raw ratings file or folder (default: the embedded sample)")
    p.add_argument(
        "--pipeline-root",
        default="out/local-runs",
        help="folder for the run's artifacts (default out/local-runs)",
    )
    p.add_argument(
        "--registry",
        default=DEFAULT_REGISTRY,
        help=(
            "the local model registry: the folder standing in for the Vertex AI Model Registry "
            "(the champion is the default version of the run's model line: model_display_name, "
            "or unset the data's own line; a blessed challenger becomes a new version; default "
            f"{DEFAULT_REGISTRY}; --param register=false: compare only)"
        ),
    )
    add_param_option(
        p,
        "pipeline parameter override, e.g. --param epochs=2 (repeatable)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Runs the pipeline and prints the summary."""
    from google.protobuf import json_format

    from pipelines import compiled
    from pipelines.commands._shared import UserError
    from pipelines.local_run import LocalRunFailed, run_local, steps_of
    from pipelines.pipeline import LOCAL_PROFILE, build_pipeline, run_problems
    from pipelines.profiles import BUILTIN
    from pipelines.submit.request import parse_assignments
    from pipelines.submit.run_values import parameter_problems
    from training_core.data.sample_data import sample_path

    started = time.perf_counter()
    registry = os.path.abspath(args.registry)
    pipeline_func = build_pipeline(BUILTIN[LOCAL_PROFILE], local=True, local_registry=registry)
    # The same typed parameters, and the same checks, as a submission of this pipeline.
    spec = json_format.MessageToDict(pipeline_func.pipeline_spec)
    template = compiled.template_from_spec(spec, "the local pipeline")
    given = compiled.coerce_parameters(
        template, parse_assignments(args.param, "--param"), require_all=False
    )
    arguments = {
        "data_uri": os.path.abspath(args.data) if args.data else sample_path(),
        **LOCAL_DEFAULTS,
        **({} if args.data else SAMPLE_DEFAULTS),
        **given,
    }
    # Now, not after validate and prepare: the values (preset, prep ranges), as submit and
    # compile check them, then the batch sizes against the local machine's replicas.
    problems = parameter_problems(arguments) + run_problems(spec, arguments)
    if problems:
        raise ValueError("these parameter values cannot run:\n  - " + "\n  - ".join(problems))
    line = preflight_champion(arguments, template, registry)
    root = os.path.abspath(os.path.join(args.pipeline_root, time.strftime("%Y%m%d-%H%M%S")))
    data = args.data or "the embedded sample"
    print(
        f"Running the pipeline on {data} ({_model_words(arguments)}): "
        f"{len(steps_of(pipeline_func))} steps, each in its own process (kfp.local)"
    )
    try:
        result = run_local(root, arguments, pipeline_func, verbose=args.verbose)
    except LocalRunFailed as e:
        raise UserError(str(e)) from None
    registers = arguments.get("register", template.parameters["register"].default)
    print(summary(result, time.perf_counter() - started, registry, line if registers else None))
    print(f"Report: {write_report(result, registry)}")  # Last: the line a person looks for.
    return 0


def write_report(result, registry: str = "") -> str:
    """The run's report page (pipelines/run_report.py) in its run folder; returns its path.

    It holds what the summary says and more: the training curve, both splits beside the
    champion and the popularity baseline, a few users' recommendations, each step's time.
    """
    from pipelines import run_folder, run_report

    exported, examples = result.outputs["exported_model"], result.outputs["examples"]
    samples, why = run_report.try_sample_users(exported, examples)
    facts = run_folder.facts_from_local_run(
        os.path.dirname(os.path.dirname(exported)),  # <root>/<pipeline>-<time>/<task>/<name>
        steps=result.steps,
        samples=samples,
        registration=_registration(result, registry),
        samples_note=why,
    )
    return run_report.write(facts, os.path.join(result.pipeline_root, run_report.REPORT_FILE))


def preflight_champion(arguments: dict, template: Template, registry: str) -> ModelLine:
    """The run's model line (``model_line.ModelLine``), its champion checked against the data.

    Before any step runs. The line is ``model_display_name``, or unset the data's own
    (training_core/serving/model_line.py, the rule the compare step applies). Where the run has
    a champion (``champion_uri``, else when registering the line's default version in the local
    registry), its items and the data's items as the prepare step would index them must be one
    catalogue (the gate's rule and message, training_core/evaluation/gate.py): a champion of
    another would fail the compare step after training. Data that cannot be read is left to the
    validate and prepare steps, which say what is wrong with it.

    Raises:
        ValueError: a champion of another catalogue; a name that cannot name a registry model.
    """
    from training_core.data import config as prep_config
    from training_core.data import io as rio
    from training_core.data import prepare, read_errors
    from training_core.evaluation import gate
    from training_core.serving import local_registry, model_line, vertex_registry

    def value(name: str):
        return arguments[name] if name in arguments else template.parameters[name].default

    data_uri = arguments["data_uri"]
    line = model_line.resolve(value(model_line.PARAM), data_uri)
    champion = value("champion_uri")
    if not champion and value("register"):
        found = local_registry.find_champion(registry, line.name)
        champion = found.path if found is not None else ""
    if not champion or not os.path.isdir(champion):  # None, or not local: the gate checks it.
        return line
    columns = ("user_col", "item_col", "time_col", "rating_col", "event_col")
    reading = ("data_format", "id_type", "min_rating", "positive_events", "min_ratings")
    settings = prep_config.from_parameters(
        data_uri,
        "",
        {
            **{name: value(name) for name in reading},
            "columns": rio.Columns(*(value(name) or None for name in columns)),  # "": detect.
        },
    )
    try:
        with _quiet("training_core"):  # The data's findings are the prepare step's to log.
            items = prepare.item_vocabulary(settings)
    except read_errors.DataError:
        return line
    try:
        gate.check_catalogue(champion, vertex_registry.export_items(champion), items, data_uri)
    except ValueError as e:
        own = model_line.of_data(data_uri).name
        unset = f"; unset, this data's line is {own}" if own != line.name else ""
        raise ValueError(
            f"{e}. Checked before any step ran: the model line {line.name} ({line.why}{unset})"
        ) from None
    return line


@contextlib.contextmanager
def _quiet(logger: str):
    """``logger`` logs errors only while the block runs."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def summary(result, seconds: float, registry: str = "", line: ModelLine | None = None) -> str:
    """What a finished run measured, where its artifacts are, and what to do next.

    ``line``: the model line the run registers in (``preflight_champion``), said with why.
    """
    from training_core.data.metadata import read_metadata
    from training_core.serving.vertex_registry import SERVING_METADATA_FILE

    m = result.metrics
    nan = float("nan")
    negatives = read_metadata(result.outputs["examples"]).eval_negatives
    from pipelines.run_folder import served_task

    # The model that serves: the refit's export where the run refit (the gate's is held out).
    task = served_task(result.artifacts, "export-model")
    exported = result.artifacts.get(task, {}).get(
        "exported_model", result.outputs["exported_model"]
    )
    lines = [
        f"Finished in {seconds:.0f}s. HR@10 {m.get('hr_at_10', nan):.4f}  NDCG@10 "
        f"{m.get('ndcg_at_10', nan):.4f} over {int(m.get('eval_users', 0))} users, each "
        f"against {negatives} sampled negatives (full catalog: HR@10 "
        f"{m.get('full_catalog_hr_at_10', nan):.4f})",
        *_against_popularity(m),
        _gate(result, registry),
        *([_line_words(line)] if line is not None else []),
        f"Artifacts under {result.pipeline_root}:",
    ]
    for step, artifacts in result.artifacts.items():
        folders = {os.path.dirname(path) for path in artifacts.values()}
        if len(artifacts) > 1 and len(folders) == 1:  # One line a step: its folder, its names.
            lines.append(f"  {step:15s} {', '.join(artifacts)} in {folders.pop()}/")
            continue
        for name, path in artifacts.items():
            lines.append(f"  {step:15s} {name:15s} {path}")
    if result.logs:
        lines.append(f"Step logs: {result.logs}")
    lines.append(f"Exported model: {exported}")
    with open(os.path.join(exported, SERVING_METADATA_FILE)) as f:
        user = json.load(f)["example_requests"]["recommend"]["instances"][0]["user_id"]
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else "python"
    lines += [
        f"Try it (top 10 items for user {user}): {try_it_command(python, exported, user)}",
        "Serve it: docs/serving.md (requests, TF Serving, the Vertex AI Model Registry)",
        "Next: more epochs (--param epochs=8), your own ratings (--data FILE_OR_FOLDER: the "
        "preset for its size), "
        "Vertex AI (ncf-pipelines compile, submit: docs/pipelines.md)",
    ]
    return "\n".join(lines)


def try_it_command(python: str, exported: str, user: int | str) -> str:
    """A shell command that prints ``user``'s top 10 items from the SavedModel at ``exported``.

    ``user``: a raw user id of the data's kind, an integer (tf.int64) or a string (tf.string).
    Every word is quoted for the shell (``shlex``) and the path and a string id are Python
    string literals, so a path with spaces, quotes or ``$(...)`` is read as the path and runs
    nothing else.
    """
    if isinstance(user, str):
        user_id = f"tf.constant([{user!r}], tf.string)"
    else:
        user_id = f"tf.constant([{int(user)}], tf.int64)"
    code = (
        "from training_core.common import console; console.setup(); import tensorflow as tf; "
        f"m = tf.saved_model.load({json.dumps(exported)}); "
        f'print(m.signatures["recommend"](user_id={user_id}, '
        'exclude_seen=tf.constant([True]))["item_ids"].numpy())'
    )
    return shlex.join([python, "-c", code])


def _model_words(arguments: dict) -> str:
    """The preset and epochs the run trains with, as the start line names them."""
    from training_core.training.presets import AUTO
    from training_core.training.train_config import DEFAULTS

    preset = arguments.get("preset", DEFAULTS["preset"])
    epochs = arguments.get("epochs", DEFAULTS["epochs"])
    preset_words = "auto: the preset for the data's size" if preset == AUTO else preset
    epochs_words = f"{epochs} epochs" if epochs else "the preset's epochs"  # 0: not set.
    data_epochs = arguments.get("data_epochs")  # 0 or absent: as many as trained.
    prepared = f", {data_epochs} prepared" if data_epochs else ", one prepared per epoch trained"
    return f"preset {preset_words}, {epochs_words}{prepared}"


def _against_popularity(m: dict) -> list[str]:
    """The popularity baseline's HR@10 beside the model's, in one line (none if not measured)."""
    pop = m.get("popularity_hr_at_10")
    if pop is None:
        return []
    hr = m.get("hr_at_10", float("nan"))
    verdict = (
        f"the model beats it by {hr - pop:+.4f}"
        if m.get("beats_popularity")
        else "the model does NOT beat it: it has learned nothing personal"
    )
    lines = [f"Popularity baseline (most-trained items for everyone): HR@10 {pop:.4f}; {verdict}."]
    ease = m.get("ease_hr_at_10")
    if ease is not None:
        lam = m.get("ease_lambda")
        lines.append(
            f"EASE baseline (closed-form item-item, lambda {lam:g} chosen on validation): "
            f"HR@10 {ease:.4f}; the model "
            + (
                f"beats it by {hr - ease:+.4f}."
                if hr > ease
                else f"does not beat it ({hr - ease:+.4f})."
            )
        )
    return lines


def _gate(result, registry: str) -> str:
    """The gate's decision and what came of it, in one line."""
    reason = result.decision.get("reason", "no decision recorded")
    blessed = bool(result.decision.get("blessed"))
    outcome = _registration(result, registry)
    return f"Gate: {'blessed' if blessed else 'refused'}, {outcome} ({reason})."


def _line_words(line: ModelLine) -> str:
    """The model line a run registers in, and why that one, in one line."""
    from training_core.serving.model_line import PARAM

    return f"Model line: {line.name}, {line.why}; --param {PARAM}=NAME names another"


def _registration(result, registry: str) -> str:
    """What came of the gate's decision in the registry, in words."""
    from pipelines.run_folder import served_task

    task = served_task(result.artifacts, "register-model")
    registered = result.artifacts.get(task, {}).get("vertex_model")
    if registered:  # <registry>/<model line>/versions/<N>
        line = os.path.basename(os.path.dirname(os.path.dirname(registered)))
        return f"registered as version {os.path.basename(registered)} of {line} in {registry}"
    if result.decision.get("blessed"):
        return "not registered (--param register=false)"
    return "nothing registered, the champion stays"
