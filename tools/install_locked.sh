#!/usr/bin/env bash
# How an image variant's environment is made from uv.lock: the one home of these steps. The
# Dockerfile's stages run them and `make image-check` (tools/image_check.py) runs the very same
# ones without Docker, so the two cannot drift. docs/images.md explains the design.
#
#   install_locked.sh requirements VARIANT OUT
#       The set's lock -> OUT/SET.hashes.txt (every locked distribution of the set, hash-pinned)
#       and OUT/SET.txt (the same pins without hashes), and OUT/SET.left-out.txt: the packages
#       the set's pyproject.toml keeps out with [tool.uv] override-dependencies (keras), whose
#       absence the install step accepts. The cpu and gpu sets are uv.lock's (pyproject.toml in
#       the working directory); the tpu set is images/tpu/uv.lock's, a project of its own
#       (TensorFlow's TPU build is newer than the TensorFlow TFDV pins). Offline (--frozen).
#   install_locked.sh project OUT
#       The project's own wheel (training_core, components, pipelines, vertex_emulator) -> OUT.
#   install_locked.sh wheels VARIANT REQ OUT
#       The variant's wheelhouse -> OUT: `pip wheel --require-hashes --no-deps` downloads every
#       locked wheel (hash-checked against uv.lock) and builds a wheel from the hash-checked sdist
#       of each package that the lock has only as a source distribution (crcmod, google-apitools,
#       kfp, kfp-server-api, pyfarmhash, cloudml-hypertune; pyfarmhash needs a C++ compiler).
#       Network and compiler.
#   install_locked.sh install VARIANT REQ WHEELS DIST VENV
#       A fresh venv at VENV from `python3`, then exactly the pinned set from the wheelhouse:
#       `uv pip install --no-index --no-build` (offline; refuses to build anything), then the
#       project wheel from DIST, then `check` and `verify`. Needs uv (UV=... or on PATH).
#   install_locked.sh check VARIANT REQ PYTHON
#       `uv pip check` of PYTHON's environment: every installed distribution's requirements are
#       met, but for the packages REQ/SET.left-out.txt names (and, in the tpu set, the project's
#       own: that set holds only what the training step imports, which verify proves).
#   install_locked.sh verify VARIANT [PYTHON]
#       The checks a finished environment must pass (tools/verify_image.py).
#
# Variants are components/_image.py's VARIANTS; what each adds to the base set is export_args.
# The dataflow variant (Dataflow's worker image) installs the cpu set: lock_set names the set a
# variant installs, so REQ holds one file per set (cpu.txt serves cpu and dataflow). The serve
# variant (our model server) installs the cpu set with the serve extra, its own set (serve.txt).
set -euo pipefail

die() { echo "install_locked.sh: $*" >&2; exit 1; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The Python that runs pip and tools/wheelhouse.py in the builder steps ($BUILD_PYTHON, else
# python3). The install step always makes its venv from the image's own `python3`.
BUILD_PYTHON=${BUILD_PYTHON:-python3}

# The uv executable: $UV, else `uv` on PATH, else the one `python3 -m uv` runs.
if [ -z "${UV:-}" ]; then
  UV=$(command -v uv || python3 -c 'import uv; print(uv.find_uv_bin())' 2>/dev/null) \
    || die "uv not found (set UV=/path/to/uv)"
fi

# What `uv export` exports for each set: uv.lock's base dependencies (cpu), with the gpu extra
# (gpu), or images/tpu's own lock (tpu: tensorflow-tpu and libtpu, KFP, YAML; no TFDV).
TPU_PROJECT=images/tpu
export_args() {
  local lockset
  lockset=$(lock_set "$1") || exit 1
  case "$lockset" in
    cpu) ;;
    gpu) echo "--extra gpu" ;;
    serve) echo "--extra serve" ;;
    tpu) echo "--project $TPU_PROJECT" ;;
  esac
}

# The pyproject.toml that holds a set's override-dependencies.
set_pyproject() {
  case "$1" in
    tpu) echo "$TPU_PROJECT/pyproject.toml" ;;
    *) echo pyproject.toml ;;
  esac
}

lock_set() {
  case "$1" in
    cpu | dataflow) echo cpu ;;
    gpu | tpu | serve) echo "$1" ;;
    *) die "unknown variant '$1' (cpu, gpu, tpu, dataflow or serve)" ;;
  esac
}

cmd_requirements() {
  local variant args out=$2
  variant=$(lock_set "$1")
  args=$(export_args "$variant")
  mkdir -p "$out"
  # shellcheck disable=SC2086  # args is a list of flags
  "$UV" export --frozen --no-dev --no-emit-project --format requirements-txt --no-header \
    $args --output-file "$out/$variant.hashes.txt" >/dev/null
  # shellcheck disable=SC2086
  "$UV" export --frozen --no-dev --no-emit-project --format requirements-txt --no-header \
    --no-hashes --no-annotate $args --output-file "$out/$variant.txt" >/dev/null
  # The packages the lock leaves out on purpose: each override pinned to a marker no Python meets
  # (`name; python_version < '3'`). Their one home is the set's pyproject.toml; this file carries
  # the names to the install step, which has no pyproject.
  "$BUILD_PYTHON" - "$(set_pyproject "$variant")" > "$out/$variant.left-out.txt" <<'PY'
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    overrides = tomllib.load(f).get("tool", {}).get("uv", {}).get("override-dependencies", [])
for spec in overrides:
    name, _, marker = spec.partition(";")
    if re.fullmatch(r"\s*python_version\s*<\s*['\"]3['\"]\s*", marker):
        print(name.strip())
PY
  echo "$variant: $(grep -c '==' "$out/$variant.txt") locked distributions -> $out/$variant.txt" \
    "(left out on purpose: $(paste -sd ' ' "$out/$variant.left-out.txt"))"
}

