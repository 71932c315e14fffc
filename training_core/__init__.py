"""training_core."""
