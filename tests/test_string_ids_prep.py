"""Data prep of string ids, and of ratings and events read from a file (issue 40).

String ids are indexed in ascending str order, which gives the same records as integer ids
mapped to strings that keep their order; the vocabularies hold the strings as written. The
positive rules (--min-rating, --positive-events) go through the reader to the dataset.
"""

import csv
import os

import numpy as np
import pytest
from conftest import SMALL_PREPARE, read_records

from training_core.data import ids, indexing, metadata, positive_rules, prepare, records
from training_core.data.config import PrepareConfig


def test_string_ids_are_indexed_in_python_str_order():
    raw = ["b", "B", "a", "10", "9", "é", "z", "080652121X", "0806521210", "a", "€", "Z", "9"]
    vocab, codes = indexing._factorize(np.asarray(raw, dtype=object))
    assert vocab.dtype == object and vocab.tolist() == sorted(set(raw))
    assert vocab[codes].tolist() == raw
    assert codes.dtype == np.int64


def _rows(num_users=25, num_items=30, seed=5):
    """(user, item, time, rating, event) rows: each user 6 to 15 items, one per second."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(num_users):
        for t, i in enumerate(rng.permutation(num_items)[: rng.integers(6, 16)]):
            event = ("view", "cart", "purchase")[int(rng.integers(0, 3))]
            rows.append((7 * u + 3, 11 * int(i) + 2, 100 * u + t, int(rng.integers(1, 6)), event))
    return rows


def _write(path, rows, user=str, item=str):
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["user_id", "item_id", "timestamp", "rating", "event"])
        out.writerows((user(u), item(i), t, r, e) for u, i, t, r, e in rows)
    return str(path)


def _prepare(src, out, **options):
    options = {**SMALL_PREPARE, **options}
    return prepare.prepare(PrepareConfig(src, str(out), **options))


def _build_files(result):
    """Every file of the dataset's build but its vocabularies, by path under the build."""
    m = result.metadata
    build = os.path.join(result.output_dir, os.path.dirname(os.path.dirname(m.user_vocab)))
    found = {}
    for dirpath, _, names in os.walk(build):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), build)
            if not rel.startswith(metadata.VOCAB_DIR):
                with open(os.path.join(dirpath, name), "rb") as f:
                    found[rel] = f.read()
    return found


def test_string_ids_prepare_the_records_of_integer_ids_in_the_same_order(tmp_path):
    rows = _rows()
    ints = _prepare(_write(tmp_path / "ints.csv", rows), tmp_path / "ints")
    # Letters then zero-padded numbers: text, and in the order of the numbers. Items as ISBNs.
    strings = _prepare(
        _write(tmp_path / "s.csv", rows, lambda u: f"u{u:06d}", lambda i: f"08{i:07d}X"),
        tmp_path / "strings",
    )
    m = strings.metadata
    assert (m.user_id_type, m.item_id_type) == (ids.ID_STRING, ids.ID_STRING)
    assert (ints.metadata.user_id_type, ints.metadata.item_id_type) == ("int64", "int64")
    files = _build_files(strings)
    assert files == _build_files(ints) and len(files) == 2 * 2 + 2 + 2
    users = metadata.read_vocab(os.path.join(strings.output_dir, m.user_vocab), "string")
    items = metadata.read_vocab(os.path.join(strings.output_dir, m.item_vocab), "string")
    int_users = metadata.read_vocab(os.path.join(ints.output_dir, ints.metadata.user_vocab))
    int_items = metadata.read_vocab(os.path.join(ints.output_dir, ints.metadata.item_vocab))
    assert users.tolist() == [f"u{u:06d}" for u in int_users]
    assert items.tolist() == [f"08{i:07d}X" for i in int_items]
    with open(os.path.join(strings.output_dir, m.item_vocab), "rb") as f:
        assert f.read() == "".join(f"08{i:07d}X\n" for i in int_items).encode()
    assert m.options["columns"] == ints.metadata.options["columns"]
    assert "id_type" not in m.options  # auto: the default, not recorded.


