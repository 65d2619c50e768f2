"""The ``files`` sink: a Parquet table of one folder per batch (on a disk), or of manifests naming
each batch's files (on an object store).

* ``sink``: ``FilesSink``, staging, publication, replay and retirement, the read path.
* ``layout``: where published batches, manifests and compaction's own files are (``TableLayout``,
  ``CompactionLayout``), and the group manifest.
* ``maintenance``: the sink's actions in a maintenance pass, built from ``compaction`` (a closed
  day's small files joined), ``groups`` (a compacted member's replay or retirement), ``intents``
  (swaps written down before they are done), ``object_store`` (the same by group manifest, where
  nothing is renamed) and ``retention`` (abandoned attempts, trash, rejected records).
"""

from offsetbatch.sinks.files.layout import TableLayout
from offsetbatch.sinks.files.sink import FilesSink

__all__ = ["FilesSink", "TableLayout"]
