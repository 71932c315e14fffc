"""Every command README.md, docs/submit.md, docs/serving.md and docs/verify.md show, run as written.

The ```bash and ```python blocks of ``DOCS`` are read from the files; each shell command runs in
``bash`` with this environment's ``bin/`` first on PATH (``uv run`` finds the project through
``UV_PROJECT``, frozen and offline), each doc in a folder of its own. The only changes made to a
command, all listed in ``substitute``:

- ``/tmp/`` becomes this test's temporary folder (the README's tour writes under ``out/``, which
  is the README's own folder here, as each doc runs in a folder of its own);
- ``synth --shape NAME`` becomes ``--shape ml-100k``: the smallest MovieLens shape the docs use
  (the embedded sample's), so that every later command runs on small data with the values the
  docs give (``tiny``'s 300 items are fewer than the 999 evaluation negatives a default takes);
- ``tune --trials N`` becomes ``--trials 1``: the preset's own values still run first (outside
  the count) and one trial the sampler picks after them, so the best is still chosen between the
  two; more trials take the same code path again (TPE samples at random for its first ten and
  the median pruner prunes from the fourth on, ``training_core/tune.py``);
- a command that would reach Google Cloud runs as its own dry run: ``submit`` with ``--dry-run``,
  ``make push`` with ``DRY_RUN=1``;
- every ``verify`` gets ``--cache-dir`` with the one execution cache of this ``pytest`` run
  (conftest's ``verify_cache``, shared with tests/test_verify.py, test_verify_gcsfuse.py and
  test_cache_and_effects.py), as a user who verifies several templates of one pipeline would
  pass it, and docs/verify.md's ``vertex_emulator.verify(...)`` call gets ``cache_dir=`` that
  folder: a task is served from it only where an earlier verification ran the same spec on the
  same inputs and the same data (``vertex_emulator/cache.py``). So the README's ``verify`` of
  ``gpu-a100`` and docs/verify.md's two verifications of ``gpu-a100-2workers`` on the embedded
  sample with verify's defaults are served every cached task by tests/test_verify.py's
  verifications of the same templates with the same parameters (conftest's ``verified``, asked
  for first; that test asserts their tasks ran, the replicas included): here they check that
  the documented commands run and exit 0 as written, not the training again. A verification on
  other data (``--data ml-1m/``) or another image (docs/submit.md's) runs every task.

What a doc takes as already there is put there first, from the README's tour (``PROVIDED``).
Commands that cannot run here at all (a browser sign-in, ``gcloud``, ``docker``, the whole suite)
are listed in ``NOT_RUN`` with the reason; a command in the docs that is neither run nor listed
fails ``test_every_documented_command_is_run_or_listed``, and so does a listed one that the docs
no longer show.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import DOCS_TEMPLATE, chain_options

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/submit.md", "docs/serving.md", "docs/verify.md")
# A fenced block, at the start of a line or indented in a list item.
_FENCE = re.compile(r"^([ \t]*)```(\w*)\n(.*?)^[ \t]*```", re.M | re.S)

# Commands that cannot run here, as the doc shows them (continuation lines joined), and why.
NOT_RUN = {
    "make test": "the whole test suite, this test included",
    "make run": "writes out/ in the clone and takes a minute: `run-local` on the embedded sample, "
    "which tests/test_run_local.py runs (and the tour's run-local below, on its own data)",
    "gcloud auth login": "a browser sign-in to Google",
    "gcloud auth application-default login": "a browser sign-in to Google",
    "gcloud config set project my-project": "changes the user's gcloud configuration",
    "gcloud services enable aiplatform.googleapis.com artifactregistry.googleapis.com "
    "storage.googleapis.com compute.googleapis.com iam.googleapis.com": "Google Cloud",
    "gcloud services enable dataflow.googleapis.com": "Google Cloud",
    "gcloud storage buckets create gs://my-bucket --location us-central1 "
    "--uniform-bucket-level-access": "Google Cloud",
    "gcloud artifacts repositories create ncf --repository-format docker "
    "--location us-central1": "Google Cloud",
    "gcloud auth configure-docker us-central1-docker.pkg.dev": "changes Docker's configuration",
    "make push PROFILE=gpu-t4 IMAGE_REPOSITORY=us-central1-docker.pkg.dev/my-project/ncf/"
    "ncf-pipelines": "Docker and Artifact Registry (its DRY_RUN=1 form runs)",
    # docs/submit.md, "A service account for the pipeline".
    "SA=ncf-runner@my-project.iam.gserviceaccount.com": "names the account for the gcloud "
    "commands below, which need Google Cloud",
    'gcloud iam service-accounts create ncf-runner --display-name "ncf-pipelines runs"': "Google "
    "Cloud",
    **{
        f"gcloud projects add-iam-policy-binding my-project --member serviceAccount:$SA --role "
        f"roles/{role} --condition None": "Google Cloud"
        for role in (
            "aiplatform.user",
            "logging.logWriter",
            "dataflow.developer",
            "dataflow.worker",
        )
    },
    "gcloud storage buckets add-iam-policy-binding gs://my-bucket --member serviceAccount:$SA "
    "--role roles/storage.objectAdmin": "Google Cloud",
    "gcloud artifacts repositories add-iam-policy-binding ncf --location us-central1 --member "
    "serviceAccount:$SA --role roles/artifactregistry.reader": "Google Cloud",
    "gcloud iam service-accounts add-iam-policy-binding $SA --member serviceAccount:$SA --role "
    "roles/iam.serviceAccountUser": "Google Cloud",
    'gcloud iam service-accounts add-iam-policy-binding $SA --member "user:$(gcloud config '
    'get-value account)" --role roles/iam.serviceAccountUser': "Google Cloud",
    "gcloud projects get-iam-policy my-project --flatten bindings --filter "
    "\"bindings.members:serviceAccount:$SA\" --format 'value(bindings.role)'": "Google Cloud",
    "gcloud storage cp -r ml-1m gs://my-bucket/ml-1m": "Google Cloud",
}
# Python blocks that cannot run here, by a line they hold, and why.
NOT_RUN_PYTHON = {
    "result = vertex.submit(": "creates a run on Vertex AI",
}

# What a doc takes as already there: its relative path -> the README tour's file it is.
PROVIDED = {
    "docs/serving.md": {
        "runs/ml-1m": "README/out/ml-100k-model",
        "data/ml-1m": "README/out/ml-100k-data",
    },
    "docs/verify.md": {"ml-1m": "README/out/ml-100k"},
}


def blocks(doc: str) -> list[tuple[str, str]]:
    """The doc's ```bash and ```python blocks, as ``(language, text)``."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    return [
        (lang, textwrap.dedent(body))
        for _, lang, body in _FENCE.findall(text)
        if lang in ("bash", "python")
    ]


