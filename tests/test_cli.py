import logging
import os
import re
import shutil
import subprocess
import sys

import pytest

from pipelines import cli
from training_core.data import metadata, synthetic

# Every subcommand, in --help order. Written out here (not read from ``cli.COMMAND_MODULES``) so
# that a subcommand lost from the CLI fails these tests instead of silently leaving the
# parametrised set below.
EXPECTED_SUBCOMMANDS = [
    "prepare-data",
    "synth",
    "train",
    "evaluate",
    "export",
    "recommend",
    "tune",
    "validate",
    "profiles",
    "compile",
    "submit",
    "verify",
    "run-local",
    "templates",
    "rollout",
]


def _subcommands():
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return list(action.choices)


def _listed_in_help(help_text: str) -> list[str]:
    """The subcommand names of the COMMAND block of top-level --help, in order."""
    block = help_text.split("  COMMAND\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^ {4}(\S+)", block, re.M)


def test_parser_has_exactly_the_expected_subcommands():
    assert _subcommands() == EXPECTED_SUBCOMMANDS


@pytest.mark.parametrize("name", EXPECTED_SUBCOMMANDS)
def test_every_subcommand_help_has_a_description_and_an_example(name, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Example:" in out and f"ncf-pipelines {name}" in out


def test_console_script_installed():
    """The installed ``ncf-pipelines`` entry point (not ``python -m``) lists every subcommand."""
    bin_dir = os.path.dirname(sys.executable)
    script = shutil.which("ncf-pipelines", path=bin_dir)
    assert script, f"no ncf-pipelines console script in {bin_dir}: is the project installed?"
    done = subprocess.run(
        [script, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ncf-pipelines "), done.stdout
    assert _listed_in_help(done.stdout) == EXPECTED_SUBCOMMANDS, done.stdout


@pytest.mark.parametrize("layout", ["ml-100k", "ml-1m", "ml-20m", "csv", "parquet"])
def test_prepare_data_on_each_layout(tmp_path, tiny_interactions, layout, capsys):
    target = tmp_path / (
        "raw.csv" if layout == "csv" else "raw.parquet" if layout == "parquet" else "raw"
    )
    synthetic.write(tiny_interactions, str(target), layout)
    out = tmp_path / "out"
    code = cli.main(
        [
            "prepare-data",
            "--input",
            str(target),
            "--output",
            str(out),
            "--eval-negatives",
            "20",
            "--min-ratings",
            "5",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "Prepared" in printed and "users 200" in printed
    assert metadata.read_metadata(out).num_users == 200


def test_default_input_is_the_embedded_sample(tmp_path, capsys):
    code = cli.main(["prepare-data", "--output", str(tmp_path / "o"), "--eval-negatives", "10"])
    assert code == 0
    m = metadata.read_metadata(tmp_path / "o")
    assert m.source["files"] == ["sample_ratings.csv.gz"]
    assert m.num_users == 943


def test_bad_input_exits_2_with_file_and_line(tmp_path, capsys):
    bad = tmp_path / "ratings.dat"
    bad.write_text("1::2::5::100\n1::x::4::101\n")
    code = cli.main(["prepare-data", "--input", str(bad), "--output", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err
    assert "ratings.dat:2: item id 'x'" in err
    assert not (tmp_path / "o").exists()


def test_synth_writes_requested_shape(tmp_path, capsys):
    code = cli.main(
        [
            "synth",
            "--shape",
            "tiny",
            "--users",
            "50",
            "--layout",
            "ml-1m",
            "--output",
            str(tmp_path / "s"),
        ]
    )
    assert code == 0
    lines = (tmp_path / "s" / "ratings.dat").read_text().splitlines()
    assert len({line.split("::")[0] for line in lines}) == 50


def test_synth_structure_changes_how_users_pick(tmp_path, capsys):
    """--structure movielens weakens the latent signal: the same seed picks other items; an
    unknown name is refused with the names to use."""
    written = {}
    for structure in ("planted", "movielens"):
        out = tmp_path / structure
        args = ["synth", "--shape", "tiny", "--layout", "csv", "--output", str(out)]
        assert cli.main([*args, "--structure", structure]) == 0
        written[structure] = out.read_text()
    assert written["planted"] != written["movielens"]
    rows = [line.split(",") for line in written["movielens"].splitlines()[1:]]
    assert len({r[0] for r in rows}) == synthetic.SHAPES["tiny"].num_users
    assert cli.main(["synth", "--structure", "real", "--output", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "unknown structure 'real'" in err and "movielens" in err
    assert not (tmp_path / "x").exists()


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh Python, without this process's logging or verbosity settings."""
    base = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "NCF_VERBOSE")}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **env},
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


@pytest.mark.slow
def test_tensorflow_starts_quietly_and_verbose_leaves_it_alone():
    """What a step's process does first (console.setup): TensorFlow's start-up log (CUDA factory
    "errors" on a machine without a GPU, oneDNN notes), absl's and google-api-core's warning
    about Python 3.11 and aiplatform's about google-cloud-storage < 3 print nothing;
    NCF_VERBOSE=1 changes nothing."""
    quiet = _python(
        "from training_core.common import console; console.setup()\n"
        "import google.api_core, google.cloud.aiplatform, tensorflow as tf\n"
        "tf.saved_model.save(tf.Module(), __import__('tempfile').mkdtemp())\n"
        "print(int(tf.constant(41) + 1))"
    )
    assert quiet.returncode == 0, quiet.stderr
    assert (quiet.stdout, quiet.stderr) == ("42\n", "")
    verbose = _python(
        "import os; from training_core.common import console\n"
        "print(console.setup(), os.environ.get('TF_CPP_MIN_LOG_LEVEL'))",
        NCF_VERBOSE="1",
    )
    assert verbose.stdout == "True None\n", verbose.stderr


def test_a_failing_command_still_shows_its_error(tmp_path, capsys):
    missing = tmp_path / "nope.csv"
    assert cli.main(["prepare-data", "--input", str(missing), "--output", str(tmp_path)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_progress_events_round_trip_and_plain_lines(monkeypatch, capsys):
    from training_core.common import console

    monkeypatch.setenv(console.PROGRESS_ENV, console.PROGRESS_EVENTS)
    with console.progress("epoch 1/2", 10, "steps") as bar:
        assert bar.level == logging.DEBUG  # The caller's own lines step aside while drawn.
        bar.update(10, "loss 0.5")
    events = [console.parse_event(line) for line in capsys.readouterr().out.splitlines()]
    assert events[0].done == 0 and events[-1].done == 10 and events[-1].note == "loss 0.5"
    assert events[-1].describe().startswith("epoch 1/2: 10/10 steps (100%), loss 0.5, ")
    assert console.parse_event("ncf-progress {not json") is None
    monkeypatch.delenv(console.PROGRESS_ENV)  # Off a terminal: nothing drawn, lines at INFO.
    with console.progress("writing", None, "files") as bar:
        bar.update(3)
        assert bar.level == logging.INFO
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    ("argv", "verbose"),
    [(["-v", "run-local"], True), (["run-local", "--verbose"], True), (["run-local"], False)],
)
def test_verbose_before_or_after_the_subcommand(argv, verbose):
    assert cli.build_parser().parse_args(argv).verbose is verbose


def test_a_misspelt_flag_gets_the_command_s_usage_and_the_flag_it_looks_like(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--data", "d", "--model_dir", "m", "--bogus-flag-xyz"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "usage: ncf-pipelines train" in err  # The command's usage, not the top level's.
    assert "--model_dir (did you mean --model-dir?)" in err
    assert re.search(r"--bogus-flag-xyz(?! \(did you mean)", err)  # No guess when none is close.


def test_train_on_raw_ratings_says_how_to_prepare_them(tmp_path, capsys):
    raw = tmp_path / "ml raw"
    raw.mkdir()
    (raw / "ratings.dat").write_text("1::2::5::100\n2::3::4::101\n")
    code = cli.main(["train", "--data", str(raw), "--model-dir", str(tmp_path / "m")])
    assert code == 2
    err = capsys.readouterr().err
    assert "holds raw ratings" in err and "ratings.dat" in err
    assert f"ncf-pipelines prepare-data --input '{raw}' --output DATA_DIR" in err
    assert not (tmp_path / "m").exists()
    # A folder with neither raw ratings nor a complete dataset keeps the plain message.
    code = cli.main(
        ["train", "--data", str(tmp_path / "empty"), "--model-dir", str(tmp_path / "m")]
    )
    assert code == 2 and "holds no complete prepared dataset" in capsys.readouterr().err
