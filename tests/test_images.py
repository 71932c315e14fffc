"""The images against what their nodes give them (issue 34): fast checks of the Dockerfile's
stages as ``make image-check`` executes them, of that check's own probes, of the kernels
TensorFlow carries for the GPU profiles, of the Dataflow worker image the Beam profile compiles
with, and of the TPU image's blocker at compile and submit.

``make image-check`` (tools/image_check.py, root, no Docker) is the full proof: it builds each
stage in a clean root and mounts a stand-in driver where Vertex AI mounts the real one."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

from components import _image
from pipelines import yaml_io

REPO = Path(__file__).resolve().parent.parent
cuda_kernels = load_script("tools/cuda_kernels.py")
image_check = load_script("tools/image_check.py")

STAGES = image_check.dockerfile_stages(REPO / "Dockerfile")


def stage_env(variant: str) -> dict[str, str]:
    """A final stage's environment, as image_check's chroot engine applies its ENV lines."""
    env = {"PATH": image_check.DEFAULT_PATH}
    for stage in image_check.stage_chain(STAGES, variant):
        for keyword, text in stage["instructions"]:
            if keyword == "ENV":
                image_check.apply_env(env, text)
    return env


def stage_runs(variant: str) -> list[str]:
    return [t for k, t in STAGES[variant]["instructions"] if k == "RUN"]


# --- GPU: the driver Vertex AI mounts at /usr/local/nvidia -------------------------------------


def test_the_gpu_stage_puts_the_mounted_driver_on_the_loader_path():
    env = stage_env("gpu")
    assert f"{image_check.DRIVER_MOUNT}/lib64" in env["LD_LIBRARY_PATH"].split(":")
    path = env["PATH"].split(":")
    assert f"{image_check.DRIVER_MOUNT}/bin" in path
    assert path[0] == "/opt/venv/bin"  # python3 stays the venv's.
    conf = [r for r in stage_runs("gpu") if "/etc/ld.so.conf.d/" in r]
    assert conf and f"{image_check.DRIVER_MOUNT}/lib64" in conf[0] and "ldconfig" in conf[0]
    # Only the gpu image: the others have no driver to find.
    assert "LD_LIBRARY_PATH" not in stage_env("cpu")


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (image-check's too)")
def test_the_stand_in_driver_is_found_only_through_the_loader_path(tmp_path):
    """The stand-in image-check mounts: found through LD_LIBRARY_PATH (reporting its version),
    missing without it; the checker accepts only that pattern."""
    driver = image_check.stub_driver(tmp_path)
    probe = (
        "import ctypes\ntry:\n lib = ctypes.CDLL('libcuda.so.1')\n"
        "except OSError:\n print('missing')\n"
        "else:\n v = ctypes.c_int(); lib.cuDriverGetVersion(ctypes.byref(v)); print(v.value)"
    )
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    run = [sys.executable, "-c", probe]
    assert subprocess.run(run, env=env, capture_output=True, text=True).stdout.strip() == "missing"
    env["LD_LIBRARY_PATH"] = str(driver / "lib64")
    found = subprocess.run(run, env=env, capture_output=True, text=True).stdout.strip()
    assert found == str(image_check.STUB_DRIVER_VERSION)
    assert os.access(driver / "bin" / "nvidia-smi", os.X_OK)
    ctypes.CDLL(str(driver / "lib64" / "libcuda.so.1"))  # A real shared object.

    good = "\n".join([
        f"as-mounted found-{image_check.STUB_DRIVER_VERSION}",
        "without-ld-library-path missing",
        f"after-ldconfig found-{image_check.STUB_DRIVER_VERSION}",
        f"nvidia-smi {image_check.DRIVER_MOUNT}/bin/nvidia-smi",
        "tensorflow 1",
    ])  # fmt: skip
    assert "TensorFlow called its cuInit" in image_check.check_driver_probe(good)
    # What the image before the fix gives: nothing finds the mounted driver.
    old = "as-mounted missing\nwithout-ld-library-path missing\nafter-ldconfig missing\n"
    with pytest.raises(SystemExit, match="driver mounted at /usr/local/nvidia"):
        image_check.check_driver_probe(old + "nvidia-smi \ntensorflow 0")


def test_tensorflow_carries_sass_for_every_gpu_profile():
    """TF 2.16.2 (the wheel both the cpu and gpu images install) has SASS for sm_50..sm_90 and
    PTX for compute_90 only: an H100 (sm_90) runs the SASS, no PTX JIT at start-up."""
    import importlib.util

    package = Path(importlib.util.find_spec("tensorflow").origin).parent  # Not imported: slow.
    found = cuda_kernels.kernels(package / "libtensorflow_cc.so.2")
    sass = {arch for kind, arch in found if kind == "SASS"}
    ptx = {arch for kind, arch in found if kind == "PTX"}
    assert sass == {50, 60, 70, 80, 90} and ptx == {90}
    assert found[("SASS", 90)] == found[("SASS", 80)] > 200  # Every fat binary, not a few.
    # What TensorFlow's build info calls it: "compute_90" is SASS and PTX in its clang build.
    build_info = (package / "python" / "platform" / "build_info.py").read_text()
    assert "['sm_50', 'sm_60', 'sm_70', 'sm_80', 'compute_90']" in build_info
    # The H100 profiles' descriptions say it.
    from pipelines.profiles import BUILTIN

    for name in ("gpu-h100", "gpu-h100x8"):
        assert "sm_90" in BUILTIN[name].description


# --- Dataflow: Beam's boot entrypoint ----------------------------------------------------------


def test_the_dataflow_stage_is_a_worker_image_dataflow_can_start():
    instructions = STAGES["dataflow"]["instructions"]
    entry = [json.loads(t) for k, t in instructions if k == "ENTRYPOINT"]
    assert entry == [[_image.BEAM_BOOT]]
    copies = [t for k, t in instructions if k == "COPY"]
    assert copies == ["--from=beam-sdk /opt/apache/beam /opt/apache/beam"]
    assert STAGES["beam-sdk"]["parent"] == "${BEAM_SDK_IMAGE}"
    assert stage_env("dataflow")["RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT"] == "1"
    assert "install_locked.sh install dataflow" in stage_runs("dataflow")[0]
    # The Beam SDK image is the locked apache-beam's, and a drift is named.
    dockerfile, lock = (REPO / "Dockerfile").read_text(), (REPO / "uv.lock").read_text()
    assert image_check.beam_sdk_image_problem(dockerfile, lock) is None
    beam = 'name = "apache-beam"\nversion = "'
    drifted = lock.replace(beam, beam + "9")
    assert "needs apache/beam_python3.11_sdk:9" in image_check.beam_sdk_image_problem(
        dockerfile, drifted
    )
    # Its Python set is the cpu image's (one wheelhouse, one lock set).
    done = subprocess.run(
        [str(REPO / "tools" / "install_locked.sh"), "verify", "nonsense"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "cpu, gpu, tpu, dataflow or serve" in done.stderr
    assert "dataflow" in _image.VARIANTS


def test_the_entrypoint_check_refuses_an_image_without_beams_boot():
    image_check.check_entrypoint(["/opt/apache/beam/boot"], "dataflow")
    with pytest.raises(SystemExit, match="Dataflow runs"):
        image_check.check_entrypoint(None, "dataflow")  # The cpu image: no entrypoint.


@pytest.mark.parametrize(
    ("args", "added"),
    [
        (["--runner=DataflowRunner", "--project=p"], True),
        (["--runner", "dataflow"], True),
        (["--runner=DataflowRunner", "--sdk_container_image=mine"], False),
        (["--runner=DataflowRunner", "--worker_harness_container_image=mine"], False),
        (["--direct_num_workers=2"], False),
        ([], False),
    ],
)
def test_a_dataflow_job_gets_the_worker_image_unless_it_names_one(args, added):
    out = _image.with_worker_image(args, "REPO:1-dataflow")
    assert out == args + ["--sdk_container_image=REPO:1-dataflow"] * added


@pytest.mark.slow
def test_the_dataflow_profile_compiles_with_the_worker_image(tmp_path):
    """The prepare-data task's compiled input, with a run's Dataflow options as the step
    combines them, is the worker image Beam's own option parser reads."""
    from apache_beam.options.pipeline_options import PipelineOptions, WorkerOptions

    from pipelines import pipeline, profiles

    def worker_image(profile: str, **kwargs) -> str:
        path = pipeline.compile_pipeline(
            profiles.BUILTIN[profile], str(tmp_path / f"{profile}.yaml"), **kwargs
        )
        spec = yaml_io.load(open(path))
        dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
        tasks = {name: t for dag in dags for name, t in dag["tasks"].items()}
        # Every step that runs a Beam job with the run's options: validate, prepare, recommend.
        images = {
            name: tasks[name]["inputs"]["parameters"]["worker_image"]["runtimeValue"]["constant"]
            for name in ("validate-data", "prepare-data", "recommend")
        }
        assert len(set(images.values())) == 1, images
        return images["prepare-data"]

    compiled = worker_image("gpu-a100x8-dataflow", image_repository="europe-docker.pkg.dev/p/r/n")
    assert compiled == "europe-docker.pkg.dev/p/r/n:" + _image.package_version() + "-dataflow"
    run_args = ["--runner=DataflowRunner", "--project=p", "--region=europe-west4",
                "--temp_location=gs://b/tmp"]  # fmt: skip
    options = PipelineOptions(_image.with_worker_image(run_args, compiled))
    assert options.view_as(WorkerOptions).sdk_container_image == compiled
    # Profiles that prepare on one machine pull no worker image (make push builds none).
    assert worker_image("gpu-a100") == ""


