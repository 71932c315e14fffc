"""Serving: the export, batch recommendations, the model registries, deployment."""
