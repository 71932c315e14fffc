"""Evaluation: sampled and full-catalog metrics, the popularity baseline, the gate."""
