"""The validation gate's HTML report: verdict, anomalies with what to do, checks, features, Facets.

Rendered through the report kit (``training_core.common.report_kit``, template
``validation_report.html.j2``); TFDV's own Facets view of the statistics is embedded as TFDV
writes it.
"""

from __future__ import annotations

import os

from markupsafe import Markup

from training_core.common import report_kit
from training_core.data.validation_anomalies import ValidationResult


def write_report(result: ValidationResult, stats, baseline_stats, path: str) -> None:
    """An HTML page: verdict, anomalies with what to do, a feature table, and TFDV's Facets view."""
    from tensorflow_data_validation.utils import display_util

    facets = display_util.get_statistics_html(
        stats, baseline_stats, lhs_name="current", rhs_name="baseline"
    )
    facts = {
        "input": result.input_path,
        "format": result.format,
        "rows": str(result.num_examples),
        "schema": result.schema_source,
        "drift": "checked against baseline statistics" if result.drift_checked else "not checked",
    }
    page = report_kit.render(
        "validation_report.html.j2",
        result=result,
        verdict="PASSED" if result.passed else f"{len(result.anomalies)} ANOMALIES",
        facts=facts,
        anomalies=[(a.feature, a.kind, a.description, a.advice) for a in result.anomalies],
        features=feature_rows(stats),
        facets=Markup(facets),  # TFDV's own page (HTML and its script), embedded as it is.
    )
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(page)


def feature_rows(stats) -> list[tuple[str, ...]] | None:
    """A row per feature of ``stats``: name, type, present, missing, min, max, mean, unique.

    None where there are no statistics.
    """
    from tensorflow_metadata.proto.v0 import statistics_pb2

    if not stats.datasets:
        return None
    rows = []
    for feat in stats.datasets[0].features:
        name = ".".join(feat.path.step) or feat.name
        kind = statistics_pb2.FeatureNameStatistics.Type.Name(feat.type)
        if feat.HasField("num_stats"):
            n = feat.num_stats
            common = n.common_stats
            cells = (f"{n.min:g}", f"{n.max:g}", f"{n.mean:.4g}", "")
        else:
            s = feat.string_stats
            common = s.common_stats
            cells = ("", "", "", str(s.unique))
        rows.append((name, kind, str(common.num_non_missing), str(common.num_missing), *cells))
    return rows
