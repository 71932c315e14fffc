"""The ``ncf-pipelines`` command line: one subcommand per module in ``pipelines/commands``.

Each command module defines ``register(subparsers)``, which adds its parser and sets ``func`` to a
function taking the parsed arguments and returning an exit code. Heavy imports (TensorFlow, KFP)
happen inside those functions, so ``--help`` stays fast and importing never needs cloud settings.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import sys
import traceback

from training_core.common.console import VERBOSE_ENV

# Order is the order shown in --help.
COMMAND_MODULES = (
    "prepare_data",
    "synth",
    "train",
    "evaluate",
    "export",
    "recommend",
    "tune",
    "validate",
    "profiles",
    "compile",
    "submit",
    "verify",
    "run_local",
    "templates",
    "rollout",
)


VERBOSE_HELP = (
    "print everything the libraries and each pipeline step print, and debug details (or set "
    f"{VERBOSE_ENV}=1)"
)


# Exit status of a fault of the machine (disk, memory; training_core.common.faults); bad input
# gives 2.
MACHINE_FAULT_EXIT = 1


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


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand of ``COMMAND_MODULES``."""
    parser = argparse.ArgumentParser(
        prog="ncf-pipelines",
        description=(
            "Neural Collaborative Filtering from raw interactions to a served model: "
            "data prep, training, evaluation and Kubeflow/Vertex AI pipelines."
        ),
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        # Every command must import: a missing one is a broken install, not an optional extra.
        importlib.import_module(f"pipelines.commands.{name}").register(sub)
    for command in sub.choices.values():  # Also after the subcommand; SUPPRESS keeps an earlier -v.
        command.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command = next(
            a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
        ).choices[args.command]
        command.error(unrecognized(unknown, command))  # Its usage, then exit 2.
    from training_core.common import console

    # Before any command imports TensorFlow; commands read the outcome as args.verbose.
    args.verbose = console.setup(True if args.verbose else None)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        handlers=[console.stderr_handler()],
    )
    from training_core.common import faults
    from training_core.common.atomic_writes import FolderBusyError

    try:
        return int(args.func(args) or 0)
    except Exception as e:
        # The machine's own faults first: a vanished mount is also a FileNotFoundError.
        message = faults.describe(e)
        if message is not None:
            if args.verbose:
                traceback.print_exc()
            print(f"ncf-pipelines {args.command}: error: {message}", file=sys.stderr)
            return MACHINE_FAULT_EXIT
        if isinstance(
            e, (UserError, ValueError, FileNotFoundError, FileExistsError, FolderBusyError)
        ):
            print(f"ncf-pipelines {args.command}: error: {e}", file=sys.stderr)
            return 2
        raise


def unrecognized(unknown: list[str], command: argparse.ArgumentParser) -> str:
    """What argparse says of arguments a command does not take, with the flag each one looks like.

    ``--model_dir`` gets "did you mean --model-dir?": the closest of the command's own flags, with
    ``_`` read as ``-``.
    """
    flags = [f for action in command._actions for f in action.option_strings if f.startswith("--")]
    said = []
    for arg in unknown:
        flag = arg.split("=", 1)[0]
        guess = flag.startswith("-") and difflib.get_close_matches(
            flag.replace("_", "-"), flags, n=1, cutoff=0.6
        )
        said.append(f"{arg} (did you mean {guess[0]}?)" if guess else arg)
    return f"unrecognized arguments: {' '.join(said)}"


def add_input_arguments(
    parser: argparse.ArgumentParser, required: bool, help_text: str, id_type: bool = False
) -> None:
    """The raw-input options that data prep and validation share (--input, --format, columns).

    ``id_type``: add ``--id-type`` too, for a command that does not take ``PrepareConfig``'s
    options (prepare-data has it as the ``id_type`` field's option, with the same help).
    """
    parser.add_argument("--input", required=required, help=help_text)
    from training_core.data.io import EVENT_ALIASES, FORMAT_ALIASES, RATING_ALIASES

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
    """The one ``--param NAME=VALUE`` option (read with ``submit.parse_assignments``)."""
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help=help)


def example_epilog(*lines: str) -> str:
    """An ``Example:`` block for a subcommand's --help."""
    return "Example:\n" + "\n".join(f"  {line}" for line in lines)


if __name__ == "__main__":
    sys.exit(main())
