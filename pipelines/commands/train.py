"""``ncf-pipelines train``: NeuMF training under any tf.distribute strategy."""

from __future__ import annotations

import argparse
import json
import os

from pipelines.commands._shared import example_epilog, options
from pipelines.commands.config_options import add_config_options
from training_core.data.metadata import SPLIT_TEST
from training_core.training.strategy import ALL_REDUCE_ALGS, STRATEGIES
from training_core.training.train_config import OPTIONS, TrainOptions, config_for
from training_core.tune import METRICS, TUNABLE

# Where Vertex AI tells a job's container to write its model (a tuning trial's own folder).
MODEL_DIR_ENV = "AIP_MODEL_DIR"


def add_strategy_args(p: argparse.ArgumentParser) -> None:
    """Strategy options shared by train and evaluate."""
    p.add_argument(
        "--strategy",
        default="auto",
        choices=STRATEGIES,
        help="distribution strategy (default auto: TPU, TF_CONFIG/CLUSTER_SPEC "
        "cluster, GPUs, else one CPU)",
    )
    p.add_argument("--num-gpus", type=int, help="GPUs to use (default: all visible)")
    p.add_argument(
        "--tpu",
        dest="tpu_address",
        help="TPU name or grpc:// address; 'local' for the host's own TPU",
    )
    p.add_argument(
        "--all-reduce-alg",
        choices=ALL_REDUCE_ALGS,
        help="cross-device all-reduce for mirrored (default: TensorFlow's choice)",
    )
    p.add_argument("--num-packs", type=int, default=1, help="gradient packs for that all-reduce")
    p.add_argument(
        "--expect-accelerator",
        help="fail unless this accelerator is visible (a Vertex AI accelerator type such as "
        "NVIDIA_H100_80GB or TPU_V3; a tuning trial's command sets it), instead of training on "
        "the CPU",
    )
    p.add_argument(
        "--expect-accelerator-count",
        type=int,
        help="how many of --expect-accelerator must be visible (default 1)",
    )


def strategy_from_args(args: argparse.Namespace):
    """Builds the strategy first thing (multi-worker set-up must precede other TF ops)."""
    from training_core.training.strategy import build_strategy, strategy_config

    return build_strategy(
        strategy_config(
            name=args.strategy,
            num_gpus=args.num_gpus,
            tpu_address=args.tpu_address,
            all_reduce_alg=args.all_reduce_alg,
            num_packs=args.num_packs,
            expect_accelerator=args.expect_accelerator,
            expect_accelerator_count=args.expect_accelerator_count,
        )
    )


def write_json(path: str, payload: dict) -> None:
    """Writes JSON through a temporary name."""
    from training_core.common.atomic_writes import write_text_atomic

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_text_atomic(path, json.dumps(payload, indent=2) + "\n")


