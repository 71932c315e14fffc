"""Subcommands of the ncf-pipelines CLI."""
