# ncf-pipelines: `make help` lists the targets. Every target sets up what it needs first.
UV_VERSION := 0.13.8
UV := python3 -m uv
PYTEST_ARGS ?=

.PHONY: help setup run test test-fast lint format bench-prepare bench-reference bench-quality clean

help: ## Show this help.
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-15s %s\n", $$1, $$2}'

setup: ## Install uv and the locked environment into .venv (idempotent).
	@python3 -m uv --version >/dev/null 2>&1 || python3 -m pip install --quiet "uv==$(UV_VERSION)"
	$(UV) sync --frozen

run: setup ## Main job: the whole pipeline locally (kfp.local) on the embedded sample data.
	$(UV) run ncf-pipelines run-local --pipeline-root out/local-runs

test: setup ## Run the whole test suite, slow tests included (what CI runs).
	$(UV) run pytest -q --durations=15 $(PYTEST_ARGS)

test-fast: setup ## Run the tests without the ones marked slow.
	$(UV) run pytest -q -m "not slow" $(PYTEST_ARGS)

lint: setup ## Ruff lint and format check.
	$(UV) run ruff check .
	$(UV) run ruff format --check .

format: setup ## Apply ruff formatting and safe fixes.
	$(UV) run ruff format .
	$(UV) run ruff check --fix .

bench-prepare: setup ## Data-prep benchmark on ml-1m and ml-20m shaped synthetic data.
	$(UV) run python bench/prepare_speed.py --shapes ml-1m ml-20m

bench-reference: setup ## Side by side with TF Model Garden's NCF: data prep, training speed.
	bash bench/reference/setup_reference_env.sh
	$(UV) run python bench/prep_vs_reference.py --rounds 3
	$(UV) run python bench/train_vs_reference.py --rounds 3

bench-quality: setup ## HR@10/NDCG@10 per epoch, ours vs the reference (writes docs/quality-curve.md).
	bash bench/reference/setup_reference_env.sh
	$(UV) run python bench/quality_curve.py --epochs 5 --docs

clean: ## Remove outputs (keeps .venv).
	rm -rf out .pytest_cache
