"""``make image-check``: every Dockerfile stage's install, reproduced where there is no Docker.

1. Builder (on this machine, like the Dockerfile's builder, wheels-<variant> and project stages):
   ``tools/install_locked.sh`` exports each variant's locked set from uv.lock, fills one wheelhouse
   (hash-checked downloads; the sdist-only packages built with this machine's compiler) and builds
   the project wheel. The result is laid out like the builder's ``/stage`` and ``/dist``.
2. A clean root: Debian bookworm (python3 is 3.11, as in ``python:3.11-slim``) made with
   ``debootstrap --variant=minbase`` with only ``python3`` and ``python3-venv``; no compiler (the
   check asserts it). Made once and kept under ``out/image-check/rootfs``.
3. For each variant, a throw-away copy of that root (an overlay) with ``/stage`` and ``/dist``
   bind-mounted read-only where the Dockerfile mounts them; then the Dockerfile's own final
   stage is executed in it, read from the Dockerfile: its ``ENV`` lines (those of the stages it
   derives from too) and its ``RUN`` commands, verbatim, under ``chroot``. The RUN is
   ``install_locked.sh install`` (offline, ``--no-build``) followed by ``tools/verify_image.py``.
   Afterwards ``python3`` on the stage's PATH must be the venv's and print the variant's tag.
4. buildah (installed with apt-get when missing): the Dockerfile itself, every stage, built
   without a daemon (``buildah bud --target VARIANT``). No registry is reachable, so
   ``PYTHON_IMAGE`` is a stand-in for python:3.11-slim made from the clean root (plus
   python3-dev for Python's headers, which python:3.11-slim has too). The image is then probed
   (python3, tag, no compiler, no wheelhouse left) and deleted.

``--engines chroot`` runs 1-3 only (fast; caches kept), ``--engines buildah`` only 2 and 4.
The tpu stage is expected to stop with the "no libtpu" reason (exit 3; docs/images.md, "TPU"):
that is reported as a known blocker, not a failure, and any other tpu problem fails the check.

Downloads are kept between runs (the wheelhouse under ``out/image-check/stage/wheels`` and pip's
wheel cache under ``out/image-check/pip-cache``), so a second run downloads nothing.
Needs root (chroot, mount), Python 3.11 with pip, a C++ compiler (build-essential is installed
with apt-get when missing) and ``debootstrap`` (likewise). Timings and sizes are printed and
written to ``out/image-check/report.txt``.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INSTALL = REPO / "tools" / "install_locked.sh"
SUITE = "bookworm"  # Debian 12, whose python3 is 3.11 like python:3.11-slim's.
ROOT_PACKAGES = ("python3", "python3-venv")
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++")
NO_LIBTPU = 3  # tools/verify_image.py's exit status for "tpu environment without libtpu".
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def log(message: str) -> None:
    """One progress line, flushed at once (CI logs)."""
    print(f"[image-check] {message}", flush=True)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Runs a command, echoing it first; raises on failure unless check=False."""
    kwargs.setdefault("check", True)
    log("$ " + shlex.join(cmd))
    return subprocess.run(cmd, **kwargs)


class Timings:
    """Wall-clock seconds and outcome per named step, in order."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float, str]] = []
        self.failed = False

    def measure(self, name: str, func, *args) -> bool:
        """Calls ``func(*args)`` and records how long it took and what it returned (or raised).

        Returns:
            Whether the step succeeded.
        """
        start = time.monotonic()
        try:
            outcome = str(func(*args) or "ok")
        except (Exception, SystemExit) as error:  # noqa: BLE001 - reported, then the run fails
            outcome = f"FAILED: {error}"
            self.failed = True
        self.steps.append((name, time.monotonic() - start, outcome))
        log(f"{name}: {time.monotonic() - start:.0f} s: {outcome}")
        return not outcome.startswith("FAILED")


# ---------------------------------------------------------------------------------------------
# The Dockerfile, read (only what the final stages need).


def dockerfile_stages(path: Path) -> dict[str, dict]:
    """Stages by name: ``{"parent": str, "instructions": [(KEYWORD, text), ...]}``."""
    stages: dict[str, dict] = {}
    current: dict | None = None
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if logical and line.startswith("#"):
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, rest = logical.partition(" ")
        keyword = keyword.upper()
        logical = ""
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else words[0]
            current = {"parent": words[0], "instructions": []}
            stages[name] = current
        elif current is not None:
            current["instructions"].append((keyword, rest.strip()))
    return stages


def stage_chain(stages: dict[str, dict], name: str) -> list[dict]:
    """The stage and the stages it derives from, base first (external images left out)."""
    chain = []
    while name in stages:
        chain.append(stages[name])
        name = stages[name]["parent"]
    return list(reversed(chain))


def apply_env(env: dict[str, str], text: str) -> None:
    """Applies one ``ENV K=V ...`` instruction to ``env`` ($VAR and ${VAR} expanded)."""
    for item in shlex.split(text):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"Dockerfile: unsupported ENV form {text!r} (use K=V)")
        value = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), ""), value)
        env[key] = value


MOUNT = re.compile(r"^--mount=(\S+)\s+")


def split_run(text: str) -> tuple[list[dict[str, str]], str]:
    """A RUN instruction's ``--mount`` options (as dicts) and its shell command."""
    mounts = []
    while match := MOUNT.match(text):
        mounts.append(dict(part.split("=", 1) for part in match.group(1).split(",")))
        text = text[match.end() :]
    return mounts, text


