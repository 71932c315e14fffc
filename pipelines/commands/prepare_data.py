"""``ncf-pipelines prepare-data``: raw ratings to pre-batched TFRecords."""

from __future__ import annotations

import argparse

from pipelines.cli import (
    add_beam_pipeline_args,
    add_input_arguments,
    beam_pipeline_args,
    example_epilog,
    input_columns,
    options,
)
from training_core.data.config import (
    DEFAULTS,
    OPTIONS,
    RUNNER_BEAM,
    RUNNER_LOCAL,
    RUNNERS,
    prepare_config,
)
from training_core.data.sampling import EVAL_DISTINCT, EVAL_SAMPLINGS
from training_core.presets import PRESET_NAMES


def _positive_or_auto(text: str) -> int | None:
    return None if text == "auto" else int(text)


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "prepare-data",
        help="turn raw ratings into pre-batched NCF TFRecords",
        description=(
            "Read raw ratings (any MovieLens layout, or a CSV/Parquet table with user, item and "
            "timestamp columns), hold out each user's latest interaction, draw training "
            "negatives per epoch and eval candidates, and write pre-batched TFRecords with "
            "metadata.json. Without --input, the embedded sample data is used."
        ),
        epilog=example_epilog(
            "ncf-pipelines prepare-data --input ml-1m/ --output data/ml-1m --num-epochs 3",
            "ncf-pipelines prepare-data --input events.parquet --user-col uid --item-col sku "
            "--time-col ts --output data/events",
            "ncf-pipelines prepare-data --input /gcs/b/raw/ --output /gcs/b/data --runner beam "
            '--beam-pipeline-args="--runner=DataflowRunner --project=P --region=us-central1 '
            '--temp_location=gs://b/tmp --max_num_workers=100"',
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(
        p, required=False, help_text="ratings file or folder (default: the embedded sample)"
    )
    p.add_argument("--output", required=True, help="folder to write the dataset into")
    # Each option's dest is its PrepareConfig field; None (not given) keeps the field's default.
    p.add_argument(
        "--min-ratings",
        type=int,
        help=f"drop users with fewer ratings (default {DEFAULTS['min_ratings']} as the "
        "reference; 0 disables)",
    )
    p.add_argument(
        "--num-epochs",
        type=int,
        help="epochs of training data, each with a fresh negative draw (default: as many as "
        "training runs, from --train-preset and --train-epochs; epochs trained past the prepared "
        "ones reuse their negatives and overfit)",
    )
    p.add_argument(
        "--train-preset",
        choices=PRESET_NAMES,
        help="the preset training will use (its --preset), for the default --num-epochs: its "
        f"epochs (default {DEFAULTS['train_preset']}: the preset for the data's size)",
    )
    p.add_argument(
        "--train-epochs",
        type=int,
        help="the epochs training will run (its --epochs), for the default --num-epochs "
        "(default: the preset's)",
    )
    p.add_argument(
        "--num-neg",
        type=int,
        help=f"training negatives per positive (default {DEFAULTS['num_neg']})",
    )
    p.add_argument(
        "--eval-negatives",
        type=int,
        help=f"eval negatives per user (default {DEFAULTS['eval_negatives']})",
    )
    p.add_argument(
        "--eval-sampling",
        choices=EVAL_SAMPLINGS,
        help=f"{EVAL_DISTINCT}: never-seen negatives without repeats (default), or "
        "the reference's sampling with replacement, for side-by-side comparison",
    )
    p.add_argument(
        "--train-batch-size",
        type=int,
        help="rows per training record = global training batch "
        f"(default {DEFAULTS['train_batch_size']})",
    )
    p.add_argument(
        "--eval-batch-size",
        type=_positive_or_auto,
        help="rows per eval record; rounded to whole users (default auto)",
    )
    p.add_argument("--seed", type=int, help=f"random seed (default {DEFAULTS['seed']})")
    p.add_argument("--num-shards", type=int, help="user shards (default: 1 per 1M rows, >= 2)")
    p.add_argument("--workers", type=int, help="worker processes (default: one per CPU core)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace a different dataset already in --output"
    )
    p.add_argument(
        "--runner",
        default=RUNNER_LOCAL,
        choices=RUNNERS,
        help=f"{RUNNER_LOCAL}: this machine (default); {RUNNER_BEAM}: an Apache Beam job, "
        "in-process unless --beam-pipeline-args names a runner (same output either way; see "
        "docs/beam.md)",
    )
    add_beam_pipeline_args(
        p, f"--runner {RUNNER_BEAM} (Dataflow: add --machine_type, --max_num_workers)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Runs data preparation and prints a summary."""
    from training_core.data import prepare, report
    from training_core.data.sample_data import sample_path

    config = prepare_config(
        args.input or sample_path(),
        args.output,
        columns=input_columns(args),
        **options(args, OPTIONS),
    )
    result = prepare.run(config, args.runner, beam_pipeline_args(args))
    print(report.summary(result))
    return 0
