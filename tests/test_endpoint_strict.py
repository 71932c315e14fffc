"""Plain-http endpoints: only loopback, and only written plainly (``api_endpoint_problem``).

Every request carries the user's OAuth bearer token, so ``--api-endpoint`` and
``--registry-endpoint`` may be plain http only to a stand-in on this machine. The host must be
the one the HTTP client connects to: requests picks it with urllib3's parser, which ends a host at
a backslash where ``urllib.parse`` does not, so the check accepts only
``http://HOST[:PORT][/PATH]`` and cross-checks the host with urllib3.
"""

import dataclasses
import urllib.parse

import pytest
import requests
from conftest import BUCKET, PROJECT, TOKEN
from urllib3.util import parse_url

from pipelines import cli
from pipelines.submit.endpoints import API_ENDPOINT, REGISTRY_ENDPOINT, api_endpoint_problem
from pipelines.submit.request import SubmitConfig, validate_config
from vertex_emulator.registry_service import RegistryStandIn

LOCATION = "us-central1"
REPO = f"https://{LOCATION}-kfp.pkg.dev/{PROJECT}/ncf"
TEMPLATE = f"{REPO}/ncf-pipeline/latest-cpu"
# urllib.parse reads the host as 127.0.0.1; urllib3, and so requests, connects to 192.0.2.2.
BACKSLASH_AT = "http://192.0.2.2:18080\\@127.0.0.1"

HOSTILE = [
    BACKSLASH_AT,
    "http://192.0.2.2\\@127.0.0.1",
    "http://192.0.2.2\\@localhost:8080",
    "http://192.0.2.2:80\\@[::1]",
    "http://127.0.0.1\\@192.0.2.2",
    "http:\\\\192.0.2.2",
    "http:/192.0.2.2",
    "http://127.0.0.1@evil.example",
    "http://user:pass@127.0.0.1:8080",
    "http://@127.0.0.1",
    "http://[::1]@evil.example",
    "http://127.0.0.1.evil.example",
    "http://localhost.evil.example",
    "http://evil.example#@127.0.0.1",
    "http://evil.example?@127.0.0.1",
    "http://127.0.0.1:8080/v1?x=1",
    "http://127.0.0.1:8080/v1#top",
    "http://127.0.0.1\t.evil.example",
    "http://127.0.0.1\n.evil.example",
    "http://127.0.0.1 .evil.example",
    " http://evil.example",
    "\x00http://127.0.0.1",
    "http://127.0.0.1:8080 ",
    "http://%31%32%37.0.0.1",
    "http://127.0.0.1%2eevil.example",
    "http://[::1%25eth0]:9000",
    "http://2130706433",
    "http://0177.0.0.1",
    "http://0x7f.0.0.1",
    "http://127.1",
    "http://[::ffff:127.0.0.1]",
    "http://127.0.0.1:",
    "http://127.0.0.1:99999",
    "http://localhost.",
    "HTTP://127.0.0.1:8080",
]

ALLOWED = [
    None,
    "",
    "us-central1-aiplatform.googleapis.com",  # A bare host: the transport adds https://.
    "https://anything.example",
    "https://192.0.2.2\\@127.0.0.1",  # TLS wherever it goes.
    "http://127.0.0.1:8080",
    "http://127.0.0.2",
    "http://127.255.0.9:1/v1/",
    "http://localhost:1234/v1",
    "http://LOCALHOST",
    "http://[::1]:9000",
    "http://[0:0:0:0:0:0:0:1]",
]


def test_a_backslash_sends_the_request_to_another_host_than_urllib_parse_reads():
    """Why the old check was not enough: it read 127.0.0.1; requests sends to 192.0.2.2."""
    assert urllib.parse.urlsplit(BACKSLASH_AT).hostname == "127.0.0.1"
    assert (parse_url(BACKSLASH_AT).host, parse_url(BACKSLASH_AT).port) == ("192.0.2.2", 18080)
    prepared = requests.Request("GET", BACKSLASH_AT + "/v1/projects").prepare()
    assert parse_url(prepared.url).host == "192.0.2.2"
    message = api_endpoint_problem(BACKSLASH_AT)
    assert message.startswith(
        f"api endpoint (--api-endpoint) {BACKSLASH_AT!r} is plain http but not in the form "
        "http://HOST[:PORT][/PATH] (it has user info '@' and a backslash; requests would send "
        "it to 192.0.2.2)"
    )
    assert "Use https:// (or the host alone)" in message


