# ncf-pipelines: `make help` lists the targets. Every target sets up what it needs first.
UV_VERSION := 0.13.8
UV := python3 -m uv
PYTEST_ARGS ?=
# pytest-xdist workers for make test/test-fast (docs/testing.md): one per core of a CI machine;
# --dist loadfile keeps each file's tests (and its module fixtures) on one worker, and
# --no-loadscope-reorder hands out the files in collection order (tests/conftest.py's
# START_FIRST, the longest, first). 0: no workers.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
# Images (docs/images.md): which variants (default: all of components/_image.py's VARIANTS), which
# repository (default: components/_image.py's IMAGE_REPOSITORY), which image-check engines.
IMAGE_VARIANTS ?=
IMAGE_REPOSITORY ?=
IMAGE_CHECK_ENGINES ?= chroot buildah
# make image / make push: IMAGE_USER=root builds the root variant, tagged ...-VARIANT-root (compile
# --image-user root names those): for a Vertex AI whose /gcs refuses uid 1000 (docs/images.md).
IMAGE_USER ?=
# make push: the profile whose images are built and pushed to IMAGE_REPOSITORY; DRY_RUN=1 prints.
PROFILE ?= cpu
DRY_RUN ?=
# Where image-check keeps its clean root and downloaded wheels between runs.
IMAGE_CHECK_WORK ?= out/image-check
# make audit: pip-audit's own venv (uv.lock's audit group) and the exports and report; where the
# advisories come from: snapshot (tools/advisories.json, offline; CI), pypi or osv (live, pip-audit).
AUDIT_WORK ?= out/audit
AUDIT_SERVICE ?= snapshot
# make mutants: which mutants of tools/mutants.py to run (ids, space-separated; default: all).
MUTANTS ?=
# make setup: where each set-up phase's output goes (V=1: to the terminal instead).
SETUP_LOG ?= out/setup.log
V ?=
logged = $(if $(V),$(1),$(1) >>$(SETUP_LOG) 2>&1 || { cat $(SETUP_LOG); echo "setup failed: the output above is also in $(SETUP_LOG)"; exit 1; })

.PHONY: help setup run test test-fast test-tpu-env report-check mutants lint format bench-prepare \
	bench-reference bench-quality image image-check pin-base push audit clean

help: ## Show this help.
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-15s %s\n", $$1, $$2}'

# --compile-bytecode: the .pyc files are written once here (about 35 s on 2 cores, then about
# 1.5 s per sync). Where PYTHONDONTWRITEBYTECODE=1 (set on some CI hosts) Python would otherwise
# compile TensorFlow from source in every process: 19 s per `import tensorflow` instead of 6.
# --extra serve: the serving image's web server (fastapi, starlette, uvicorn; pure Python), so the
# tests run the model server (tests/test_prediction_server.py).
# One line per phase; each phase's own output goes to $(SETUP_LOG), and is printed in full when the
# phase fails. V=1 prints it as it comes instead.
setup: ## Install uv and the locked environment into .venv (idempotent).
	@mkdir -p $(dir $(SETUP_LOG)) && : > $(SETUP_LOG)
	@python3 -m uv --version >/dev/null 2>&1 || { \
	  echo "setup: installing uv $(UV_VERSION) with pip"; \
	  $(call logged,python3 -m pip install --quiet "uv==$(UV_VERSION)"); }
	@echo "setup: the locked environment in .venv (uv sync; details in $(SETUP_LOG))"
	@$(call logged,$(UV) sync --frozen --compile-bytecode --extra serve)

run: setup ## Main job: the whole pipeline locally (kfp.local) on the embedded sample data.
	$(UV) run ncf-pipelines run-local --pipeline-root out/local-runs

# The tests that render the run report in headless Chromium are left out by name here and run
# by report-check, which installs Chromium first (docs/run-report.md). A -k in PYTEST_ARGS
# replaces this one.
NOT_BROWSER = -k "not chromium"
# The tests that train in the tpu image's TensorFlow need its environments: test-tpu-env runs them.
NOT_TPU_ENV = -m "not tpu_env"

test: setup ## Run the whole test suite, slow tests included (what CI runs; the browser's: report-check).
	$(UV) run pytest -q --durations=15 $(XDIST) $(NOT_BROWSER) $(NOT_TPU_ENV) $(PYTEST_ARGS)

test-fast: setup ## Run the tests without the ones marked slow.
	$(UV) run pytest -q -m "not slow and not tpu_env" $(XDIST) $(NOT_BROWSER) $(PYTEST_ARGS)

# make test-tpu-env: the tpu image's set (images/tpu/uv.lock: TensorFlow's TPU build) and the same
# TensorFlow release's CPU build (XLA on the CPU, which the TPU build lacks), each with the
# project installed without its dependencies, as the image installs it.
TPU_ENV ?= $(CURDIR)/.venv-tpu
XLA_ENV ?= $(CURDIR)/.venv-tpu-xla

test-tpu-env: setup ## Train, resume, evaluate across, XLA: the training path in the tpu image's TensorFlow (CI).
	@echo "test-tpu-env: $(TPU_ENV) and $(XLA_ENV) from images/tpu/uv.lock (details in $(SETUP_LOG))"
	@$(call logged,UV_PROJECT_ENVIRONMENT=$(TPU_ENV) $(UV) sync --project images/tpu --frozen \
		--group test --compile-bytecode)
	@$(call logged,UV_PROJECT_ENVIRONMENT=$(XLA_ENV) $(UV) sync --project images/tpu --frozen \
		--no-default-groups --group xla --group test --compile-bytecode)
	@$(call logged,$(UV) pip install --python $(TPU_ENV)/bin/python --no-deps --quiet -e .)
	@$(call logged,$(UV) pip install --python $(XLA_ENV)/bin/python --no-deps --quiet -e .)
	NCF_TPU_PYTHON=$(TPU_ENV)/bin/python NCF_XLA_PYTHON=$(XLA_ENV)/bin/python \
		$(UV) run pytest -q -m tpu_env $(PYTEST_ARGS) tests/test_tpu_env.py

