"""The ``postgres`` sink: a PostgreSQL table in the ledger's own database, loaded in the **same**
transaction that commits the batch in the ledger (docs/architecture.md, *The PostgreSQL sink*).

    sink:
      type: postgres
      staging: /data/staging/orders       # staging root: the Spark job writes Parquet here, as for every sink
      table: analytics.orders             # schema.table, in the ledger's database
      mode: append                        # or upsert, with key: [order_id] (and version_column, delete_column)

Spark's JDBC writer commits one transaction per task, so a failed stage leaves part of a batch in
the table. Here the Spark job only stages Parquet; the commit task, under the pipeline lock and in
the ledger's transaction (``Sink.publish_in_transaction``), does

1. ``SET LOCAL TIME ZONE 'UTC'``; creates the table on first use from the staged Parquet's schema,
   or adds new columns (``ALTER TABLE … ADD COLUMN``); a column whose type changed fails here,
   before any row is written, naming the column;
2. ``DELETE`` the rows of the output id (a replay or a retried commit replaces them);
3. ``COPY … FROM STDIN`` of the attempt's rows, streamed from the Parquet files with pyarrow one
   record batch at a time (memory stays bounded whatever the batch size), with ``batch_id`` added;
4. the same for rejected records into ``<table>_rejected``.

The ledger's batch row and frontier compare-and-set are written in that same transaction (by
``commit``), so a reader sees a batch's rows and the new frontier together or not at all, and a
crash anywhere before ``COMMIT`` leaves both unchanged. The marker that proves "batch N is in" is
the transaction itself (the ledger row ``published_at`` commits with the rows).

**COPY format: CSV.** pyarrow's CSV writer turns a whole record batch into text in C++ (no Python
per row); PostgreSQL's CSV input tells NULL (unquoted empty) from an empty string (quoted ``""``,
and pyarrow quotes every string), and parses timestamps, decimals, dates, booleans and floats
(``nan``, ``1e+300``) with each type's own input function. The binary format would need every
value encoded in Python to PostgreSQL's wire formats (numeric digits, microseconds since 2000),
slower and easier to get wrong. Only ``bytea`` (as ``\\x…`` hex) and nested Spark types (as
``jsonb`` text) are converted in Python, and only for the columns that have them.

**Upsert** (``mode: upsert``, ``key: [...]``; optional ``version_column``, ``delete_column``):
the table shows, per key, its newest change, and a version decides which is newest, not the order
in which batches were committed: every change is kept in ``<table>_changes`` (``change_log``), and
a commit of output N rewrites the table's rows of exactly the keys N touches or touched. A replay
of any batch, in any order, leaves the table as the first pass did; a key missing from a replayed
batch's new output returns to its previous change; a delete (a row whose ``delete_column`` is true)
is never undone by an older batch. ``rows_out`` in the ledger counts the staged rows.

Identifiers are validated (letters, digits, ``_``) and always quoted with
``psycopg2.sql.Identifier``; no name is ever formatted into SQL text.

The package, one module per job:

* ``settings``: ``PostgresSettings`` (the ``sink:`` mapping), identifier checks, and the binding
  of the sink's connection to the ledger's;
* ``schema``: the table's columns: staged Parquet/Arrow types as PostgreSQL's, which changes are
  compatible, and the CREATE / ALTER that create and evolve the table and ``<table>_rejected``;
* ``copy_stream``: the streaming CSV ``COPY`` from staged Parquet (``CopyStream``);
* ``change_log``: the upsert's change log and the rule that the newest version of a key wins;
* ``sink``: ``PostgresSink``, the seam's halves: staging checks, the load in the ledger's
  transaction, retire, ownership and the read path.
"""

from offsetbatch.sinks.postgres.copy_stream import CopyStream
from offsetbatch.sinks.postgres.schema import compatible, staged_columns
from offsetbatch.sinks.postgres.settings import PostgresSettings, check_identifier
from offsetbatch.sinks.postgres.sink import PostgresSink

__all__ = ["CopyStream", "PostgresSettings", "PostgresSink", "check_identifier", "compatible", "staged_columns"]
