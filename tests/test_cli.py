import subprocess
import sys

import pytest

from pipelines import cli
from training_core import metadata, synthetic


def _subcommands():
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)


def test_prepare_data_and_synth_are_registered():
    assert {"prepare-data", "synth"} <= set(_subcommands())


@pytest.mark.parametrize("name", _subcommands())
def test_every_subcommand_help_has_a_description_and_an_example(name, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "Example:" in out and f"ncf-pipelines {name}" in out


def test_console_script_installed():
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "prepare-data" in done.stdout


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
