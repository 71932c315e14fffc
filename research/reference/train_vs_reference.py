"""Training examples/s of ours beside TF Model Garden's NCF custom loop: same data, same session.

One synthetic ml-1m-shaped raw dataset (``research/reference/make_movielens_layout.py``) is prepared
twice from the same ``ratings.csv``: by the reference's own prep (``run_reference_prep.py``, its
TFRecord layout) and by ours (``training_core.data.prepare``); both with 4 negatives per positive,
999 eval negatives and a training pre-batch of 1024. Then the two trainers run alternately
(ours, reference, ours, reference, ...), each in its own subprocess, one epoch each, with the
reference's flag defaults (our preset ``reference``: 8 factors, layers 64,32,16,8, Adam
0.001/0.9/0.999/1e-8) at batch 1024. Each reports steady-state training examples/s: startup,
tracing/compilation, the first ``--warmup`` steps and evaluation are excluded. Ours is also run
at ``--best-batch`` (needs a pre-batch dividing it). The host is shared, so only the ratios of
interleaved runs mean much; the table gives each round's numbers and the medians.

Needs the reference side venv (``bash research/reference/setup_reference_env.sh``).

    uv run python -m research.reference.train_vs_reference --rounds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time

REF_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(REF_DIR))
REF_PY = os.path.join(ROOT, "research", ".reference-venv", "bin", "python")


def _last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON result in output:\n{text[-3000:]}")


def _run(cmd: list[str], env: dict | None = None) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return _last_json(proc.stdout)


def setup(work: str, seed: int) -> tuple[str, str]:
    """Raw data, the reference's prep and ours (each made once, reused when present)."""
    raw = os.path.join(work, "raw")
    ref_prep = os.path.join(work, "ref-prep")
    ours_prep = os.path.join(work, "ours-prep")
    if not os.path.exists(os.path.join(raw, "ml-1m", "ratings.csv")):
        subprocess.run(
            [sys.executable, os.path.join(REF_DIR, "make_movielens_layout.py"), "--layout",
             "ml-1m", "--output", raw, "--seed", str(seed)],
            check=True,
            cwd=ROOT,
        )  # fmt: skip
    if not os.path.exists(os.path.join(ref_prep, "meta_data.json")):
        _run(
            [REF_PY, os.path.join(REF_DIR, "run_reference_prep.py"), "--dataset", "ml-1m",
             "--input", raw, "--output", ref_prep, "--epochs", "1", "--batch", "1024"]
        )  # fmt: skip
    if not os.path.exists(os.path.join(ours_prep, "metadata.json")):
        from training_core.data import prepare
        from training_core.data.config import PrepareConfig

        prepare.prepare(
            PrepareConfig(
                input_path=os.path.join(raw, "ml-1m", "ratings.csv"),
                output_dir=ours_prep,
                format="csv",
                num_epochs=1,
                num_neg=4,
                eval_negatives=999,
                train_batch_size=1024,
            )
        )
    return ref_prep, ours_prep


def run_reference(ref_prep: str, work: str, warmup: int) -> dict:
    model_dir = os.path.join(work, "ref-model")
    shutil.rmtree(model_dir, ignore_errors=True)
    out = _run(
        [REF_PY, os.path.join(REF_DIR, "run_reference_train.py"), "--prep", ref_prep,
         "--epochs", "1", "--batch", "1024", "--warmup", str(warmup), "--model-dir", model_dir]
    )  # fmt: skip
    return {
        "examples_per_s": out["examples_per_s"],
        "hr_at_10": out["hr_at_10"][-1],
        "wall_s": out["wall_s"],
    }


def run_ours(ours_prep: str, work: str, batch: int, warmup: int, extra: list[str]) -> dict:
    model_dir = os.path.join(work, "ours-model")
    shutil.rmtree(model_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "research.reference.train_vs_reference", "--worker", ours_prep,
           "--model-dir", model_dir, "--batch", str(batch), "--warmup", str(warmup),
           *extra]  # fmt: skip
    return _run(cmd)


