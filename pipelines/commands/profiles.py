"""``ncf-pipelines profiles``: the hardware profile catalogue."""

from __future__ import annotations

import argparse

from pipelines.commands._shared import example_epilog


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "profiles",
        help="list the hardware profiles (machine per step, training strategy)",
        description=(
            "Print the hardware profiles a pipeline can be compiled for: the training machine(s), "
            "accelerator, strategy and data machine of each, built-in and from --profiles-file. "
            "Each profile is checked (preflight); problems are listed under the table."
        ),
        epilog=example_epilog(
            "ncf-pipelines profiles",
            "ncf-pipelines profiles --profiles-file my-profiles.yaml",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--profiles-file", help="YAML file with custom profiles")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Prints the catalogue and any profile that would not pass preflight."""
    from pipelines import profiles

    print(profiles.catalogue(args.profiles_file))
    catalogue = dict(profiles.BUILTIN)
    if args.profiles_file:
        catalogue.update(profiles.load_profiles(args.profiles_file))
    bad = 0
    for profile in catalogue.values():
        try:
            profiles.preflight(profile)
        except profiles.ProfileError as e:
            bad += 1
            print(f"\n{e}")
    return 2 if bad else 0
