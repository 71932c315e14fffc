"""Data-validation benchmark: TFDV statistics wall time on synthetic MovieLens shapes, local runner.

    uv run python -m bench.validate_speed --shapes ml-1m ml-20m [--modes in_memory mp2] \
        [--json out.json]

For each shape it writes a synthetic ratings file in that shape's MovieLens layout under --workdir
if it is not there yet (not timed), then, for each Beam DirectRunner mode, runs the full
``validate`` (statistics, inferred schema, anomalies, report) in a fresh process and reports:
  stats_s      wall time of the Beam pipeline (read + GenerateStatistics + write FeatureStats.pb)
  total_s      validate() end to end (statistics + schema + anomalies + report), imports excluded
  rows_per_s   rows / stats_s
  peak_rss_gb  peak resident memory of the process and its worker processes
Modes: in_memory (DirectRunner's default, one process), mt2 (2 threads), mp2 (2 worker processes).
``--fraction F`` validates only the first F of the file (whole lines), to extrapolate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

LAYOUT_OF = {"ml-100k": "ml-100k", "ml-1m": "ml-1m", "ml-20m": "ml-20m"}
MODES = {
    "in_memory": [],
    "mt2": ["--direct_num_workers=2", "--direct_running_mode=multi_threading"],
    "mp2": ["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
}

CHILD = r"""
import json, resource, sys, logging
from training_core.data import validate as v
import tensorflow_data_validation  # Import before timing: not part of the pipeline's cost.
cfg = v.ValidateConfig(input_path=sys.argv[1], outputs=v.OutputPaths.under(sys.argv[2]),
                       beam_pipeline_args=tuple(json.loads(sys.argv[3])), fail_on_anomalies=False)
r = v.validate(cfg)
self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print("RESULT " + json.dumps({
    "rows": r.num_examples, "stats_s": r.statistics_seconds, "total_s": r.seconds,
    "anomalies": [a.kind for a in r.anomalies],
    "peak_rss_gb": (self_kb + kids_kb) / 2**20,
}))
"""


def raw_file(shape: str, workdir: str) -> str:
    raw = os.path.join(workdir, f"raw-{shape}")
    if not os.path.exists(raw):
        subprocess.run(
            [sys.executable, "-m", "pipelines.cli", "synth", "--shape", shape, "--layout"]
            + [LAYOUT_OF[shape], "--output", raw],
            check=True,
        )
    return raw


def head_fraction(raw: str, fraction: float, workdir: str) -> str:
    """The first ``fraction`` of the ratings file (whole lines), in the same layout."""
    name = next(n for n in ("ratings.csv", "ratings.dat", "u.data") if os.path.exists(f"{raw}/{n}"))
    out = os.path.join(workdir, f"{os.path.basename(raw)}-{fraction:g}")
    os.makedirs(out, exist_ok=True)
    src, dst = os.path.join(raw, name), os.path.join(out, name)
    if not os.path.exists(dst):
        size = os.path.getsize(src)
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read(int(size * fraction)))
            g.write(f.readline())
    return out


def run_one(raw: str, mode: str, workdir: str) -> dict:
    out = tempfile.mkdtemp(dir=workdir, prefix="validate-")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, raw, out, json.dumps(MODES[mode])],
        capture_output=True,
        text=True,
        check=False,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{mode} on {raw} failed:\n{done.stderr[-3000:]}")
    res = json.loads(line[len("RESULT ") :])
    res["rows_per_s"] = res["rows"] / res["stats_s"]
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shapes", nargs="+", default=["ml-1m"], choices=sorted(LAYOUT_OF))
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    p.add_argument("--fraction", type=float, default=1.0, help="validate this share of each file")
    p.add_argument("--workdir", default="/tmp/ncf-bench")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    results = []
    for shape in args.shapes:
        raw = raw_file(shape, args.workdir)
        if args.fraction < 1:
            raw = head_fraction(raw, args.fraction, args.workdir)
        for mode in args.modes:
            r = {
                "shape": shape,
                "fraction": args.fraction,
                "mode": mode,
                **run_one(raw, mode, args.workdir),
            }
            results.append(r)
            print(
                f"{shape:8s} x{args.fraction:<5g} {mode:10s} rows={r['rows']:>10,} "
                f"stats={r['stats_s']:7.1f}s total={r['total_s']:7.1f}s "
                f"{r['rows_per_s'] / 1e6:6.2f}M rows/s peak_rss={r['peak_rss_gb']:.1f}GB",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
