"""Statistics of raw interactions: TFDV's ``GenerateStatistics`` in Beam, and counts of text ids.

``compute_statistics`` writes ``FeatureStats.pb`` (binary DatasetFeatureStatisticsList,
``tfdv.load_stats_binary``). What data prep refuses in a text id column and a schema cannot say
is counted by ``IdTextStats`` (custom statistics of ``user_id``/``item_id``), read back with
``id_text_counts``; ``validation_anomalies`` turns the counts into anomalies.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
from tensorflow_data_validation.statistics.generators import stats_generator
from tensorflow_metadata.proto.v0 import statistics_pb2

from training_core.data import beam_source, id_columns
from training_core.data.beam_source import IDS


# Text ids: what data prep refuses and a schema cannot say. IdTextStats counts each kind of value
# (with an example) as custom statistics named ``id_text_COUNTER`` / ``id_text_COUNTER_example``.
# As the reader tells them apart (id_columns' own functions): an integer id is one int64 holds (a
# negative one data prep refuses as negative); a control character is C0, DEL, C1 or Unicode's
# line or paragraph separator; whitespace is Unicode's.
def _id_masks(values: pa.Array) -> dict[str, pa.Array]:
    """Per counter of ``ID_TEXT_COUNTERS`` but "values", which values of ``values`` it counts.

    By the reader's own rules (``id_columns.integer_ids``, ``id_columns.CONTROL_PATTERN``), so
    the gate counts exactly what data prep would read as integers or refuse.
    """
    integer = pa.array(id_columns.integer_ids(values)[0])
    return {
        "integer": integer,
        "text": pc.invert(integer),
        "empty": pc.equal(values, ""),
        "padded": pc.not_equal(pc.utf8_trim_whitespace(values), values),
        "control": pc.match_substring_regex(values, id_columns.CONTROL_PATTERN),
    }


ID_TEXT_COUNTERS = ("values", "integer", "text", "empty", "padded", "control")
_CUSTOM_STAT = "id_text_"


class IdTextStats(stats_generator.CombinerStatsGenerator):
    """Custom statistics of text id columns: how many ids are integers, empty, padded, ...

    Integer columns get none, so an integer-id file's statistics are what TFDV alone computes.
    The accumulator is ``{feature: {counter: [count, example or None]}}``.
    """

    def __init__(self):
        """The generator for ``user_id`` and ``item_id``."""
        super().__init__("IdTextStats")

    def create_accumulator(self) -> dict:
        """Nothing counted."""
        return {}

    def add_input(self, accumulator: dict, examples: pa.RecordBatch) -> dict:
        """Counts one batch's text ids."""
        for name in IDS:
            index = examples.schema.get_field_index(name)
            if index < 0:
                continue
            values = examples.column(index).flatten()
            if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
                continue
            if pa.types.is_large_string(values.type):
                values = values.cast(pa.string())
            masks = _id_masks(values)
            counts = accumulator.setdefault(name, {})
            total = counts.setdefault("values", [0, None])
            total[0] += len(values)
            for counter, mask in masks.items():
                entry = counts.setdefault(counter, [0, None])
                n = pc.sum(mask).as_py() or 0
                entry[0] += n
                if n and entry[1] is None:
                    entry[1] = values.filter(mask)[0].as_py()
        return accumulator

    def merge_accumulators(self, accumulators) -> dict:
        """Sums the counts; keeps the first example found."""
        out: dict = {}
        for acc in accumulators:
            for name, counts in acc.items():
                merged = out.setdefault(name, {})
                for counter, (n, example) in counts.items():
                    entry = merged.setdefault(counter, [0, None])
                    entry[0] += n
                    if entry[1] is None:
                        entry[1] = example
        return out

    def extract_output(self, accumulator: dict) -> statistics_pb2.DatasetFeatureStatistics:
        """``id_text_COUNTER`` (num) and ``id_text_COUNTER_example`` (str) per text id feature."""
        out = statistics_pb2.DatasetFeatureStatistics()
        for name, counts in sorted(accumulator.items()):
            feature = out.features.add()
            feature.path.step.append(name)
            for counter in ID_TEXT_COUNTERS:
                n, example = counts.get(counter, (0, None))
                feature.custom_stats.add(name=_CUSTOM_STAT + counter, num=n)
                if example is not None:
                    feature.custom_stats.add(name=f"{_CUSTOM_STAT}{counter}_example", str=example)
        return out


def id_text_counts(stats, feature: str) -> dict[str, tuple[int, str | None]]:
    """``IdTextStats``'s counters of ``feature`` in ``stats`` ({} for an integer column)."""
    out: dict[str, tuple[int, str | None]] = {}
    for feat in stats.datasets[0].features if stats.datasets else ():
        if ".".join(feat.path.step) != feature:
            continue
        custom = {c.name: c for c in feat.custom_stats if c.name.startswith(_CUSTOM_STAT)}
        for counter in ID_TEXT_COUNTERS:
            num = custom.get(_CUSTOM_STAT + counter)
            example = custom.get(f"{_CUSTOM_STAT}{counter}_example")
            if num is not None:
                out[counter] = (int(num.num), example.str if example is not None else None)
    return out


def compute_statistics(
    source: beam_source.Source,
    output_file: str,
    schema=None,
    beam_pipeline_args: tuple[str, ...] = (),
    range_bytes: int = beam_source.DEFAULT_RANGE_BYTES,
) -> None:
    """Runs TFDV's ``GenerateStatistics`` in a Beam pipeline and writes ``FeatureStats.pb``.

    ``schema`` (optional) tells TFDV which integer features are categorical, as TFX's
    StatisticsGen does with its schema input. ``IdTextStats`` adds its counts of text ids.
    Without ``--runner``, the pipeline runs on Beam's in-process FnApiRunner
    (``--direct_num_workers``/``--direct_running_mode`` apply).
    """
    import apache_beam as beam
    import tensorflow_data_validation as tfdv
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(list(beam_pipeline_args))
    runner_name = options.view_as(StandardOptions).runner
    remote = "dataflow" in str(runner_name).lower()
    runner = None if runner_name else beam_source.in_process_runner(options)
    os.makedirs(os.path.dirname(output_file) or ".", exist_ok=True)
    stats_options = tfdv.StatsOptions(schema=schema, generators=[IdTextStats()])
    with beam.Pipeline(runner=runner, options=options) as p:
        _ = (
            p
            | "ReadInteractions"
            >> beam_source.ReadInteractionBatches(source, range_bytes, runner_is_remote=remote)
            | "GenerateStatistics" >> tfdv.GenerateStatistics(stats_options)
            | "WriteStatistics"
            >> tfdv.WriteStatisticsToBinaryFile(beam_source.beam_path(output_file, remote))
        )
