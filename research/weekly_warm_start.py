"""How many epochs a warm-started weekly retrain needs to reach a cold one (docs/weekly-runs.md).

Real MovieLens-100k (``u.data``: user, item, rating, timestamp, tab-separated) is cut into two
consecutive weekly snapshots by timestamp: week N holds every interaction up to the cut
``T = last timestamp - weeks_back * 7 days``, week N+1 every interaction up to ``T + 7 days``.
Both are prepared with ``ncf-pipelines prepare-data`` at its defaults (a validation split; the
ml-100k preset's 20 epochs of negatives). Per seed:

  champion  ``ncf-pipelines train`` on week N as a pipeline run trains (the ml-100k preset, its
            patience keeping the best validation epoch), then ``ncf-pipelines export``;
  cold      week N+1 from fresh weights, ``--epochs`` epochs without early stopping;
  warm      week N+1 from the champion's export (``--warm-start-from``), likewise.

Each epoch of cold and warm records the validation HR@10 the run measures and the test split's
sampled HR@10 of the epoch's checkpoint (scored here, outside the run's wall time). The summary
gives each run's best validation HR@10, the first warm epoch that reaches the cold run's best,
and the epoch and test HR@10 the preset's patience would have kept (``results.stop_reason``
replayed on the curve). Everything goes under ``--work`` (default
``out/weekly-warm-start``, kept out of git); ``--docs`` prints the Markdown tables.

    .venv/bin/python -m research.weekly_warm_start --ratings /tmp/real/ml-100k/u.data --seeds 0 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(os.path.dirname(sys.executable), "ncf-pipelines")
WEEK = 7 * 86400
WEEKS = ("week-n", "week-n1")


def slice_weeks(ratings: str, work: str, weeks_back: int) -> dict[str, dict]:
    """Writes week N and week N+1 as ``u.data`` files; returns what each holds."""
    raw = np.loadtxt(ratings, dtype=np.int64)
    times = raw[:, 3]
    cut = int(times.max()) - weeks_back * WEEK
    facts = {}
    for name, until in zip(WEEKS, (cut, cut + WEEK), strict=True):
        rows = raw[times <= until]
        folder = os.path.join(work, "raw", name)
        os.makedirs(folder, exist_ok=True)
        np.savetxt(os.path.join(folder, "u.data"), rows, fmt="%d", delimiter="\t")
        facts[name] = {
            "until": until,
            "interactions": len(rows),
            "users": int(np.unique(rows[:, 0]).size),
            "items": int(np.unique(rows[:, 1]).size),
        }
    week = raw[(times > cut) & (times <= cut + WEEK)]
    before = raw[times <= cut]
    facts["new_week"] = {
        "interactions": len(week),
        "new_users": int(np.setdiff1d(week[:, 0], before[:, 0]).size),
        "new_items": int(np.setdiff1d(week[:, 1], before[:, 1]).size),
    }
    return facts


def _run(args: list[str], log: str) -> float:
    start = time.perf_counter()
    with open(log, "w") as f:
        subprocess.run([CLI, *args], check=True, stdout=f, stderr=subprocess.STDOUT)
    return time.perf_counter() - start


def prepare(work: str) -> None:
    for name in WEEKS:
        out = os.path.join(work, "data", name)
        if os.path.exists(os.path.join(out, "metadata.json")):
            continue
        raw = os.path.join(work, "raw", name, "u.data")
        args = ["prepare-data", "--input", raw, "--format", "ml-100k", "--output", out]
        _run([*args, "--workers", "1"], os.path.join(work, f"prepare-{name}.log"))


def champion(work: str, seed: int) -> str:
    """The champion of week N for ``seed``, exported; returns the export folder."""
    runs = os.path.join(work, "runs")
    model_dir, export_dir = (os.path.join(runs, f"champion-s{seed}{s}") for s in ("", "-export"))
    if not os.path.exists(os.path.join(export_dir, "serving_metadata.json")):
        data = os.path.join(work, "data", "week-n")
        log = os.path.join(runs, f"champion-s{seed}")
        os.makedirs(runs, exist_ok=True)
        _run(["train", "--data", data, "--model-dir", model_dir, "--seed", str(seed)], log + ".log")
        _run(
            ["export", "--model-dir", model_dir, "--data", data, "--output", export_dir],
            log + "-export.log",
        )
    return export_dir


def weekly_run(
    work: str, seed: int, epochs: int, warm_from: str | None, lr_scale: float = 1.0
) -> dict:
    """Trains week N+1 for ``epochs`` epochs (no early stop); per-epoch validation and test.

    Row 0 is the model before its first step (fresh, or the champion's weights carried over).
    ``lr_scale`` multiplies the preset's learning rate. Kept in ``runs/NAME.json``: a rerun of
    the script reads it instead of training again.
    """
    import tensorflow as tf

    from training_core.data.metadata import SPLIT_VALIDATION, read_metadata
    from training_core.evaluation.evaluate import make_eval_fn, run_eval
    from training_core.training import (
        input_pipeline,
        loop,
        results,
        train_config,
        trainer,
        warm_start,
    )
    from training_core.training.model_dir import latest_checkpoint

    data = os.path.join(work, "data", "week-n1")
    name = f"{'warm' if warm_from else 'cold'}-s{seed}" + (
        f"-lr{lr_scale:g}x" if lr_scale != 1 else ""
    )
    model_dir = os.path.join(work, "runs", name)
    saved = model_dir + ".json"
    if os.path.exists(saved):
        with open(saved) as f:
            return json.load(f)
    shutil.rmtree(model_dir, ignore_errors=True)  # A run killed before its JSON: again.
    config = train_config.config_for(data, model_dir, seed=seed, epochs=epochs, target_hr=0.0)
    config = train_config.config_for(
        data,
        model_dir,
        seed=seed,
        epochs=epochs,
        target_hr=0.0,
        learning_rate=config.model.learning_rate * lr_scale,
        warm_start_uri=warm_from,
    )
    meta, strategy = read_metadata(data), tf.distribute.get_strategy()
    # A copy of the model: built as the run builds its own, then scored at each checkpoint.
    model = trainer.build_model(config.model, meta, seed)
    if warm_from:
        warm_start.apply(warm_start.read_champion(warm_from), model, meta, data)
    score = make_eval_fn(model, strategy, input_pipeline.eval_items_per_user(meta), tf.float32)

    def hr_at_10(split_meta) -> float:
        return run_eval(model, strategy, split_meta, data, tf.float32, score).hr

    validation = meta.split(SPLIT_VALIDATION)
    rows = [
        {
            "epoch": 0,
            "validation_hr_at_10": hr_at_10(validation),
            "test_hr_at_10": hr_at_10(meta),
            "seconds": 0.0,
        }
    ]
    marks = {"last": time.perf_counter()}

    def on_epoch(result) -> bool:
        now = time.perf_counter()
        tf.train.Checkpoint(model=model).read(latest_checkpoint(model_dir)).expect_partial()
        rows.append(
            {
                "epoch": result.epoch,
                "validation_hr_at_10": result.hr_at_10,
                "test_hr_at_10": hr_at_10(meta),
                "seconds": now - marks["last"],
                "loss": result.loss,
            }
        )
        print(f"{name} epoch {result.epoch}: {rows[-1]}", flush=True)
        marks["last"] = time.perf_counter()
        return False

    result = loop.train(config, strategy, on_epoch=on_epoch)
    history = result.epochs
    stop = next(
        (
            i
            for i in range(1, len(history) + 1)
            if results.stop_reason(_patient(config), history[:i])
        ),
        len(history),
    )
    run = {
        "name": name,
        "learning_rate": config.model.learning_rate,
        "warm_start": warm_start.recorded(model_dir),
        "epochs": rows,
        "wall_seconds": sum(r["seconds"] for r in rows),  # Without the scoring here.
        "pipeline_stop_epoch": stop,
        "pipeline_kept_epoch": results.best_epoch(history[:stop]).epoch,
    }
    with open(saved, "w") as f:
        json.dump(run, f, indent=2)
    return run


def _patient(config):
    """The preset's early stopping, as a pipeline run has it (patience, target)."""
    from training_core.training.presets import get_preset

    preset = get_preset(config.preset)
    return dataclasses.replace(
        config.model, patience=preset.patience, hr_threshold=preset.hr_threshold
    )


def summarize(cold: dict, other: dict) -> dict:
    """The cold run's best validation HR@10, and when ``other`` first reaches it."""
    trained = [r for r in cold["epochs"] if r["epoch"] > 0]
    best = max(trained, key=lambda r: r["validation_hr_at_10"])
    reach = next(
        (r for r in other["epochs"] if r["validation_hr_at_10"] >= best["validation_hr_at_10"]),
        None,
    )

    def kept(run: dict) -> dict:
        row = next(r for r in run["epochs"] if r["epoch"] == run["pipeline_kept_epoch"])
        return {"stop": run["pipeline_stop_epoch"], **row}

    def seconds_to(run: dict, epoch: int) -> float:
        return sum(r["seconds"] for r in run["epochs"] if r["epoch"] <= epoch)

    return {
        "cold_best_validation": best["validation_hr_at_10"],
        "cold_best_epoch": best["epoch"],
        "cold_seconds_to_best": seconds_to(cold, best["epoch"]),
        "best_validation": max(r["validation_hr_at_10"] for r in other["epochs"]),
        "epochs_to_cold_best": reach["epoch"] if reach else None,
        "seconds_to_cold_best": seconds_to(other, reach["epoch"]) if reach else None,
        "cold_pipeline": kept(cold),
        "pipeline": kept(other),
    }


def markdown(report: dict) -> str:
    """The per-epoch table of each seed and the summary, as docs/weekly-runs.md shows them."""
    out = []
    for seed, runs in report["seeds"].items():
        names = list(runs["runs"])
        out.append(f"Seed {seed}, HR@10 validation / test:\n")
        out.append("| epoch | " + " | ".join(names) + " |")
        out.append("|---:|" + "---|" * len(names))
        for i, row in enumerate(runs["runs"][names[0]]["epochs"]):
            cells = [
                f"{r['validation_hr_at_10']:.4f} / {r['test_hr_at_10']:.4f}"
                for r in (runs["runs"][n]["epochs"][i] for n in names)
            ]
            out.append(f"| {row['epoch']} | " + " | ".join(cells) + " |")
        out.append("")
    out.append(
        "| seed | run | best validation | epochs (s) to the cold run's best validation | "
        "patience 4 keeps: epoch (stops at), test |"
    )
    out.append("|---:|---|---:|---|---|")
    for seed, runs in report["seeds"].items():
        for name, s in runs["summary"].items():
            reach = (
                f"{s['epochs_to_cold_best']} ({s['seconds_to_cold_best']:.0f} s)"
                if s["epochs_to_cold_best"] is not None
                else "not within the epochs"
            )
            k = s["pipeline"]
            out.append(
                f"| {seed} | {name} | {s['best_validation']:.4f} | {reach} | {k['epoch']} "
                f"({k['stop']}), {k['test_hr_at_10']:.4f} |"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ratings", default="/tmp/real/ml-100k/u.data", help="MovieLens-100k u.data")
    p.add_argument("--work", default=os.path.join(ROOT, "out", "weekly-warm-start"))
    p.add_argument("--weeks-back", type=int, default=3, help="the cut: weeks before the last day")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--epochs", type=int, default=20, help="epochs of the cold and warm runs")
    p.add_argument(
        "--warm-lr-scales",
        type=float,
        nargs="*",
        default=[],
        help="also warm runs at these multiples of the preset's learning rate (default: none)",
    )
    p.add_argument("--docs", action="store_true", help="print the Markdown tables")
    args = p.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    out = os.path.join(args.work, "report.json")
    report = {"weeks": slice_weeks(args.ratings, args.work, args.weeks_back), "seeds": {}}
    if os.path.exists(out):
        with open(out) as f:
            report["seeds"] = json.load(f).get("seeds", {})
    prepare(args.work)
    for seed in args.seeds:
        if str(seed) in report["seeds"]:
            continue
        export_dir = champion(args.work, seed)
        runs = {"cold": weekly_run(args.work, seed, args.epochs, None)}
        runs["warm"] = weekly_run(args.work, seed, args.epochs, export_dir)
        for scale in args.warm_lr_scales:
            runs[f"warm, lr x{scale:g}"] = weekly_run(
                args.work, seed, args.epochs, export_dir, lr_scale=scale
            )
        summary = {name: summarize(runs["cold"], run) for name, run in runs.items()}
        report["seeds"][str(seed)] = {"runs": runs, "summary": summary}
        with open(out, "w") as f:
            json.dump(report, f, indent=2)
    print(json.dumps(report["weeks"], indent=2))
    if args.docs:
        print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
