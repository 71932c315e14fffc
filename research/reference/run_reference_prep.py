"""Time the reference NCF data preparation (TF Model Garden create_ncf_data.py) on a dataset dir.

Runs ``official.recommendation.create_ncf_data``'s own ``main`` with its flags
(``--dataset --data_dir --meta_data_file_path --train_prebatch_size=1024`` and its other
defaults: bisection negatives, 4 negatives per positive, eval prebatch 99000), after
symlinking the three input files of ``<input>/<dataset>/`` into ``<output>/<dataset>/``:
the reference writes its TFRecords (``training_cycle_<e>/shard_*.tfrecords``,
``eval_data/``) and raw-data pickle cache under its ``--data_dir``. The cache is removed
first (unless --keep-cache) so the pandas preprocessing is timed too.

Prints one JSON line: wall time, per-phase times (preprocess = CSV read/filter/remap/sort,
per-epoch training-set construction, eval construction), training rows of one epoch as
counted from the TFRecords (sum of valid_point_mask; padding excluded) and rows/s.

Run with the side venv (see setup_reference_env.sh):
    research/.reference-venv/bin/python research/reference/run_reference_prep.py \
        --dataset ml-1m --input /tmp/ml --output /tmp/ncf-prep --epochs 2
"""

import argparse
import json
import os
import shutil
import sys
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def count_rows(pattern):
    """(records, valid rows) in the training TFRecords matching pattern."""
    import tensorflow as tf

    feats = {"valid_point_mask": tf.io.VarLenFeature(tf.int64)}
    ds = (
        tf.data.Dataset.list_files(pattern, shuffle=False)
        .interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=4)
        .batch(256)
    )
    counts = [
        (
            int(tf.size(x)),
            int(tf.reduce_sum(tf.io.parse_example(x, feats)["valid_point_mask"].values)),
        )
        for x in ds
    ]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", choices=["ml-1m", "ml-20m"], default="ml-1m")
    ap.add_argument("--input", required=True, help="dir holding <dataset>/ratings.csv etc.")
    ap.add_argument("--output", required=True, help="reference data_dir for TFRecords/metadata")
    ap.add_argument("--epochs", type=int, default=1, help="training epochs to generate")
    ap.add_argument("--batch", type=int, default=1024, help="train_prebatch_size")
    ap.add_argument("--keep-cache", action="store_true")
    args = ap.parse_args()

    sub = os.path.join(args.output, args.dataset)
    os.makedirs(sub, exist_ok=True)
    for name in ("ratings.csv", "movies.csv", f"{args.dataset}.zip"):
        src, dst = (
            os.path.abspath(os.path.join(args.input, args.dataset, name)),
            os.path.join(sub, name),
        )
        if not os.path.exists(src):
            sys.exit(f"missing {src}; run make_movielens_layout.py first")
        if not os.path.lexists(dst):
            os.symlink(src, dst)
    for d in os.listdir(args.output):  # stale epochs would be counted/trained on
        if d.startswith("training_cycle_") or d == "eval_data":
            shutil.rmtree(os.path.join(args.output, d))
    if not args.keep_cache:
        for f in os.listdir(sub):
            if f.startswith("raw_data_cache"):
                os.remove(os.path.join(sub, f))

    from absl import flags
    from absl import logging as absl_logging
    from official.recommendation import create_ncf_data, data_pipeline, data_preprocessing

    phases = {}  # name -> list of seconds, one per call

    def timed(fn, key):
        def wrapper(*a, **k):
            t = time.perf_counter()
            out = fn(*a, **k)
            phases.setdefault(key, []).append(round(time.perf_counter() - t, 3))
            return out

        return wrapper

    # Instrument only (no behaviour change): wrap reference methods with timers.
    data_preprocessing._filter_index_sort = timed(
        data_preprocessing._filter_index_sort, "preprocess_s"
    )
    base = data_pipeline.BaseDataConstructor
    base._construct_training_epoch = timed(
        base._construct_training_epoch, "construct_train_epoch_s"
    )
    base._construct_eval_epoch = timed(base._construct_eval_epoch, "construct_eval_s")
    cls = data_pipeline.BisectionDataConstructor
    cls.construct_lookup_variables = timed(cls.construct_lookup_variables, "lookup_tables_s")

    meta_path = os.path.join(args.output, "meta_data.json")
    flags.FLAGS(
        [
            sys.argv[0],
            f"--data_dir={args.output}",
            f"--dataset={args.dataset}",
            f"--meta_data_file_path={meta_path}",
            f"--num_train_epochs={args.epochs}",
            f"--train_prebatch_size={args.batch}",
        ]
    )
    absl_logging.set_verbosity(absl_logging.INFO)  # as app.run would with its defaults
    t0 = time.perf_counter()
    create_ncf_data.main(None)
    wall = time.perf_counter() - t0

    meta = json.load(open(meta_path))
    records, rows = count_rows(os.path.join(args.output, "training_cycle_0", "*.tfrecords"))
    epoch_s = phases["construct_train_epoch_s"]
    print(
        json.dumps(
            {
                "impl": "reference-tf-model-garden",
                "stage": "prep",
                "dataset": args.dataset,
                "train_prebatch_size": args.batch,
                "epochs_generated": args.epochs,
                "wall_s": round(wall, 3),
                "loadavg_1m_at_end": os.getloadavg()[0],
                **phases,
                "train_rows_per_epoch": rows,
                "train_records_per_epoch": records,
                "meta_num_train_elements": meta["num_train_elements"],
                "meta_num_train_steps": meta["num_train_steps"],
                "rows_per_s_epoch_construction": round(rows / (sum(epoch_s) / len(epoch_s))),
                "rows_per_s_wall": round(rows * args.epochs / wall),
                "output": os.path.abspath(args.output),
            }
        )
    )


if __name__ == "__main__":
    main()
