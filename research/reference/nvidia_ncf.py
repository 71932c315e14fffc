"""NVIDIA's PyTorch NCF (DeepLearningExamples) run unchanged on a GPU machine, beside our step.

    python3 -m research.reference.nvidia_ncf setup --examples DLE --dllogger DLLOGGER \
        --dest .devrun/nvidia-ncf                    # here: copy their code (never committed)
    python3 -m research.reference.nvidia_ncf data --out /tmp/nv-ml20m  # there: ml-20m-shaped data
    python3 -m research.reference.nvidia_ncf train --code .devrun/nvidia-ncf --data /tmp/nv-ml20m \
        --epochs 3 [--amp] --out nv.jsonl            # there: their ncf.py, their throughput

Why: NVIDIA publishes 22.6M (TF32) and 34.1M (mixed precision) samples/s for one A100 at batch
1,048,576 (the figure issue 18 names), but nothing for the H100 or H200 this project is lent.
Running their code on the same card as ``research/gpu_ceiling_jax.py`` turns a comparison across
chips into one measured side by side.

``setup`` copies ``PyTorch/Recommendation/NCF/*.py`` from a checkout of
github.com/NVIDIA/DeepLearningExamples and the ``dllogger`` package from github.com/NVIDIA/dllogger
(their requirements.txt installs it from git) into one folder; nothing of theirs enters this repo.

``data`` writes the files their ``convert.py`` writes (``feature_spec.yaml``, ``train_data_0.pt``
user/item pairs, ``train_data_1.pt`` labels, ``test_data_0.pt``/``test_data_1.pt`` with 100
negatives per user) at ml-20m's shape: ``gpu_train_speed.ml20m_positives`` (138,493 users,
26,744 items, 19,861,770 training positives, skewed activity, Zipf-like items), the pairs
``gpu_ceiling_jax.py epoch`` trains on. Their ``convert.py`` needs
the real ratings file and a per-row Python loop (minutes); the training step's speed depends on
the shape and the id distribution, not on which pairs are real. Eval HR@10 on it means nothing.

``train`` runs their ``ncf.py`` with its own defaults (64 factors, MLP 256-256-128-64 with dropout
0.5, batch 2**20, FusedAdam lr 0.0045, betas 0.25/0.5, 4 negatives drawn on the GPU each epoch)
and reads the ``train_throughput`` per epoch from their JSON log: their figure, "averaged over an
entire training epoch" (the epoch's negative sampling and shuffle included). Two adaptations,
both only where their environment is missing, printed when used:

* ``apex`` (NVIDIA's extension library, built from source in their container) is absent from the
  GPU machine: ``apex.optimizers.FusedAdam`` then resolves to ``torch.optim.Adam(fused=True)``, the
  same update (FusedAdam's AdamW mode with weight decay 0 is Adam) as one fused kernel.
* TF32: their published TF32 column comes from the 21.04 container, whose PyTorch ran float32
  matrix products as TF32 by default; today's PyTorch does not, so ``train`` turns it on unless
  ``--no-tf32``. ``--amp`` is their mixed-precision switch (autocast float16 with a GradScaler).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

from bench.gpu_train_speed import ML20M_ITEMS, ML20M_USERS, ml20m_positives, zipf_items

TEST_NEGATIVES = 100  # their convert.py's --valid_negative default
NCF_DIR = "PyTorch/Recommendation/NCF"

# Runs inside the child process, before their ncf.py: the two adaptations the docstring names.
_BOOT = r"""
import runpy, sys, types
code, tf32, argv = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
import torch
if tf32:
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
try:
    import apex.optimizers  # noqa: F401
except ImportError:
    def FusedAdam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **_):
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                fused=True)
    apex = types.ModuleType("apex"); opt = types.ModuleType("apex.optimizers")
    opt.FusedAdam = FusedAdam; apex.optimizers = opt
    sys.modules["apex"] = apex; sys.modules["apex.optimizers"] = opt
    print("nvidia_ncf: apex missing; FusedAdam -> torch.optim.Adam(fused=True)", flush=True)
