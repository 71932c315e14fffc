"""``ncf-pipelines synth``: write MovieLens-like synthetic ratings with a planted structure."""

from __future__ import annotations

import argparse

from pipelines.commands._shared import example_epilog


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "synth",
        help="write synthetic MovieLens-like ratings (planted latent factors)",
        description=(
            "Generate ratings whose structure a trained model can learn (users pick items by "
            "latent factors plus popularity), in any MovieLens layout or as CSV/Parquet. Shapes "
            "default to a public MovieLens set's user, item and rating counts."
        ),
        epilog=example_epilog(
            "ncf-pipelines synth --shape ml-20m --layout ml-20m --output /tmp/ml-20m-synth",
            "ncf-pipelines synth --users 5000 --items 2000 --interactions 300000 "
            "--layout parquet --output /tmp/events.parquet",
            "ncf-pipelines synth --shape ml-100k --structure movielens --output /tmp/ml-100k-like",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--shape", default="ml-100k", help="ml-100k (default), ml-1m, ml-20m or tiny")
    p.add_argument("--users", type=int, help="override the number of users")
    p.add_argument("--items", type=int, help="override the number of items")
    p.add_argument("--interactions", type=int, help="override the number of ratings")
    p.add_argument(
        "--layout",
        default="ml-100k",
        help="ml-100k (u.data), ml-1m (ratings.dat), ml-20m (ratings.csv), csv or "
        "parquet (default ml-100k); rows in the real file's order (ml-20m sorted by user, then "
        "item; ml-1m grouped by user), shuffled for the others",
    )
    p.add_argument(
        "--output", required=True, help="folder for MovieLens layouts, file for csv/parquet"
    )
    p.add_argument(
        "--structure",
        default="planted",
        help="how strong the planted structure is: planted (default; easy to learn) or "
        "movielens (as hard as real MovieLens-100k for NCF models: tune on this)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Generates and writes the data."""
    import dataclasses

    from training_core.common import faults
    from training_core.data import synthetic

    if args.shape not in synthetic.SHAPES:
        raise ValueError(
            f"unknown --shape {args.shape!r}; use one of {', '.join(synthetic.SHAPES)}"
        )
    config = synthetic.SHAPES[args.shape]
    overrides = {
        "num_users": args.users,
        "num_items": args.items,
        "num_interactions": args.interactions,
    }
    config = dataclasses.replace(
        config, seed=args.seed, **{k: v for k, v in overrides.items() if v is not None}
    )
    config = synthetic.with_structure(config, args.structure)
    data = synthetic.generate(config)
    with faults.writing("the synthetic ratings", args.output, option="--output"):
        path = synthetic.write(data, args.output, args.layout, seed=args.seed)
    print(
        f"wrote {len(data):,} ratings ({config.num_users:,} users, {config.num_items:,} items) "
        f"to {path}"
    )
    return 0