def normalized(command: str) -> str:
    """A command as ``NOT_RUN`` spells it: its words joined by one space, quotes kept as written."""
    command = re.sub(r"\s+#.*$", "", command.replace("\\\n", " "))
    return " ".join(command.split())


def documented(doc: str) -> list[tuple[str, str]]:
    """Every command and Python block of the doc, as ``(kind, text)``, in order."""
    out = []
    for lang, body in blocks(doc):
        if lang == "python":
            out.append(("python", body))
            continue
        for line in body.replace("\\\n", " ").splitlines():
            if shlex.split(line, comments=True):
                out.append(("bash", normalized(line)))
    return out


def not_run_reason(kind: str, text: str) -> str | None:
    """Why the command or block is not run here, or None."""
    if kind == "bash":
        return NOT_RUN.get(text)
    return next((why for line, why in NOT_RUN_PYTHON.items() if line in text), None)


def substitute(command: str, tmp: pathlib.Path, cache_dir: str) -> str:
    """The command as this test runs it (every change the module docstring lists)."""
    command = command.replace("/tmp/", f"{tmp}/tmp/")
    command = re.sub(r"--shape \S+", "--shape ml-100k", command)
    words = command.split()
    if "tune" in words[:4]:
        command = re.sub(r"--trials \d+", "--trials 1", command)
    if "submit" in words[:4] and "--dry-run" not in words:
        command += " --dry-run"
    if words[:2] == ["make", "push"] and not any(w.startswith("DRY_RUN=") for w in words):
        command += " DRY_RUN=1"
    if "verify" in words[:4] and "--cache-dir" not in words:
        command += f" --cache-dir {cache_dir}"
    return command


def substitute_python(block: str, cache_dir: str) -> str:
    """A Python block as this test runs it: ``vertex_emulator.verify(...)`` gets ``cache_dir``."""
    return re.sub(r"(\bvertex_emulator\.verify\([^()]*)\)", rf"\1, cache_dir={cache_dir!r})", block)


def environment(tmp: pathlib.Path, activated: bool) -> dict[str, str]:
    """The shell a user runs the command in; ``uv run`` frozen and offline on this project.

    ``activated``: this environment's ``bin/`` first on PATH, as after ``source .venv/bin/activate``
    (for the docs' bare ``ncf-pipelines`` and ``saved_model_cli``); not for ``make``, whose
    ``python3 -m uv`` needs the system's Python, as in a fresh shell. Where ``make setup``
    installed uv as a module only (no ``uv`` on PATH), a ``uv`` that runs it is put on PATH, as
    the README's ``uv run`` assumes one.
    """
    venv_bin = os.path.dirname(sys.executable)
    # Under `uv run pytest` PATH already starts with it: a fresh shell's PATH has no venv.
    inherited = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin]
    path = [venv_bin] if activated else []
    python3 = shutil.which("python3", path=os.pathsep.join(inherited))
    if shutil.which("uv", path=os.pathsep.join(inherited)) is None and python3:
        shim = tmp / "uv-shim"
        shim.mkdir(exist_ok=True)
        (shim / "uv").write_text(f'#!/bin/sh\nexec {python3} -m uv "$@"\n')
        (shim / "uv").chmod(0o755)
        path.append(str(shim))
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return {
        **env,
        "PATH": os.pathsep.join([*path, *inherited]),
        "UV_PROJECT": str(ROOT),
        "UV_FROZEN": "1",
        "UV_OFFLINE": "1",
    }


