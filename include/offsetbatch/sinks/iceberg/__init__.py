"""The ``iceberg`` sink: each batch one atomic Iceberg snapshot, in a SQL catalog, whose summary
says which Kafka offsets it holds (docs/architecture.md, *The Iceberg sink*).

    sink:
      type: iceberg
      staging: /data/staging/events       # staging root: the Spark job writes Parquet here
      namespace: analytics
      table: events
      warehouse: /data/warehouse
      partition_by: ["day(event_time)"]   # optional
      # catalog: postgresql://… or an Airflow connection id; default: the ledger's database

Spark 4.3 has no Iceberg runtime, so Spark does not write the table: the job stages Parquet as
for every sink, and the commit task registers those files with pyiceberg (no JVM), in this order:

1. the ledger transaction (batch committed, frontier advanced), as for the files sink;
2. per table (``<table>``, then ``<table>_rejected``): unless a snapshot in the table's history
   already carries ``offsetbatch.batch-id = N``, move the attempt's files under the table's
   location and commit **one** snapshot that adds them and removes the files holding the rows of
   the output id (a replay) and of superseded batches (a rewind): readers see the old rows or the
   new, never both or neither, and a reader pinned to an older snapshot keeps the old ones;
3. the ledger marks the batch published; the staging folder is removed.

A crash anywhere after 1 is rolled forward by the next commit or plan (``publish_pending``); the
snapshot summary is the proof a table has the batch, so it is never added twice. A batch whose
columns the table cannot take (a type change Iceberg cannot promote) is refused before 1.

Rejected records go to a second Iceberg table, ``<table>_rejected`` (same columns as the files
sink's ``_rejected`` folder plus ``batch_id``): readers of both use the same tools.

The package, one module per job:

* ``settings``: ``IcebergSettings`` (the ``sink:`` mapping) and the catalog's default;
* ``catalog``: opening pyiceberg's ``SqlCatalog`` (URL or Airflow connection) with its fault point;
* ``schema``: staged columns against the table's (evolution, refusals) and the partition spec;
* ``markers``: the snapshot summary written per batch and read back (roll-forward, ``published_ids``,
  ``ledger rebuild``);
* ``upsert``: ``mode: upsert``, the table of one row per key derived from ``<table>_changes``;
* ``maintenance``: ``IcebergSink.maintenance``, a pass over every table the sink owns: compaction,
  snapshot expiry with the markers archived first (``markers``, *The archive*), deletion of the
  files only expired snapshots referenced (through an intent file a killed pass's successor
  finishes) and an orphan sweep;
* ``sink``: ``IcebergSink``, the seam's halves.
"""

from offsetbatch.sinks.iceberg.settings import IcebergSettings
from offsetbatch.sinks.iceberg.sink import IcebergSink

__all__ = ["IcebergSettings", "IcebergSink"]
