"""``ncf-pipelines prepare-data``: raw ratings to pre-batched TFRecords."""

from __future__ import annotations

import argparse

from pipelines.cli import add_input_arguments, example_epilog, input_columns


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
    p.add_argument(
        "--min-ratings",
        type=int,
        default=20,
        help="drop users with fewer ratings (default 20 as the reference; 0 disables)",
    )
    p.add_argument(
        "--num-epochs",
        type=int,
        default=1,
        help="epochs of training data, each with a fresh negative draw (default 1)",
    )
    p.add_argument(
        "--num-neg", type=int, default=4, help="training negatives per positive (default 4)"
    )
    p.add_argument(
        "--eval-negatives", type=int, default=999, help="eval negatives per user (default 999)"
    )
    p.add_argument(
        "--eval-sampling",
        default="distinct",
        choices=["distinct", "reference"],
        help="distinct never-seen negatives (default), or the reference's sampling "
        "with replacement, for side-by-side comparison",
    )
    p.add_argument(
        "--train-batch-size",
        type=int,
        default=1024,
        help="rows per training record = global training batch (default 1024)",
    )
    p.add_argument(
        "--eval-batch-size",
        type=_positive_or_auto,
        default=None,
        help="rows per eval record; rounded to whole users (default auto)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--num-shards", type=int, help="user shards (default: 1 per 1M rows, >= 2)")
    p.add_argument("--workers", type=int, help="worker processes (default: one per CPU core)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace a different dataset already in --output"
    )
    p.add_argument(
        "--runner",
        default="local",
        choices=["local", "beam"],
        help="local: this machine (default); beam: an Apache Beam job, in-process unless "
        "--beam-pipeline-args names a runner (same output either way; see docs/beam.md)",
    )
    p.add_argument(
        "--beam-pipeline-args",
        default="",
        help='Beam/Dataflow options for --runner beam, one string after "=": '
        '--beam-pipeline-args="--runner=DataflowRunner '
        "--project=P --region=R --temp_location=gs://... --machine_type=n1-highmem-8 "
        '--max_num_workers=100 --sdk_container_image=IMAGE" (default: in-process runner)',
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Runs data preparation and prints a summary."""
    import shlex

    from training_core.data import prepare
    from training_core.data.sample_data import sample_path

    config = prepare.PrepareConfig(
        input_path=args.input or sample_path(),
        output_dir=args.output,
        format=args.format,
        columns=input_columns(args),
        min_ratings=args.min_ratings,
        num_epochs=args.num_epochs,
        num_neg=args.num_neg,
        eval_negatives=args.eval_negatives,
        eval_sampling=args.eval_sampling,
        train_batch_size=args.train_batch_size,
        eval_batch_size=args.eval_batch_size,
        seed=args.seed,
        num_shards=args.num_shards,
        workers=args.workers,
        overwrite=args.overwrite,
    )
    beam_args = shlex.split(args.beam_pipeline_args)
    if args.runner == "beam":
        from training_core.data import prepare_beam

        result = prepare_beam.run(config, "beam", beam_args)
    elif beam_args:
        raise ValueError("--beam-pipeline-args needs --runner beam")
    else:
        result = prepare.prepare(config)
    print(prepare.summary(result))
    return 0
