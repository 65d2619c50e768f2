"""What a maintenance pass is made of: the pieces sinks, the config and the ledger share, below
them all, so a sink can say what it would do without knowing who runs it.

* ``policy``: the ``maintenance:`` settings (retention, target file size, schedule).
* ``actions``: a pass as data, ``Action``s a dry run prints and a real pass applies, and the
  ``Horizon`` every action of one pass agrees on.
* ``ledger_history``: the ledger's batches, ranges and routine events past ``ledger_retain``,
  summarized (the frontier, gaps and the audit kept).

A sink opts in with the ``Maintained`` trait (``sinks.base``): Iceberg (``sinks.iceberg.maintenance``)
and files (``sinks.files_maintenance``) compact and expire; PostgreSQL in upsert mode trims its
change log (``sinks.postgres.change_log``); the markers of PostgreSQL and Kafka are the ledger's
batch rows and a consumer-group offset, bounded by the ledger's history. ``offsetbatch.maintain``
runs a pass (the CLI's ``maintain``, the maintenance DAG).
"""
