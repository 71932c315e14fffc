"""``ncf-pipelines prepare-data``: raw ratings to pre-batched TFRecords."""

from __future__ import annotations

import argparse

from pipelines.commands._shared import (
    add_beam_pipeline_args,
    add_input_arguments,
    beam_pipeline_args,
    example_epilog,
    input_columns,
    options,
)
from pipelines.commands.config_options import add_config_options
from training_core.data.config import (
    OPTIONS,
    RUNNER_BEAM,
    RUNNER_LOCAL,
    RUNNERS,
    PrepareConfig,
    prepare_config,
)
from training_core.training.presets import PRESET_NAMES
from training_core.training.train_config import with_training_epochs


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "prepare-data",
        help="turn raw ratings into pre-batched NCF TFRecords",
        description=(
            "Read raw ratings (any MovieLens layout, or a CSV/Parquet table with user, item and "
            "timestamp columns; ids may be integers or strings, --id-type), hold out each "
            "user's latest interaction, draw training negatives per epoch and eval candidates, "
            "and write pre-batched TFRecords with metadata.json. Rows rated below --min-rating, "
            "or of events not in --positive-events, count as seen, not as positives: never "
            "drawn as negatives, never recommended back. Without --input, the embedded sample "
            "data is used."
        ),
        epilog=example_epilog(
            "ncf-pipelines prepare-data --input ml-1m/ --output data/ml-1m --num-epochs 3",
            "ncf-pipelines prepare-data --input events.parquet --user-col uid --item-col sku "
            "--time-col ts --output data/events",
            "ncf-pipelines prepare-data --input shop.csv --id-type string --event-col action "
            "--positive-events purchase,add_to_cart --output data/shop",
            "ncf-pipelines prepare-data --input ml-1m/ --min-rating 4 --output data/ml-1m-liked",
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
    # One option per PrepareConfig field with help (its metadata); the presets are training's.
    add_config_options(p, PrepareConfig, train_preset={"choices": PRESET_NAMES})
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
    from training_core.data import prep_result, prepare
    from training_core.data.sample_data import sample_path

    config = prepare_config(
        args.input or sample_path(),
        args.output,
        columns=input_columns(args),
        **options(args, OPTIONS),
    )
    config = with_training_epochs(config)  # What training runs decides the epochs prepared.
    result = prepare.run(config, args.runner, beam_pipeline_args(args))
    print(prep_result.summary(result))
    return 0
