"""Placeholders (issue 37): refused alike everywhere, the placeholder image repository warned about,
the dry run's default account not invented, and ``make push`` pushing what the template pulls."""

import json
import logging
import re
import subprocess
import sys

import pytest

from components._image import IMAGE_REPOSITORY, VARIANTS, image_for
from pipelines import cli, compiled, placeholder_values, push_images, yaml_io

REPOSITORY = "us-central1-docker.pkg.dev/my-project/ncf/ncf-pipelines"
SUBMIT = ["--region", "us-central1", "--dry-run"]
DATA = ["--param", "data_uri=gs://my-bucket/ml-1m/"]


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """gpu-t4 compiled twice: with the default (placeholder) repository and with a real one."""
    out = tmp_path_factory.mktemp("templates")
    paths = {"default": str(out / "default.yaml"), "own": str(out / "own.yaml")}
    assert cli.main(["compile", "--profile", "gpu-t4", "--output", paths["default"]]) == 0
    own = ["--image-repository", REPOSITORY, "--output", paths["own"]]
    assert cli.main(["compile", "--profile", "gpu-t4", *own]) == 0
    return paths


@pytest.mark.parametrize(
    "what, value, kind, word",
    [
        ("--project", "MY_PROJECT", "project", "MY_PROJECT"),
        ("pipeline root", "gs://MY_BUCKET/ncf", "bucket", "MY_BUCKET"),
        ("service account", "PROJECT_NUMBER-compute@developer.gserviceaccount.com",
         "service account", "PROJECT_NUMBER"),
        ("network", "projects/PROJECT_NUMBER/global/networks/NAME", "network", "PROJECT_NUMBER"),
        ("--image-repository", "REGION-docker.pkg.dev/PROJECT/REPOSITORY/ncf-pipelines",
         "image repository", "REGION"),
    ],
)  # fmt: skip
def test_placeholder_words_are_found_with_one_message(what, value, kind, word):
    problem = placeholder_values.placeholder_problem(what, value, kind)
    assert problem == (
        f"{what} {value!r} holds the placeholder {word}: replace it with "
        f"{placeholder_values.WHAT_TO_PUT[kind]}"
    )


@pytest.mark.parametrize(
    "value, kind",
    [
        ("my-project", "project"),
        ("gs://my-bucket/ncf", "bucket"),
        ("gs://my-bucket/ML-1M/ratings.dat", "bucket"),  # Object names may be upper case.
        ("/tmp/ML-1M", "bucket"),  # Not a bucket at all: not looked at.
        ("runner@my-project.iam.gserviceaccount.com", "service account"),
        ("projects/123456789/global/networks/ml-vpc", "network"),
        (REPOSITORY, "image repository"),
        (None, "image"),
    ],
)
def test_real_looking_example_values_are_not_placeholders(value, kind):
    assert placeholder_values.placeholder_problem("x", value, kind) is None


@pytest.mark.parametrize(
    "argv, word",
    [
        (["--project", "MY_PROJECT", "--pipeline-root", "gs://my-bucket/ncf", *DATA], "MY_PROJECT"),
        (["--project", "my-project", "--pipeline-root", "gs://MY_BUCKET/ncf", *DATA], "MY_BUCKET"),
        (
            ["--project", "my-project", "--pipeline-root", "gs://my-bucket/ncf", *DATA,
             "--service-account", "PROJECT_NUMBER-compute@developer.gserviceaccount.com"],
            "PROJECT_NUMBER",
        ),
        (
            ["--project", "my-project", "--pipeline-root", "gs://my-bucket/ncf",
             "--param", "data_uri=gs://MY_BUCKET/ml-1m/"],
            "MY_BUCKET",
        ),
    ],
)  # fmt: skip
def test_submit_refuses_a_placeholder_as_compile_does(templates, capsys, argv, word):
    """The README's old `--project MY_PROJECT` and compile's `.../MY_PROJECT/...`: one message."""
    code = cli.main(["submit", "--template", templates["own"], *argv, *SUBMIT])
    err = capsys.readouterr().err
    assert code == 2
    assert f"holds the placeholder {word}: replace it with" in err

    repository = f"europe-docker.pkg.dev/{word}/ml/ncf-pipelines"
    out = str(templates["own"]) + ".again.yaml"
    assert cli.main(["compile", "--image-repository", repository, "--output", out]) == 2
    err = capsys.readouterr().err
    assert f"--image-repository {repository!r} holds the placeholder {word}: replace it" in err