def register(sub: argparse._SubParsersAction) -> None:
    """Adds the subcommand."""
    p = sub.add_parser(
        "train",
        help="train NeuMF on a prepared dataset",
        description=(
            "Train NeuMF (GMF + MLP) on pre-batched TFRecords with a custom training loop, "
            "evaluating HR@10 and NDCG@10 after every epoch on the data's validation split "
            "(the test split if it has none), which chooses the best epoch and when to stop; "
            "the test split is scored once at the end, on the final model. Checkpoints go to "
            "--model-dir every epoch (and every --checkpoint-every steps); running again with "
            "the same --model-dir "
            "resumes from the latest one. TensorBoard summaries go to $AIP_TENSORBOARD_LOG_DIR "
            "when set (Vertex AI), else to MODEL_DIR/summaries. With --refit-of, on a dataset "
            "prepared with --refit, it trains an evaluated run's configuration again on every "
            "interaction, for that run's epochs, evaluating nothing (docs/training.md, Refit); "
            "on one prepared with --no-validation, a test refit: every interaction before each "
            "user's test item, scored once on the test split at the end. "
            "With --warm-start-from, the model starts from a champion's weights: users and "
            "items it knows keep their rows, new ones start fresh (docs/weekly-runs.md)."
        ),
        epilog=example_epilog(
            "ncf-pipelines train --data data/ml-1m --model-dir runs/ml-1m --preset ml-1m "
            "--metrics-out runs/ml-1m/metrics.json",
            "TF_CONFIG='{...}' ncf-pipelines train --data gs://b/ml-20m --model-dir gs://b/run "
            "--preset ml-20m --strategy multi_worker_mirrored",
            "ncf-pipelines train --data data/ml-1m-refit --model-dir runs/ml-1m-refit "
            "--refit-of runs/ml-1m",
            "ncf-pipelines train --data data/ml-1m-no-validation --model-dir "
            "runs/ml-1m-test-refit --refit-of runs/ml-1m",
            "ncf-pipelines train --data data/week-48 --model-dir runs/week-48 "
            "--warm-start-from exports/week-47",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, help="prepared dataset folder (metadata.json)")
    p.add_argument(
        "--model-dir",
        help="checkpoints and summaries folder (default: $AIP_MODEL_DIR, which Vertex AI sets "
        "for a tuning trial; required otherwise)",
    )
    # One option per TrainOptions field (its metadata); dest: the field, None: its default.
    add_config_options(p, TrainOptions)
    p.add_argument(
        "--no-early-stop",
        dest="target_hr",
        action="store_const",
        const=0.0,
        help="train every epoch even after HR@10 reaches the target or stops improving (the "
        "preset's patience), and keep the last (--target-hr 0)",
    )
    p.add_argument(
        "--hypertune-metric",
        choices=METRICS,
        help="report this metric after every epoch to Vertex AI's hyperparameter tuning "
        "service (cloudml-hypertune; a tuning job's trials set it)",
    )
    # A Vertex AI tuning job appends a trial's values as --NAME=VALUE, NAME being the search
    # space's parameter id (a TrainOptions field): accept those spellings too, unlisted.
    # A discrete value is a double in the StudySpec: 64 may come as 64.0 for an integer option.
    for action in list(p._actions):
        dest = action.dest
        if dest in TUNABLE and f"--{dest}" not in action.option_strings:
            kind = _whole_number if action.type is int else action.type
            p.add_argument(f"--{dest}", dest=dest, type=kind, help=argparse.SUPPRESS)
    p.add_argument("--metrics-out", help="write per-epoch metrics as JSON here")
    p.add_argument("--plots-out", help="write an HTML page of loss/HR/NDCG per epoch here")
    add_strategy_args(p)
    p.set_defaults(func=run)


def _whole_number(text: str) -> int:
    """``64`` or ``64.0`` as 64; anything else is refused as argparse refuses a bad int."""
    value = float(text)
    if not value.is_integer():
        raise ValueError(text)
    return int(value)


def run(args: argparse.Namespace) -> int:
    """Checks the options and the data, builds the strategy, trains and writes the metrics."""
    from training_core.common import first_run
    from training_core.training import curve_page
    from training_core.training.loop import train
    from training_core.tune import trial_reporter

    # Every option (and the data folder) is checked first, each message naming its option; no
    # TensorFlow op runs before the strategy, whose building can take long (TPU start-up,
    # waiting for the other workers).
    model_dir = args.model_dir or os.environ.get(MODEL_DIR_ENV, "")
    if not model_dir:
        raise ValueError(f"--model-dir is required (or ${MODEL_DIR_ENV}, as Vertex AI sets it)")
    from training_core.serving.vertex_registry import mounted_path

    model_dir = mounted_path(model_dir) if not args.model_dir else model_dir
    config = config_for(args.data, model_dir, **options(args, OPTIONS))
    # What only a real run tells (docs/submit.md, "First-run checklist"), before hours of work:
    # the outputs on Cloud Storage FUSE, and a trial's metric file (checked as it is made).
    first_run.check_outputs([model_dir, args.metrics_out or "", args.plots_out or ""])
    on_epoch = None
    if args.hypertune_metric:
        metric_file = os.environ.get(first_run.METRIC_FILE_ENV)
        on_epoch = trial_reporter(args.hypertune_metric, metric_file)
    strategy = strategy_from_args(args)  # Before any TensorFlow op.
    result = train(config, strategy, on_epoch=on_epoch)
    payload = result.to_dict()
    if args.metrics_out:
        write_json(args.metrics_out, payload)
    if args.plots_out:
        with open(args.plots_out, "w") as f:
            f.write(curve_page.result_page(payload))
    final = result.final
    if final is not None:
        print(result_line(result))
    return 0


def result_line(result) -> str:
    """What a run printed: the chosen epoch's numbers on the split that chose it, the test ones."""
    final, split, test = result.final, result.selection_split, result.test
    if result.refit and test is not None:
        return (
            f"trained {result.global_step} steps ({len(result.epochs)} epochs, a test refit on "
            f"every interaction before each user's test item): loss {final.loss:.4f} "
            f"{final.examples_per_sec:,.0f} examples/s; test HR@10 {test.hr_at_10:.4f} NDCG@10 "
            f"{test.ndcg_at_10:.4f} (scored once, on the final model)"
        )
    if result.refit:
        return (
            f"trained {result.global_step} steps ({len(result.epochs)} epochs, a refit on every "
            f"interaction: nothing held out, nothing evaluated): loss {final.loss:.4f} "
            f"{final.examples_per_sec:,.0f} examples/s"
        )
    kept = f", the model is epoch {final.epoch}'s (the best)" if result.kept_epoch else ""
    line = (
        f"trained {result.global_step} steps ({len(result.epochs)} epochs{kept}): "
        f"{split} HR@10 {final.hr_at_10:.4f} NDCG@10 {final.ndcg_at_10:.4f} loss "
        f"{final.loss:.4f} {final.examples_per_sec:,.0f} examples/s"
    )
    if split != SPLIT_TEST and test is not None:
        line += (
            f"; test HR@10 {test.hr_at_10:.4f} NDCG@10 {test.ndcg_at_10:.4f} (scored once, on "
            "the final model)"
        )
    return line