@pytest.mark.parametrize("endpoint", HOSTILE)
def test_hostile_plain_http_endpoints_are_refused(endpoint):
    for what in (API_ENDPOINT, REGISTRY_ENDPOINT):
        message = api_endpoint_problem(endpoint, what)
        assert message and message.startswith(f"{what} {endpoint!r} is plain http ")
        assert "bearer token" in message and "(127.0.0.1, ::1 or localhost)" in message


@pytest.mark.parametrize("endpoint", ALLOWED)
def test_tls_bare_hosts_and_plain_loopback_are_allowed(endpoint):
    assert api_endpoint_problem(endpoint) is None


@pytest.mark.parametrize(
    "endpoint, says",
    [
        ("http://127.0.0.1@evil.example", "(it has user info '@'; requests would send it to evil"),
        ("http://%31%32%37.0.0.1", "(it has a percent-escape; "),
        ("http://evil.example?@127.0.0.1", "user info '@' and a query '?'; "),
        ("http://evil.example#@127.0.0.1", "user info '@' and a fragment '#'; "),
        ("http://127.0.0.1\t.evil.example", "(it has a space or control character; "),
        ("http://127.0.0.1.evil.example", "is plain http to 127.0.0.1.evil.example: "),
        ("http://2130706433", "is plain http to 2130706433: "),
        ("http://127.0.0.1:99999", "to port 99999 (ports are 1-65535)"),
    ],
)
def test_the_message_says_what_is_wrong(endpoint, says):
    assert says in api_endpoint_problem(endpoint)


def test_a_host_urllib3_reads_differently_is_refused(monkeypatch):
    """The strict form and urllib3 must agree; were urllib3 to read another host, refuse."""
    import urllib3.util

    monkeypatch.setattr(urllib3.util, "parse_url", lambda url: parse_url("http://192.0.2.2:8080"))
    message = api_endpoint_problem("http://127.0.0.1:8080")
    assert "to 127.0.0.1 by one URL parser but not by another (requests would send it to " in (
        message
    )


def test_submit_config_checks_both_endpoints():
    config = SubmitConfig(
        template_path="t.yaml", project=PROJECT, region=LOCATION, pipeline_root=f"gs://{BUCKET}/r"
    )
    validate_config(config)
    for field, what in (("api_endpoint", "--api-endpoint"), ("registry_endpoint", "--registry")):
        bad = dataclasses.replace(config, **{field: BACKSLASH_AT})
        with pytest.raises(ValueError, match=f"{what}.*is plain http but not in the form"):
            validate_config(bad)


@pytest.fixture
def registry():
    with RegistryStandIn(access_token=TOKEN) as r:
        r.add_repository(PROJECT, LOCATION, "ncf")
        yield r


@pytest.mark.parametrize(
    "argv",
    [
        ["templates", "list", "--repo", REPO],
        ["templates", "get", TEMPLATE, "--output", "never.yaml"],
        ["compile", "--output", "never.yaml", "--publish", REPO],
        ["verify", TEMPLATE, "--requests-only"],
        [
            "submit",
            "--template",
            TEMPLATE,
            "--project",
            PROJECT,
            "--region",
            LOCATION,
            "--pipeline-root",
            f"gs://{BUCKET}/r",
            "--dry-run",
        ],
    ],
    ids=["templates-list", "templates-get", "compile-publish", "verify", "submit"],
)
def test_every_command_refuses_a_backslash_endpoint_before_any_request(
    argv, registry, adc, tmp_path, monkeypatch, capsys
):
    """The stand-in registry plays the other host: urllib.parse reads localhost, requests would
    connect to the stand-in, with ADC's token."""
    endpoint = f"{registry.url}\\@localhost"
    assert urllib.parse.urlsplit(endpoint).hostname == "localhost"
    assert parse_url(endpoint).port == parse_url(registry.url).port
    monkeypatch.chdir(tmp_path)
    assert cli.main([*argv, "--registry-endpoint", endpoint]) == 2
    err = capsys.readouterr().err
    assert f"registry endpoint (--registry-endpoint) {endpoint!r} is plain http but not" in err
    assert registry.requests == [] and not (tmp_path / "never.yaml").exists()
