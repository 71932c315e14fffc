"""Data prep beside TF Model Garden's NCF prep (create_ncf_data): same data, same session.

    bash research/reference/setup_reference_env.sh  # once: the reference's side environment
    uv run python -m research.reference.prep_vs_reference --rounds 3 [--epochs 2] \
        [--work /tmp/ncf-prep-vs-ref]

Both read one synthetic ml-1m-shaped ratings folder (the reference accepts only ml-1m/ml-20m
with their exact counts; research/reference/make_movielens_layout.py writes it) and write `--epochs`
epochs of training data (4 negatives, pre-batch 1024) plus the eval set (999 negatives), each in
its own process, alternating. The figure is training rows written per second of wall time for the
whole run (reading, cleaning, eval set and all epochs included), as the reference reports it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REF_PY = os.path.join(os.path.dirname(HERE), ".reference-venv", "bin", "python")

OURS = r"""
import json, sys, time
from training_core.data.config import PrepareConfig
from training_core.data import prepare
t = time.perf_counter()
r = prepare.prepare(PrepareConfig(sys.argv[1], sys.argv[2], num_epochs=int(sys.argv[3]),
                                          overwrite=True))
wall = time.perf_counter() - t
m = r.metadata
print(json.dumps({"wall_s": wall, "train_rows_per_epoch": m.num_train_elements,
                  "rows_per_s_wall": m.num_train_elements * m.num_epochs / wall}))
"""


def _last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--work", default="/tmp/ncf-prep-vs-ref")
    args = ap.parse_args()
    if not os.path.exists(REF_PY):
        sys.exit(
            "the reference environment is missing: bash research/reference/setup_reference_env.sh"
        )
    raw = os.path.join(args.work, "raw")
    if not os.path.exists(os.path.join(raw, "ml-1m", "ratings.csv")):
        subprocess.run(
            [
                sys.executable,
                os.path.join(HERE, "make_movielens_layout.py"),
                "--layout",
                "ml-1m",
                "--output",
                raw,
                "--seed",
                "0",
            ],
            check=True,
        )
    rows = []
    for r in range(1, args.rounds + 1):
        ours = _last_json(
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    OURS,
                    os.path.join(raw, "ml-1m", "ratings.csv"),
                    os.path.join(args.work, "ours"),
                    str(args.epochs),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        ref = _last_json(
            subprocess.run(
                [
                    REF_PY,
                    os.path.join(HERE, "run_reference_prep.py"),
                    "--dataset",
                    "ml-1m",
                    "--input",
                    raw,
                    "--output",
                    os.path.join(args.work, "ref"),
                    "--epochs",
                    str(args.epochs),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        ratio = ours["rows_per_s_wall"] / ref["rows_per_s_wall"]
        rows.append((ref["rows_per_s_wall"], ours["rows_per_s_wall"], ratio))
        print(
            f"round {r}: reference {ref['rows_per_s_wall'] / 1e6:.2f}M rows/s "
            f"({ref['wall_s']:.1f}s)  ours {ours['rows_per_s_wall'] / 1e6:.2f}M rows/s "
            f"({ours['wall_s']:.1f}s)  ratio {ratio:.2f}x  load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        time.sleep(1)
    med = [statistics.median(c) for c in zip(*rows, strict=True)]
    print(
        f"median: reference {med[0] / 1e6:.2f}M rows/s  ours {med[1] / 1e6:.2f}M rows/s  "
        f"ratio {med[2]:.2f}x  (train rows per epoch: ours {ours['train_rows_per_epoch']:,}, "
        f"reference {ref['train_rows_per_epoch']:,})"
    )


if __name__ == "__main__":
    main()
