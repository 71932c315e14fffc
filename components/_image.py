"""The one container image every component runs in (see Dockerfile).

Pipelines compile with this image unless ``--image`` (or ``NCF_PIPELINES_IMAGE`` read by the CLI)
names another; components never read the environment themselves.
"""

DEFAULT_IMAGE = "us-docker.pkg.dev/ncf-pipelines/images/ncf-pipelines:0.1.0"
