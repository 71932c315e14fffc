"""Pipeline templates in Artifact Registry: published, listed, downloaded, submitted and verified.

Every registry request is kfp's own ``RegistryClient``'s, sent to
``vertex_emulator/registry_service.py`` on 127.0.0.1 (``--registry-endpoint``); credentials are
Application Default Credentials whose token endpoint is the Vertex AI stand-in (conftest's ``adc``),
so the client sends the token google-auth got, and the registry stand-in refuses anything else.
Submissions go on to the Vertex AI stand-in (``standin``) through aiplatform, as in test_submit.py.
"""

import hashlib
import json

import pytest
import requests
from conftest import BUCKET, PROJECT, SA, TOKEN, shared_folder

from components._image import package_version
from pipelines import cli, template_registry, yaml_io
from pipelines.submit.endpoints import REGISTRY_ENDPOINT, api_endpoint_problem
from vertex_emulator.registry_service import RegistryStandIn

LOCATION = "us-central1"
REPO = f"https://{LOCATION}-kfp.pkg.dev/{PROJECT}/ncf"
PACKAGE = "ncf-pipeline"  # pipelines.pipeline.PIPELINE_NAME: the package of every profile.
V_TAG = f"v{package_version()}-cpu"
DATA = f"gs://{BUCKET}/ml-1m/"


@pytest.fixture
def registry():
    with RegistryStandIn(access_token=TOKEN) as r:
        r.add_repository(PROJECT, LOCATION, "ncf")
        yield r


@pytest.fixture(scope="module")
def cpu_yaml(tmp_path_factory) -> str:
    """The cpu profile compiled once, for tests that publish a file they did not compile."""
    from pipelines import pipeline, profiles

    path = str(tmp_path_factory.mktemp("cpu") / "cpu.yaml")
    pipeline.compile_pipeline(profiles.BUILTIN["cpu"], path)
    return path


def _publish(path: str, registry, *tags: str) -> template_registry.Published:
    """``path`` uploaded with the cpu profile's tags, as ``compile --publish`` does."""
    from google.oauth2.credentials import Credentials

    return template_registry.publish(
        path,
        template_registry.parse_repository(REPO),
        template_registry.template_tags("cpu", package_version(), tags),
        credentials=Credentials(token=TOKEN),
        endpoint=registry.url,
    )


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.sha256(f.read()).hexdigest()


def _submit_args(template: str, registry, standin, *extra: str) -> list[str]:
    return [
        "submit",
        "--template",
        template,
        "--project",
        PROJECT,
        "--region",
        LOCATION,
        "--pipeline-root",
        f"gs://{BUCKET}/root",
        "--service-account",
        SA,
        "--api-endpoint",
        standin.url,
        "--registry-endpoint",
        registry.url,
        "--param",
        f"data_uri={DATA}",
        "--param",
        "preset=tiny",
        *extra,
    ]


