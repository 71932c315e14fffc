"""The template a submission runs when it is a registry URL: downloaded once, checked as a file.

``fetched_template`` gives the config a local copy to read and send, and records the URL as the
job's ``template_uri``; a local template passes unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator

from pipelines.submit.endpoints import REGISTRY_ENDPOINT, api_endpoint_problem
from pipelines.submit.request import SubmitConfig
from pipelines.submit.service import SubmitError, default_credentials

_LOG = logging.getLogger(__name__)


@contextlib.contextmanager
def fetched_template(config: SubmitConfig) -> Iterator[SubmitConfig]:
    """``config`` with a registry template downloaded; a local template passes unchanged.

    ``template_path`` becomes the local copy (kept while the context is open), ``template_uri``
    the URL. The download uses ``config.credentials``, else Application Default Credentials.

    Raises:
        ValueError: a malformed registry URL or endpoint, before any request.
        SubmitError: the registry refused (an unknown tag names the repository's tags).
    """
    import tempfile

    from pipelines import template_registry

    if not template_registry.is_registry_url(config.template_path):
        yield config
        return
    ref = template_registry.parse_template(config.template_path)
    problem = api_endpoint_problem(config.registry_endpoint, REGISTRY_ENDPOINT)
    if problem:
        raise ValueError(problem)
    credentials = config.credentials or default_credentials()
    with tempfile.TemporaryDirectory(prefix="ncf-template-") as folder:
        try:
            got = template_registry.download(
                ref,
                os.path.join(folder, f"{ref.package}.yaml"),
                credentials=credentials,
                endpoint=config.registry_endpoint,
            )
        except template_registry.TemplateRegistryError as e:
            raise SubmitError(str(e)) from e
        _LOG.info("template %s is version %s", ref.url, got.version)
        yield dataclasses.replace(config, template_path=got.path, template_uri=ref.url)