# make report-check: where its run-local run goes, and Debian's Chromium package.
REPORT_CHECK_WORK ?= out/report-check
CHROMIUM_PACKAGE ?= chromium

report-check: setup ## A real run-local's report (and a recorded one) rendered in headless Chromium.
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "report-check: installing $(CHROMIUM_PACKAGE) (apt-get)"; \
	    apt-get update -qq && apt-get install -y -qq $(CHROMIUM_PACKAGE) >/dev/null; \
	  else \
	    echo "report-check needs Chromium: apt-get install $(CHROMIUM_PACKAGE) (as root)"; exit 1; \
	  fi; }
	@rm -rf $(REPORT_CHECK_WORK) && mkdir -p $(REPORT_CHECK_WORK)
	$(UV) run ncf-pipelines run-local --pipeline-root $(REPORT_CHECK_WORK)/runs \
		--registry $(REPORT_CHECK_WORK)/registry --param epochs=1 | tee $(REPORT_CHECK_WORK)/run.log
	@report=$$(tail -n 1 $(REPORT_CHECK_WORK)/run.log | sed -n 's/^Report: //p'); \
	  test -n "$$report" || { echo "run-local's last line names no report"; exit 1; }; \
	  NCF_RUN_REPORT="$$report" $(UV) run pytest -q -p no:cacheprovider -k chromium \
	    tests/test_run_report.py

mutants: setup ## Mutation check of the core's decision rules (tools/mutants.py; MUTANTS=id... for some).
	$(UV) run --frozen python tools/mutants.py $(if $(MUTANTS),--only $(MUTANTS))

lint: setup ## Ruff lint and format check.
	$(UV) run ruff check .
	$(UV) run ruff format --check .

format: setup ## Apply ruff formatting and safe fixes.
	$(UV) run ruff format .
	$(UV) run ruff check --fix .

bench-prepare: setup ## Data-prep benchmark on ml-1m and ml-20m shaped synthetic data.
	$(UV) run python -m bench.prepare_speed --shapes ml-1m ml-20m

bench-reference: setup ## Side by side with TF Model Garden's NCF: data prep, training speed.
	bash research/reference/setup_reference_env.sh
	$(UV) run python -m research.reference.prep_vs_reference --rounds 3
	$(UV) run python -m research.reference.train_vs_reference --rounds 3

bench-quality: setup ## HR@10/NDCG@10 per epoch, ours vs the reference (writes docs/quality-curve.md).
	bash research/reference/setup_reference_env.sh
	$(UV) run python -m research.quality_curve --epochs 5 --docs

image: setup ## Build every image variant (cpu, gpu, dataflow, tpu) with Docker; tags from components/_image.py.
	@command -v docker >/dev/null 2>&1 || { echo "make image needs Docker; without it: make image-check"; exit 1; }
	@set -e; for variant in $(or $(IMAGE_VARIANTS),$$($(UV) run --frozen python -c \
			'from components._image import VARIANTS; print(*VARIANTS)')); do \
		tag=$$($(UV) run --frozen python -m components._image --variant $$variant \
			$(if $(IMAGE_REPOSITORY),--repository $(IMAGE_REPOSITORY)) \
			$(if $(IMAGE_USER),--user $(IMAGE_USER))); \
		echo "== $$variant -> $$tag"; \
		DOCKER_BUILDKIT=1 docker build --build-arg UV_VERSION=$(UV_VERSION) \
			$(if $(IMAGE_USER),--build-arg IMAGE_USER=$(IMAGE_USER)) \
			--target $$variant --tag $$tag .; \
	done

pin-base: ## Pin the Dockerfile's base images to the digests their tags name now (Docker; then commit).
	python3 tools/image_check.py --pin-base

push: setup ## Build and push the images PROFILE's template runs to IMAGE_REPOSITORY (docs/submit.md).
	$(UV) run --frozen python -m pipelines.push_images --profile $(PROFILE) \
		$(if $(IMAGE_REPOSITORY),--repository $(IMAGE_REPOSITORY)) --uv-version $(UV_VERSION) \
		$(if $(IMAGE_USER),--user $(IMAGE_USER)) $(if $(DRY_RUN),--dry-run)

image-check: setup ## Without Docker: each stage's install (--no-build) in a clean root; buildah build (CI).
	python3 tools/image_check.py --uv-version $(UV_VERSION) --engines $(IMAGE_CHECK_ENGINES) \
		--work $(IMAGE_CHECK_WORK) \
		$(if $(IMAGE_VARIANTS),--variants $(IMAGE_VARIANTS))

audit: setup ## Dependency audit of uv.lock's sets (AUDIT_SERVICE=snapshot|pypi|osv); accepted findings: tools/audit_accepted.toml.
	UV_PROJECT_ENVIRONMENT=$(AUDIT_WORK)/venv $(UV) sync --frozen --only-group audit \
		--no-install-project --quiet
	$(AUDIT_WORK)/venv/bin/python tools/audit.py --uv "$(UV)" --work $(AUDIT_WORK) \
		--pip-audit $(AUDIT_WORK)/venv/bin/pip-audit --vulnerability-service $(AUDIT_SERVICE)

clean: ## Remove outputs (keeps .venv).
	rm -rf out .pytest_cache
