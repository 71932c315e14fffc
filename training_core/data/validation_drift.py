"""Drift against baseline statistics: the thresholds a run sets, written into the schema.

TFDV compares this run's statistics with the baseline's for each feature whose schema entry has
a drift comparator; ``apply_drift`` sets them (a caller's over the schema's own, and by default
``js`` on the ids and the rating).
"""

from __future__ import annotations

import dataclasses

from training_core.data.beam_source import ITEM, RATING, USER

LINF, JS = "linf", "js"
# Applied when baseline statistics are given and neither the schema nor the caller sets a
# comparator for the feature. Ids and ratings only: timestamps move forward by design.
DEFAULT_DRIFT_THRESHOLD = 0.1
DEFAULT_DRIFT_FEATURES = (USER, ITEM, RATING)


@dataclasses.dataclass(frozen=True)
class DriftThreshold:
    """Flags drift of one feature against baseline statistics above ``threshold``.

    ``linf`` (L-infinity distance of the value frequencies) needs a categorical feature;
    ``js`` (approximate Jensen-Shannon divergence) works on numeric and categorical ones.
    """

    feature: str
    comparator: str
    threshold: float

    def __post_init__(self):
        """Rejects unknown comparators and thresholds outside (0, 1]."""
        if self.comparator not in (LINF, JS):
            raise ValueError(
                f"drift comparator {self.comparator!r} for {self.feature}: use linf or js"
            )
        if not 0 < self.threshold <= 1:
            raise ValueError(f"drift threshold for {self.feature} must be in (0, 1]")


def apply_drift(schema, drift: tuple[DriftThreshold, ...], defaults: bool) -> None:
    """Sets drift comparators in ``schema``: explicit ones win over the schema's own.

    With ``defaults``, ids and rating without a comparator get ``js`` at DEFAULT_DRIFT_THRESHOLD.

    Raises:
        ValueError: a feature not in the schema, or ``linf`` on a feature that is not categorical.
    """
    from tensorflow_metadata.proto.v0 import schema_pb2

    by_name = {f.name: f for f in schema.feature}
    for d in drift:
        feature = by_name.get(d.feature)
        if feature is None:
            raise ValueError(
                f"drift setting for {d.feature!r}: no such feature in the schema "
                f"(features: {', '.join(sorted(by_name))})"
            )
        categorical = feature.type == schema_pb2.BYTES or (
            feature.type == schema_pb2.INT and feature.int_domain.is_categorical
        )
        if d.comparator == LINF and not categorical:
            raise ValueError(
                f"drift setting {d.feature}=linf: L-infinity compares the value frequencies of a "
                f"categorical feature, and {d.feature} is numeric. Use {d.feature}=js:T, or mark "
                "it categorical in the baseline schema (int_domain { is_categorical: true })."
            )
        feature.ClearField("drift_comparator")
        if d.comparator == LINF:
            feature.drift_comparator.infinity_norm.threshold = d.threshold
        else:
            feature.drift_comparator.jensen_shannon_divergence.threshold = d.threshold
    if defaults:
        explicit = {d.feature for d in drift}
        for name in DEFAULT_DRIFT_FEATURES:
            feature = by_name.get(name)
            if feature is None or name in explicit or feature.HasField("drift_comparator"):
                continue
            comp = feature.drift_comparator.jensen_shannon_divergence
            comp.threshold = DEFAULT_DRIFT_THRESHOLD
