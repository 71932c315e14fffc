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
import sys
import traceback

from pipelines.commands._shared import UserError
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
    from training_core.common.folder_lock import FolderBusyError

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


if __name__ == "__main__":
    sys.exit(main())