def run_doc(doc: str, tmp: pathlib.Path, cache_dir: str) -> list[tuple[str, float]]:
    """Runs every command and Python block of ``doc`` that can run here; their times.

    Raises:
        AssertionError: a command that did not exit 0, with its output.
    """
    cwd = tmp / doc.replace("/", "_").replace(".md", "")
    cwd.mkdir(parents=True, exist_ok=True)
    for rel, source in PROVIDED.get(doc, {}).items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        if not (cwd / rel).exists():
            (cwd / rel).symlink_to(tmp / source)
    times = []
    for kind, text in documented(doc):
        if not_run_reason(kind, text):
            continue
        if kind == "python":
            text = substitute_python(text, cache_dir)
            argv, shown = [sys.executable, "-c", text], text.strip().splitlines()[0]
        else:
            shown = substitute(text, tmp, cache_dir)
            argv = ["bash", "-c", shown]
        make = shown.startswith("make ")
        start = time.monotonic()
        done = subprocess.run(
            argv,
            cwd=ROOT if make else cwd,  # make runs where the Makefile is, in the clone.
            env=environment(tmp, activated=not make),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        times.append((shown, time.monotonic() - start))
        print(f"{times[-1][1]:6.1f}s  {doc}: {shown[:110]}", flush=True)
        assert done.returncode == 0, (
            f"{doc}: `{shown}` exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n"
            f"--- stderr\n{done.stderr[-5000:]}"
        )
    return times


@pytest.fixture(scope="module")
def tour(tmp_path_factory, verify_cache, verified) -> pathlib.Path:
    """The README's commands, run once: the other docs start from what they made. Its
    ``verify ncf-gpu-a100.yaml`` is served from tests/test_verify.py's verification of the same
    template (asked for first)."""
    verified("gpu-a100", **chain_options("gpu-a100"))
    tmp = tmp_path_factory.mktemp("documented")
    (tmp / "tmp").mkdir()
    run_doc("README.md", tmp, verify_cache)
    return tmp


def test_every_documented_command_is_run_or_listed():
    """A command the docs add is run here or listed in NOT_RUN; each listed one is still shown."""
    shown = {text for doc in DOCS for kind, text in documented(doc) if kind == "bash"}
    python = [text for doc in DOCS for kind, text in documented(doc) if kind == "python"]
    stale = sorted(set(NOT_RUN) - shown)
    assert not stale, f"NOT_RUN lists commands no doc shows any more: {stale}"
    stale_python = [line for line in NOT_RUN_PYTHON if not any(line in b for b in python)]
    assert not stale_python, f"NOT_RUN_PYTHON lists lines no doc shows: {stale_python}"
    runnable = {"uv", "ncf-pipelines", "saved_model_cli", "make"}
    for text in shown - set(NOT_RUN):
        program = shlex.split(text)[0]
        assert program in runnable, (
            f"a documented command this test neither runs nor lists: `{text}`; run it (a "
            f"program in {sorted(runnable)}) or add it to NOT_RUN with the reason"
        )
        if program == "make":  # Other targets (run, test, image) are too long to run here.
            assert text.split()[1] in ("setup", "push"), f"`{text}`: list it in NOT_RUN"


def test_the_docs_hold_what_this_test_runs():
    """Each doc still has blocks this test reads (a renamed fence would silently run nothing)."""
    counts = {doc: len(documented(doc)) for doc in DOCS}
    assert all(counts.values()), counts


@pytest.mark.slow
def test_readme_tour_runs_as_written(tour):
    """The README's tour ran (the fixture); its outputs are where the tour says."""
    assert (tour / "README" / "out" / "ml-100k-export" / "saved_model.pb").is_file()
    assert (tour / "README" / "out" / "ml-100k-recs").exists()
    assert (tour / "README" / "ncf-gpu-a100.yaml").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("doc", ["docs/submit.md", "docs/serving.md", "docs/verify.md"])
def test_doc_commands_run_as_written(doc, tour, verify_cache, verified):
    # Their verifications of the embedded sample are served from tests/test_verify.py's runs.
    if doc == "docs/verify.md":
        verified("gpu-a100-2workers", **chain_options("gpu-a100-2workers"))
    if doc == "docs/submit.md":
        verified(DOCS_TEMPLATE, **chain_options(DOCS_TEMPLATE))
    run_doc(doc, tour, verify_cache)
