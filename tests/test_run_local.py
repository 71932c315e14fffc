import os

import pytest

from pipelines import cli
from training_core.data import metadata


@pytest.mark.slow
def test_run_local_whole_pipeline_on_the_embedded_sample(tmp_path, capsys):
    code = cli.main(
        [
            "run-local",
            "--pipeline-root",
            str(tmp_path),
            "--param",
            "epochs=2",
            "--param",
            "eval_negatives=100",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "HR@10" in out and "Exported model:" in out
    hr = float(out.split("HR@10 ")[1].split()[0])
    assert 0.3 < hr <= 1.0  # 100 negatives: popularity alone gives well under this here.
    exported = out.split("Exported model: ")[1].split()[0]
    assert os.path.exists(os.path.join(exported, "saved_model.pb"))
    for step in ("validate-data", "prepare-data", "train-model", "evaluate-model", "export-model"):
        assert f"  {step}" in out
    examples = next(
        line.split()[-1]
        for line in out.splitlines()
        if line.strip().startswith("prepare-data") and "examples" in line
    )
    assert metadata.read_metadata(examples).eval_negatives == 100


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
    both = captured.out + captured.err
    assert "validate-data" in captured.err  # The summary names the failing step...
    assert "item_id" in both and "INT_TYPE_SMALL_INT" in both  # ...its log says why.
    assert "train-model" not in captured.err


@pytest.mark.parametrize(
    ("param", "message"),
    [
        # Anything but a boolean was False before: the validation gate silently turned off.
        ("fail_on_anomalies=ture", "parameter 'fail_on_anomalies' expects true or false"),
        ("epochs=two", "parameter 'epochs' expects an integer, got 'two'"),
        ("nosuch=1", "unknown parameter 'nosuch'"),
        ("preset=nosuch", "preset 'nosuch' is unknown; use one of"),
    ],
)
def test_run_local_refuses_bad_parameters_before_any_step_runs(tmp_path, capsys, param, message):
    root = tmp_path / "runs"
    code = cli.main(["run-local", "--pipeline-root", str(root), "--param", param])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not root.exists()  # Nothing ran.
