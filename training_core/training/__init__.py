"""Training: the model, the step, the loop, the optimizer, strategies, presets and options."""
