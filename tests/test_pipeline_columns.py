"""A table with its own column names, read by the pipeline's steps (issue 40, item 4).

``run-local --data events.csv`` on a file with ``customer_id,product_id,event_time`` works with
``--param user_col=customer_id --param item_col=product_id --param time_col=event_time``; without
them the step's message names those parameters, not the command line's flags
(``training_core.common.hints``). Here the validate_data and prepare_data components run through
their ``python_func`` on a tiny such table, as a pipeline step runs them; the pipeline's wiring of
the parameters is in tests/test_pipeline_compile.py and tests/test_config_flow.py.
"""

from __future__ import annotations

import os

import pytest
from kfp.dsl import HTML, Artifact, Dataset

from components.prepare_data import prepare_data
from components.validate_data import validate_data
from training_core.common import hints
from training_core.data import metadata, read_errors

# The table's own names, and the parameters that name them to the steps.
NAMED = {"user_col": "customer_id", "item_col": "product_id", "time_col": "event_time"}
# What keeps prepare_data quick on a tiny table.
SMALL = dict(min_ratings=0, num_epochs=1, eval_negatives=20, train_batch_size=128)


@pytest.fixture(scope="module")
def events_csv(tmp_path_factory, tiny_csv) -> str:
    """The tiny ratings as ``customer_id,product_id,stars,event_time`` (no column's usual name)."""
    with open(tiny_csv) as f:
        header, *rows = f.read().splitlines()
    renamed = {"user_id": NAMED["user_col"], "item_id": NAMED["item_col"], "rating": "stars"}
    renamed["timestamp"] = NAMED["time_col"]
    names = [renamed[name] for name in header.split(",")]
    path = tmp_path_factory.mktemp("events") / "events.csv"
    path.write_text("\n".join([",".join(names), *rows]) + "\n")
    return str(path)


def _validate(path: str, out, **parameters):
    outputs = {n: Artifact(uri=str(out / n)) for n in ("statistics", "schema", "anomalies")}
    report = HTML(uri=str(out / "report.html"))
    validate_data.python_func(raw_data=Dataset(uri=path), report=report, **outputs, **parameters)
    return report


def test_both_steps_read_the_columns_the_parameters_name(events_csv, tmp_path):
    report = _validate(events_csv, tmp_path / "validate", **NAMED)
    assert report.metadata["passed"] is True
    examples = Dataset(uri=str(tmp_path / "examples"))
    prepare_data.python_func(raw_data=Dataset(uri=events_csv), examples=examples, **NAMED, **SMALL)
    prepared = metadata.read_metadata(examples.path)
    assert examples.metadata["num_users"] == prepared.num_users == 200
    # The columns the parameters named are the dataset's recorded options.
    assert prepared.options["columns"]["user"] == "customer_id"


@pytest.mark.parametrize("step", ["validate_data", "prepare_data"])
def test_without_them_the_step_names_the_pipeline_parameter(events_csv, tmp_path, step):
    with pytest.raises(read_errors.DataError) as raised:
        if step == "validate_data":
            _validate(events_csv, tmp_path)
        else:
            prepare_data.python_func(
                raw_data=Dataset(uri=events_csv), examples=Dataset(uri=str(tmp_path / "e"))
            )
    message = str(raised.value)
    assert "--param user_col=COLUMN" in message and "customer_id" in message
    assert "--user-col" not in message  # A flag the pipeline does not take.
    # The step put the command line's style back (a pipeline step's process ends there anyway).
    assert hints.STYLE_ENV not in os.environ and hints.option("--user-col") == "--user-col"


def test_a_parameter_naming_a_missing_column_is_named_as_a_parameter(events_csv, tmp_path):
    with pytest.raises(read_errors.DataError, match=r"'user_id'.*--param user_col=COLUMN"):
        prepare_data.python_func(
            raw_data=Dataset(uri=events_csv),
            examples=Dataset(uri=str(tmp_path / "e")),
            **{**NAMED, "user_col": "user_id"},
        )


def test_in_pipeline_names_parameters_inside_and_restores_the_style_after(monkeypatch):
    monkeypatch.delenv(hints.STYLE_ENV, raising=False)
    with hints.in_pipeline():
        assert hints.option("--user-col") == "--param user_col=COLUMN"
        assert os.environ[hints.STYLE_ENV] == hints.STYLE_PIPELINE  # Worker processes inherit.
        assert hints.option("--no-such-flag") == "--no-such-flag"
    assert hints.STYLE_ENV not in os.environ
    monkeypatch.setenv(hints.STYLE_ENV, "something-else")
    with hints.in_pipeline():
        pass
    assert os.environ[hints.STYLE_ENV] == "something-else"
