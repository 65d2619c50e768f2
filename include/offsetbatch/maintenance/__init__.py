"""The maintenance pass: ``offsetbatch maintain`` and the maintenance DAG run ``maintain``.

* ``run``: one pass: roll forward what is unpublished, then the sink's actions, the ledger's and the
  job specs' in order, each sink action under the pipeline's ledger lock, audited as ``maintenance``
  events (docs/architecture.md, *Running for months*).
* ``ledger_actions``: the ledger's part of a pass (its history summarized: ``ledger.history``).

What a pass is made of lives below the sinks that use it, in ``sinks.maintenance`` (the
``maintenance:`` settings, ``Action``, ``Horizon``). A sink opts in with the ``Maintained`` trait
(``sinks.base``): Iceberg (``sinks.iceberg.maintenance``) and files (``sinks.files.maintenance``)
compact and expire; PostgreSQL in upsert mode trims its change log (``sinks.postgres.change_log``);
the markers of PostgreSQL and Kafka are the ledger's batch rows and a consumer-group offset, bounded
by the ledger's history.
"""

from offsetbatch.maintenance.run import EVENT, Outcome, Pass, horizon, maintain, plan

__all__ = ["EVENT", "Outcome", "Pass", "horizon", "maintain", "plan"]
