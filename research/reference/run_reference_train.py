"""Time the reference NCF custom-loop training (TF Model Garden ncf_keras_main.py) on CPU.

Runs ``ncf_keras_main.run_ncf`` in-process with its own flags: ``--keras_use_ctl``,
``--batch_size=1024``, ``--num_gpus=0``, the reference's ml-1m defaults (NeuMF,
num_factors=8, layers=64,32,16,8, Adam lr=0.001, 4 negatives, HR@10 over 999 negatives),
reading the pre-made TFRecords of run_reference_prep.py via ``--train_dataset_path
<prep>/training_cycle_*/*``, ``--eval_dataset_path <prep>/eval_data/*`` and
``--input_meta_data_path <prep>/meta_data.json`` (eval batch = the prep's eval prebatch).
Extra reference flags can follow ``--`` (e.g. ``-- --distribution_strategy=one_device``).

Measurement (instrumentation only, no behaviour change): the reference's TimeHistory
callback's hooks are wrapped to also timestamp every step; the reference's own
"Done eval epoch N, hit_rate=X" log records give HR@10 per epoch. examples_per_s is
batch_size * steps / seconds over training steps only, excluding the first --warmup steps
(tf.function tracing, pipeline fill) and excluding evaluation; per-epoch numbers include
everything from the epoch's first to its last training step.

Run with the side venv after run_reference_prep.py --epochs >= N:
    research/.reference-venv/bin/python research/reference/run_reference_train.py \
        --prep /tmp/ncf-prep --epochs 2
"""

import argparse
import json
import logging
import os
import sys
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prep", required=True, help="output dir of run_reference_prep.py")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=100, help="steps excluded from examples/s")
    ap.add_argument("--model-dir", default=None, help="default: <prep>/model")
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]

    meta = json.load(open(os.path.join(args.prep, "meta_data.json")))
    if meta["num_train_epochs"] < args.epochs or meta["train_prebatch_size"] != args.batch:
        sys.exit(
            f"prep has {meta['num_train_epochs']} epochs of batch "
            f"{meta['train_prebatch_size']}; need {args.epochs} of {args.batch}"
        )

    from absl import flags
    from absl import logging as absl_logging
    from official.recommendation import ncf_common, ncf_keras_main
    from official.utils.misc import keras_utils

    steps = []  # (epoch, perf_counter at end of each training step)

    th = keras_utils.TimeHistory  # wrap its hooks in place (the class is used by name)
    orig_begin, orig_end = th.on_epoch_begin, th.on_batch_end

    def on_epoch_begin(self, epoch, logs=None):
        self._bench_epoch = epoch
        steps.append((epoch, time.perf_counter()))  # marks the epoch start
        orig_begin(self, epoch, logs)

    def on_batch_end(self, batch, logs=None):
        orig_end(self, batch, logs)
        steps.append((self._bench_epoch, time.perf_counter()))

    th.on_epoch_begin, th.on_batch_end = on_epoch_begin, on_batch_end

    evals, losses = {}, {}

    class Grab(logging.Handler):
        def emit(self, r):
            if r.msg.startswith("Done eval epoch"):
                evals[int(r.args[0])] = (float(r.args[1]), time.perf_counter())
            elif r.msg.startswith("Done training epoch"):
                losses[int(r.args[0])] = float(r.args[1])

    absl_logging.set_verbosity(absl_logging.INFO)  # as app.run would with its defaults
    logging.getLogger("absl").addHandler(Grab())

    model_dir = args.model_dir or os.path.join(args.prep, "model")
    ncf_common.define_ncf_flags()
    flags.FLAGS(
        [
            sys.argv[0],
            "--dataset=ml-1m" if meta["num_users"] == 6040 else "--dataset=ml-20m",
            "--keras_use_ctl",
            f"--batch_size={args.batch}",
            f"--eval_batch_size={meta['eval_prebatch_size']}",
            f"--train_epochs={args.epochs}",
            "--num_gpus=0",
            "--clean",
            f"--model_dir={model_dir}",
            f"--data_dir={args.prep}",
            f"--train_dataset_path={os.path.join(args.prep, 'training_cycle_*', '*')}",
            f"--eval_dataset_path={os.path.join(args.prep, 'eval_data', '*')}",
            f"--input_meta_data_path={os.path.join(args.prep, 'meta_data.json')}",
            *extra,
        ]
    )
    t0 = time.perf_counter()
    stats = ncf_keras_main.run_ncf(flags.FLAGS)
    wall = time.perf_counter() - t0

    per_epoch, tot_steps, tot_s = [], 0, 0.0
    for e in range(args.epochs):
        ts = [t for ep, t in steps if ep == e]  # ts[0] = epoch start, then one per step
        n = len(ts) - 1
        w = args.warmup if e == 0 else 0
        tot_steps += n - w
        tot_s += ts[-1] - ts[w]
        hr, t_eval_end = evals.get(e + 1, (None, None))
        per_epoch.append(
            {
                "epoch": e + 1,
                "steps": n,
                "train_s": round(ts[-1] - ts[0], 3),
                "examples_per_s": round(args.batch * n / (ts[-1] - ts[0])),
                "eval_s": round(t_eval_end - ts[-1], 3) if t_eval_end else None,
                "train_loss": losses.get(e + 1),
                "hr_at_10": hr,
            }
        )
    print(
        json.dumps(
            {
                "impl": "reference-tf-model-garden",
                "stage": "train_ctl",
                "batch_size": args.batch,
                "eval_batch_size": meta["eval_prebatch_size"],
                "epochs": args.epochs,
                "flags_extra": extra,
                "wall_s": round(wall, 3),
                "startup_s": round(steps[0][1] - t0, 3),  # run_ncf start -> first epoch begin
                "loadavg_1m_at_end": os.getloadavg()[0],
                "examples_per_s": round(args.batch * tot_steps / tot_s),
                "examples_per_s_excludes": f"first {args.warmup} steps, eval",
                "reference_avg_exp_per_second": round(stats.get("avg_exp_per_second", 0)),
                "hr_at_10": [p["hr_at_10"] for p in per_epoch],
                "per_epoch": per_epoch,
                "final_eval_hit_rate": float(stats["eval_hit_rate"]),
            }
        )
    )


if __name__ == "__main__":
    main()
