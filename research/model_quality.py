"""Which model wins: NeuMF, MF, GMF, MLP and popularity, per epoch, over several seeds.

One synthetic raw set of a MovieLens shape (``--shape``, default ml-100k: 943 users, 1682
items, 100,000 ratings, Zipf-like item popularity and log-normal user activity) is prepared once
with this product's defaults for evaluation (999 distinct never-seen negatives per user) and a
training pre-batch of ``--batch-size`` with ``--epochs`` epochs of fresh negatives. Then each
``--models`` architecture trains with the ``--preset`` hyperparameters (the product's default
preset unless given) for every ``--seeds`` seed, each run its own ``ncf-pipelines train``
process (``--model ARCH --seed S --no-early-stop``), and the popularity baseline is ranked by
the same evaluation code (``training_core.evaluation.baselines``). HR@10 and NDCG@10 per epoch come
from the training history; the table reports, per model, the mean and spread (sample standard
deviation) over seeds of the best and the last epoch.

Results go to ``<work>/model_quality.json``; ``--docs`` also writes
``docs/model-quality-synthetic.md``.

    uv run python -m research.model_quality --epochs 20 --seeds 0 1 2 --docs
    uv run python -m research.model_quality --docs-only          # re-render from the JSON
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(os.path.dirname(sys.executable), "ncf-pipelines")
DOC = os.path.join(ROOT, "docs", "model-quality-synthetic.md")  # What --docs writes.


def data_dir(work: str, name: str, seed: int, batch_size: int) -> str:
    """Where ``prepare_data`` puts the prepared set ``name`` of raw-data seed ``seed``."""
    return os.path.join(work, f"data-{name}-b{batch_size}-s{seed}")


def set_name(args: dict) -> str:
    """The set's name: the shape, and the structure unless it is the generator's default."""
    structure = args.get("structure", "planted")
    return args["shape"] + ("" if structure == "planted" else f"-{structure}")


def preset_words(args: dict) -> str:
    """The preset as the page names it: ``auto`` with the preset it picked for the set."""
    from training_core.data.metadata import read_metadata
    from training_core.training.presets import AUTO, resolve_preset

    preset = args["preset"]
    if preset != AUTO:
        return f"`{preset}` preset's"
    data = data_dir(args["work"], set_name(args), args["data_seed"], args["batch_size"])
    picked = resolve_preset(preset, read_metadata(data).num_train_positives)
    return f"default preset's (`auto`, which picks `{picked}` for this set)"


def prepare_data(work: str, name: str, config, epochs: int, batch_size: int, generate=None) -> str:
    """The raw set ``config`` generates (a ``synthetic.SyntheticConfig``) and its prepared
    dataset, named ``name`` and the seed under ``work``; reused when there with enough epochs.
    ``generate``: a function that makes the interactions instead (a variant of the generator;
    ``config`` still names the seed and bounds the eval negatives)."""
    from training_core.data import prepare, synthetic
    from training_core.data.config import PrepareConfig

    data = data_dir(work, name, config.seed, batch_size)
    if _prepared(data, epochs):
        return data
    os.makedirs(work, exist_ok=True)
    raw = os.path.join(work, f"{name}-s{config.seed}.csv")
    interactions = generate() if generate is not None else synthetic.generate(config)
    synthetic.write(interactions, raw, "csv")
    eval_negatives = min(999, config.num_items - config.min_per_user)  # 999 at ml-100k and up.
    # The reference's leave-one-out (no validation split), the protocol this page reports.
    config = PrepareConfig(input_path=raw, output_dir=data, num_epochs=epochs, validation=False,
                           eval_negatives=eval_negatives, train_batch_size=batch_size)  # fmt: skip
    prepare.prepare(config)
    return data


def prepare_input(work: str, path: str, epochs: int, batch_size: int) -> str:
    """A ratings file or folder of the user's (real MovieLens, say) prepared as the synthetic
    sets are: the product's defaults (999 distinct never-seen eval negatives), ``batch_size``,
    ``epochs`` epochs; its layout is detected as ``ncf-pipelines prepare`` detects it."""
    from training_core.data import prepare
    from training_core.data.config import PrepareConfig

    data = data_dir(work, input_name(path), 0, batch_size)
    if _prepared(data, epochs):
        return data
    os.makedirs(work, exist_ok=True)
    prepare.prepare(PrepareConfig(input_path=path, output_dir=data, num_epochs=epochs,
                                  train_batch_size=batch_size, validation=False))  # fmt: skip
    return data


def input_name(path: str) -> str:
    """The set's name for ``--input``: ``input-`` and the file or folder name."""
    return "input-" + os.path.basename(os.path.normpath(path)).replace(".", "_")


