"""Vertex AI's (and Google Cloud's) naming rules: the forms a name must take to be accepted.

One home for the patterns that ``submit`` checks a submission against before sending it and
that ``verify``'s custom-job checks (and its JobService stand-in) apply to a request, so both
refuse the same names. Match with ``fullmatch``.
"""

from __future__ import annotations

import re

# A project id (6-30 lowercase letters, digits and '-', starting with a letter), optionally
# behind a domain ("example.com:my-project").
PROJECT_ID = re.compile(r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
# A VPC network as Vertex AI peers with it: the project's number, not its id.
NETWORK = re.compile(r"projects/[0-9]+/global/networks/[^/\s]+")
# A service account is named by its email.
SERVICE_ACCOUNT = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
# A resource's parent: projects/PROJECT/locations/LOCATION.
PARENT = re.compile(r"projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)")
# A Cloud Storage bucket (the pipeline root's).
BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
# Labels: keys start with a lowercase letter; keys and values at most 63 lowercase letters,
# digits, '_' or '-'; at most 64 labels.
LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
MAX_LABELS = 64
# An Experiment is a Vertex ML Metadata context whose id is the experiment name, and
# CreateContextRequest.context_id "Must be 4-128 characters in length. Valid characters are
# /[a-z][0-9]-/" (Vertex AI v1 API reference).
EXPERIMENT = re.compile(r"[a-z0-9][a-z0-9-]{3,127}")
