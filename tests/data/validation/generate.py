"""Regenerates the small validation test files (run from the repo root; output is deterministic).

    uv run python tests/data/validation/generate.py

clean.csv           synthetic interactions that meet every check
missing_column.csv  the same rows without the timestamp column
wrong_type.csv      user ids written as text ("u17"): a type anomaly under --id-type int64
out_of_range.csv    negative item ids, timestamps in 1970 and in 2100
drifted.csv         another sample whose items come from a shifted catalogue (ids + 400)
string_ids.csv      the same rows with text ids: users "user-0011", items ISBN-like "000000050X"
mixed_ids.csv       clean.csv's rows, every 50th item id written ISBN-like (integers and text
                    mixed: data prep asks for --id-type string)

clean_schema.pbtxt is not written here: it is the schema the gate inferred for clean.csv before
string ids existed (``max_timestamp=1_800_000_000``), kept to show that an integer-id file's
schema has not changed.
"""

from __future__ import annotations

import os

import numpy as np

from training_core.data import synthetic

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = synthetic.SyntheticConfig(
    num_users=40, num_items=120, num_interactions=400, min_per_user=5, seed=11
)


def _write(name: str, header: list[str], cols: list[np.ndarray]) -> None:
    lines = [",".join(header)]
    lines += [",".join(str(c[i]) for c in cols) for i in range(len(cols[0]))]
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    data = synthetic.generate(SHAPE)
    rng = np.random.default_rng(5)
    u, i, t = data.users, data.items, data.timestamps
    r = rng.integers(1, 6, len(u))
    header = ["user_id", "item_id", "rating", "timestamp"]
    _write("clean.csv", header, [u, i, r, t])
    _write("missing_column.csv", header[:3], [u, i, r])
    _write("wrong_type.csv", header, [np.char.add("u", u.astype(str)), i, r, t])
    bad_i, bad_t = i.copy(), t.copy()
    bad_i[::50] = -bad_i[::50]
    bad_t[7::60] = 86_400  # 1970-01-02
    bad_t[13::60] = 4_102_444_800  # 2100-01-01
    _write("out_of_range.csv", header, [u, bad_i, r, bad_t])
    other = synthetic.generate(synthetic.SyntheticConfig(**{**SHAPE.__dict__, "seed": 12}))
    users = np.char.add("user-", np.char.zfill(u.astype(str), 4))
    isbn = np.char.add(np.char.zfill(i.astype(str), 9), "X")
    _write("string_ids.csv", header, [users, isbn, r, t])
    mixed = i.astype(str).astype(object)
    mixed[::50] = isbn[::50]
    _write("mixed_ids.csv", header, [u, mixed, r, t])
    _write(
        "drifted.csv",
        header,
        [other.users, other.items + 400, rng.integers(1, 6, len(other)), other.timestamps],
    )


if __name__ == "__main__":
    main()