def _prepared(data: str, epochs: int) -> bool:
    """Whether ``data`` holds a prepared set with at least ``epochs`` epochs (else cleared)."""
    from training_core.data.metadata import read_metadata

    try:
        if read_metadata(data).num_epochs >= epochs:
            return True
    except FileNotFoundError:
        pass
    shutil.rmtree(data, ignore_errors=True)
    return False


def train_run(data: str, work: str, arch: str, seed: int, preset: str, epochs: int) -> dict:
    """One training run in its own process; its per-epoch history."""
    name = f"{arch}-seed{seed}"
    model_dir = os.path.join(work, "models", name)
    shutil.rmtree(model_dir, ignore_errors=True)
    metrics_out = os.path.join(work, "metrics", f"{name}.json")
    cmd = [CLI, "train", "--data", data, "--model-dir", model_dir, "--preset", preset,
           "--model", arch, "--epochs", str(epochs), "--seed", str(seed), "--no-early-stop",
           "--metrics-out", metrics_out]  # fmt: skip
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    with open(metrics_out) as f:
        epochs_out = json.load(f)["epochs"]
    keep = ("epoch", "loss", "hr_at_10", "ndcg_at_10", "examples_per_sec")
    return {
        "arch": arch,
        "seed": seed,
        "wall_s": round(time.perf_counter() - t0, 1),
        "epochs": [{k: e[k] for k in keep if k in e} | _extra(e) for e in epochs_out],
    }


def _extra(epoch: dict) -> dict:
    """Full-catalog metrics, when the training history has them."""
    return {k: v for k, v in epoch.items() if k.startswith("full_catalog")}


def popularity(data: str) -> dict:
    """The popularity baseline's HR@10/NDCG@10 by the evaluation code that ranks the models."""
    import tensorflow as tf

    from training_core.data.metadata import read_metadata
    from training_core.evaluation import evaluate
    from training_core.evaluation.eval_config import CURVE_FULL_CATALOG_USERS
    from training_core.evaluation.full_catalog import FullCatalogEval

    meta = read_metadata(data)
    strategy = tf.distribute.get_strategy()
    # The same users the training curve ranks against the full catalog.
    users = FullCatalogEval(None, strategy, meta, data, CURVE_FULL_CATALOG_USERS)
    got, full = evaluate.rank_popularity(users, strategy, meta, data)
    return {
        "hr_at_10": got.hr,
        "ndcg_at_10": got.ndcg,
        "eval_users": got.users,
        "full_catalog_hr_at_10": full.metrics.hr,
        "full_catalog_ndcg_at_10": full.metrics.ndcg,
        "full_catalog_users": full.metrics.users,
    }


def summarize(runs: list[dict]) -> dict:
    """Per architecture: mean and spread over seeds of the best and last epoch's metrics."""
    out = {}
    for arch in dict.fromkeys(r["arch"] for r in runs):
        mine = [r for r in runs if r["arch"] == arch]
        row = {"seeds": [r["seed"] for r in mine]}
        metrics = ["hr_at_10", "ndcg_at_10"]
        if all("full_catalog_hr_at_10" in e for r in mine for e in r["epochs"]):
            metrics += ["full_catalog_hr_at_10", "full_catalog_ndcg_at_10"]
        for metric in metrics:
            best = [max(e[metric] for e in r["epochs"]) for r in mine]
            last = [r["epochs"][-1][metric] for r in mine]
            row[f"best_{metric}"] = _spread(best)
            row[f"last_{metric}"] = _spread(last)
        row["best_epoch"] = [max(r["epochs"], key=lambda e: e["hr_at_10"])["epoch"] for r in mine]
        row["examples_per_sec"] = _spread(
            [statistics.mean(e["examples_per_sec"] for e in r["epochs"]) for r in mine]
        )
        out[arch] = row
    return out


