"""User-facing errors raised on the Beam workers of data prep, marked for the launcher to decode.

A worker's exception reaches the launcher as a Beam traceback; the marker (``[ncf-error ...]``,
the payload in base64 JSON) survives it, so the launcher (``prepare_beam``) re-raises the single
path's own error: a bad line named by its number, the ids' kinds, an empty table.
"""

from __future__ import annotations

import base64
import json
import re
import traceback

from training_core.data import read_errors

_MARK = re.compile(r"\[ncf-error ([A-Za-z0-9+/=]+)\]")


class _Reported(Exception):
    """A user-facing error raised inside the job, with its payload encoded for the launcher."""

    def __init__(self, payload: dict):
        blob = base64.b64encode(json.dumps(payload).encode()).decode()
        super().__init__(f"{payload.get('message', payload)} [ncf-error {blob}]")


def report(kind: str, error: Exception | str, **extra) -> _Reported:
    """The error to raise on a worker: ``kind`` tells the launcher how to re-raise it."""
    return _Reported({"kind": kind, "message": str(error), **extra})


def decode_failure(error: BaseException) -> dict | None:
    """The payload a job failure carries (from :func:`report`), or None when it is not ours."""
    text = "".join(traceback.format_exception(error))
    found = _MARK.search(text)
    return json.loads(base64.b64decode(found.group(1))) if found else None


def reporting(fn):
    """Runs ``fn``, turning DataError/ValueError into a marked error the launcher decodes."""

    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except read_errors.DataError as e:
            raise report("data", e) from None
        except ValueError as e:
            raise report("value", e) from None

    wrapper.__name__ = wrapper.__qualname__ = fn.__name__
    return wrapper
