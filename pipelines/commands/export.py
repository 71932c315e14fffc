"""``ncf-pipelines export``: a serving SavedModel (raw ids in, scores and top-k items out)."""

from __future__ import annotations

import argparse
import json

from pipelines.commands._shared import example_epilog
from pipelines.commands.config_options import add_config_options, given_options
from training_core.serving.export_config import ExportConfig


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "export",
        help="export a trained model as a serving SavedModel",
        description=(
            "Restore the latest checkpoint of --model-dir on the CPU and write a SavedModel that "
            "serves with TensorFlow alone: signature 'score' (raw user_id, item_id -> score, "
            "known), 'recommend' (raw user_id, exclude_seen -> top-k item_ids, scores) and "
            "'recommend_unseen' (raw user_id alone -> top-k unseen item_ids, scores), one of "
            "them also as serving_default. The ids are of the data's kind: int64, or strings "
            "(tf.string; JSON strings in a request) for data prepared with string ids. The id "
            "vocabularies and each user's seen items (every item the data holds for them) come "
            "from --data and are stored inside the model. See docs/serving.md."
        ),
        epilog=example_epilog(
            "ncf-pipelines export --model-dir runs/ml-1m --data data/ml-1m "
            "--output exports/ml-1m --top-k 10",
            "saved_model_cli show --dir exports/ml-1m --all",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model-dir", required=True, help="training output folder (checkpoints)")
    p.add_argument("--data", required=True, help="the prepared dataset it was trained on")
    p.add_argument("--output", required=True, help="SavedModel folder to create")
    add_config_options(p, ExportConfig)  # One option per field with help (its metadata).
    p.set_defaults(func=run)


# What a failed export leaves (training_core.serving.export publishes the folder in one step).
UNCHANGED = "--output was left as it was: the export is published only once complete"


def run(args: argparse.Namespace) -> int:
    """Exports and prints where, and a request to try."""
    from training_core.common import faults
    from training_core.data.ids import ID_INT64
    from training_core.serving.export import export
    from training_core.training.model_dir import resolve_checkpoint

    given = given_options(args, ExportConfig)
    if given.get("checkpoint"):  # Checked here, so that the error names the option.
        given["checkpoint"] = resolve_checkpoint(
            args.model_dir, given["checkpoint"], option="--checkpoint"
        )
    with faults.writing("the exported model", args.output, option="--output", after=UNCHANGED):
        result = export(
            ExportConfig(
                model_dir=args.model_dir, data_dir=args.data, export_dir=args.output, **given
            )
        )
    print(
        f"exported step {result.step} to {result.export_dir} (TensorFlow "
        f"{result.tensorflow_version}; {result.num_users} users, {result.num_items} items, "
        f"top {result.top_k}; serving_default = {result.default_signature})"
    )
    kinds = (result.user_id_type, result.item_id_type)
    if kinds != (ID_INT64, ID_INT64):  # Integer ids: the output as before.
        print(f"ids: {kinds[0]} user ids, {kinds[1]} item ids (a string id is a JSON string)")
    for name, body in result.example_requests.items():
        print(f"example {name} request: {json.dumps(body)}")
    print(f"inspect: saved_model_cli show --dir {result.export_dir} --all")
    return 0