def worker(args: argparse.Namespace) -> int:
    """One epoch of our training in this process; prints steady-state examples/s as JSON."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import tensorflow as tf

    from training_core.training import loop, presets, train_config

    # Our loop logs once per host call (every steps_per_loop steps); timestamp those records. The
    # rate runs from the end of the loop that passes --warmup steps (tracing included before it)
    # to the end of the last loop, so it includes per-loop host work but not startup or eval.
    marks: list[tuple[int, float]] = []

    class Marks(logging.Handler):
        def emit(self, record):
            if record.msg.startswith("epoch %d step %d/%d"):
                marks.append((int(record.args[1]), time.perf_counter()))

    # --steps-per-loop and --warmup are in steps of 1024 rows; larger batches keep the same rows
    # per host call and the same rows of warmup (an epoch at 16384 is only ~300 steps).
    scale = max(1, args.batch // 1024)
    steps_per_loop = max(10, args.steps_per_loop // scale)
    warmup = args.warmup // scale
    log = logging.getLogger("training_core.training.trainer")
    log.setLevel(logging.INFO)
    log.addHandler(Marks())
    config = train_config.TrainConfig(
        data_dir=args.worker,
        model_dir=args.model_dir,
        model=dataclasses.replace(
            presets.get_preset(args.preset, epochs=1, batch_size=args.batch), hr_threshold=None
        ),
        steps_per_loop=steps_per_loop,
        dense_gradients=train_config.EMBEDDING_UPDATES[args.embedding_updates],
    )
    t0 = time.perf_counter()
    result = loop.train(config, tf.distribute.get_strategy())
    wall = time.perf_counter() - t0
    first = next(i for i, (s, _) in enumerate(marks) if s >= warmup)
    (s0, t_a), (s1, t_b) = marks[first], marks[-1]
    print(
        json.dumps(
            {
                "batch_size": args.batch,
                "steps": result.global_step,
                "examples_per_s": round((s1 - s0) * args.batch / (t_b - t_a)),
                "excludes": f"first {s0} steps, eval",
                "epoch_examples_per_s": round(result.last.examples_per_sec),
                "hr_at_10": result.last.hr_at_10,
                "loss": result.last.loss,
                "wall_s": round(wall, 3),
            }
        )
    )
    return 0


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--work", default="/tmp/ncf-train-vs-ref")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2, help="ours/reference pairs")
    p.add_argument("--warmup", type=int, default=200, help="steps excluded from examples/s")
    p.add_argument(
        "--best-batch", type=int, nargs="*", default=[4096, 16384], help="ours only, also run"
    )
    p.add_argument("--preset", default="reference")
    p.add_argument("--steps-per-loop", type=int, default=200)
    p.add_argument("--embedding-updates", choices=["auto", "dense", "sparse"], default="auto")
    p.add_argument("--out", help="append JSON lines here")
    # Internal: run one training epoch of ours (a subprocess of the driver).
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=1024, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    if not os.path.exists(REF_PY):
        sys.exit(f"{REF_PY} missing; run: bash research/reference/setup_reference_env.sh")

    ref_prep, ours_prep = setup(args.work, args.seed)
    extra = [
        "--preset", args.preset, "--steps-per-loop", str(args.steps_per_loop),
        "--embedding-updates", args.embedding_updates,
    ]  # fmt: skip
    rows = []

    def record(impl: str, rnd: int, batch: int, res: dict) -> None:
        row = {"impl": impl, "round": rnd, "batch_size": batch, **res,
               "loadavg_1m": round(os.getloadavg()[0], 2)}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")

    for rnd in range(1, args.rounds + 1):
        record("ours", rnd, 1024, run_ours(ours_prep, args.work, 1024, args.warmup, extra))
        record("reference", rnd, 1024, run_reference(ref_prep, args.work, args.warmup))
        for batch in args.best_batch:
            record("ours", rnd, batch, run_ours(ours_prep, args.work, batch, args.warmup, extra))

    def rate(impl, rnd, batch):
        return next(
            r["examples_per_s"]
            for r in rows
            if r["impl"] == impl and r["round"] == rnd and r["batch_size"] == batch
        )

    rounds = range(1, args.rounds + 1)
    print(f"\n{'round':>5} {'reference@1024':>15} {'ours@1024':>11} {'ratio':>6}", end="")
    for b in args.best_batch:
        print(f" {f'ours@{b}':>11} {'ratio':>6}", end="")
    print()
    cols = {"ref": [], 1024: [], **{b: [] for b in args.best_batch}}
    for rnd in rounds:
        ref = rate("reference", rnd, 1024)
        cols["ref"].append(ref)
        line = f"{rnd:>5} {ref:>15,} "
        for b in [1024, *args.best_batch]:
            ours = rate("ours", rnd, b)
            cols[b].append(ours / ref)
            line += f"{ours:>11,} {ours / ref:>5.2f}x "
        print(line)
    ref_med = statistics.median(cols["ref"])
    line = f"{'med':>5} {round(ref_med):>15,} "
    for b in [1024, *args.best_batch]:
        ours_med = statistics.median(rate("ours", rnd, b) for rnd in rounds)
        line += f"{round(ours_med):>11,} {statistics.median(cols[b]):>5.2f}x "
    print(line)
    print("(ratio: ours / the reference run of the same round; 'med' ratio: median of rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