@pytest.mark.slow  # About 5-10 s with the suite beside it.
def test_compile_publishes_tags_lists_and_downloads(registry, adc, tmp_path, capsys):
    """compile --publish uploads through RegistryClient: the version is the file's sha256, tagged
    with the project version and profile; a second upload moves both tags; list and get agree."""
    first = str(tmp_path / "first.yaml")
    args = ["compile", "--profile", "cpu", "--output", first, "--publish", REPO]
    assert cli.main([*args, "--registry-endpoint", registry.url, "--tag", "nightly"]) == 0
    out = capsys.readouterr().out
    version = _sha256(first)
    assert f"published {first} as {PACKAGE} {version}" in out
    for ref in (V_TAG, "latest-cpu", "nightly", version):
        assert f"  {REPO}/{PACKAGE}/{ref}\n" in out
    (upload,) = [r for r in registry.requests if r.method == "POST"]
    assert upload.path == f"/{LOCATION}-kfp.pkg.dev/{PROJECT}/ncf"
    assert upload.headers["content-type"].startswith("multipart/form-data")
    assert upload.headers["authorization"] == f"Bearer {TOKEN}"  # From ADC, via google-auth.

    second = str(tmp_path / "second.yaml")
    args = ["compile", "--profile", "cpu", "--output", second, "--publish", REPO]
    assert cli.main([*args, "--registry-endpoint", registry.url, "--param", "epochs=2"]) == 0
    capsys.readouterr()
    newer = _sha256(second)
    assert newer != version

    assert cli.main(["templates", "list", "--repo", REPO, "--registry-endpoint", registry.url]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == f"{REPO}/{PACKAGE}"
    # Newest first; the profile's tags moved to it, "nightly" stayed on the first upload.
    assert listed[1].startswith(f"  {newer}  ") and listed[1].endswith(f"tags: latest-cpu, {V_TAG}")
    assert listed[2].startswith(f"  {version}  ") and listed[2].endswith("tags: nightly")

    got = str(tmp_path / "got.yaml")
    url = f"{REPO}/{PACKAGE}/nightly"
    get = ["templates", "get", url, "--output", got, "--registry-endpoint", registry.url]
    assert cli.main(get) == 0
    assert f"downloaded {url} ({version}) to {got}" in capsys.readouterr().out
    with open(got, "rb") as a, open(first, "rb") as b:
        assert a.read() == b.read()


def test_submit_dry_run_reads_the_template_from_its_url(registry, cpu_yaml, standin, adc, capsys):
    published = _publish(cpu_yaml, registry)
    url = f"{REPO}/{PACKAGE}/latest-cpu"
    assert cli.main([*_submit_args(url, registry, standin), "--dry-run"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["template"] == url and shown["template_uri"] == url
    assert shown["template_version"] == published.version == _sha256(cpu_yaml)
    assert shown["pipeline_name"] == PACKAGE and shown["parameter_values"]["preset"] == "tiny"
    # The downloaded spec's parameters: it declares data_fingerprint, filled as for a file.
    assert shown["parameter_values"]["data_fingerprint"] == f"(computed at submit time from {DATA})"
    downloads = [r.path for r in registry.requests if r.method == "GET"]
    assert downloads == [f"/{LOCATION}-kfp.pkg.dev/{PROJECT}/ncf/{PACKAGE}/latest-cpu"]
    assert [r for r in standin.requests if r.path.startswith("/v1/")] == []  # Nothing sent.


def test_submit_creates_the_job_with_the_template_uri(registry, cpu_yaml, standin, adc, capsys):
    """As aiplatform's PipelineJob does for a registry URL: templateUri and the downloaded spec."""
    published = _publish(cpu_yaml, registry)
    url = f"{REPO}/{PACKAGE}/{published.version}"
    assert cli.main(_submit_args(url, registry, standin)) == 0, capsys.readouterr().err
    assert "Submitted pipeline job projects/" in capsys.readouterr().out
    (created,) = standin.find("POST", r"/v1/projects/[^/]+/locations/[^/]+/pipelineJobs$")
    assert created.body["templateUri"] == url
    with open(cpu_yaml, encoding="utf-8") as f:
        assert created.body["pipelineSpec"] == yaml_io.load(f)


def test_an_unknown_tag_names_the_repository_and_its_tags(registry, cpu_yaml, standin, adc, capsys):
    _publish(cpu_yaml, registry)
    url = f"{REPO}/{PACKAGE}/latest-gpu-t4"
    assert cli.main([*_submit_args(url, registry, standin), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"no tag 'latest-gpu-t4' of {PACKAGE} in {REPO}; its tags: latest-cpu, {V_TAG}" in err
    assert "--param" not in err  # Nothing else was looked at.

    other = f"{REPO}/other-pipeline/latest-cpu"
    assert cli.main([*_submit_args(other, registry, standin), "--dry-run"]) == 2
    assert f"no package 'other-pipeline' in {REPO}; its packages: {PACKAGE}" in (
        capsys.readouterr().err
    )


def test_a_request_without_the_token_is_refused(registry, cpu_yaml):
    published = _publish(cpu_yaml, registry)
    download = f"{registry.url}/{LOCATION}-kfp.pkg.dev/{PROJECT}/ncf/{PACKAGE}/latest-cpu"
    listing = f"{registry.url}/v1/projects/{PROJECT}/locations/{LOCATION}/repositories/ncf/packages"
    for url in (download, listing):
        answer = requests.get(url, timeout=10)
        assert answer.status_code == 401
        assert answer.json()["error"]["status"] == "UNAUTHENTICATED"
    assert requests.get(download, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).ok

    from google.oauth2.credentials import Credentials

    ref = template_registry.parse_template(published.urls()[0])
    with pytest.raises(template_registry.TemplateRegistryError, match=r"(?s)\(401\).*login"):
        template_registry.download(
            ref, "/dev/null", credentials=Credentials(token="other"), endpoint=registry.url
        )


def test_a_missing_repository_says_how_to_create_it(registry, cpu_yaml):
    from google.oauth2.credentials import Credentials

    repo = template_registry.parse_repository(f"https://{LOCATION}-kfp.pkg.dev/{PROJECT}/nope")
    with pytest.raises(
        template_registry.TemplateRegistryError,
        match=r"gcloud artifacts repositories create nope --repository-format=KFP",
    ):
        template_registry.publish(
            cpu_yaml, repo, ("x",), credentials=Credentials(token=TOKEN), endpoint=registry.url
        )


def test_verify_requests_only_reads_the_template_from_its_url(registry, cpu_yaml, adc, capsys):
    _publish(cpu_yaml, registry)
    url = f"{REPO}/{PACKAGE}/{V_TAG}"
    args = ["verify", url, "--requests-only", "--registry-endpoint", registry.url]
    assert cli.main(args) == 0
    out, err = capsys.readouterr()
    assert f"verifying {url} ({_sha256(cpu_yaml)})" in err
    assert "train-model" in out


@pytest.mark.slow
def test_a_published_template_verifies_from_its_url(
    registry, adc, verified, verify_cache, tmp_path_factory, tmp_path, capsys
):
    """conftest's cpu verification first (its tasks run there); the same file published and
    verified from its URL is then served from the shared cache, end to end."""
    verified("cpu")
    compiled = str(shared_folder(tmp_path_factory) / "verified-cpu" / "cpu.yaml")
    published = _publish(compiled, registry)
    url = f"{REPO}/{PACKAGE}/latest-cpu"
    args = ["verify", url, "--registry-endpoint", registry.url, "--cache-dir", verify_cache]
    assert cli.main([*args, "--work-dir", str(tmp_path / "work")]) == 0
    out, err = capsys.readouterr()
    assert f"verifying {url} ({published.version})" in err
    assert "train-model" in out


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            [
                "submit",
                "--template",
                f"{REPO}/{PACKAGE}",
                "--project",
                PROJECT,
                "--region",
                LOCATION,
                "--pipeline-root",
                f"gs://{BUCKET}/r",
                "--dry-run",
            ],
            "is not a template in Artifact Registry: expected https://LOCATION-kfp.pkg.dev/"
            "PROJECT/REPOSITORY/PACKAGE/TAG",
        ),
        (
            ["templates", "list", "--repo", f"https://{LOCATION}-kfp.pkg.dev/{PROJECT}"],
            "is not an Artifact Registry KFP repository",
        ),
        (
            ["templates", "list", "--repo", REPO, "--registry-endpoint", "http://registry.example"],
            "registry endpoint (--registry-endpoint) 'http://registry.example' is plain http",
        ),
        (
            ["compile", "--output", "never.yaml", "--publish", REPO, "--tag", "sha256:abc"],
            "tag 'sha256:abc': a tag is 1-128 letters",
        ),
        (["compile", "--output", "never.yaml", "--tag", "x"], "go with --publish"),
    ],
)
def test_bad_urls_tags_and_endpoints_are_refused_before_any_request(
    argv, expected, registry, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    assert expected in capsys.readouterr().err
    assert registry.requests == [] and not (tmp_path / "never.yaml").exists()


def test_tags_say_the_project_version_and_profile():
    assert template_registry.template_tags("gpu-a100", "1.2.0") == (
        "v1.2.0-gpu-a100",
        "latest-gpu-a100",
    )
    with pytest.raises(ValueError, match="given twice"):
        template_registry.template_tags("cpu", "1.2.0", ["latest-cpu"])
    assert api_endpoint_problem("http://127.0.0.1:5", REGISTRY_ENDPOINT) is None