def test_the_readme_submit_example_values_pass(templates, capsys):
    argv = ["--project", "my-project", "--pipeline-root", "gs://my-bucket/ncf", *DATA]
    assert cli.main(["submit", "--template", templates["own"], *argv, *SUBMIT]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["project"] == "my-project"


def _warnings(caplog) -> str:
    """The warnings logged since the last call (the CLI's stderr handler under pytest)."""
    text = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    caplog.clear()
    return text


@pytest.mark.slow
def test_compile_and_submit_warn_while_the_template_names_the_placeholder_repository(
    templates, tmp_path, caplog
):
    argv = ["--project", "my-project", "--pipeline-root", "gs://my-bucket/ncf", *DATA, *SUBMIT]
    caplog.set_level(logging.WARNING)
    assert cli.main(["compile", "--profile", "gpu-t4", "--output", str(tmp_path / "p.yaml")]) == 0
    compile_warning = _warnings(caplog)
    assert cli.main(["submit", "--template", templates["default"], *argv]) == 0
    submit_warning = _warnings(caplog)
    for warning in (compile_warning, submit_warning):
        assert f"runs images from {IMAGE_REPOSITORY}, the placeholder repository" in warning
        assert image_for("gpu") in warning and "--image-repository" in warning
        assert "make push" in warning

    assert cli.main(["submit", "--template", templates["own"], *argv]) == 0
    assert "placeholder repository" not in _warnings(caplog)
    own = ["--image-repository", REPOSITORY, "--output", str(tmp_path / "q.yaml")]
    assert cli.main(["compile", "--profile", "gpu-t4", *own]) == 0
    assert "placeholder repository" not in _warnings(caplog)


def test_dry_run_names_the_default_account_by_rule_not_by_an_invented_number(templates, capsys):
    argv = ["--project", "my-project", "--pipeline-root", "gs://my-bucket/ncf", *DATA, *SUBMIT]
    assert cli.main(["submit", "--template", templates["own"], *argv]) == 0
    shown = json.loads(capsys.readouterr().out)
    default = "PROJECT_NUMBER-compute@developer.gserviceaccount.com"
    assert default in shown["service_account"]
    job = shown["custom_jobs"]["train-model"]
    assert job["service_account"] == default
    assert job["parent"] == "projects/my-project/locations/us-central1"

    account = "ncf-runner@my-project.iam.gserviceaccount.com"
    argv += ["--service-account", account]
    assert cli.main(["submit", "--template", templates["own"], *argv]) == 0
    job = json.loads(capsys.readouterr().out)["custom_jobs"]["train-model"]
    assert job["service_account"] == account


@pytest.mark.slow
def test_submit_warns_when_the_run_would_execute_as_the_default_compute_account(
    templates, capsys, caplog
):
    """The Compute Engine default account usually holds Editor: a run as it (no
    --service-account, or that account named with its number) is warned about, with the way
    out; a dedicated account is not."""
    argv = ["--project", "my-project", "--pipeline-root", "gs://my-bucket/ncf", *DATA, *SUBMIT]
    caplog.set_level(logging.WARNING)
    for account in ([], ["--service-account", "123456789-compute@developer.gserviceaccount.com"]):
        assert cli.main(["submit", "--template", templates["own"], *argv, *account]) == 0
        warning = _warnings(caplog)
        assert "Editor role" in warning and "--service-account" in warning
        assert 'docs/submit.md, "A service account for the pipeline"' in warning
    dedicated = ["--service-account", "ncf-runner@my-project.iam.gserviceaccount.com"]
    assert cli.main(["submit", "--template", templates["own"], *argv, *dedicated]) == 0
    assert "Editor" not in _warnings(caplog)
    capsys.readouterr()


def _pulled_images(path: str) -> set[str]:
    """The images a compiled template's tasks run, read from where Vertex AI reads them."""
    with open(path) as f:
        spec = yaml_io.load(f)
    executors = spec["deploymentSpec"]["executors"].values()
    images = {e["container"]["image"] for e in executors if "container" in e}  # Not importers.
    images |= {p["container_spec"]["image_uri"] for p in compiled.worker_pools(spec)}
    return images


@pytest.mark.parametrize("profile", ["cpu", "gpu-a100x8-dataflow"])
@pytest.mark.slow
def test_push_builds_and_pushes_exactly_what_compile_puts_in_the_template(
    profile, tmp_path, capsys
):
    """`make push`'s dry run against `compile --image-repository` of the same profile."""
    path = str(tmp_path / "t.yaml")
    compile_argv = ["--profile", profile, "--image-repository", REPOSITORY, "--output", path]
    assert cli.main(["compile", *compile_argv]) == 0
    pulled = _pulled_images(path)
    text = open(path).read()

    argv = ["--profile", profile, "--repository", REPOSITORY, "--uv-version", "0.0.0", "--dry-run"]
    assert push_images.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    builds = [line.split() for line in lines if line.startswith("+ docker build")]
    pushes = [line.split()[-1] for line in lines if line.startswith("+ docker push")]
    built = {b[b.index("--tag") + 1]: b[b.index("--target") + 1] for b in builds}
    assert set(pushes) == set(built) and pulled <= set(pushes)
    named = {  # Every variant's tag the template names anywhere (a Dataflow worker image too).
        image_for(v, REPOSITORY)
        for v in VARIANTS
        if re.search(re.escape(image_for(v, REPOSITORY)) + r"(?![\w.-])", text)
    }
    assert set(pushes) == named
    for tag, variant in built.items():  # Each from the Dockerfile stage its tag names.
        assert variant in VARIANTS and tag == image_for(variant, REPOSITORY)
    if profile == "cpu":
        assert pushes == [image_for("cpu", REPOSITORY)]
    else:  # The Dataflow profile: steps, training and (when it is one of ours) the workers' image.
        assert set(pushes) >= {image_for("cpu", REPOSITORY), image_for("gpu", REPOSITORY)}


def test_push_prints_the_compile_options_that_pin_what_it_pushed(tmp_path, capsys):
    """After a push, the digest each tag now names (Docker's RepoDigests for the repository)
    becomes `compile --image-digest`, and compiling with those options pins the template."""
    cpu, gpu = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    digests = [f"other.example/x@sha256:{'9' * 64}", f"{REPOSITORY}@{cpu}"]
    assert push_images.digest_in(digests, REPOSITORY, "t") == cpu
    with pytest.raises(ValueError, match="was it pushed"):
        push_images.digest_in(digests[:1], REPOSITORY, "t")
    options = push_images.pin_options(REPOSITORY, {"gpu": gpu, "cpu": cpu})
    assert options == (
        f"--image-repository {REPOSITORY} --image-digest cpu={cpu} --image-digest gpu={gpu}"
    )
    path = str(tmp_path / "pinned.yaml")
    assert cli.main(["compile", "--profile", "gpu-t4", *options.split(), "--output", path]) == 0
    assert _pulled_images(path) == {f"{REPOSITORY}@{cpu}", f"{REPOSITORY}@{gpu}"}
    capsys.readouterr()


@pytest.mark.parametrize(
    "repository, expected",
    [
        ("REGION-docker.pkg.dev/MY_PROJECT/ncf/ncf-pipelines", "holds the placeholder REGION"),
        (IMAGE_REPOSITORY, "components/_image.py's placeholder repository"),
    ],
)
def test_push_refuses_a_placeholder_repository(repository, expected, capsys):
    argv = ["--repository", repository, "--uv-version", "0.0.0", "--dry-run"]
    with pytest.raises(SystemExit) as exc:
        push_images.main(argv)
    assert exc.value.code == 2
    assert expected in capsys.readouterr().err


def test_make_push_without_a_repository_says_what_to_pass():
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.push_images", "--uv-version", "0.0.0", "--dry-run"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "make push PROFILE=... IMAGE_REPOSITORY=" in done.stderr


@pytest.mark.parametrize(
    "argv, word",
    [
        (["--project", "MY_PROJECT"], "MY_PROJECT"),
        (["--service-account", "PROJECT_NUMBER-compute@developer.gserviceaccount.com"],
         "PROJECT_NUMBER"),
        (["--pipeline-root", "gs://MY_BUCKET/root"], "MY_BUCKET"),
    ],
)  # fmt: skip
def test_verify_refuses_a_placeholder_as_submit_does(templates, capsys, argv, word):
    code = cli.main(["verify", templates["own"], "--requests-only", *argv])
    assert code == 2
    assert f"holds the placeholder {word}: replace it with" in capsys.readouterr().err