# ---------------------------------------------------------------------------------------------
# Steps.


def builder(variants: list[str], work: Path) -> str:
    """The builder stages' work, on this machine: /stage (req, wheels, tools, bin/uv) and /dist."""
    stage, dist = work / "stage", work / "dist"
    env = dict(os.environ, PIP_CACHE_DIR=str(work / "pip-cache"), BUILD_PYTHON=sys.executable)
    for variant in variants:
        run([str(INSTALL), "requirements", variant, str(stage / "req")], env=env, cwd=REPO)
        run([str(INSTALL), "wheels", variant, str(stage / "req"), str(stage / "wheels")], env=env)
    run([str(INSTALL), "project", str(dist)], env=env, cwd=REPO)
    shutil.rmtree(stage / "tools", ignore_errors=True)
    (stage / "tools").mkdir(parents=True)
    for name in ("install_locked.sh", "wheelhouse.py", "verify_image.py"):
        shutil.copy2(REPO / "tools" / name, stage / "tools" / name)
    uv = subprocess.run(
        [sys.executable, "-c", "import uv; print(uv.find_uv_bin())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (stage / "bin").mkdir(exist_ok=True)
    shutil.copy2(uv, stage / "bin" / "uv")
    return f"{len(list((stage / 'wheels').glob('*.whl')))} wheels"


def ensure_rootfs(work: Path, mirror: str) -> str:
    """The clean root (made once; remade when its package list changes)."""
    rootfs, stamp = work / "rootfs", f"{SUITE} {' '.join(ROOT_PACKAGES)}\n"
    ready = rootfs / ".ncf-image-check"
    if ready.exists() and ready.read_text() == stamp:
        return "reused"
    if shutil.which("debootstrap") is None:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"])
    tmp = work / "rootfs.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(rootfs, ignore_errors=True)
    run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(ROOT_PACKAGES)}"]
        + [SUITE, str(tmp), mirror],
        stdout=subprocess.DEVNULL,
    )
    shutil.rmtree(tmp / "var" / "cache" / "apt" / "archives", ignore_errors=True)
    (tmp / ".ncf-image-check").write_text(stamp)
    tmp.rename(rootfs)
    return "made"


def mount(stack: ExitStack, args: list[str], target: Path) -> None:
    """Mounts and registers the unmount."""
    run(["mount", *args, str(target)])
    stack.callback(subprocess.run, ["umount", "-l", str(target)], check=False)


def bind_ro(stack: ExitStack, source: Path, target: Path) -> None:
    """A read-only bind mount."""
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    mount(stack, ["--bind", str(source)], target)
    run(["mount", "-o", "remount,bind,ro", str(target)])


def remove_unless_mounted(path: Path) -> None:
    """Deletes ``path`` unless something is still mounted below it."""
    prefix = str(path) + "/"
    with open("/proc/mounts") as mounts:
        busy = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    if busy:
        log(f"not removing {path}: still mounted: {busy}")
    else:
        shutil.rmtree(path, ignore_errors=True)


def variant_root(stack: ExitStack, work: Path, variant: str) -> Path:
    """A throw-away copy of the clean root (overlay; a plain copy where overlay is missing)."""
    base = work / "run" / variant
    if base.exists():
        subprocess.run(
            ["umount", "-R", "-l", str(base / "root")], check=False, stderr=subprocess.DEVNULL
        )
        remove_unless_mounted(base)
    for part in ("upper", "work", "root"):
        (base / part).mkdir(parents=True)
    stack.callback(remove_unless_mounted, base)
    options = f"lowerdir={work / 'rootfs'},upperdir={base / 'upper'},workdir={base / 'work'}"
    try:
        mount(stack, ["-t", "overlay", "overlay", "-o", options], base / "root")
    except subprocess.CalledProcessError:
        log("overlay mount failed; copying the clean root instead")
        (base / "root").rmdir()
        shutil.copytree(work / "rootfs", base / "root", symlinks=True)
    return base / "root"


