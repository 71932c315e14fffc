import dataclasses
import io
import logging
import os
from collections.abc import Callable

import numpy as np
import pytest
from kfp.local import logging_utils, status

from pipelines import cli
from pipelines.local_run import StepDisplay
from training_core.common import console
from training_core.data import ids, metadata
from training_core.serving import batch_recommend, local_registry, model_line

MAX_LINES = 60  # What a successful run-local may print (issue 17).


@dataclasses.dataclass(frozen=True)
class SampleRun:
    """What the whole-pipeline run reads: run-local's arguments, and the sample's user ids."""

    args: tuple[str, ...]
    user: Callable[[int], str]  # The run's raw id of the sample's user.


@pytest.fixture
def sample_run(tmp_path) -> SampleRun:
    """The embedded sample as a shop's event table holds it (issue 40: string ids, its own
    column names, conftest's ``write_events_sample``), the columns named with ``--param
    user_col=...``, with the preset run-local trains the embedded sample with (the test gives
    the epochs). ``make run`` and ``make report-check`` run the embedded sample itself."""
    from conftest import EVENT_PARAMS, customer_key, write_events_sample

    from pipelines.commands.run_local import SAMPLE_DEFAULTS

    path = write_events_sample(str(tmp_path / "events.csv"))
    params = {"preset": SAMPLE_DEFAULTS["preset"], **EVENT_PARAMS}
    args = ["--data", path, *(a for k, v in params.items() for a in ("--param", f"{k}={v}"))]
    return SampleRun(tuple(args), customer_key)


