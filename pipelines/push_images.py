"""Build and push exactly the images one profile's compiled template names (``make push``).

The pipeline is compiled for the profile with ``--image-repository REPOSITORY`` (into a scratch
folder), and every ``REPOSITORY:TAG`` the template names is built from the Dockerfile stage of
its variant and pushed: the tags are the template's own, derived by ``components._image``, so
what is pushed is what the compiled template pulls. ``--dry-run`` prints the commands instead.
After the push, the digest each tag now names is read back (``docker image inspect``) and the
``compile --image-digest`` options that pin them are printed: a tag can be pushed again, a
digest cannot.

``python -m pipelines.push_images --profile gpu-a100 --repository R [--dry-run]``; ``make push
PROFILE=gpu-a100 IMAGE_REPOSITORY=R [DRY_RUN=1]`` runs it (docs/submit.md, step 4).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

# The Dockerfile's folder (the build context): the repository root of a clone.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def images_to_push(
    profile_name: str, repository: str, profiles_file: str | None = None, user: str = "1000:1000"
) -> list[tuple[str, str]]:
    """The ``(variant, tag)`` of every image the profile's template names, compiled for repository.

    ``user`` ``root``: the template ``compile --image-user root`` writes (the root variant's tags).

    Raises:
        ValueError: the repository holds a placeholder or is the placeholder repository, or the
            template names a tag of the repository that no variant has.
    """
    from components._image import DEFAULT_USER, IMAGE_REPOSITORY, VARIANTS, image_for
    from pipelines import compiled, pipeline, placeholder_values, profiles

    placeholder_values.check_placeholders({"IMAGE_REPOSITORY": (repository, "image repository")})
    if repository.rstrip("/") == IMAGE_REPOSITORY:
        raise ValueError(
            f"IMAGE_REPOSITORY {repository!r} is components/_image.py's placeholder repository; "
            f"name your own: {placeholder_values.WHAT_TO_PUT['image repository']}"
        )
    profile = profiles.get_profile(profile_name, profiles_file)
    with tempfile.TemporaryDirectory(prefix="ncf-push-") as scratch:
        path = pipeline.compile_pipeline(
            profile,
            os.path.join(scratch, "pipeline.yaml"),
            image_repository=repository,
            image_user=user,
        )
        tags = compiled.images_from(compiled.load_template(path).spec, repository)
    variant_of = {image_for(v, repository, u): v for v in VARIANTS for u in {DEFAULT_USER, user}}
    unknown = [t for t in tags if t not in variant_of]
    if unknown:
        raise ValueError(
            f"the {profile_name} template names {', '.join(unknown)}, which no image variant of "
            f"components/_image.py ({', '.join(VARIANTS)}) builds"
        )
    return [(variant_of[t], t) for t in tags]


def commands(builds: list[tuple[str, str]], uv_version: str) -> list[list[str]]:
    """``docker build`` (the variant's Dockerfile stage) then ``docker push``, for each image.

    A root variant's tag (``...-VARIANT-root``) is built with ``--build-arg IMAGE_USER=root``.
    """
    out = []
    for variant, tag in builds:
        user = ["--build-arg", "IMAGE_USER=root"] if tag.endswith(f"-{variant}-root") else []
        out.append(
            ["docker", "build", "--build-arg", f"UV_VERSION={uv_version}", *user]
            + ["--target", variant, "--tag", tag, "."]
        )
        out.append(["docker", "push", tag])
    return out


def repo_digest(tag: str, repository: str) -> str:
    """The ``sha256:...`` digest ``tag`` was pushed as (its RepoDigests entry for repository).

    Raises:
        ValueError: Docker knows no digest of it in that repository (not pushed).
    """
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", tag],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return digest_in(json.loads(out) or [], repository, tag)


def digest_in(repo_digests: list[str], repository: str, tag: str) -> str:
    """The digest of ``repository`` among Docker's ``RepoDigests`` (``REPO@sha256:...``)."""
    for ref in repo_digests:
        name, _, digest = ref.rpartition("@")
        if name == repository.rstrip("/"):
            return digest
    raise ValueError(f"docker knows no digest of {tag} in {repository}: was it pushed?")


def pin_options(repository: str, digests: dict[str, str]) -> str:
    """The compile options that pin each pushed variant: ``--image-digest VARIANT=sha256:...``."""
    return " ".join(
        [f"--image-repository {repository}"]
        + [f"--image-digest {variant}={digest}" for variant, digest in sorted(digests.items())]
    )


def main(argv: list[str] | None = None) -> int:
    """Builds and pushes (or prints, with --dry-run) the profile's images; the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu", help="hardware profile (default cpu)")
    parser.add_argument("--profiles-file", help="YAML file with custom profiles")
    parser.add_argument(
        "--repository",
        help="your Artifact Registry repository, REGION-docker.pkg.dev/PROJECT/REPOSITORY/"
        "ncf-pipelines (make push: IMAGE_REPOSITORY=...)",
    )
    parser.add_argument("--uv-version", required=True, help="the Makefile's UV_VERSION")
    parser.add_argument(
        "--user",
        default="1000:1000",
        choices=("1000:1000", "root"),
        help="IMAGE_USER: root builds and pushes the root variant (docs/images.md)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    args = parser.parse_args(argv)
    if not args.repository:
        parser.exit(
            2,
            "make push: error: name the repository to push to: make push PROFILE=... "
            "IMAGE_REPOSITORY=REGION-docker.pkg.dev/PROJECT/REPOSITORY/ncf-pipelines\n",
        )
    try:
        builds = images_to_push(args.profile, args.repository, args.profiles_file, args.user)
    except (ValueError, FileNotFoundError) as e:
        parser.exit(2, f"make push: error: {e}\n")
    print(f"profile {args.profile} runs {len(builds)} image(s):")
    for variant, tag in builds:
        print(f"  {variant:8} {tag}")
    if not args.dry_run and shutil.which("docker") is None:
        parser.exit(2, "make push: error: needs Docker (DRY_RUN=1 prints the commands)\n")
    if not os.path.isfile(os.path.join(_ROOT, "Dockerfile")):
        parser.exit(2, f"make push: error: no Dockerfile in {_ROOT}: run it in a clone\n")
    for command in commands(builds, args.uv_version):
        print("+ " + shlex.join(command), flush=True)
        if not args.dry_run:
            env = {**os.environ, "DOCKER_BUILDKIT": "1"}
            if subprocess.run(command, cwd=_ROOT, env=env, check=False).returncode:
                print(f"make push: error: {shlex.join(command)} failed", file=sys.stderr)
                return 1
    if not args.dry_run:
        digests = {v: repo_digest(tag, args.repository) for v, tag in builds}
        print(
            f"Pushed. Compile with: {pin_options(args.repository, digests)}"
            f"{' --image-user root' if args.user == 'root' else ''}\n"
            "(the digests pin what was pushed now; the tags alone would follow later pushes)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
