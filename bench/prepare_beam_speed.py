"""Beam data prep beside the single-machine path: rows/s on a synthetic MovieLens shape.

    uv run python -m bench.prepare_beam_speed --shape ml-20m [--workers 2] [--json out.json]

Writes the shape's synthetic ratings file if missing (not timed; /tmp/ncf-bench/raw-SHAPE), then
runs the full preparation (defaults: 1 epoch, 4 negatives, 999 eval negatives, batch 1024) once
per path, each in a fresh process: ``local`` (``prepare.prepare``, ``--workers`` processes) and
``beam`` (Beam's in-process FnApiRunner, ``--direct_num_workers`` = ``--workers``,
multi_processing). Reports input rows/s and training rows/s of each end to end, their ratio, and
checks that both trees are byte-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
from training_core.data.config import PrepareConfig
from training_core.data import prepare, prepare_beam
src, out, runner, workers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
cfg = PrepareConfig(input_path=src, output_dir=out, workers=workers, num_epochs=1)
t0 = time.perf_counter()
if runner == "local":
    r = prepare.prepare(cfg)
else:
    args = (f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing")
    r = prepare_beam.prepare_beam(cfg, prepare_beam.BeamConfig(args))
seconds = time.perf_counter() - t0
m = r.metadata
kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rows_read": m.source["rows_read"], "train_rows": m.num_train_elements,
                  "eval_rows": m.num_eval_elements, "seconds": seconds,
                  "peak_rss_gb": max(kb, kids) / 2**20}))
"""


def _tree_digest(root: str) -> dict[str, str]:
    import hashlib

    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            full = os.path.join(dirpath, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def run(shape: str, workers: int, workdir: str) -> dict:
    """Both paths on one shape; returns their numbers."""
    raw = os.path.join(workdir, f"raw-{shape}")
    if not os.path.exists(raw):
        cmd = [sys.executable, "-m", "pipelines.cli", "synth", "--shape", shape]
        subprocess.run([*cmd, "--layout", shape, "--output", raw], check=True)
    result = {"shape": shape, "workers": workers}
    for runner in ("local", "beam"):
        out = os.path.join(workdir, f"prep-{shape}-{runner}")
        subprocess.run(["rm", "-rf", out], check=True)
        done = subprocess.run(
            [sys.executable, "-c", CHILD, raw, out, runner, str(workers)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            sys.exit(f"{runner} failed:\n{done.stderr[-3000:]}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        r["rows_per_s"] = r["rows_read"] / r["seconds"]
        r["train_rows_per_s"] = r["train_rows"] / r["seconds"]
        result[runner] = r
    result["beam_over_local_seconds"] = result["beam"]["seconds"] / result["local"]["seconds"]
    result["byte_identical"] = _tree_digest(
        os.path.join(workdir, f"prep-{shape}-local")
    ) == _tree_digest(os.path.join(workdir, f"prep-{shape}-beam"))
    return result


def main() -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="ml-20m", choices=["ml-100k", "ml-1m", "ml-20m"])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--workdir", default="/tmp/ncf-bench")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    r = run(args.shape, args.workers, args.workdir)
    for runner in ("local", "beam"):
        x = r[runner]
        print(
            f"{args.shape} {runner:5s}: {x['seconds']:7.1f}s  {x['rows_per_s'] / 1e6:6.2f}M input "
            f"rows/s  {x['train_rows_per_s'] / 1e6:6.2f}M train rows/s  "
            f"peak RSS {x['peak_rss_gb']:.1f} GB"
        )
    print(
        f"beam / local time: {r['beam_over_local_seconds']:.2f}x; "
        f"byte-identical: {r['byte_identical']}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()
