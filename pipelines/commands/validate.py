"""``ncf-pipelines validate``: the TFDV data validation gate on raw interactions."""

from __future__ import annotations

import argparse
import sys

from pipelines.commands._shared import (
    add_beam_pipeline_args,
    add_input_arguments,
    beam_pipeline_args,
    example_epilog,
    input_columns,
)


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "validate",
        help="check raw interactions with TensorFlow Data Validation (a gate that blocks)",
        description=(
            "Compute TFDV statistics of raw interactions (same inputs as prepare-data) in an "
            "Apache Beam pipeline, infer a schema or check against a baseline schema, look for "
            "drift against baseline statistics, and write statistics, schema, anomalies and an "
            "HTML report to --output. Exits with status 2 and lists each anomaly on stderr when "
            "the data does not meet the schema (unless --warn-only). See docs/validation.md."
        ),
        epilog=example_epilog(
            "ncf-pipelines validate --input ml-20m/ --output val/ml-20m",
            "ncf-pipelines validate --input new/ratings.csv --output val/new --baseline val/ml-20m",
            "ncf-pipelines validate --input new/ratings.csv --output val/new "
            "--baseline-schema reviewed/schema.pbtxt --baseline-stats val/ml-20m "
            "--drift item_id=js:0.05",
            "ncf-pipelines validate --input /gcs/B/ml-25m/ratings.csv --output /gcs/B/val "
            '--beam-pipeline-args="--runner=DataflowRunner --project=P --region=R '
            '--temp_location=gs://B/tmp --sdk_container_image=IMAGE"',
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(
        p, required=True, help_text="ratings file or folder (as prepare-data)", id_type=True
    )
    _add_positive_rule_arguments(p)
    p.add_argument("--output", required=True, help="folder for statistics, schema, anomalies")
    p.add_argument(
        "--baseline",
        metavar="EARLIER_OUTPUT",
        help="the --output folder of an earlier validate run: check against its schema and for "
        "drift against its statistics (short for --baseline-schema and --baseline-stats with "
        "that folder)",
    )
    p.add_argument(
        "--baseline-schema",
        help="reviewed schema.pbtxt to check against: the file, its folder, or an earlier run's "
        "--output folder; default: infer one",
    )
    p.add_argument(
        "--baseline-stats",
        help="FeatureStats.pb of earlier data, to check for drift: the file, its folder, or an "
        "earlier run's --output folder",
    )
    p.add_argument(
        "--drift",
        action="append",
        default=[],
        metavar="FEATURE=linf:T|js:T",
        help="drift threshold for a feature (repeatable); default with --baseline-stats: "
        "js:0.1 for user_id, item_id and rating",
    )
    p.add_argument(
        "--drift-config", help="YAML/JSON mapping feature to 'linf:T' or 'js:T' (as --drift)"
    )
    p.add_argument(
        "--min-time",
        default="1995-01-01",
        help="earliest plausible timestamp, epoch seconds or YYYY-MM-DD (default 1995-01-01)",
    )
    p.add_argument(
        "--max-time",
        help="latest plausible timestamp, epoch seconds or YYYY-MM-DD (default: now + 1 day)",
    )
    p.add_argument(
        "--no-domain-checks",
        action="store_true",
        help="use the inferred or baseline schema as is, without the interaction-data checks",
    )
    p.add_argument(
        "--warn-only",
        action="store_true",
        help="report anomalies as a warning and exit 0 instead of blocking",
    )
    add_beam_pipeline_args(p, "the statistics (TFDV)")
    p.set_defaults(func=run)


def _add_positive_rule_arguments(p: argparse.ArgumentParser) -> None:
    """``--min-rating`` and ``--positive-events``, as prepare-data's (PrepareConfig's help).

    Here they only say which columns data prep will need: a numeric rating, an event column.
    """
    import dataclasses

    from training_core.data.config import PrepareConfig

    fields = {f.name: f for f in dataclasses.fields(PrepareConfig)}
    checks = {
        "min_rating": "here: the rating column must be there, in every row, and numeric",
        "positive_events": "here: the event column must be there",
    }
    for name, check in checks.items():
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=float if name == "min_rating" else str,
            default=fields[name].default,
            help=f"as prepare-data's: {fields[name].metadata['help']}; {check}",
        )


def run(args: argparse.Namespace) -> int:
    """Runs the gate; returns 2 (with the anomalies on stderr) when it blocks."""
    from training_core.data import validate
    from training_core.data.times import parse_time

    if args.baseline and (args.baseline_schema or args.baseline_stats):
        raise ValueError(
            "--baseline takes both the schema and the statistics of one earlier run; use it "
            "alone, or --baseline-schema and --baseline-stats"
        )
    drift = ()
    if args.drift_config:
        drift += validate.load_drift_file(args.drift_config)
    drift += tuple(validate.parse_drift(s) for s in args.drift)
    config = validate.ValidateConfig(
        input_path=args.input,
        outputs=validate.OutputPaths.under(args.output),
        format=args.format,
        columns=input_columns(args),
        baseline_schema=args.baseline or args.baseline_schema,
        baseline_statistics=args.baseline or args.baseline_stats,
        drift=drift,
        domain_checks=not args.no_domain_checks,
        min_timestamp=parse_time(args.min_time),
        max_timestamp=parse_time(args.max_time) if args.max_time else None,
        fail_on_anomalies=not args.warn_only,
        beam_pipeline_args=beam_pipeline_args(args),
        id_type=args.id_type,
        min_rating=args.min_rating,
        positive_events=args.positive_events,
    )
    try:
        result = validate.validate(config)
    except validate.ValidationFailed as e:
        print(f"ncf-pipelines validate: {e}", file=sys.stderr)
        return 2
    print(validate.summary(result))
    return 0