cmd_project() {
  local out=$1
  mkdir -p "$out"
  rm -f "$out"/ncf_pipelines-*.whl
  "$UV" build --wheel --out-dir "$out" >/dev/null
  ls "$out"/ncf_pipelines-*.whl
}

cmd_wheels() {
  local variant req=$2 out=$3 todo
  variant=$(lock_set "$1")
  [ -f "$req/$variant.hashes.txt" ] || die "no $req/$variant.hashes.txt (run 'requirements' first)"
  mkdir -p "$out"
  # Only what the wheelhouse lacks (a re-run downloads nothing; see tools/wheelhouse.py).
  todo="$out/.todo-$variant.txt"
  "$BUILD_PYTHON" "$HERE/wheelhouse.py" missing "$req/$variant.hashes.txt" "$out" "$todo"
  if [ -s "$todo" ]; then
    # --no-deps: the export is the complete, resolved set. --require-hashes: every file, wheel
    # or sdist, must match a hash in uv.lock. Wheels are copied as they are; sdists are built,
    # always through PEP 517 in an isolated build environment (--use-pep517: older pips would
    # otherwise try `setup.py bdist_wheel` with whatever the builder happens to have).
    "$BUILD_PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --require-hashes \
      --use-pep517 --wheel-dir "$out" --requirement "$todo"
  fi
  rm -f "$todo"
  echo "$variant: wheelhouse $out ready"
}

cmd_install() {
  local variant=$1 req=$2 wheels=$3 dist=$4 venv=$5 project lockset
  lockset=$(lock_set "$variant")
  [ -f "$req/$lockset.txt" ] || die "no $req/$lockset.txt"
  project=$(ls "$dist"/ncf_pipelines-*.whl 2>/dev/null | head -n1)
  [ -n "$project" ] || die "no project wheel in $dist"
  # A venv without pip: the environment holds the locked set and nothing else.
  python3 -m venv --without-pip "$venv"
  # --no-index: only the wheelhouse; --no-build: a missing wheel is an error, never a build;
  # --no-deps: the pins are the complete resolved set (the export did the resolving), which is
  # also what lets the tpu set go without the project's data-validation stack.
  # --compile-bytecode: every container start would otherwise recompile TensorFlow & co.
  "$UV" pip install --python "$venv/bin/python" --no-index --no-build --no-deps \
    --find-links "$wheels" --requirement "$req/$lockset.txt" --no-cache --quiet \
    --compile-bytecode
  "$UV" pip install --python "$venv/bin/python" --no-index --no-build --no-deps \
    --no-cache --quiet --compile-bytecode "$project"
  cmd_check "$variant" "$req" "$venv/bin/python"
  cmd_verify "$variant" "$venv/bin/python3"
}

cmd_check() {
  local variant=$1 req=$2 python=$3 lockset
  lockset=$(lock_set "$variant")
  # Every installed distribution's requirements are met, except a requirement on a package the
  # set leaves out on purpose (REQ/SET.left-out.txt: keras, which TensorFlow names and nothing
  # here uses) and, in the tpu set, the project's own requirements: that set holds what the
  # training step imports and not the data-validation stack (verify imports the step).
  [ -f "$req/$lockset.left-out.txt" ] || die "no $req/$lockset.left-out.txt (run 'requirements' first)"
  local report problems name
  report=$("$UV" pip check --python "$python" 2>&1) \
    || grep -q '^The package' <<<"$report" || die "$variant: uv pip check failed:"$'\n'"$report"
  problems=$(grep '^The package' <<<"$report" || true)
  if [ "$lockset" = tpu ]; then
    problems=$(grep -v '^The package `ncf-pipelines` requires' <<<"$problems" || true)
  fi
  for name in $(cat "$req/$lockset.left-out.txt"); do
    problems=$(grep -v -E "requires \`${name//./\\.}[=<>!~ \`]" <<<"$problems" || true)
  done
  [ -z "$problems" ] || die "$variant: inconsistent environment:"$'\n'"$problems"
  echo "$variant: every requirement met (left out on purpose: $(paste -sd ' ' "$req/$lockset.left-out.txt"))"
}

cmd_verify() {
  local variant=$1 python=${2:-python3}
  export_args "$variant" >/dev/null
  # Quiet TensorFlow's C++ logging; the checks themselves are tools/verify_image.py.
  PYTHONWARNINGS=ignore::FutureWarning TF_CPP_MIN_LOG_LEVEL=2 "$python" "$HERE/verify_image.py" "$variant"
}

[ $# -ge 1 ] || die "usage: install_locked.sh requirements|project|wheels|install|check|verify ..."
command=$1
shift
case "$command" in
  requirements) [ $# -eq 2 ] || die "usage: requirements VARIANT OUT"; cmd_requirements "$@" ;;
  project) [ $# -eq 1 ] || die "usage: project OUT"; cmd_project "$@" ;;
  wheels) [ $# -eq 3 ] || die "usage: wheels VARIANT REQ OUT"; cmd_wheels "$@" ;;
  install) [ $# -eq 5 ] || die "usage: install VARIANT REQ WHEELS DIST VENV"; cmd_install "$@" ;;
  check) [ $# -eq 3 ] || die "usage: check VARIANT REQ PYTHON"; cmd_check "$@" ;;
  verify) [ $# -ge 1 ] || die "usage: verify VARIANT [PYTHON]"; cmd_verify "$@" ;;
  *) die "unknown command '$command'" ;;
esac
