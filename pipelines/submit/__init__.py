"""Submitting a compiled pipeline to Vertex AI Pipelines, as a run or as a schedule.

``dry_run.describe(config)`` says what would be sent without any network call (``--dry-run``);
``vertex.submit(config)`` sends it through ``google.cloud.aiplatform.PipelineJob``. Inputs are
checked before any request: the fields against Vertex AI's rules (``request``, ``endpoints``),
parameters against the template's root inputs (converted to their declared types) and against
what the pipeline can run (``run_values``), and no value may hold a placeholder from the docs
(``pipelines.placeholder_values``). Errors from the service become a ``service.SubmitError``
whose message carries the service's own words and what to check.

The REST transport is used for every call, so what the tests exercise against the local
stand-in (``vertex_emulator/rest_service.py``) is the code path used against Vertex AI; nothing
here imports the emulator (tests/test_architecture.py).

A template may be a URL in Artifact Registry (``https://LOCATION-kfp.pkg.dev/...``,
``pipelines.template_registry``): ``registry_template.fetched_template`` downloads it once, every
check reads the local copy, and the job is created from that copy with the URL as its
``template_uri``, as aiplatform does when it downloads a registry template itself.
"""
