"""``ncf-pipelines evaluate``: HR@10/NDCG@10 of a trained model folder."""

from __future__ import annotations

import argparse
import json
import sys

from pipelines.commands._shared import example_epilog, options
from pipelines.commands.config_options import add_config_options
from pipelines.commands.train import add_strategy_args, strategy_from_args, write_json
from training_core.data.metadata import SPLIT_TEST, SPLIT_VALIDATION
from training_core.evaluation import eval_config
from training_core.training.model_dir import CHECKPOINT_SUBDIR


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "evaluate",
        help="evaluate a trained model on a prepared dataset",
        description=(
            "Restore the latest checkpoint of --model-dir (written under any strategy) and "
            "compute HR@10 and NDCG@10 over the test split of --data and, where it has one, "
            "its validation split: against each user's sampled negatives, and against every "
            "item the user had not interacted with before (full catalog, for "
            "--full-catalog-users users)."
        ),
        epilog=example_epilog(
            "ncf-pipelines evaluate --data data/ml-1m --model-dir runs/ml-1m "
            "--metrics-out runs/ml-1m/eval.json"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, help="prepared dataset folder (metadata.json)")
    p.add_argument("--model-dir", required=True, help="training output folder")
    p.add_argument(
        "--checkpoint",
        help=f"a checkpoint path prefix (.../{CHECKPOINT_SUBDIR}/ckpt-100) or a folder of "
        "checkpoints (its latest); default: the latest in --model-dir",
    )
    p.add_argument("--metrics-out", help="write the metrics as JSON here")
    add_config_options(p, eval_config.EvalOptions)  # One option per field (its metadata).
    add_strategy_args(p)
    p.set_defaults(func=run, strategy="default")


def run(args: argparse.Namespace) -> int:
    """Evaluates and prints the metrics."""
    eval_options = eval_config.eval_options(**options(args, eval_config.OPTIONS))  # Before TF.
    strategy = strategy_from_args(args)

    from training_core.evaluation.evaluate import evaluate
    from training_core.training.model_dir import resolve_checkpoint

    checkpoint = args.checkpoint
    if checkpoint:  # Checked here, so that the error names the option.
        checkpoint = resolve_checkpoint(args.model_dir, checkpoint, option="--checkpoint")
    result = evaluate(args.data, args.model_dir, strategy, checkpoint, eval_options)
    if args.metrics_out:
        write_json(args.metrics_out, result.to_dict())
    print(json.dumps(result.to_dict()))  # The test split's unprefixed; "validation" nested.
    for split, scores in ((SPLIT_TEST, result), (SPLIT_VALIDATION, result.validation)):
        if scores is not None:  # For people, apart from the JSON on stdout.
            print(
                f"{split} split: HR@10 {scores.hr_at_10:.4f} NDCG@10 {scores.ndcg_at_10:.4f} "
                f"over {scores.eval_users} users (full catalog HR@10 "
                f"{scores.full_catalog_hr_at_10:.4f})",
                file=sys.stderr,
            )
    return 0
