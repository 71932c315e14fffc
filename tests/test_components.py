import tempfile

import pytest
from kfp import dsl, local
from kfp.dsl import Dataset

from components.prepare_data import prepare_data
from training_core.data import metadata
from training_core.data.sample_data import sample_path
from training_core.training import presets


def test_prepare_data_python_func_with_real_artifacts(tmp_path, tiny_csv):
    raw = Dataset(uri=tiny_csv)
    examples = Dataset(uri=str(tmp_path / "examples"))
    prepare_data.python_func(
        raw_data=raw,
        examples=examples,
        min_ratings=0,
        eval_negatives=30,
        num_epochs=2,
        train_batch_size=128,
    )
    m = metadata.read_metadata(examples.path)
    assert m.num_epochs == 2 and m.train_prebatch_size == 128
    assert examples.metadata["num_users"] == m.num_users == 200
    assert examples.metadata["fingerprint"] == m.fingerprint
    assert examples.metadata["reused"] is False


def test_prepare_data_bad_input_fails_with_its_message(tmp_path):
    bad = tmp_path / "u.data"
    bad.write_text("1\t2\t5\t100\n1\t2\n")
    with pytest.raises(ValueError, match=r"u\.data:2: expected 4 fields"):
        prepare_data.python_func(
            raw_data=Dataset(uri=str(bad)), examples=Dataset(uri=str(tmp_path / "e"))
        )


@pytest.mark.slow
def test_prepare_data_through_kfp_local_on_the_embedded_sample():
    root = tempfile.mkdtemp()
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root)

    @dsl.pipeline
    def prep_only(eval_negatives: int = 50) -> Dataset:
        raw = dsl.importer(artifact_uri=sample_path(), artifact_class=Dataset)
        return prepare_data(raw_data=raw.output, eval_negatives=eval_negatives).outputs["examples"]

    task = prep_only()
    out = task.output
    m = metadata.read_metadata(out.path)
    assert m.num_users == 943 and m.eval_negatives == 50
    # num_epochs not set: the epochs the train step's defaults would run on this data (auto:
    # the preset for its size), resolved by the component once it counted the data.
    auto = presets.resolve_preset(presets.AUTO, m.num_train_positives)
    assert m.num_epochs == presets.PRESETS[auto].epochs == len(m.train_files) == 20
    assert out.metadata["num_users"] == 943
