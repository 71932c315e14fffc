"""What the subcommands share: the one-line user error, common options and their readers.

Each ``pipelines/commands`` module imports these from here, never from ``pipelines.cli``, which
loads the command modules (``importlib``): an arrow back would be a circle no import graph shows
(tests/test_architecture.py forbids it).
"""

from __future__ import annotations

import argparse
import os


class UserError(Exception):
    """An error caused by input or options: printed as one clear message, no traceback."""


def project_and_region(args: argparse.Namespace) -> tuple[str, str]:
    """``--project`` and ``--region``, else ``GOOGLE_CLOUD_PROJECT``/``GOOGLE_CLOUD_REGION``.

    Raises:
        UserError: either is missing, naming the option and the variable.
    """
    project = args.project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    region = args.region or os.environ.get("GOOGLE_CLOUD_REGION")
    if not project:
        raise UserError("no project: pass --project or set GOOGLE_CLOUD_PROJECT")
    if not region:
        raise UserError("no region: pass --region or set GOOGLE_CLOUD_REGION")
    return project, region


def add_input_arguments(
    parser: argparse.ArgumentParser, required: bool, help_text: str, id_type: bool = False
) -> None:
    """The raw-input options that data prep and validation share (--input, --format, columns).

    ``id_type``: add ``--id-type`` too, for a command that does not take ``PrepareConfig``'s
    options (prepare-data has it as the ``id_type`` field's option, with the same help).
    """
    parser.add_argument("--input", required=required, help=help_text)
    from training_core.data.formats import FORMAT_ALIASES
    from training_core.data.io import EVENT_ALIASES, RATING_ALIASES

    parser.add_argument(
        "--format",
        default="auto",
        help=f"input layout: {', '.join(FORMAT_ALIASES)} (default auto: from the file names)",
    )
    parser.add_argument("--user-col", help="user id column of a csv/parquet table")
    parser.add_argument("--item-col", help="item id column of a csv/parquet table")
    parser.add_argument("--time-col", help="timestamp column of a csv/parquet table")
    parser.add_argument(
        "--rating-col",
        help="rating column of a csv/parquet table, read for --min-rating (default: the first "
        f"of {', '.join(RATING_ALIASES)}; MovieLens files: their rating)",
    )
    parser.add_argument(
        "--event-col",
        help="event column of a csv/parquet table, read for --positive-events (default: the "
        f"first of {', '.join(EVENT_ALIASES)})",
    )
    if id_type:
        import dataclasses

        from training_core.data.config import PrepareConfig

        (field,) = [f for f in dataclasses.fields(PrepareConfig) if f.name == "id_type"]
        parser.add_argument(
            "--id-type",
            dest="id_type",
            default=field.default,
            choices=field.metadata["choices"],
            help=field.metadata["help"],
        )


def add_beam_pipeline_args(parser: argparse.ArgumentParser, what: str) -> None:
    """``--beam-pipeline-args``, as every subcommand that can run on Apache Beam takes it."""
    parser.add_argument(
        "--beam-pipeline-args",
        action="append",
        default=[],
        metavar='"--runner=... ..."',
        help=f"Apache Beam pipeline options for {what}, shell-quoted (repeatable), e.g. "
        '--beam-pipeline-args="--runner=DataflowRunner --project=P --region=R '
        '--temp_location=gs://B/tmp --sdk_container_image=IMAGE"; default: in process '
        "(Beam's FnApiRunner)",
    )


def beam_pipeline_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The Beam options ``add_beam_pipeline_args`` collected, one option per item."""
    import shlex

    return tuple(a for given in args.beam_pipeline_args for a in shlex.split(given))


def options(args: argparse.Namespace, names: tuple[str, ...]) -> dict:
    """The parsed values of the options among ``names`` (a config's fields) this parser has."""
    given = vars(args)
    return {name: given[name] for name in names if name in given}


def input_columns(args: argparse.Namespace):
    """The ``training_core.data.io.Columns`` the input options name."""
    from training_core.data import io as rio

    return rio.Columns(args.user_col, args.item_col, args.time_col, args.rating_col, args.event_col)


def add_param_option(
    parser: argparse.ArgumentParser,
    help: str = "pipeline parameter (repeatable); converted to the declared type",
) -> None:
    """The one ``--param NAME=VALUE`` option (read with ``submit.request.parse_assignments``)."""
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help=help)


def example_epilog(*lines: str) -> str:
    """An ``Example:`` block for a subcommand's --help."""
    return "Example:\n" + "\n".join(f"  {line}" for line in lines)
