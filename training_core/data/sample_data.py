"""The embedded default data, shipped inside the package.

A synthetic, MovieLens-100k-shaped ratings table, so that every command and the whole pipeline run
without downloads.
"""

from __future__ import annotations

import os

SAMPLE_FILE = "sample_ratings.csv.gz"


def sample_path() -> str:
    """Path of the embedded sample (csv: user_id, item_id, rating, timestamp)."""
    return os.path.join(os.path.dirname(__file__), SAMPLE_FILE)
