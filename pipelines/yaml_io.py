"""Reading and writing compiled pipelines' YAML with libyaml's C parser and emitter.

PyYAML's pure-Python ``safe_load``/``safe_dump`` take about 0.5 s each for one compiled template
(about 160 kB); its C classes (``CSafeLoader``, ``CSafeDumper``, built into PyYAML's wheels)
read and write the same documents about ten times faster, with the same safe constructors: no
tag can create a Python object. Where PyYAML was built without libyaml the pure-Python classes
are used; the documents read are the same either way.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
YAMLError = yaml.YAMLError


def load(stream: str | bytes | IO) -> Any:
    """``yaml.safe_load``, faster."""
    return yaml.load(stream, Loader=Loader)  # noqa: S506 (a safe loader)


def load_all(stream: str | bytes | IO) -> list[Any]:
    """``list(yaml.safe_load_all(stream))``, faster."""
    return list(yaml.load_all(stream, Loader=Loader))  # noqa: S506 (a safe loader)


def dump_all(documents: list[Any], stream: IO | None = None, **options: Any) -> str | None:
    """``yaml.safe_dump_all``, faster (block style, ``allow_unicode`` as given)."""
    return yaml.dump_all(documents, stream, Dumper=Dumper, **options)
