"""Each value is checked where it enters, and the message names the option and the value.

The issue "Checks that come late, never, or name the wrong thing": `compile` took a misspelt
machine type, `submit --dry-run` took an unknown preset, a negative eval_negatives and a region
that does not exist, and `train` took a negative learning rate, silently turned batch size 0 into
1024 and said "num_factors, batch_size and epochs must be positive" for `--epochs 0`.
"""

import os
import subprocess
import sys

import pytest

from pipelines import cli
from pipelines.submit import run_values
from training_core.data.metadata import read_metadata
from training_core.training import presets, train_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--learning-rate", "-1"], "--learning-rate must be > 0, got -1.0"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--epochs", "0"], "--epochs must be >= 1, got 0"),
        (["--steps-per-loop", "0"], "--steps-per-loop must be >= 1, got 0"),
        (["--checkpoint-every", "-5"], "--checkpoint-every must be >= 0 (0: each epoch only)"),
        (["--target-hr", "2"], "--target-hr must be at most 1, an HR@10"),
        (["--preset", "ml20m"], "--preset 'ml20m' is unknown (did you mean 'ml-20m'?)"),
    ],
)
def test_train_command_names_the_bad_option(tiny_data, tmp_path, capsys, extra, message):
    model_dir = tmp_path / "m"
    argv = ["train", "--data", tiny_data, "--model-dir", str(model_dir), "--preset", "tiny"]
    assert cli.main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert f"ncf-pipelines train: error: {message}" in err
    assert not model_dir.exists()  # Refused before anything was written (or a strategy built).


def test_train_command_reports_every_bad_option_at_once(tiny_data, tmp_path, capsys):
    argv = ["train", "--data", tiny_data, "--model-dir", str(tmp_path / "m")]
    argv += ["--learning-rate", "-1", "--batch-size", "0", "--epochs", "0"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    for message in ("--learning-rate", "--batch-size", "--epochs must be >= 1, got 0"):
        assert message in err


def test_batch_size_left_out_is_the_data_s_pre_batch_size(tiny_data):
    config = train_config.config_for(tiny_data, "unused", "ml-1m", batch_size=None)
    assert config.model.batch_size == read_metadata(tiny_data).train_prebatch_size != 1024


@pytest.mark.slow
def test_submit_dry_run_refuses_what_vertex_ai_would_refuse_later(tmp_path, capsys):
    from pipelines import pipeline, profiles

    template = str(tmp_path / "ncf.yaml")
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], template)
    base = ["submit", "--template", template, "--project", "my-proj", "--dry-run"]
    base += ["--pipeline-root", "gs://bucket/root", "--param", "data_uri=gs://bucket/ml-1m/"]
    for extra, message in [
        (["--region", "us-central1", "--param", "preset=nosuch"], "unknown preset 'nosuch'"),
        (
            ["--region", "us-central1", "--param", "eval_negatives=-5"],
            "parameter 'eval_negatives' must be >= 0, got -5",
        ),
        (["--region", "mars-north1"], "--region 'mars-north1' is not a Vertex AI region"),
    ]:
        assert cli.main([*base, *extra]) == 2, extra
        assert message in capsys.readouterr().err
    assert cli.main([*base, "--region", "us-central1", "--param", "preset=ml-20m"]) == 0


def test_preset_names_for_submit_are_the_presets_and_need_no_tensorflow():
    # Every preset, and auto (the default: picked by the data's size).
    assert run_values.preset_names() == ("auto", *presets.PRESETS)
    code = (
        "import sys; from pipelines.submit import run_values; names = run_values.preset_names(); "
        "assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'; print(names)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "'auto'" in done.stdout and "'ml-1m'" in done.stdout


def test_verify_names_a_region_vertex_ai_does_not_have(tmp_path, capsys):
    template = tmp_path / "never-read.yaml"  # The region is refused before the template is read.
    argv = ["verify", str(template), "--region", "europe-wset4", "--requests-only"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--region 'europe-wset4' is not a Vertex AI region" in err
    assert "did you mean 'europe-west4'?" in err
