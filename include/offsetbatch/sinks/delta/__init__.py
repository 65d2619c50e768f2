"""The ``delta`` sink: each batch one Delta Lake commit, written by delta-rs (the ``deltalake``
package, no JVM), whose application transaction and ``commitInfo`` say which Kafka offsets it holds
(docs/architecture.md, *The Delta sink*).

    sink:
      type: delta
      staging: /data/staging/events       # the Spark job's Parquet, as for every sink
      table: /data/delta/events           # the table; rejected records in /data/delta/events_rejected
      partition_by: [event_date]          # optional

Spark 4.3 has no Delta runtime (Delta 4.x supports Spark up to 4.2), so Spark does not write the
table: the job stages Parquet, and the commit task writes it into the table with delta-rs, in this
order:

1. the ledger transaction (batch committed, frontier advanced), as for the files sink;
2. per table (``<table>``, then ``<table>_rejected``): unless the table already has batch N (its
   application transaction ``offsetbatch/<pipeline>`` is below N, or its markers say so), one
   commit that adds the batch's rows and removes those of the output id (a replay) and of
   superseded batches (a rewind), on exactly the version that check read;
3. the ledger marks the batch published; the staging folder is removed.

A crash anywhere after 1 is rolled forward by the next commit or plan (``publish_pending``); a
second writer racing it loses its commit and finds the batch there.

The package, one module per job:

* ``settings``: ``DeltaSettings`` (the ``sink:`` mapping);
* ``table``: opening a table with delta-rs (its URI, the object store's settings);
* ``schema``: staged columns against the table's (new columns, refused type changes);
* ``markers``: the application transaction and commit marker per batch, and their archive;
* ``upsert``: ``mode: upsert``, the table of one row per key merged from ``<table>_changes``;
* ``maintenance``: compaction, vacuum, checkpoints and log cleanup that keep the markers;
* ``sink``: ``DeltaSink``, the seam's halves.
"""

from offsetbatch.sinks.delta.settings import DeltaSettings
from offsetbatch.sinks.delta.sink import DeltaSink

__all__ = ["DeltaSettings", "DeltaSink"]