# --- TPU: its own dependency set (images/tpu) --------------------------------------------------


def _tpu_project() -> dict:
    import tomllib

    with open(REPO / "images" / "tpu" / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _pins(specs: list[str]) -> dict[str, str]:
    return {s.split("==")[0]: s.split("==")[1].split(";")[0].strip() for s in specs if "==" in s}


def test_the_tpu_set_shares_the_project_s_requirements_word_for_word():
    """images/tpu holds the training step's needs; each one the project also names is written
    the same (one range for KFP's executor, whichever image runs it), and the XLA group is the
    TPU build's own TensorFlow release (tests/test_tpu_env.py compiles the step with it)."""
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]["dependencies"]
    tpu = _tpu_project()
    by_name = {spec.split(">")[0].split("=")[0].split("<")[0]: spec for spec in project}
    for spec in tpu["project"]["dependencies"]:
        name = spec.split(">")[0].split("=")[0].split("<")[0]
        assert by_name.get(name) == spec, f"{spec} is {by_name.get(name)} in pyproject.toml"
    groups = tpu["dependency-groups"]
    assert _pins(groups["tpu"])["tensorflow-tpu"] == _pins(groups["xla"])["tensorflow-cpu"]
    assert "tensorflow-data-validation" not in str(tpu)  # The reason it is a set of its own.


