"""From raw ratings to the record contract.

Readers of every input layout (``io``, and ``beam_source`` for Apache Beam) and what they stand
on (``formats``, ``input_files``, ``delimited``, ``id_columns`` over the kinds of ``ids``,
``times``, ``positive_rules``, ``read_errors``, ``arrow_columns``), negative sampling
(``sampling``), the TFRecord format (``records``), the dataset's ``metadata.json`` (``metadata``)
and folder layout (``dataset_folder``), the preparation engines (``prepare`` on one machine, with
``indexing`` and ``worker_pool``; ``prepare_beam`` as a Beam job, with its stages
``prepare_beam_read``, ``prepare_beam_clean``, ``prepare_beam_write`` and
``prepare_beam_errors``) over the same global decisions (``plan``), shard writers
(``shards``) and run result (``report``), and data that needs no download (``sample_data``,
``synthetic``). Nothing here imports the trainer.
"""

# CVE-2023-47248: the locked pyarrow (10, pinned by TFDV's tfx-bsl) unpickles a Parquet or
# Arrow IPC file's "arrow.py_extension_type" column, so a crafted ratings file runs code as it
# is read. The hotfix refuses that type; every reader here imports this package first.
# The tpu image (images/tpu: training only) has no pyarrow, so nothing there can read such a
# file; wherever pyarrow is installed the hotfix is required.
import importlib.util

if importlib.util.find_spec("pyarrow") is not None:
    import pyarrow_hotfix  # noqa: F401