def _spread(values: list[float]) -> dict:
    return {
        "mean": statistics.mean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": values,
    }


def write_docs(res: dict) -> None:
    s = res["summary"]
    pop = res["popularity"]
    winner = max(s, key=lambda a: s[a]["best_hr_at_10"]["mean"])
    args = res["args"]
    lines = [
        "# Which model wins: NeuMF against its baselines",
        "",
        "On real MovieLens-100k under the honest protocol (a validation split chooses the epoch, "
        "the test split is scored once), see [model quality](model-quality.md) and [the tuning "
        "log](tuning-log.md#honest-numbers-on-real-movielens-100k-issue-52): the `ml-100k` "
        "preset's "
        "model. The page below is synthetic data under the reference's leave-one-out protocol "
        "(the best epoch read on the test item).",
        "",
        f"Written by `research/model_quality.py` (`{res['command']}`; {res['minutes']:.0f} min "
        f"on a shared 2-core CPU host, {res['date']}). One synthetic {args['shape']}-shaped "
        "raw set (Zipf-like item popularity, log-normal user activity, a planted latent-factor "
        f"structure, `{args.get('structure', 'planted')}`; `training_core/data/synthetic.py`), "
        "prepared once: 4 training negatives per positive drawn afresh each epoch, 999 "
        "distinct never-seen eval negatives, batch "
        f"{args['batch_size']}, {args['epochs']} epochs. Every model trains with the "
        f"{preset_words(args)} hyperparameters (only `--model` and `--seed` change), "
        f"seeds {', '.join(map(str, args['seeds']))}. This is synthetic data: it ranks the "
        "models on data of this shape; to rank them on yours, train each on it "
        "(`ncf-pipelines train --data <yours> --model neumf|mf|gmf|mlp`).",
        "",
        "HR@10 and NDCG@10 rank each user's held-out item against its 999 sampled negatives; "
        "**full catalog** ranks it against every item the user did not train on (Krichene & "
        "Rendle 2020: sampled metrics can order models differently), for the training curve's "
        "fixed sample of users (`eval_config.CURVE_FULL_CATALOG_USERS`, all of them at this "
        "size).",
        "",
        "| model | best HR@10 (mean ± sd) | best NDCG@10 | last-epoch HR@10 | best full-catalog "
        "HR@10 | best full-catalog NDCG@10 | best epoch per seed | examples/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    full = all("best_full_catalog_hr_at_10" in row for row in s.values())
    for arch, row in sorted(s.items(), key=lambda kv: -kv[1]["best_hr_at_10"]["mean"]):
        b, n, last = row["best_hr_at_10"], row["best_ndcg_at_10"], row["last_hr_at_10"]
        fh = row.get("best_full_catalog_hr_at_10")
        fn = row.get("best_full_catalog_ndcg_at_10")
        fcells = (
            f"{fh['mean']:.4f} ± {fh['std']:.4f} | {fn['mean']:.4f} ± {fn['std']:.4f}"
            if fh
            else "(not recorded) | (not recorded)"
        )
        lines.append(
            f"| {arch} | {b['mean']:.4f} ± {b['std']:.4f} | {n['mean']:.4f} ± {n['std']:.4f} "
            f"| {last['mean']:.4f} ± {last['std']:.4f} | {fcells} "
            f"| {', '.join(map(str, row['best_epoch']))} "
            f"| {row['examples_per_sec']['mean']:,.0f} |"
        )
    pop_full = (
        f"{pop['full_catalog_hr_at_10']:.4f} | {pop['full_catalog_ndcg_at_10']:.4f}"
        if "full_catalog_hr_at_10" in pop
        else "| "
    )
    lines.append(
        f"| popularity | {pop['hr_at_10']:.4f} | {pop['ndcg_at_10']:.4f} | (not trained) "
        f"| {pop_full} | | |"
    )
    lines += ["", f"**Winner on this data: {winner}** (highest mean best-epoch HR@10)."]
    if full:
        full_winner = max(s, key=lambda a: s[a]["best_full_catalog_hr_at_10"]["mean"])
        agree = "as" if full_winner == winner else "unlike"
        lines.append(
            f"By full-catalog HR@10 the winner is **{full_winner}** ({agree} the sampled metric)."
        )
    lines += [
        "",
        "## HR@10 per epoch (mean over seeds)",
        "",
        "| epoch | " + " | ".join(s) + " |",
        "|---|" + "---|" * len(s),
    ]
    by_arch = {a: [r for r in res["runs"] if r["arch"] == a] for a in s}
    for i in range(args["epochs"]):
        cells = [
            f"{statistics.mean(r['epochs'][i]['hr_at_10'] for r in runs):.4f}"
            for runs in by_arch.values()
        ]
        lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    if full:
        lines += [
            "",
            "## Full-catalog HR@10 per epoch (mean over seeds)",
            "",
            "| epoch | " + " | ".join(s) + " |",
            "|---|" + "---|" * len(s),
        ]
        for i in range(args["epochs"]):
            cells = [
                f"{statistics.mean(r['epochs'][i]['full_catalog_hr_at_10'] for r in runs):.4f}"
                for runs in by_arch.values()
            ]
            lines.append(f"| {i + 1} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Reproduce: `make setup`, then the command above (`--docs-only` re-renders this page "
        "from `<work>/model_quality.json`).",
        "",
    ]
    with open(DOC, "w") as f:
        f.write("\n".join(lines))


def main() -> int:
    from training_core.training.presets import ARCHITECTURES
    from training_core.training.train_config import DEFAULTS

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", default="ml-100k", help="synthetic shape (default ml-100k)")
    p.add_argument(
        "--structure",
        default="planted",
        help="synthetic structure (training_core/data/synthetic.py STRUCTURES): planted "
        "(default) or movielens (as hard as real MovieLens-100k)",
    )
    p.add_argument(
        "--input",
        help="a ratings file or folder to prepare and use instead of synthetic data (e.g. a "
        "real MovieLens u.data); --shape, --structure and --data-seed are then unused",
    )
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--data-seed", type=int, default=0, help="the raw data's seed")
    p.add_argument("--models", nargs="+", default=list(ARCHITECTURES), choices=ARCHITECTURES)
    p.add_argument("--preset", default=DEFAULTS["preset"])
    p.add_argument("--work", default="/tmp/ncf-model-quality")
    p.add_argument("--docs", action="store_true", help="also write docs/model-quality-synthetic.md")
    p.add_argument("--docs-only", action="store_true", help="only render docs from the JSON")
    args = p.parse_args()
    out_json = os.path.join(args.work, "model_quality.json")
    if args.docs_only:
        with open(out_json) as f:
            write_docs(json.load(f))
        return 0
    os.makedirs(args.work, exist_ok=True)
    t0 = time.perf_counter()
    if args.input:
        if args.docs:
            raise SystemExit("--docs renders the synthetic set's page; with --input, read the JSON")
        data = prepare_input(args.work, args.input, args.epochs, args.batch_size)
    else:
        from training_core.data import synthetic

        config = synthetic.with_structure(
            dataclasses.replace(synthetic.SHAPES[args.shape], seed=args.data_seed), args.structure
        )
        data = prepare_data(args.work, set_name(vars(args)), config, args.epochs, args.batch_size)
    runs = []
    for seed in args.seeds:  # Seeds outermost: a stopped run still has every model once.
        for arch in args.models:
            run = train_run(data, args.work, arch, seed, args.preset, args.epochs)
            best = max(e["hr_at_10"] for e in run["epochs"])
            print(f"{arch} seed {seed}: best HR@10 {best:.4f} ({run['wall_s']} s)", flush=True)
            runs.append(run)
    res = {
        "command": "uv run python -m research.model_quality " + " ".join(sys.argv[1:]),
        "date": datetime.date.today().isoformat(),
        "minutes": (time.perf_counter() - t0) / 60,
        "args": vars(args),
        "runs": runs,
        "summary": summarize(runs),
        "popularity": popularity(data),
    }
    with open(out_json, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps({a: r["best_hr_at_10"] for a, r in res["summary"].items()}, indent=1))
    print("popularity", res["popularity"])
    if args.docs:
        write_docs(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