@pytest.mark.slow
def test_compile_and_push_of_the_tpu_profile_name_a_buildable_image(tmp_path, caplog, capsys):
    """The tpu image builds from the lock now (make image-check proves it): compile warns of
    nothing tpu-specific, and make push builds and pushes it like any other."""
    from pipelines import cli, push_images

    out = tmp_path / "tpu.yaml"
    with caplog.at_level(logging.WARNING, logger="ncf-pipelines"):
        assert cli.main(["compile", "--profile", "tpu-v5e-8", "--output", str(out)]) == 0
    assert _image.image_for("tpu") in out.read_text()
    assert not [r for r in caplog.records if "libtpu" in r.getMessage() or "cannot" in
                r.getMessage()]  # fmt: skip
    repository = "europe-docker.pkg.dev/p/r/ncf-pipelines"
    argv = ["--profile", "tpu-v5e-8", "--repository", repository, "--uv-version", "0.0.0"]
    assert push_images.main([*argv, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "--target tpu" in printed and _image.image_for("tpu", repository) in printed
    assert "note:" not in printed


# --- Supply chain: the user the images run as, pinned bases and downloads, pinned images -------

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("variant", _image.VARIANTS)
def test_every_final_stage_installs_as_root_then_runs_as_the_unprivileged_user(variant):
    """Each image ends as uid 1000 (numeric, so a runtime requiring non-root can tell), created
    in the shared runtime stage; its installs (and the gpu stage's ldconfig) run before, as root."""
    instructions = STAGES[variant]["instructions"]
    keywords = [k for k, _ in instructions]
    users = [t for k, t in instructions if k == "USER"]
    assert len(users) == 1  # By default (no --build-arg IMAGE_USER) it resolves to 1000:1000.
    assert image_check.stage_user(instructions) == _image.DEFAULT_USER == "1000:1000"
    assert "RUN" not in keywords[keywords.index("USER") :]  # Nothing installed as the user.
    assert image_check.check_user(image_check.stage_user(instructions), variant) == "1000:1000"
    (create,) = [t for k, t in STAGES["runtime"]["instructions"] if k == "RUN"]
    assert "useradd --uid 1000 --gid 1000" in create and "groupadd --gid 1000 ncf" in create
    assert STAGES[variant]["parent"] == "runtime"


@pytest.mark.parametrize("variant", ["cpu", "gpu", "dataflow", "tpu"])
def test_the_root_variant_is_one_build_arg_and_its_own_tag(variant):
    """The switch for a /gcs (or tuning metric folder) that refuses uid 1000 (first_run.py):
    ``--build-arg IMAGE_USER=root`` makes the stage end as root, and only that; its tag is the
    variant's with ``-root``, which ``compile --image-user root`` names and ``make push
    IMAGE_USER=root`` builds with that build-arg."""
    from pipelines import push_images

    instructions = STAGES[variant]["instructions"]
    assert ("ARG", "IMAGE_USER=1000:1000") in instructions
    assert ("USER", "${IMAGE_USER}") in instructions
    assert image_check.stage_user(instructions, {"IMAGE_USER": "root"}) == "root"
    with pytest.raises(SystemExit):  # make image-check keeps checking the default as non-root.
        image_check.check_user("root", variant)
    tag = _image.image_for(variant, "R", "root")
    assert tag == f"R:{_image.package_version()}-{variant}-root"
    assert _image.image_for(variant, "R") == f"R:{_image.package_version()}-{variant}"
    (build, _push) = push_images.commands([(variant, tag)], "0.1")
    assert build[build.index("IMAGE_USER=root") - 1] == "--build-arg"
    (build, _push) = push_images.commands([(variant, _image.image_for(variant, "R"))], "0.1")
    assert not [a for a in build if a.startswith("IMAGE_USER")]
    with pytest.raises(ValueError, match="unknown image user"):
        _image.image_for(variant, "R", "0")


@pytest.mark.parametrize("user", [None, "", "root", "0", "0:0", "root:root"])
def test_the_image_check_refuses_an_image_that_runs_as_root(user):
    with pytest.raises(SystemExit, match="USER 1000:1000"):
        image_check.check_user(user, "cpu")


def test_the_probes_must_have_run_as_the_images_user():
    """probe_script prints the uid it ran as; a probe run as root (no USER) fails the check."""
    assert 'echo "uid:$(id -u)"' in image_check.probe_script("cpu")
    tag = f"REPO:{_image.package_version()}-cpu"
    ran = f"/opt/venv/bin/python3\n{tag}\n"
    assert image_check.check_probe(ran + "uid:1000\n", "/opt/venv", _image.package_version(),
                                   "cpu") == tag  # fmt: skip
    for bad in ("uid:0\n", ""):
        with pytest.raises(SystemExit, match="ran as root"):
            image_check.check_probe(ran + bad, "/opt/venv", _image.package_version(), "cpu")
    # A tuning trial's metric folder the user cannot write (Vertex AI's CLOUD_ML_HP_METRIC_FILE).
    unwritable = ran + "uid:1000\nunwritable:/var/hypertune\n"
    with pytest.raises(SystemExit, match="unwritable:/var/hypertune"):
        image_check.check_probe(unwritable, "/opt/venv", _image.package_version(), "cpu")


def test_the_gpu_probe_runs_ldconfig_as_root_and_the_rest_as_the_user():
    """The NVIDIA runtime hook (root) runs ldconfig; the user cannot write the loader cache."""
    steps = image_check.driver_probes()
    assert [as_root for _, as_root in steps] == [False, True, False]
    assert steps[1][0] == "ldconfig"
    as_user = [script for script, as_root in steps if not as_root]
    assert "without-ld-library-path" in as_user[0] and "after-ldconfig" in as_user[1]
    # Each step runs in a shell of its own, so each must work alone: run the part after
    # ldconfig here (no libcuda on this machine: the snippet prints "missing", not nothing).
    done = subprocess.run(
        ["bash", "-c", as_user[1].split('echo "nvidia-smi', 1)[0]],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() in ("after-ldconfig missing", "after-ldconfig found-12030")
    assert "ldconfig" not in [line.strip() for line in image_check.DRIVER_PROBE.splitlines()]


def test_the_chroot_engine_runs_as_the_dockerfile_user_with_its_home(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\nncf:x:1000:1000::/home/ncf:/usr/sbin/nologin\n"
    )
    assert image_check.user_spec(tmp_path, "1000:1000") == "1000:1000"
    assert image_check.user_spec(tmp_path, "ncf") == "1000:1000"
    assert image_check.user_home(tmp_path, "1000:1000") == "/home/ncf"
    assert image_check.user_home(tmp_path, "4242") == "/"
    with pytest.raises(SystemExit, match="no such user"):
        image_check.user_spec(tmp_path, "nobody-here")


def test_uv_is_installed_only_from_files_with_known_hashes():
    """The builder's uv comes from a requirement line with PyPI's sha256 of its Linux wheels
    (--require-hashes): a changed file on the index, or a new UV_VERSION without its hashes,
    stops the build."""
    import re

    text = (REPO / "Dockerfile").read_text()
    (hashes,) = re.findall(r'^ARG UV_SHA256="([^"]*)"', text, re.M)
    hashes = hashes.replace("\\\n", " ").split()
    assert len(hashes) == 3 and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes)
    (install,) = [t for k, t in STAGES["builder"]["instructions"] if k == "RUN" and "uv.txt" in t]
    assert "--require-hashes" in install and "--only-binary :all:" in install
    assert '"uv==${UV_VERSION}"' not in text  # The unchecked install is gone.
    line = subprocess.run(
        ["sh", "-c", install.split("&&")[1] + "&&" + install.split("&&")[2] + "; cat /tmp/uv.txt"],
        env={"UV_VERSION": "0.13.8", "UV_SHA256": " ".join(hashes), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert line == "uv==0.13.8" + "".join(f" --hash=sha256:{h}" for h in hashes)


def _uv() -> str:
    """The uv executable: the one `uv run` names in $UV, else uv on PATH, else the one that
    `make setup` installed as a module of the system's Python (this venv's base)."""
    found = os.environ.get("UV") or shutil.which("uv")
    if found:
        return found
    return subprocess.run(
        [getattr(sys, "_base_executable", "python3"), "-c", "import uv; print(uv.find_uv_bin())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_the_install_accepts_exactly_the_packages_the_lock_leaves_out(tmp_path):
    """pyproject's overrides keep keras out of uv.lock although TensorFlow names it; the images
    install the lock with --no-deps, so `uv pip check` of a finished image reports it missing.
    The requirements step carries the left-out names to the install's check, which accepts those
    and nothing else. Run here on this environment, which lacks Keras for the same reason (CI's
    image-check once failed every stage on it)."""
    import tomllib

    script = str(REPO / "tools" / "install_locked.sh")
    env = {**os.environ, "BUILD_PYTHON": sys.executable, "UV": _uv()}
    req = tmp_path / "req"
    subprocess.run([script, "requirements", "cpu", str(req)], cwd=REPO, env=env, check=True)
    overrides = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["uv"][
        "override-dependencies"
    ]
    never = [s.split(";")[0].strip() for s in overrides if "python_version < '3'" in s]
    left_out = (req / "cpu.left-out.txt").read_text().split()
    assert left_out == never and "keras" in left_out
    pinned = {line.split("==")[0] for line in (req / "cpu.txt").read_text().splitlines()}
    assert not pinned & set(left_out)

    def check(folder: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [script, "check", "cpu", str(folder), sys.executable],
            env=env,
            capture_output=True,
            text=True,
        )

    done = check(req)
    assert done.returncode == 0, done.stderr
    assert "every requirement met" in done.stdout
    # Without the list, the same environment is refused, naming what is missing and who wants it.
    (req / "cpu.left-out.txt").write_text("libtpu\n")
    done = check(req)
    assert done.returncode == 1
    assert "The package `tensorflow` requires `keras" in done.stderr


def test_the_tpu_set_is_exported_from_its_own_lock(tmp_path):
    """`requirements tpu` exports images/tpu/uv.lock's default group (offline, --frozen): the TPU
    build of TensorFlow with the libtpu it pins, KFP, and neither TensorFlow's standard build nor
    the data-validation stack; its left-out list is that project's."""
    script = str(REPO / "tools" / "install_locked.sh")
    env = {**os.environ, "BUILD_PYTHON": sys.executable, "UV": _uv()}
    req = tmp_path / "req"
    subprocess.run([script, "requirements", "tpu", str(req)], cwd=REPO, env=env, check=True)
    pins = {
        line.split("==")[0]: line.split("==")[1].split(" ")[0]
        for line in (req / "tpu.txt").read_text().splitlines()
        if "==" in line
    }
    groups = _tpu_project()["dependency-groups"]
    assert pins["tensorflow-tpu"] == _pins(groups["tpu"])["tensorflow-tpu"]
    assert pins["libtpu"] == _pins(groups["tpu"])["libtpu"]
    assert "kfp" in pins and "pyyaml" in pins
    for absent in ("tensorflow", "tensorflow-cpu", "tensorflow-data-validation", "apache-beam",
                   "pytest", "keras"):  # fmt: skip
        assert absent not in pins, absent
    assert (req / "tpu.left-out.txt").read_text().split() == ["keras"]
    assert "--hash=sha256:" in (req / "tpu.hashes.txt").read_text()


def test_make_pin_base_pins_each_base_image_by_digest():
    dockerfile = (REPO / "Dockerfile").read_text()
    bases = image_check.base_images(dockerfile)
    assert set(bases) == {"PYTHON_IMAGE", "BEAM_SDK_IMAGE"}
    pinned = image_check.pin_bases(dockerfile, dict.fromkeys(bases, DIGEST))
    assert image_check.unpinned_bases(pinned) == []
    assert f"ARG PYTHON_IMAGE=python:3.11-slim@{DIGEST}\n" in pinned
    # Pinned again (a newer digest) replaces the old one; the Beam version check still holds.
    newer = "sha256:" + "cd" * 32
    again = image_check.pin_bases(pinned, {"PYTHON_IMAGE": newer})
    assert f"ARG PYTHON_IMAGE=python:3.11-slim@{newer}\n" in again and DIGEST in again
    lock = (REPO / "uv.lock").read_text()
    assert image_check.beam_sdk_image_problem(again, lock) is None
    with pytest.raises(SystemExit, match="64 lowercase hex"):
        image_check.pin_bases(dockerfile, {"PYTHON_IMAGE": "sha256:abc"})


@pytest.mark.parametrize(
    ("image", "ok"),
    [
        ("europe-docker.pkg.dev/p/r/ncf:1-cpu", True),  # A tag: allowed (and warned about).
        (f"europe-docker.pkg.dev/p/r/ncf@{DIGEST}", True),
        (f"europe-docker.pkg.dev/p/r/ncf:1-cpu@{DIGEST}", True),
        ("europe-docker.pkg.dev/p/r/ncf@sha256:abc", False),
        (f"europe-docker.pkg.dev/p/r/ncf@{DIGEST.upper()}", False),
        (f"@{DIGEST}", False),
    ],
)
def test_an_image_digest_must_be_well_formed(image, ok):
    problem = _image.digest_problem(image, "--image")
    assert (problem is None) == ok
    assert ok or "--image" in problem and "NAME@sha256:DIGEST" in problem


def _compile(tmp_path, name, *argv):
    from pipelines import cli, compiled

    path = tmp_path / f"{name}.yaml"
    code = cli.main(["compile", "--output", str(path), *argv])
    spec = compiled.load_template(str(path)).spec if code == 0 else None
    return code, (compiled.images_named(spec) if spec else None)


def _movable_warning(caplog) -> list[str]:
    found = [r.getMessage() for r in caplog.records if "names images by tag" in r.getMessage()]
    caplog.clear()
    return found


@pytest.mark.slow
def test_compile_pins_images_by_digest_and_warns_about_movable_tags(tmp_path, caplog, capsys):
    repo = "europe-docker.pkg.dev/p/r/ncf-pipelines"
    version = _image.package_version()
    profile = ["--profile", "gpu-a100x8-dataflow", "--image-repository", repo]
    caplog.set_level(logging.WARNING, logger="ncf-pipelines")

    # Tags only: compiled as before, with a warning naming every movable image.
    code, images = _compile(tmp_path, "tags", *profile)
    assert code == 0 and images == [f"{repo}:{version}-{v}" for v in ("cpu", "dataflow", "gpu")]
    (warning,) = _movable_warning(caplog)
    assert all(i in warning for i in images) and "--image-digest" in warning

    # Two of three pinned: the template names the digests; the warning names the third only.
    gpu = "sha256:" + "cd" * 32
    pins = ["--image-digest", f"cpu={DIGEST}", "--image-digest", f"gpu={gpu}"]
    code, images = _compile(tmp_path, "some", *profile, *pins)
    assert code == 0
    assert images == [f"{repo}:{version}-dataflow", f"{repo}@{DIGEST}", f"{repo}@{gpu}"]
    (warning,) = _movable_warning(caplog)
    assert f"{repo}:{version}-dataflow" in warning and f"{version}-cpu" not in warning

    # All pinned: no warning. So is one image given by digest (--image), written as is.
    code, _ = _compile(tmp_path, "all", *profile, *pins, "--image-digest", f"dataflow={DIGEST}")
    assert code == 0 and _movable_warning(caplog) == []
    one = f"{repo}@{DIGEST}"
    code, images = _compile(tmp_path, "one", "--profile", "gpu-a100", "--image", one)
    assert code == 0 and images == [one] and _movable_warning(caplog) == []
    capsys.readouterr()

    # Refused, naming the option, with no template left behind.
    for argv, message in [
        ([*profile, "--image-digest", "gpu=sha256:abc"], "64 lowercase hex"),
        ([*profile, "--image-digest", f"arm={DIGEST}"], "no image variant 'arm'"),
        (["--profile", "cpu", "--image-digest", f"gpu={DIGEST}"], "runs no gpu image"),
        (["--profile", "cpu", "--image", "x@sha256:abc"], "--image 'x@sha256:abc' is not"),
        (["--profile", "cpu", "--image", one, "--image-digest", f"cpu={DIGEST}"], "with --image"),
    ]:
        code, _ = _compile(tmp_path, "bad", *argv)
        assert code == 2 and message in capsys.readouterr().err, argv
        assert not (tmp_path / "bad.yaml").exists()


# --- Dependency audit (make audit, tools/audit.py) ---------------------------------------------


def _audit(tmp_path, dependencies, accepted=None):
    audit = load_script("tools/audit.py")

    report = tmp_path / "report.json"
    report.write_text(json.dumps({"dependencies": dependencies, "fixes": []}))
    argv = ["--report", str(report)]
    if accepted is not None:
        (tmp_path / "accepted.toml").write_text(accepted)
        argv += ["--accepted", str(tmp_path / "accepted.toml")]
    return audit.main(argv)


PYARROW_CVE = {
    "id": "GHSA-5wvp-7f3h-6wmm",  # The service may report the GHSA id: the alias matches.
    "aliases": ["CVE-2023-47248"],
    "fix_versions": ["14.0.1"],
    "description": "...",
}


def test_the_audit_accepts_only_listed_findings_at_their_locked_version(tmp_path, capsys):
    clean = {"name": "numpy", "version": "1.26.4", "vulns": []}
    pyarrow = {"name": "pyarrow", "version": "10.0.1", "vulns": [PYARROW_CVE]}
    assert _audit(tmp_path, [clean, pyarrow]) == 0  # tools/audit_accepted.toml's entry.
    out = capsys.readouterr().out
    assert "accepted" in out and "pyarrow 10.0.1: GHSA-5wvp-7f3h-6wmm (fixed in: 14.0.1)" in out

    new = {"id": "PYSEC-2099-1", "aliases": [], "fix_versions": [], "description": "..."}
    assert _audit(tmp_path, [{**pyarrow, "vulns": [PYARROW_CVE, new]}]) == 1
    assert "NOT ACCEPTED" in capsys.readouterr().out
    # Accepted for 10.0.1 only: the same advisory at another version is not accepted, and the
    # entry that matched nothing is named stale.
    assert _audit(tmp_path, [{**pyarrow, "version": "11.0.0"}]) == 1
    out = capsys.readouterr().out
    assert "pyarrow 11.0.0" in out and "stale" in out and "pyarrow 10.0.1: PYSEC-2023-238" in out


def test_the_audit_fails_when_the_service_could_not_look_packages_up(tmp_path, capsys):
    """pip-audit skips a package it cannot look up and still says "No known vulnerabilities
    found" (exit 0): what it does on a machine whose PyPI has no JSON API. That is no audit."""
    skipped = {
        "name": "pyarrow",
        "skip_reason": "Dependency not found on PyPI and could not be audited: pyarrow (10.0.1)",
    }
    assert _audit(tmp_path, [skipped, {"name": "numpy", "version": "1", "vulns": []}]) == 2
    captured = capsys.readouterr()
    assert "1 package(s) could not be looked up" in captured.err and "pyarrow" in captured.err
    assert "stale" not in captured.out  # Nothing was matched because nothing was looked up.


def test_every_accepted_finding_says_why(tmp_path):
    audit = load_script("tools/audit.py")

    entries = audit.load_accepted(audit.ACCEPTED)
    assert entries and all(len(e["why"]) > 40 for e in entries)
    with pytest.raises(SystemExit, match=r"accepted.toml: accepted entry 1 has no why"):
        _audit(tmp_path, [], '[[accepted]]\nid = "X"\npackage = "p"\nversion = "1"\n')


def test_the_offline_snapshot_matches_by_osv_rules():
    """The snapshot audit (what CI runs): OSV's events on PEP 440 versions, and listed versions."""
    audit = load_script("tools/audit.py")
    from packaging.version import Version

    rng = {"type": "ECOSYSTEM", "events": [{"introduced": "1.0"}, {"fixed": "1.2"}]}
    last = {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"last_affected": "0.9"}]}
    affected = {"package": "p", "ranges": [rng, last], "versions": ["3.0rc1"]}
    hit = {v: audit._affects(affected, Version(v)) for v in ["0.1", "0.9", "0.9.1", "1.0", "1.1.9"]}
    hit |= {v: audit._affects(affected, Version(v)) for v in ["1.2", "2.0", "3.0rc1"]}
    assert hit == {
        **{"0.1": True, "0.9": True, "0.9.1": False, "1.0": True, "1.1.9": True},
        **{"1.2": False, "2.0": False, "3.0rc1": True},
    }
    # A GIT range (commit ids) is not a version range: it neither matches nor names a fix.
    git = {"package": "p", "ranges": [{"type": "GIT", "events": [{"introduced": "0"}]}]}
    assert not audit._affects(git, Version("1.0"))

    # The committed snapshot: the pyarrow advisory at the locked version, not at its fix; an
    # old TensorFlow's many advisories (a control that the file is matched at all).
    snapshot = json.loads(audit.SNAPSHOT.read_text())
    report = audit.snapshot_report(
        {"pyarrow": "10.0.1", "numpy": "1.26.4", "tensorflow": "2.6.0"}.items(), snapshot
    )
    found = {d["name"]: [v["id"] for v in d["vulns"]] for d in report["dependencies"]}
    assert "PYSEC-2023-238" in found["pyarrow"] and len(found["tensorflow"]) > 10
    fixed = audit.snapshot_report([("pyarrow", "14.0.1")], snapshot)["dependencies"][0]["vulns"]
    assert "PYSEC-2023-238" not in [v["id"] for v in fixed]
    # The snapshot covers every package uv.lock names (else the audit refuses: see main).
    assert audit.locked_names() <= set(snapshot["packages"])


def test_the_snapshot_audit_runs_over_the_lock_and_refuses_a_stale_snapshot(
    tmp_path, capsys, monkeypatch
):
    import tomllib

    audit = load_script("tools/audit.py")

    # uv's export of each set, as every pin of uv.lock (under `uv run`, `python3 -m uv` is the
    # venv's Python, which has no uv; `make audit` runs the real export).
    lock = tomllib.loads((audit.REPO / "uv.lock").read_text())["package"]
    pinned = tmp_path / "requirements-all.txt"
    pinned.write_text("".join(f"{p['name']}=={p['version']}\n" for p in lock if "version" in p))
    monkeypatch.setattr(audit, "export", lambda work, uv: [pinned])
    assert audit.main(["--work", str(tmp_path / "w")]) == 0  # Today's lock: accepted only.
    out = capsys.readouterr().out
    assert "PyPA Advisory Database as of" in out and "pyarrow 10.0.1: PYSEC-2023-238" in out

    snapshot = json.loads(audit.SNAPSHOT.read_text())
    snapshot["packages"].remove("numpy")
    (tmp_path / "old.json").write_text(json.dumps(snapshot))
    argv = ["--work", str(tmp_path / "w"), "--snapshot", str(tmp_path / "old.json")]
    assert audit.main(argv) == 2
    assert "was made before uv.lock named numpy" in capsys.readouterr().err