def test_integer_users_and_string_items_prepare_together(tmp_path):
    rows = _rows()
    result = _prepare(
        _write(tmp_path / "mixed.csv", rows, str, lambda i: f"sku-{i:04d}"), tmp_path / "o"
    )
    m = result.metadata
    assert (m.user_id_type, m.item_id_type) == ("int64", "string")
    assert metadata.read_vocab(os.path.join(result.output_dir, m.user_vocab)).tolist() == sorted(
        {u for u, *_ in rows}
    )


def _records(root, files, training):
    return read_records([os.path.join(root, f.path) for f in files], training)


def _latest(rows):
    """The latest row of each (user, item) pair (rows are in time order per user)."""
    return {(u, i): (r, e) for u, i, _, r, e in rows}


@pytest.mark.parametrize(
    ("options", "rule", "is_positive"),
    [
        ({"min_rating": 3.5}, positive_rules.BELOW_MIN_RATING, lambda r, e: r >= 3.5),
        (
            {"positive_events": "purchase, cart"},
            positive_rules.NOT_POSITIVE_EVENT,
            lambda r, e: e != "view",
        ),
    ],
)
def test_rows_that_are_no_positive_are_seen_only(tmp_path, options, rule, is_positive):
    rows = _rows()
    result = _prepare(_write(tmp_path / "r.csv", rows), tmp_path / "o", **options)
    m, root = result.metadata, result.output_dir
    users = metadata.read_vocab(os.path.join(root, m.user_vocab))
    items = metadata.read_vocab(os.path.join(root, m.item_vocab))
    latest = _latest(rows)
    assert m.source[rule] == sum(not is_positive(r, e) for *_, r, e in rows) > 0
    index = {(u, i) for u in range(len(users)) for i in range(len(items))}
    raw = {pair: (users[pair[0]], items[pair[1]]) for pair in index}
    positive = {p for p in index if raw[p] in latest and is_positive(*latest[raw[p]])}
    seen_only = {p for p in index if raw[p] in latest and not is_positive(*latest[raw[p]])}
    assert len(seen_only) == m.num_seen_only > 0
    train = _records(root, m.train_files["epoch_000"], training=True)
    real = train[records.VALID_POINT_MASK] == 1
    pairs = set(zip(train["user_id"][real].tolist(), train["item_id"][real].tolist(), strict=True))
    labels = dict(
        zip(
            zip(train["user_id"][real].tolist(), train["item_id"][real].tolist(), strict=True),
            train["labels"][real].tolist(),
            strict=True,
        )
    )
    # What each draw knows (docs/model-quality.md): the seen-only pairs from before the user's
    # first held-out positive (training), the validation item, the test item.
    code = {(users[u], items[i]): (u, i) for u, i in index}
    known = {"train": set(), "validation": set(), "test": set()}
    for user in set(users.tolist()):
        mine = [(code.get((user, i)), is_positive(r, e)) for u, i, _, r, e in rows if u == user]
        num_pos = sum(pos for _, pos in mine)
        places = {"train": num_pos - 2, "validation": num_pos - 2, "test": num_pos - 1}
        before = 0
        for pair, pos in mine:
            before += pos
            for split, place in places.items():
                if not pos and before <= place and pair is not None:
                    known[split].add(pair)
    assert known["train"] and seen_only - known["train"]
    assert not pairs & known["train"]
    assert all(labels[p] == 0 for p in pairs & seen_only)  # Later ones: drawn as negatives.
    assert {p for p, label in labels.items() if label == 1} <= positive
    for split, files in (("test", m.eval_files), ("validation", m.validation_files)):
        held = _records(root, files, training=False)
        real = held[records.DUPLICATE_MASK] == 0
        drawn = set(
            zip(held["user_id"][real].tolist(), held["item_id"][real].tolist(), strict=True)
        )
        assert not drawn & known[split]
        k = 1 + m.eval_negatives
        kept = held[records.DUPLICATE_MASK][k - 1 :: k] == 0  # Padding users are masked.
        last = zip(
            held["user_id"][k - 1 :: k][kept].tolist(),
            held["item_id"][k - 1 :: k][kept].tolist(),
            strict=True,
        )
        assert set(last) <= positive
    assert {k: v for k, v in m.options.items() if k in options} == {
        k: v.replace(" ", "") if isinstance(v, str) else v for k, v in options.items()
    }