print(f"nvidia_ncf: torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
      f"tf32 matmul {torch.backends.cuda.matmul.allow_tf32}", flush=True)
sys.path.insert(0, code)
sys.argv = [code + "/ncf.py", *argv]
runpy.run_path(code + "/ncf.py", run_name="__main__")
"""


def setup(examples: str, dllogger: str, dest: str) -> int:
    """Copy their NCF scripts and dllogger into ``dest`` (a folder this repo ignores)."""
    src = os.path.join(examples, NCF_DIR)
    if not os.path.isfile(os.path.join(src, "ncf.py")):
        raise SystemExit(f"--examples {examples}: no {NCF_DIR}/ncf.py there (a checkout of "
                         "github.com/NVIDIA/DeepLearningExamples is expected)")  # fmt: skip
    pkg = os.path.join(dllogger, "dllogger")
    if not os.path.isfile(os.path.join(pkg, "logger.py")):
        raise SystemExit(f"--dllogger {dllogger}: no dllogger/logger.py there (a checkout of "
                         "github.com/NVIDIA/dllogger is expected)")  # fmt: skip
    os.makedirs(dest, exist_ok=True)
    for name in sorted(os.listdir(src)):
        if name.endswith(".py"):
            shutil.copy2(os.path.join(src, name), dest)
    shutil.copytree(pkg, os.path.join(dest, "dllogger"), dirs_exist_ok=True)
    print(f"copied {src}/*.py and {pkg} to {dest}")
    return 0


def write_data(out: str, seed: int = 0) -> dict:
    """Their convert.py's five files at ml-20m's shape (module docstring)."""
    import numpy as np
    import torch
    import yaml

    users, items = ML20M_USERS, ML20M_ITEMS
    user_ids, item_ids = ml20m_positives(seed)
    train = len(user_ids)
    pairs = np.stack([user_ids, item_ids], axis=1)
    rng = np.random.default_rng(seed + 1)
    test_pos = zipf_items(rng, users, items)
    test_items = np.concatenate(
        [test_pos[:, None], rng.integers(0, items, (users, TEST_NEGATIVES))], axis=1
    ).reshape(-1, 1)
    test_users = np.repeat(np.arange(users, dtype=np.int64), TEST_NEGATIVES + 1)[:, None]
    test_labels = np.zeros((users, TEST_NEGATIVES + 1), dtype=np.float32)
    test_labels[:, 0] = 1.0
    os.makedirs(out, exist_ok=True)
    torch.save(torch.from_numpy(pairs), os.path.join(out, "train_data_0.pt"))
    torch.save(torch.ones((train, 1), dtype=torch.float32), os.path.join(out, "train_data_1.pt"))
    test = np.concatenate([test_users, test_items.astype(np.int64)], axis=1)
    torch.save(torch.from_numpy(test), os.path.join(out, "test_data_0.pt"))
    torch.save(torch.from_numpy(test_labels.reshape(-1, 1)), os.path.join(out, "test_data_1.pt"))
    spec = {  # the layout their convert.save_feature_spec writes
        "feature_spec": {
            "user": {"dtype": "torch.int64", "cardinality": users},
            "item": {"dtype": "torch.int64", "cardinality": items},
            "label": {"dtype": "torch.float32"},
        },
        "metadata": {"test_samples_per_series": TEST_NEGATIVES + 1},
        "source_spec": {
            "train": [
                {
                    "type": "torch_tensor",
                    "features": ["user", "item"],
                    "files": ["train_data_0.pt"],
                },
                {"type": "torch_tensor", "features": ["label"], "files": ["train_data_1.pt"]},
            ],
            "test": [
                {"type": "torch_tensor", "features": ["user", "item"], "files": ["test_data_0.pt"]},
                {"type": "torch_tensor", "features": ["label"], "files": ["test_data_1.pt"]},
            ],
        },
        "channel_spec": {"user_ch": ["user"], "item_ch": ["item"], "label_ch": ["label"]},
    }
    with open(os.path.join(out, "feature_spec.yaml"), "w") as f:
        yaml.dump(spec, f)
    return {"users": users, "items": items, "train_positives": int(train),
            "max_per_user": int(np.bincount(user_ids).max())}  # fmt: skip


def check_constants(code: str) -> None:
    """Fail early if their channel or metadata names differ from what ``write_data`` writes."""
    path = os.path.join(code, "neumf_constants.py")  # theirs, loaded from its file
    spec = importlib.util.spec_from_file_location("neumf_constants", path)
    c = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(c)
    want = ("user_ch", "item_ch", "label_ch", "test_samples_per_series")
    got = (c.USER_CHANNEL_NAME, c.ITEM_CHANNEL_NAME, c.LABEL_CHANNEL_NAME,
           c.TEST_SAMPLES_PER_SERIES)  # fmt: skip
    if got != want:
        raise SystemExit(f"their neumf_constants name {got}, write_data writes {want}")


def train(code: str, data: str, epochs: int, batch: int, amp: bool, tf32: bool, log: str) -> dict:
    """Their ncf.py in a child process; returns their per-epoch throughputs and HR@10."""
    check_constants(code)
    argv = ["--data", os.path.abspath(data), "--epochs", str(epochs), "-b", str(batch),
            "--valid_batch_size", str(batch), "--log_path", os.path.abspath(log),
            "--threshold", "1.0", "--seed", "0"]  # fmt: skip
    if amp:
        argv.append("--amp")
    start = time.perf_counter()
    cmd = [sys.executable, "-c", _BOOT, os.path.abspath(code), "1" if tf32 else "0", *argv]
    proc = subprocess.run(cmd, check=False)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"their ncf.py exited {proc.returncode}")
    per_epoch = []
    with open(log) as f:
        for line in f:
            if not line.startswith("DLLL "):
                continue
            rec = json.loads(line[5:])
            if rec.get("type") == "LOG" and "train_throughput" in rec.get("data", {}):
                per_epoch.append(rec["data"])
    thr = [e["train_throughput"] for e in per_epoch]
    return {
        "impl": "nvidia-pytorch-ncf",
        "precision": "amp-float16" if amp else ("tf32" if tf32 else "float32"),
        "batch": batch,
        "epochs": len(per_epoch),
        "train_throughput_per_epoch": thr,
        "best_train_throughput": max(thr) if thr else None,
        "later_epochs_mean": sum(thr[1:]) / len(thr[1:]) if len(thr) > 1 else None,
        "train_epoch_time": [e["train_epoch_time"] for e in per_epoch],
        "wall_s": round(wall, 1),
    }


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup", help="copy their code into a folder this repo ignores")
    s.add_argument("--examples", required=True, help="checkout of NVIDIA/DeepLearningExamples")
    s.add_argument("--dllogger", required=True, help="checkout of NVIDIA/dllogger")
    s.add_argument("--dest", default=".devrun/nvidia-ncf")
    d = sub.add_parser("data", help="their convert.py's files at ml-20m shape")
    d.add_argument("--out", required=True)
    d.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train", help="their ncf.py; one JSON line of their throughputs")
    t.add_argument("--code", default=".devrun/nvidia-ncf")
    t.add_argument("--data", required=True)
    t.add_argument("--epochs", type=int, default=3)
    t.add_argument("--batch", type=int, default=1 << 20, help="their default and published batch")
    t.add_argument("--amp", action="store_true", help="their mixed precision")
    t.add_argument("--no-tf32", action="store_true", help="full float32 matrix products")
    t.add_argument("--log", default="nvidia-ncf-log.json", help="their dllogger JSON log")
    t.add_argument("--out", help="append the JSON line here")
    args = p.parse_args()
    if args.cmd == "setup":
        return setup(args.examples, args.dllogger, args.dest)
    if args.cmd == "data":
        start = time.perf_counter()
        info = write_data(args.out, args.seed)
        print(json.dumps({**info, "seconds": round(time.perf_counter() - start, 1)}))
        return 0
    row = train(args.code, args.data, args.epochs, args.batch, args.amp, not args.no_tf32, args.log)
    line = json.dumps(row)
    print(line, flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
