"""Arrow column helpers the readers share: the first row a mask marks, a column as int64."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from training_core.data.read_errors import DataError


def first_true(mask: pa.ChunkedArray | pa.Array | np.ndarray) -> int | None:
    """The index of the first true value (nulls false), or None."""
    if isinstance(mask, np.ndarray):
        found = np.flatnonzero(mask)
        return int(found[0]) if len(found) else None
    found = pc.index(pc.fill_null(mask, False), True).as_py()
    return None if found < 0 else found


def to_int64(col: pa.ChunkedArray, name: str, where: Callable[[int], str]) -> np.ndarray:
    """An integer column's values as int64; an empty value is refused, naming its row."""
    if col.null_count:
        raise DataError(
            f"{where(first_true(pc.is_null(col)))}: column {name!r} is empty; every row needs a "
            "user, an item and a timestamp: fill it in or drop the row."
        )
    return np.asarray(col.to_numpy(), dtype=np.int64)
