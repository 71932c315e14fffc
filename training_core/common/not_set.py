"""How "not set" is written, in Python and in KFP parameters: the one convention.

In Python (the configs, the CLI) an option that is not set is ``None`` and keeps its default.
KFP parameters cannot carry ``None`` through every runner: with kfp 2.13, ``kfp.local`` fails on
an optional pipeline parameter left unset ("Unknown value type") and on an unset optional integer
input of a component (``int(None)``). So in KFP parameters "not set" is the type's zero value,
``0`` or ``""``, for exactly the options whose default is ``None`` (e.g. ``epochs`` 0: the
preset's). ``from_kfp`` turns those zeros back into ``None``; the components call it through
their step's ``from_parameters``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def from_kfp(parameters: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` that are options (keys of ``defaults``), a zero value meaning "not set".

    A zero value (``0``, ``0.0``, ``""``) of an option whose default is ``None`` becomes ``None``;
    names that are not options are left out.
    """
    out = {}
    for name, value in parameters.items():
        if name not in defaults:
            continue
        if defaults[name] is None and value in (0, "") and not isinstance(value, bool):
            value = None
        out[name] = value
    return out


def kfp_default(default: Any, kind: type) -> Any:
    """The KFP parameter default for an option's default: its zero value for ``None``."""
    return kind() if default is None else default
