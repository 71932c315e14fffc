"""``ncf-pipelines recommend``: every user's top-k items, in bulk (Beam RunInference)."""

from __future__ import annotations

import argparse

from pipelines.commands._shared import add_beam_pipeline_args, beam_pipeline_args, example_epilog
from pipelines.commands.config_options import add_config_options, given_options
from training_core.serving.batch_recommend import RecommendConfig


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "recommend",
        help="write every user's top-k items (raw ids) as Parquet or JSON Lines",
        description=(
            "Run the exported model's 'recommend' signature for every user of the prepared data "
            "(Apache Beam RunInference: in process here, on Dataflow with --beam-pipeline-args) "
            "and write one row per user: user_id, item_ids (best first), scores, the user's "
            "seen items (every item the data holds for them) left out; --users: only those users. "
            "Ids are of the data's kind: integers, or strings (JSON strings, Parquet string "
            "columns) for data with string ids. The folder is published complete or not at all; "
            "manifest.json lists its files. See docs/after-training.md."
        ),
        epilog=example_epilog(
            "ncf-pipelines recommend --model exports/ml-1m --data data/ml-1m --output recs/ml-1m",
            "ncf-pipelines recommend --model exports/ml-1m --data data/ml-1m --output recs.jsonl.d "
            "--format jsonl --top-k 5",
            "ncf-pipelines recommend --model exports/books --data data/books --output recs/some "
            "--format jsonl --users u-1 u-2",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="the exported SavedModel folder")
    p.add_argument("--data", required=True, help="the prepared dataset it was trained on")
    p.add_argument("--output", required=True, help="folder to write (replaced when complete)")
    # One option per field with help (its metadata); --users takes one id or more, as text (the
    # export's kind decides how they are read: batch_recommend.parse_users).
    add_config_options(p, RecommendConfig, users={"nargs": "+", "metavar": "USER_ID"})
    add_beam_pipeline_args(p, "the recommendation job")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Writes the recommendations and says where and how fast."""
    from training_core.common import faults
    from training_core.serving.batch_recommend import recommend

    with faults.writing("the recommendations", args.output, option="--output"):
        given = given_options(args, RecommendConfig)
        if "users" in given:
            given["users"] = tuple(given["users"])
        result = recommend(
            RecommendConfig(
                export_dir=args.model,
                data_dir=args.data,
                output_dir=args.output,
                pipeline_args=beam_pipeline_args(args),
                **given,
            )
        )
    print(
        f"wrote top {result.top_k} items for {result.num_users:,} users to {result.output_dir} "
        f"({', '.join(result.files)}) in {result.seconds:.1f}s "
        f"({result.users_per_second:,.0f} users/s)"
    )
    return 0
