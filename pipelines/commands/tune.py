"""``ncf-pipelines tune``: search training options on prepared data (Optuna, resumable)."""

from __future__ import annotations

import argparse

from pipelines.cli import example_epilog
from training_core.training.presets import ARCHITECTURES
from training_core.tune import METRICS, SEARCH_SPACE_FILE, TuneConfig


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "tune",
        help="search learning rate, sizes, L2 and batch size for the data (Optuna)",
        description=(
            "Run --trials training runs on --data, each with options drawn from the search "
            "space (Optuna's TPE sampler), each reporting its metric after every epoch; a trial "
            "below the median of the earlier ones at the same epoch is stopped early. Before the "
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
    p.add_argument(
        "--preset", default=TuneConfig.preset, help=f"start from this preset ({TuneConfig.preset})"
    )
    p.add_argument(
        "--model",
        dest="architecture",
        choices=ARCHITECTURES,
        help="the scorer to tune (default: the preset's)",
    )
    p.add_argument(
        "--trials", type=int, default=TuneConfig.trials, help=f"trials ({TuneConfig.trials})"
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=TuneConfig.epochs,
        help=f"epochs per trial ({TuneConfig.epochs})",
    )
    p.add_argument(
        "--search-space",
        help=f"search-space YAML (default: {SEARCH_SPACE_FILE}; metric one of "
        f"{', '.join(METRICS)})",
    )
    p.add_argument("--seed", type=int, default=TuneConfig.seed, help="sampler and training seed")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Tunes and prints the best options, as train flags."""
    from training_core import tune

    result = tune.tune(
        TuneConfig(
            data_dir=args.data,
            work_dir=args.work_dir,
            preset=args.preset,
            architecture=args.architecture,
            trials=args.trials,
            epochs=args.epochs,
            search_space=args.search_space,
            seed=args.seed,
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
