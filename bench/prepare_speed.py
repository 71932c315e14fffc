"""Data-prep benchmark: rows/s, bytes and peak memory on synthetic MovieLens shapes.

    uv run python -m bench.prepare_speed --shapes ml-1m ml-20m [--workers 2] [--layout csv]
        [--epochs N|default] [--json out.json]

For each shape it writes a synthetic ratings file in that shape's MovieLens layout (not timed;
rows in the real dump's order: ml-20m's sorted by user then item, ml-1m's grouped by user), or
with --layout csv as a plain table with its rows shuffled (what an arbitrary export may be),
then runs the full `prepare` (read, index, split, sample, write; 1 epoch, or --epochs: N, or
`default` for what data prep prepares unless told, one epoch per epoch the shape's preset trains;
4 negatives, 999 eval negatives, batch 1024) in a fresh process and reports:
  train_rows_per_s  training rows (positives + negatives, every epoch) / end-to-end wall time
  eval_rows_per_s   eval rows (users x 1000) / end-to-end wall time
  *_task_rows_per_s rows / seconds spent in that kind of shard task (per worker)
  peak_rss_gb       peak resident memory of the prep process and its workers
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

LAYOUT_OF = {"ml-100k": "ml-100k", "ml-1m": "ml-1m", "ml-20m": "ml-20m"}

CHILD = r"""
import json, resource, sys, logging
from training_core.data.config import PrepareConfig
from training_core.data import prepare
from training_core.training.train_config import with_training_epochs
cfg = with_training_epochs(PrepareConfig(input_path=sys.argv[1], output_dir=sys.argv[2],
                    num_epochs=None if sys.argv[4] == "default" else int(sys.argv[4]),
                    workers=int(sys.argv[3]) or None))
r = prepare.prepare(cfg)
m = r.metadata
self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({
    "users": m.num_users, "items": m.num_items, "interactions": m.source["rows_kept"],
    "train_rows": m.num_train_elements * m.num_epochs, "eval_rows": m.num_eval_elements,
    "epochs": m.num_epochs,
    "seconds": r.seconds, "bytes": r.total_bytes, "timings": r.timings,
    "peak_rss_gb": (self_kb + kids_kb) / 2**20,
}))
"""


def run_shape(
    shape: str, workers: int, workdir: str, layout: str | None = None, epochs: str = "1"
) -> dict:
    layout = layout or LAYOUT_OF[shape]
    raw = os.path.join(workdir, f"raw-{shape}" + ("" if layout == LAYOUT_OF[shape] else ".csv"))
    if not os.path.exists(raw):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.cli",
                "synth",
                "--shape",
                shape,
                "--layout",
                layout,
                "--output",
                raw,
            ],
            check=True,
        )
    out = os.path.join(workdir, f"prep-{shape}")
    subprocess.run(["rm", "-rf", out], check=True)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, raw, out, str(workers), epochs],
        capture_output=True,
        text=True,
        check=True,
    )
    r = json.loads(done.stdout.strip().splitlines()[-1])
    t = r["timings"]
    r.update(
        shape=shape,
        workers=t["workers"],
        train_rows_per_s=r["train_rows"] / r["seconds"],
        eval_rows_per_s=r["eval_rows"] / r["seconds"],
        train_task_rows_per_s=r["train_rows"] / max(t["train_task_seconds"], 1e-9),
        eval_task_rows_per_s=r["eval_rows"] / max(t["eval_task_seconds"], 1e-9),
    )
    return r


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--shapes", nargs="+", default=["ml-1m", "ml-20m"])
    ap.add_argument("--workers", type=int, default=0, help="0: one per core")
    ap.add_argument(
        "--layout",
        choices=["csv"],
        help="write a plain CSV with shuffled rows instead of the shape's MovieLens layout",
    )
    ap.add_argument(
        "--epochs",
        default="1",
        help="epochs to prepare (default 1), or 'default': data prep's own default",
    )
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "ncf-bench"))
    ap.add_argument("--json", help="also write results here")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    results = []
    for shape in args.shapes:
        r = run_shape(shape, args.workers, args.workdir, args.layout, args.epochs)
        r["layout"] = args.layout or LAYOUT_OF[shape]
        results.append(r)
        print(
            f"{shape:8s} {r['layout']:7s} users {r['users']:>7,} items {r['items']:>6,} "
            f"interactions {r['interactions']:>11,} | {r['epochs']} epoch(s) | "
            f"{r['seconds']:7.1f}s end to end | "
            f"train {r['train_rows_per_s'] / 1e6:5.2f}M rows/s  eval "
            f"{r['eval_rows_per_s'] / 1e6:5.2f}M rows/s | {r['bytes'] / 1e9:5.2f} GB | "
            f"peak RSS {r['peak_rss_gb']:.1f} GiB | workers {r['workers']}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
