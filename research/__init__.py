"""Research beside the product: quality experiments, the JAX port of the training step.

Comparisons with other projects' code live in ``research/reference/``. Run each from the
repository root as a module, e.g. ``uv run python -m research.quality_curve`` (docs/benchmarks.md).
"""
