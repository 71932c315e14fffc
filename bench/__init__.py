"""The product's speed benchmarks: data prep, validation, training, evaluation, serving.

Run each from the repository root as a module, e.g. ``uv run python -m bench.prepare_speed``
(docs/benchmarks.md).
"""
