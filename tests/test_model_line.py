"""The model line a run registers in (training_core/serving/model_line.py): one per dataset.

Issue 55: one default line for every dataset made the second dataset's run fail at the gate,
after training, against the first dataset's champion. The whole sequence (the sample, then a
table of string ids, into one registry) runs in tests/test_run_local.py.
"""

import re

import pytest

from training_core.data.sample_data import sample_path
from training_core.serving import local_registry, model_line, vertex_registry


def test_the_embedded_sample_has_a_line_of_its_own():
    assert model_line.of_data(sample_path()) == model_line.ModelLine(
        "ncf-sample", "the embedded sample's line"
    )


@pytest.mark.parametrize(
    ("uri", "name"),
    [
        ("/data/my-ratings.csv", "ncf-my-ratings-"),
        ("/data/My Ratings (2024).csv.gz", "ncf-my-ratings-2024-"),
        ("/data/ml-100k/u.data", "ncf-ml-100k-"),  # A MovieLens file: its folder names it.
        ("/data/ml-1m/ratings.dat", "ncf-ml-1m-"),
        ("/data/ml-1m/", "ncf-ml-1m-"),
        ("gs://bucket/ratings/events.parquet", "ncf-events-"),
        ("gs://bucket/" + "x" * 200, "ncf-" + "x" * 24 + "-"),
    ],
)
def test_a_lines_name_is_the_datas_name_and_a_digest_of_where_it_is(uri, name):
    line = model_line.of_data(uri)
    assert re.fullmatch(re.escape(name) + "[0-9a-f]{8}", line.name), line.name
    assert model_line.identity(uri) in line.why
    # A valid local registry folder, Vertex AI display name and label value, as it is.
    local_registry.model_folder("/registry", line.name)
    vertex_registry.check_display_name(line.name, model_line.PARAM)
    assert vertex_registry.label_value(line.name) == line.name


def test_one_location_is_one_line_and_two_are_two(tmp_path, monkeypatch):
    same = ["gs://b/ratings", "gs://b/ratings/", "/gcs/b/ratings", " gs://b/ratings// "]
    assert len({model_line.of_data(u).name for u in same}) == 1
    monkeypatch.chdir(tmp_path)
    assert model_line.of_data("ratings.csv") == model_line.of_data(str(tmp_path / "ratings.csv"))
    # One file name in two folders: two datasets.
    assert model_line.of_data("/a/ratings.csv").name != model_line.of_data("/b/ratings.csv").name
    # A symlink is not resolved: the path given names the data (a "latest" link moved weekly).
    target = tmp_path / "week-48.csv"
    target.write_text("user_id,item_id\n")
    (tmp_path / "latest.csv").symlink_to(target)
    assert model_line.of_data(str(tmp_path / "latest.csv")).name.startswith("ncf-latest-")


def test_a_named_line_is_taken_as_it_is_and_no_data_names_none():
    assert model_line.resolve("ncf-neumf", "gs://b/r") == model_line.ModelLine(
        "ncf-neumf", "named by model_display_name"
    )
    assert model_line.resolve("", "gs://b/r") == model_line.of_data("gs://b/r")
    with pytest.raises(ValueError, match="no data_uri to name the model line after"):
        model_line.resolve("", " ")