def chroot(root: Path, env: dict[str, str], command: str, **kwargs):
    """``sh -c command`` inside ``root`` with exactly ``env``."""
    pairs = [f"{k}={v}" for k, v in env.items()]
    return run(
        ["chroot", str(root), "/usr/bin/env", "-i", *pairs, "/bin/sh", "-c", command], **kwargs
    )


def check_variant(work: Path, variant: str, stages: dict[str, dict], version: str) -> str:
    """The Dockerfile's final stage ``variant``, executed in a clean root."""
    if variant not in stages:
        raise SystemExit(f"Dockerfile has no stage named {variant!r}")
    host_dirs = {"/stage": work / "stage", "/dist": work / "dist"}
    env = {"PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
    with ExitStack() as stack:
        root = variant_root(stack, work, variant)
        mount(stack, ["-t", "proc", "proc"], root / "proc")
        mount(stack, ["-t", "tmpfs", "tmpfs"], root / "dev" / "shm")
        found = chroot(
            root,
            env,
            "for c in " + " ".join(COMPILERS) + "; do command -v $c; done",
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if found:
            raise SystemExit(f"the clean root has a compiler: {found}")
        status = 0
        for stage in stage_chain(stages, variant):
            for keyword, text in stage["instructions"]:
                if keyword == "ENV":
                    apply_env(env, text)
                elif keyword == "RUN":
                    mounts, command = split_run(text)
                    with ExitStack() as run_mounts:
                        for spec in mounts:
                            source = host_dirs.get(spec.get("source", ""))
                            if spec.get("type") != "bind" or source is None:
                                raise SystemExit(f"image_check.py does not know mount {spec}")
                            bind_ro(run_mounts, source, root / spec["target"].lstrip("/"))
                        status = chroot(root, env, command, check=False).returncode
                    if status:
                        break
                elif keyword not in ("ARG", "LABEL", "WORKDIR", "USER", "CMD", "ENTRYPOINT"):
                    raise SystemExit(f"image_check.py does not reproduce {keyword} ({variant})")
            if status:
                break
        if env.get("NCF_PIPELINES_IMAGE_VARIANT") != variant:
            raise SystemExit(f"stage {variant} does not set NCF_PIPELINES_IMAGE_VARIANT={variant}")
        if variant == "tpu" and status == NO_LIBTPU:
            return "KNOWN BLOCKER: no libtpu for tensorflow-tpu 2.16 on PyPI (stage stops loudly)"
        if status:
            raise SystemExit(f"stage {variant}: RUN failed with exit status {status}")
        venv = env.get("VIRTUAL_ENV", "/opt/venv")
        probe = chroot(root, env, probe_script(variant), capture_output=True, text=True)
        tag = check_probe(probe.stdout, venv, version, variant)
        size = subprocess.run(
            ["du", "-sh", str(root / venv.lstrip("/"))], capture_output=True, text=True, check=True
        ).stdout.split()[0]
        return f"ok, {tag}, venv {size}"


def probe_script(variant: str) -> str:
    """Shell run in a finished image: which python3, its tag, any compiler or build leftovers."""
    return (
        f"command -v python3; python3 -m components._image --variant {variant}; "
        f"for c in {' '.join(COMPILERS)}; do command -v $c >/dev/null && echo compiler:$c; done; "
        "for d in /stage/wheels /dist/*.whl; do [ -e $d ] && echo leftover:$d; done; true"
    )


def check_probe(output: str, venv: str, version: str, variant: str) -> str:
    """Checks probe_script's output; returns the image's tag as the image itself prints it."""
    lines = output.split()
    problems = [line for line in lines if line.startswith(("compiler:", "leftover:"))]
    if problems:
        raise SystemExit(f"stage {variant}: {problems}")
    if (
        lines[:1] != [f"{venv}/bin/python3"]
        or not lines[1:2]
        or not lines[1].endswith(f":{version}-{variant}")
    ):
        raise SystemExit(f"stage {variant}: python3 and tag on PATH are {lines}")
    return lines[1]


# ---------------------------------------------------------------------------------------------
# The Dockerfile itself, built with buildah (no daemon) on a stand-in for python:3.11-slim.

BASE_IMAGE = "localhost/ncf-pipelines-check-base:bookworm"
CHECK_IMAGE = "localhost/ncf-pipelines-check"


def ensure_buildah() -> str:
    """Installs buildah from Debian's archive when missing; returns its version."""
    if shutil.which("buildah") is None:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "buildah"])
    return subprocess.run(
        ["buildah", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()


def buildah_base(work: Path) -> str:
    """Builds a stand-in for python:3.11-slim (no registry is reachable here).

    The clean root plus python3-dev (python:3.11-slim ships Python's headers too) and this
    machine's CA bundle, so pip and uv in the builder trust what this machine trusts. No compiler.
    """
    ctr = subprocess.run(
        ["buildah", "from", "scratch"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        mnt = subprocess.run(
            ["buildah", "mount", ctr], capture_output=True, text=True, check=True
        ).stdout.strip()
        run(["cp", "-a", f"{work / 'rootfs'}/.", mnt])
        Path(mnt, ".ncf-image-check").unlink(missing_ok=True)
        bundle = Path("/etc/ssl/certs/ca-certificates.crt")
        if bundle.exists():
            Path(mnt, "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
            shutil.copy2(bundle, Path(mnt, "etc/ssl/certs/ca-certificates.crt"))
        run(["buildah", "umount", ctr], stdout=subprocess.DEVNULL)
        cert = "/etc/ssl/certs/ca-certificates.crt"
        run(
            [
                "buildah",
                "config",
                "--env",
                f"PATH={DEFAULT_PATH}",
                "--env",
                "LANG=C.UTF-8",
                "--env",
                f"SSL_CERT_FILE={cert}",
                "--env",
                f"PIP_CERT={cert}",
                ctr,
            ]
        )
        run(
            [
                "buildah",
                "run",
                "--isolation",
                "chroot",
                ctr,
                "--",
                "sh",
                "-c",
                "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                "--no-install-recommends python3-dev >/dev/null && rm -rf /var/lib/apt/lists/*",
            ]
        )
        run(["buildah", "commit", "--quiet", "--rm", ctr, BASE_IMAGE], stdout=subprocess.DEVNULL)
    except BaseException:
        subprocess.run(["buildah", "rm", ctr], check=False, capture_output=True)
        raise
    return BASE_IMAGE


def buildah_variant(variant: str, uv_version: str | None, version: str) -> str:
    """``buildah bud --target VARIANT`` of the Dockerfile, then the image probed."""
    tag = f"{CHECK_IMAGE}:{variant}"
    # --layers=false: buildah 1.28 (Debian 12) mishandles RUN --mount=from=<stage> when that
    # stage comes from its layer cache (buildah issues 4375 and 4522), so build every stage.
    cmd = [
        "buildah",
        "bud",
        "--isolation",
        "chroot",
        "--pull=never",
        "--layers=false",
        "--force-rm",
        "--build-arg",
        f"PYTHON_IMAGE={BASE_IMAGE}",
        "--target",
        variant,
        "--tag",
        tag,
        "--file",
        str(REPO / "Dockerfile"),
    ]
    if uv_version:
        cmd += ["--build-arg", f"UV_VERSION={uv_version}"]
    log("$ " + shlex.join([*cmd, str(REPO)]))
    tail: list[str] = []
    with subprocess.Popen(
        [*cmd, str(REPO)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        for line in proc.stdout:
            if "is ignored: it is neither a file nor a directory" not in line:
                print(line, end="", flush=True)
            tail = (tail + [line])[-50:]
    try:
        if (
            variant == "tpu"
            and proc.returncode == NO_LIBTPU
            and any("no libtpu" in line for line in tail)
        ):
            return "KNOWN BLOCKER: the tpu stage stops with the no-libtpu reason, as designed"
        if proc.returncode:
            raise SystemExit(f"buildah bud --target {variant} failed ({proc.returncode})")
        ctr = subprocess.run(
            ["buildah", "from", "--pull=never", tag], capture_output=True, text=True, check=True
        ).stdout.strip()
        try:
            probe = subprocess.run(
                [
                    "buildah",
                    "run",
                    "--isolation",
                    "chroot",
                    ctr,
                    "--",
                    "sh",
                    "-c",
                    probe_script(variant),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            env = subprocess.run(
                [
                    "buildah",
                    "run",
                    "--isolation",
                    "chroot",
                    ctr,
                    "--",
                    "sh",
                    "-c",
                    "echo $VIRTUAL_ENV $NCF_PIPELINES_IMAGE_VARIANT",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
        finally:
            subprocess.run(["buildah", "rm", ctr], check=False, capture_output=True)
        if env[1:] != [variant]:
            raise SystemExit(f"image {variant}: NCF_PIPELINES_IMAGE_VARIANT is {env[1:]}")
        image_tag = check_probe(probe.stdout, env[0], version, variant)
        size = subprocess.run(
            ["buildah", "images", "--format", "{{.Size}}", tag],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"ok, {image_tag}, image {size} (on the stand-in base)"
    finally:
        subprocess.run(["buildah", "rmi", "--force", tag], check=False, capture_output=True)
        # Stage images a --layers=false build leaves behind, untagged.
        subprocess.run(["buildah", "rmi", "--prune"], check=False, capture_output=True)


def disk_usage(*paths: Path) -> str:
    """``du -sh`` of the paths that exist."""
    existing = [str(p) for p in paths if p.exists()]
    if not existing:
        return ""
    return subprocess.run(["du", "-sh", *existing], capture_output=True, text=True).stdout


def image_variants() -> tuple[str, ...]:
    """``components/_image.py``'s VARIANTS, read without importing it (that needs the package)."""
    tree = ast.parse((REPO / "components" / "_image.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "VARIANTS" for t in node.targets
        ):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit("components/_image.py defines no VARIANTS")


def main(argv: list[str] | None = None) -> int:
    """Runs the check; returns the exit status."""
    variants = image_variants()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=variants, default=list(variants))
    parser.add_argument("--work", type=Path, default=REPO / "out" / "image-check")
    parser.add_argument(
        "--mirror", default=os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
    )
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=("chroot", "buildah"),
        default=["chroot", "buildah"],
        help="chroot: each final stage's RUN in a clean root (fast, caches kept); buildah: the "
        "whole Dockerfile built without a daemon, every stage from scratch (slow)",
    )
    parser.add_argument(
        "--uv-version",
        help="the Makefile's UV_VERSION, compared with the "
        "Dockerfile's ARG UV_VERSION and the uv in use",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("make image-check needs root (debootstrap, mount, chroot)")
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("make image-check builds cp311 wheels: run it with Python 3.11")
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode:
        raise SystemExit(f"{sys.executable} has no pip (the builder steps run pip wheel)")
    dockerfile = REPO / "Dockerfile"
    if args.uv_version:
        pinned = re.search(r"^ARG UV_VERSION=(\S+)", dockerfile.read_text(), re.M)
        used = subprocess.run(
            [sys.executable, "-m", "uv", "--version"], capture_output=True, text=True, check=True
        ).stdout.split()[1]
        if not pinned or pinned.group(1) != args.uv_version or used != args.uv_version:
            raise SystemExit(
                f"uv versions differ: Makefile {args.uv_version}, Dockerfile "
                f"{pinned and pinned.group(1)}, in use {used}"
            )
    if shutil.which("g++") is None:
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "build-essential"])
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    stages = dockerfile_stages(dockerfile)
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)

    timings = Timings()
    ready = timings.measure("clean root (debootstrap bookworm)", ensure_rootfs, work, args.mirror)
    if ready and "chroot" in args.engines:
        if timings.measure(
            "chroot: builder (export, wheelhouse, project wheel)", builder, args.variants, work
        ):
            for variant in args.variants:
                timings.measure(
                    f"chroot: stage {variant} (install + verify in the clean root)",
                    check_variant,
                    work,
                    variant,
                    stages,
                    version,
                )
    if ready and "buildah" in args.engines:
        if timings.measure("buildah: install", ensure_buildah) and timings.measure(
            "buildah: stand-in base image", buildah_base, work
        ):
            for variant in args.variants:
                timings.measure(
                    f"buildah: build --target {variant} (every stage)",
                    buildah_variant,
                    variant,
                    args.uv_version,
                    version,
                )
    report = ["step | seconds | result", "--- | --- | ---"]
    report += [f"{name} | {seconds:.0f} | {outcome}" for name, seconds, outcome in timings.steps]
    report += [
        "",
        "disk:",
        disk_usage(work / "stage" / "wheels", work / "pip-cache", work / "rootfs"),
    ]
    (work / "report.txt").write_text("\n".join(report) + "\n")
    print("\n".join(report), flush=True)
    return 1 if timings.failed else 0


if __name__ == "__main__":
    sys.exit(main())