def _printed_lines(text: str) -> list[str]:
    """The lines a reader sees: a line redrawn in place (``\r``) counts once, blank ones not."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n") if line.strip()]


@pytest.mark.slow
def test_run_local_whole_pipeline_on_an_event_table_with_string_ids(tmp_path, capsys, sample_run):
    """Issue 55's sequence: ``make run`` (the embedded sample, integer ids) registers its model,
    then a run on the user's own table (string ids) into the same registry, with no parameter
    about the registry, is blessed as the first model of its own line and recommends its items;
    then a worse run on that table is refused against that line's champion."""
    registry = tmp_path / "registry"
    users = [sample_run.user(1), sample_run.user(2)]
    code = cli.main(
        ["run-local", "--pipeline-root", str(tmp_path), "--registry", str(registry),
         "--param", "epochs=1", "--param", "eval_negatives=100"]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert f"Gate: blessed, registered as version 1 of ncf-sample in {registry} (no champion" in out
    assert "Model line: ncf-sample, the embedded sample's line; --param model_display_name=" in out
    sample_champion = local_registry.find_champion(str(registry), model_line.SAMPLE_LINE)
    assert sample_champion.version_id == "1"

    code = cli.main(
        [
            "run-local",
            *sample_run.args,
            "--pipeline-root",
            str(tmp_path),
            "--registry",
            str(registry),
            "--param",
            "epochs=2",
            "--param",
            "eval_negatives=100",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    out = captured.out
    # Quiet and short: a line per step start and end, the summary; no library noise.
    lines = _printed_lines(captured.out + captured.err)
    assert len(lines) <= MAX_LINES, "\n".join(lines)
    noisy = [line for line in lines if "error" in line.lower() or "warning" in line.lower()]
    assert not noisy, "\n".join(noisy)
    for step in ("validate-data", "prepare-data", "train-model", "evaluate-model"):
        assert sum(f"] {step} " in line and " started: " in line for line in lines) == 1
        assert sum(f"] {step} " in line and " done in " in line for line in lines) == 1
    logs = out.split("Step logs: ")[1].split()[0]
    with open(os.path.join(logs, "validate-data.log")) as f:
        assert "validated " in f.read()  # Each step's whole output is kept.
    assert "HR@10" in out and "Exported model:" in out
    hr = float(out.split("Finished in ")[1].split("HR@10 ")[1].split()[0])
    assert 0.3 < hr <= 1.0  # 100 negatives: popularity alone gives well under this here.
    popularity = float(out.split("Popularity baseline ")[1].split("HR@10 ")[1].split(";")[0])
    assert 0 < popularity < hr and "; the model beats it by +" in out
    exported = out.split("Exported model: ")[1].split()[0]
    assert os.path.exists(os.path.join(exported, "saved_model.pb"))
    for step in ("validate-data", "prepare-data", "train-model", "evaluate-model", "export-model"):
        assert f"  {step}" in out
    examples = next(
        line.split()[-1]
        for line in out.splitlines()
        if line.strip().startswith("prepare-data") and "examples" in line
    )
    prepared = metadata.read_metadata(examples)
    assert prepared.eval_negatives == 100
    # The columns named with --param, ids read as strings (the product codes keep leading zeros).
    assert (prepared.user_id_type, prepared.item_id_type) == (ids.ID_STRING, ids.ID_STRING)
    assert prepared.num_users == 943 and prepared.num_items == 1682  # As the sample's.
    # data_epochs not set: the prepare step prepared one epoch per epoch the train step ran.
    assert prepared.num_epochs == 2 and len(prepared.train_files) == 2
    # The gate's true branch ran under kfp.local: no champion in the table's own model line
    # (the sample's model is another line's), blessed, registered as its version 1.
    events = sample_run.args[1]
    line = model_line.of_data(events).name
    assert line.startswith("ncf-events-") and line != model_line.SAMPLE_LINE
    assert f"Gate: blessed, registered as version 1 of {line} in {registry} (no champion" in out
    assert f"Model line: {line}, named after the data at {events} (its name and a digest" in out
    champion = local_registry.find_champion(str(registry), line)
    assert champion.version_id == "1"
    assert _recommend(champion.path, users) == _recommend(exported, users)
    # Batch recommendations for every user of the sample, from the blessed model.
    recs = next(
        line.split()[-1]
        for line in out.splitlines()
        if line.strip().startswith("recommend") and "recommendations" in line
    )
    rows = batch_recommend.read(recs)
    assert len(rows) == metadata.read_metadata(examples).num_users
    first = next(row for row in rows if row["user_id"] == users[0])
    assert first["item_ids"] == _recommend(exported, users)[:10]
    assert all(isinstance(item, str) and item.startswith("08") for item in first["item_ids"])
    # Refit, on by default here (run-local registers and recommends): after the gate, the same
    # configuration trained on every interaction is what was registered and recommends; the
    # held-out model, which the gate judged, serves nothing.
    for step in ("prepare-data-2", "refit-model", "export-model-2", "recommend-2"):
        assert any(f"] {step}" in line and " done in " in line for line in lines), step
    assert "register-model  skipped: held-out-model-served is false" in out
    assert "recommend       skipped: held-out-model-recommends is false" in out

    def artifact(task, name):
        return next(
            line.split()[-1] for line in out.splitlines() if line.split()[:2] == [task, name]
        )

    def weights(folder):
        with open(os.path.join(folder, "variables", "variables.data-00000-of-00001"), "rb") as f:
            return f.read()

    refit_export, held_out = (
        artifact("export-model-2", "exported_model"),
        artifact("export-model", "exported_model"),
    )
    assert exported == refit_export and recs == artifact("recommend-2", "recommendations")
    assert weights(champion.path) == weights(refit_export) != weights(held_out)
    refit_data = metadata.read_metadata(artifact("prepare-data-2", "examples"))
    assert refit_data.refit and not prepared.refit
    assert refit_data.num_train_positives > prepared.num_train_positives

    # A worse challenger (1 epoch) against that champion: the false branch, nothing registered.
    code = cli.main(
        ["run-local", *sample_run.args, "--pipeline-root", str(tmp_path),
         "--registry", str(registry), "--param", "epochs=1", "--param", "eval_negatives=100"]
    )  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    lines = _printed_lines(captured.out + captured.err)
    for task in ("register-model", "register-model-2", "refit-model", "recommend", "recommend-2"):
        assert not any(f"] {task} " in x and " started: " in x for x in lines), task
    assert sum("] refit-model" in x and "skipped: refit-blessed is false" in x for x in lines) == 1
    assert (
        "Gate: refused, nothing registered, the champion stays (on the validation split, "
        "challenger hr_at_10" in captured.out
    )
    last = _printed_lines(captured.out)[-1]  # The run's page, named last.
    assert last.startswith("Report: ") and os.path.isfile(last.removeprefix("Report: ")), last
    worse = float(captured.out.split("Finished in ")[1].split("HR@10 ")[1].split()[0])
    assert worse < hr
    assert local_registry.find_champion(str(registry), line) == champion
    versions = os.listdir(os.path.join(registry, line, local_registry.VERSIONS_DIR))
    assert sorted(versions) == ["1", "1.json"]
    assert local_registry.find_champion(str(registry), model_line.SAMPLE_LINE) == sample_champion


def _recommend(export_dir: str, users: list[int] | list[str]) -> list[int] | list[str]:
    """The top items of ``users`` (raw ids: integers or strings), as one list."""
    import tensorflow as tf

    model = tf.saved_model.load(export_dir)
    dtype = tf.string if isinstance(users[0], str) else tf.int64
    got = model.signatures["recommend"](
        user_id=tf.constant(users, dtype), exclude_seen=tf.constant([True] * len(users))
    )
    items = got["item_ids"].numpy().ravel().tolist()
    return [item.decode() if isinstance(item, bytes) else item for item in items]


@pytest.mark.slow
def test_run_local_stops_at_the_failing_step_with_its_message(tmp_path, capfd):
    bad = tmp_path / "ratings.csv"
    bad.write_text(
        "user_id,item_id,timestamp\n"
        + "".join(f"{u},{-i},{1_000_000_000 + i}\n" for u in range(1, 30) for i in range(1, 25))
    )
    code = cli.main(["run-local", "--data", str(bad), "--pipeline-root", str(tmp_path / "r")])
    assert code == 2
    captured = capfd.readouterr()
    err = captured.err
    assert "validate-data" in err and "FAILED" in err  # The summary names the failing step...
    # ...and its error is shown in full, not only kept in its log: the message names the file.
    assert f"1 anomaly in {bad}" in err and "item_id: INT_TYPE_SMALL_INT" in err
    assert "Traceback (most recent call last)" in err
    assert "train-model" not in err
    log = err.split("its whole log in ")[1].split(";")[0]
    with open(log) as f:
        assert "INT_TYPE_SMALL_INT" in f.read()


@pytest.mark.parametrize(
    ("param", "message"),
    [
        # Anything but a boolean was False before: the validation gate silently turned off.
        ("fail_on_anomalies=ture", "parameter 'fail_on_anomalies' expects true or false"),
        ("epochs=two", "parameter 'epochs' expects an integer, got 'two'"),
        ("nosuch=1", "unknown parameter 'nosuch'"),
        ("preset=nosuch", "parameter 'preset': unknown preset 'nosuch'"),
        ("preset=ml-1n", "(did you mean 'ml-1m'?)"),
        # The prep ranges, as submit and compile check them: before validation runs.
        ("eval_negatives=-5", "parameter 'eval_negatives' must be >= 0, got -5"),
        ("id_type=str", "parameter 'id_type' must be one of auto, int64, string, got 'str'"),
        ("positive_events=,", "parameter 'positive_events' must name events"),
    ],
)
def test_run_local_refuses_bad_parameters_before_any_step_runs(tmp_path, capsys, param, message):
    root = tmp_path / "runs"
    code = cli.main(["run-local", "--pipeline-root", str(root), "--param", param])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not root.exists()  # Nothing ran.


def _register_catalogue(registry: str, name: str, items: list[int], folder: str) -> str:
    """A version of ``name`` in the local registry whose export knows the integer ``items``;
    returns its folder. The export's files the preflight reads (its item vocabulary asset and
    ``serving_metadata.json``; tests/test_string_id_serving.py holds ``gate.export_items`` to
    real exports of both id kinds), registered as ``register_model`` registers."""
    import json

    from training_core.serving.vertex_registry import SERVING_METADATA_FILE

    os.makedirs(os.path.join(folder, "assets"))
    with open(os.path.join(folder, "assets", os.path.basename(metadata.ITEM_VOCAB)), "w") as f:
        f.write(metadata.vocab_text(np.asarray(items, np.int64)))
    with open(os.path.join(folder, SERVING_METADATA_FILE), "w") as f:
        json.dump({"user_id_type": ids.ID_INT64, "item_id_type": ids.ID_INT64}, f)
    open(os.path.join(folder, "saved_model.pb"), "wb").close()
    return local_registry.register(registry, name, folder).path


def test_a_named_line_whose_champion_is_another_catalogue_is_refused_before_any_step(
    tmp_path, capsys
):
    """Issue 55: ``model_display_name`` names the line whose champion is the embedded sample's
    model (integer items 1..1682, as ``make run`` registered it under the old default name);
    a run on the user's table of string ids is refused before validation starts, with the
    gate's message, instead of at compare-models after the whole training."""
    from conftest import EVENT_PARAMS, write_events_sample

    registry, root = str(tmp_path / "registry"), tmp_path / "runs"
    champion = _register_catalogue(
        registry, "ncf-neumf", list(range(1, 1683)), str(tmp_path / "export")
    )
    events = write_events_sample(str(tmp_path / "events.csv"))
    params = {**EVENT_PARAMS, "model_display_name": "ncf-neumf"}
    code = cli.main(
        ["run-local", "--data", events, "--pipeline-root", str(root), "--registry", registry,
         *(a for k, v in params.items() for a in ("--param", f"{k}={v}"))]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert (
        f"the champion {champion} was trained on another catalogue: it knows 0% of the 1682 "
        f"items of {events}, and 0% of its own 1682 items are in that data" in err
    )
    assert "--param model_display_name=" in err and "start without a champion" in err
    assert f"unset, this data's line is {model_line.of_data(events).name}" in err
    assert not root.exists()  # Nothing ran.


def _kfp_says(message: str) -> None:
    """A record as kfp.local logs it: on the root logger, in its context, task names coloured."""
    with logging_utils.local_logger_context():
        logging.info(message)


def test_step_display_shows_steps_progress_and_keeps_the_rest_in_logs(tmp_path, monkeypatch):
    """Fed kfp.local's own messages (its formatting functions), without running a pipeline."""
    out, err = io.StringIO(), io.StringIO()
    display = StepDisplay({"train-model": "Train NeuMF"}, str(tmp_path), out, err)
    task = logging_utils.format_task_name("train-model")
    monkeypatch.setattr(console, "LINE_INTERVAL_S", 0.0)  # Every event makes a line.
    event = console.Event("epoch 1/4", 200, 477, "steps", "loss 0.4819", 2.0)
    with display.capturing():
        _kfp_says(f"Executing task {logging_utils.format_task_name('importer')}")
        _kfp_says(f"Executing task {task}")
        print("    [KFP Executor] Got executor_input: {...}")  # kfp.local indents step output.
        print(f"    {console.EVENT_PREFIX}{console.json.dumps(vars(event))}")
        success = logging_utils.format_status(status.Status.SUCCESS)
        _kfp_says(f"Task {task} finished with status {success}")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and err.getvalue() == ""
    assert lines[0].endswith("[1/1] train-model     started: Train NeuMF")
    assert lines[1].endswith("train-model     epoch 1/4: 200/477 steps (41%), loss 0.4819, 2s")
    assert "train-model     done in " in lines[2]
    log = (tmp_path / "train-model.log").read_text()
    assert "[KFP Executor] Got executor_input" in log and "\x1b[" not in log
    assert not (tmp_path / "importer.log").exists()  # Not a step: it runs no process.


def test_step_display_prints_a_failing_steps_traceback_to_stderr(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    display = StepDisplay({"prepare-data": "Prepare"}, str(tmp_path), out, err)
    task = logging_utils.format_task_name("prepare-data")
    with display.capturing():
        _kfp_says(f"Executing task {task}")
        for line in ("noise before", "Traceback (most recent call last):", "  File x", "E: bad"):
            print(f"    {line}")
        failure = logging_utils.format_status(status.Status.FAILURE)
        _kfp_says(f"Task {task} finished with status {failure}")
    assert display.failed() == str(tmp_path / "prepare-data.log")
    shown = err.getvalue().splitlines()
    assert "[1/1] prepare-data    FAILED after " in shown[0]
    assert shown[1:] == ["  Traceback (most recent call last):", "    File x", "  E: bad"]
    assert "done" not in out.getvalue()


def test_run_local_start_line_says_how_many_epochs_are_prepared():
    """Not set, the prepare step prepares one epoch per trained epoch (the pipeline's default)."""
    from pipelines.commands import run_local

    words = run_local._model_words({"preset": "auto", "epochs": 0})
    assert words == (
        "preset auto: the preset for the data's size, the preset's epochs, one prepared per "
        "epoch trained"
    )
    words = run_local._model_words({"preset": "quick", "epochs": 4, "data_epochs": 2})
    assert words == "preset quick, 4 epochs, 2 prepared"


@pytest.mark.parametrize(("user", "dtype"), [(7, "tf.int64"), ("080652121X", "tf.string")])
def test_try_it_line_asks_for_the_user_id_of_the_data_s_kind(user, dtype):
    """An integer id as tf.int64 (as before string ids), a string id as tf.string, as written."""
    import ast
    import shlex

    from pipelines.commands import run_local

    code = shlex.split(run_local.try_it_command("python", "/x/export", user))[2]
    call = next(
        node
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "constant"
    )
    assert ast.literal_eval(call.args[0]) == [user]
    assert ast.unparse(call.args[1]) == dtype
