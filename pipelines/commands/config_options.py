"""Command-line options made from a step config's fields, so that an option is written once.

The configs (``training_core.data.config.PrepareConfig``,
``training_core.training.train_config.TrainOptions``,
``training_core.evaluation.eval_config.EvalOptions``) hold each option's default, and its help as
the field's ``dataclasses.field(metadata=...)``: plain data, so the core stays argparse-free. Read
here:

- ``help``: the option's help, ``{default}`` standing for the field's default (argparse's own
  ``%`` needs ``%%``). A field without it is not a command-line option (e.g.
  ``eval_users_multiple``, which only a pipeline sets).
- ``flag``: the option's name where it is not the field's (``--model`` for ``architecture``).
- ``aliases``: more names of the option (``--architecture``, the name a Vertex AI tuning trial
  passes: ``--FIELD=VALUE``).
- ``choices``, ``metavar``: as argparse takes them.
- ``type``: a parser of ``TYPES`` by name, where the field's type is not enough.
- ``action``: ``store_false`` for a ``bool`` field whose flag turns it off (``--include-seen``
  sets ``exclude_seen`` to ``False``).

Otherwise an ``int`` or ``float`` field parses as such and a ``bool`` one is a switch. Each option's
dest is its field; not given, it is ``None`` (a switch: ``False``), which keeps the config's
default (``pipelines.commands._shared.options`` passes it on).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any


def _positive_or_auto(text: str) -> int | None:
    # Its name is in argparse's message for a bad value ("invalid _positive_or_auto value").
    return None if text == "auto" else int(text)


# Parsers a field's metadata names with "type".
TYPES: dict[str, Callable[[str], Any]] = {"positive_or_auto": _positive_or_auto}


def flag(field: dataclasses.Field) -> str:
    """The option string of a config field: ``--min-ratings`` unless its metadata names one."""
    return field.metadata.get("flag", "--" + field.name.replace("_", "-"))


def _value_type(hint: Any) -> Any:
    """``int`` for ``int`` or ``int | None``: the type a value given on the command line has."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return hint


def add_config_options(
    parser: argparse.ArgumentParser, config_class: type, **settings: dict[str, Any]
) -> None:
    """Adds one option per field of ``config_class`` that has help, in the fields' order.

    Args:
        parser: the subcommand's parser.
        config_class: a config dataclass whose fields carry the metadata above.
        settings: by field, argparse settings the command adds where the config cannot say them
            (prepare-data's ``train_preset`` choices are training's presets, which data prep
            does not know).
    """
    hints = typing.get_type_hints(config_class)
    unknown = set(settings) - {f.name for f in dataclasses.fields(config_class)}
    if unknown:
        raise TypeError(f"not fields of {config_class.__name__}: {', '.join(sorted(unknown))}")
    for field in dataclasses.fields(config_class):
        meta = field.metadata
        if "help" not in meta:
            continue
        kwargs: dict[str, Any] = {
            "dest": field.name,
            "help": meta["help"].format(default=field.default),
        }
        value_type = _value_type(hints[field.name])
        if value_type is bool:
            # A switch; "store_false" for a flag that turns a default-on field off.
            kwargs["action"] = meta.get("action", "store_true")
        elif "type" in meta:
            kwargs["type"] = TYPES[meta["type"]]
        elif value_type in (int, float):
            kwargs["type"] = value_type
        if "choices" in meta:
            kwargs["choices"] = meta["choices"]
        if "metavar" in meta:
            kwargs["metavar"] = meta["metavar"]
        kwargs.update(settings.get(field.name, {}))
        parser.add_argument(flag(field), *meta.get("aliases", ()), **kwargs)


def given_options(args: argparse.Namespace, config_class: type) -> dict[str, Any]:
    """The options of ``config_class`` given on the command line (others keep their default)."""
    given = vars(args)
    return {
        f.name: given[f.name]
        for f in dataclasses.fields(config_class)
        if "help" in f.metadata and given.get(f.name) is not None
    }
