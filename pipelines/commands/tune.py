"""``ncf-pipelines tune``: search training options on prepared data (Optuna, resumable)."""

from __future__ import annotations

import argparse

from pipelines.commands._shared import example_epilog
from pipelines.commands.config_options import add_config_options, given_options
from training_core.tune import TuneConfig


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "tune",
        help="search learning rate, sizes, L2 and batch size for the data (Optuna)",
        description=(
            "Run --trials training runs on --data, each with options drawn from the search "
            "space (Optuna's TPE sampler), each reporting its metric after every epoch, "
            "measured on the data's validation split (the test split for data prepared with "
            "--no-validation); a trial below the median of the earlier ones at the same epoch "
            "is stopped early. The best run's test-split number is printed beside it, reported "
            "and never chosen on. Before the "
            "trials, the preset's own values train once, outside the search (--trials N costs N+1 "
            "trainings): the bar the trials must clear, so the best is never worse than the "
            "preset on this data. The study is kept in --work-dir: run the same command again "
            "to resume or to add trials. The same search-space file drives the pipeline's "
            "Vertex AI tuning job (docs/training.md, 'Tuning')."
        ),
        epilog=example_epilog(
            "ncf-pipelines tune --data data/ml-1m --work-dir tune/ml-1m --preset ml-1m "
            "--trials 20 --epochs 10",
            "ncf-pipelines tune --data data/ml-1m --work-dir tune/mf --model mf "
            "--search-space my_space.yaml",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, help="prepared dataset folder (metadata.json)")
    p.add_argument(
        "--work-dir", required=True, help="the study, each trial's model, tune_results.json"
    )
    add_config_options(p, TuneConfig)  # One option per field (its metadata).
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Tunes and prints the best options, as train flags."""
    from training_core import tune

    given = given_options(args, TuneConfig)
    result = tune.tune(
        TuneConfig(
            data_dir=args.data,
            work_dir=args.work_dir,
            **given,
        )
    )
    done = sum(t["state"] == "COMPLETE" for t in result.trials)
    pruned = sum(t["state"] == "PRUNED" for t in result.trials)
    print(
        f"{len(result.trials)} trials ({done} complete, {pruned} stopped early) in "
        f"{result.seconds:.0f}s"
    )
    print(tune.describe(result))
    return 0
