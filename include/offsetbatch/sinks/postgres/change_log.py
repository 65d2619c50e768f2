"""The postgres sink's upsert: a version decides which change of a key the table shows, not the
order in which batches were committed (docs/architecture.md, *Upserts that no replay regresses*).

Two tables, both written in the ledger's transaction:

* ``<table>_changes``, the change log: every change the sink committed, one row per Kafka record
  (the staged row, its ``batch_id``), deletes included. It has the table's columns and follows its
  evolution;
* ``<table>``: per key, the newest change of the log, unless that change is a delete.

"Newest" is the greatest ``version_column`` (when set), then offset, partition, topic. Without a
``version_column`` the offset alone orders a key's changes, which is right only while every change
of a key comes from one partition (Kafka's default partitioner keeps it so); a key found in two
partitions refuses the commit and names the setting.

Committing output N (a batch, a retried commit, a replay of N in any order, a retire):

1. note the keys N's earlier changes touched, and delete those changes from the log;
2. COPY N's staged rows into the log;
3. for every noted or new key: replace the table's row by the key's newest change in the log, or
   remove it when that change is a delete.

So a replay of an old batch changes only the keys whose newest change it holds; a key missing from
its new output returns to its previous change; a delete stays deleted whatever is replayed after it.
Replaying batches in any order leaves the table as the first pass did. The log grows by the rows
every batch stages, as an append table would; a table upserted by an earlier offsetbatch (no log)
gets one seeded from its rows on the first commit.
"""

from __future__ import annotations

import logging
from offsetbatch.errors import SinkSchemaError
from offsetbatch.sinks.keyed import POSITION
from offsetbatch.sinks.postgres.schema import TableSchema

log = logging.getLogger(__package__)

SUFFIX = "_changes"
SORT_MEMORY = "256MB"  # at least, for the newest-change sort (``_plan_for_probes``)
PROBE_PAGE_COST = 1.1  # at most: PostgreSQL's advice for data in memory or on SSDs


class ChangeLog:
    """The change log of one upsert sink, run on a cursor of the ledger's transaction."""

    def __init__(self, sink: TableSchema):
        """``sink``: the ``PostgresSink`` (its names, catalog look-ups and settings)."""
        self.sink, self.settings = sink, sink.settings

    def _sql(self, text: str, **parts):
        from psycopg2 import sql

        key = sql.SQL(", ").join(map(sql.Identifier, self.settings.key))
        return sql.SQL(text).format(key=key, table=self.sink._ident(), changes=self.sink._ident(SUFFIX), **parts)

    def _keys_table(self, output_id: int):
        from psycopg2 import sql

        return sql.Identifier(f"ob_keys_{output_id}")

    # ---- the log's table, kept in step with the table ----------------------------------------

    def prepare(self, cur, output_id: int) -> bool:
        """Create the log from the table's columns (seeded with its rows: a table upserted before
        the log existed), or add the columns the table gained. False while there is no table yet
        (nothing was ever staged): nothing to log or apply."""
        from psycopg2 import sql

        table_cols = self.sink._columns(cur)
        if not table_cols:
            return False
        log_cols = self.sink._columns(cur, SUFFIX)
        if not log_cols:
            name = self.sink.table_name + SUFFIX
            cur.execute(self._sql("CREATE TABLE {changes} (LIKE {table} INCLUDING DEFAULTS)"))
            cur.execute(self._sql("ALTER TABLE {changes} ADD UNIQUE (kafka_topic, kafka_partition, kafka_offset)"))
            cur.execute(self._sql("CREATE INDEX {idx} ON {changes} ({key})", idx=sql.Identifier(f"{name}_key_idx"[:63])))
            cur.execute(self._sql("CREATE INDEX {idx} ON {changes} (batch_id)",
                                  idx=sql.Identifier(f"{name}_batch_id_idx"[:63])))
            cur.execute(self._sql("INSERT INTO {changes} SELECT * FROM {table}"))
            if cur.rowcount:
                log.info("%s: created the change log %s%s, seeded with the table's %d rows (each key's change so far)",
                         self.sink.where(output_id), self.settings.table, SUFFIX, cur.rowcount)
            return True
        for name, pg_type in table_cols.items():
            if name not in log_cols:
                cur.execute(self._sql("ALTER TABLE {changes} ADD COLUMN {col} {type}", col=sql.Identifier(name),
                                      type=sql.SQL(pg_type)))
        return True

    # ---- 1. what output N touched before ----------------------------------------------------

    def forget(self, cur, output_id: int) -> None:
        """Note the keys of N's changes in the log, then delete those changes."""
        keys = self._keys_table(output_id)
        self._plan_for_probes(cur)
        cur.execute(self._sql("DROP TABLE IF EXISTS {keys}", keys=keys))
        cur.execute(self._sql("CREATE TEMPORARY TABLE {keys} ON COMMIT DROP AS SELECT DISTINCT {key} FROM {changes} "
                              "WHERE batch_id = %s", keys=keys), (output_id,))
        cur.execute(self._sql("DELETE FROM {changes} WHERE batch_id = %s"), (output_id,))

    @staticmethod
    def _plan_for_probes(cur) -> None:
        """For this transaction only, and never against a server tuned further: a batch touches a
        percent of a large table's keys, which index probes find (2.2 s for 100,000 keys of a
        10,000,000-row table here) and a hash join over the whole table does not (7.2 s); the
        default ``random_page_cost`` of 4 (a spinning disk) makes PostgreSQL pick the latter. And
        the newest-change sort of a batch's keys stays in memory (``work_mem`` is 4 MB by default)."""
        cur.execute("SELECT set_config('random_page_cost', least(current_setting('random_page_cost')::float8, %s)::text, "
                    "true), set_config('work_mem', greatest(pg_size_bytes(current_setting('work_mem')), "
                    "pg_size_bytes(%s)) / 1024 || 'kB', true)", (PROBE_PAGE_COST, SORT_MEMORY))

    # ---- 3. the table follows the log --------------------------------------------------------

    def apply(self, cur, output_id: int) -> tuple[int, int]:
        """After N's new changes are in the log: check them, then rewrite the table's rows of every
        key N touches or touched. Returns (keys whose row is written, keys left without a row)."""
        keys = self._keys_table(output_id)
        cur.execute(self._sql("INSERT INTO {keys} SELECT DISTINCT {key} FROM {changes} WHERE batch_id = %s "
                              "EXCEPT SELECT {key} FROM {keys}", keys=keys), (output_id,))
        cur.execute(self._sql("ANALYZE {keys}", keys=keys))  # no autovacuum sees a temporary table: its size
        # is unknown to the planner otherwise
        self._check_new(cur, output_id)
        if not self.settings.version_column:
            self._check_one_partition(cur, output_id, keys)
        cur.execute(self._sql("DELETE FROM {table} WHERE ({key}) IN (SELECT {key} FROM {keys})", keys=keys))
        cur.execute(self._sql("SELECT count(*) FROM {keys}", keys=keys))
        touched = cur.fetchone()[0]
        cur.execute(self._newest_rows(cur, keys))
        return cur.rowcount, touched - cur.rowcount

    def _newest_rows(self, cur, keys):
        from psycopg2 import sql

        cols = sql.SQL(", ").join(map(sql.Identifier, self.sink._columns(cur)))
        order = [sql.SQL("{} DESC").format(sql.Identifier(c)) for c in
                 ([self.settings.version_column] if self.settings.version_column else []) + list(POSITION)]
        deleted = (sql.SQL("WHERE {} IS NOT TRUE").format(sql.Identifier(self.settings.delete_column))
                   if self.settings.delete_column else sql.SQL(""))
        return self._sql("INSERT INTO {table} ({cols}) SELECT {cols} FROM (SELECT DISTINCT ON ({key}) * FROM {changes} "
                         "WHERE ({key}) IN (SELECT {key} FROM {keys}) ORDER BY {key}, {order}) newest {deleted}",
                         cols=cols, keys=keys, order=sql.SQL(", ").join(order), deleted=deleted)

    def _check_new(self, cur, output_id: int) -> None:
        """A key or version that is NULL identifies or orders nothing: refused, naming the record."""
        from psycopg2 import sql

        needed = [*self.settings.key, *([self.settings.version_column] if self.settings.version_column else [])]
        cur.execute(self._sql("SELECT kafka_topic, kafka_partition, kafka_offset, {nulls} FROM {changes} "
                              "WHERE batch_id = %s AND ({any_null}) ORDER BY 1, 2, 3 LIMIT 1",
                              nulls=sql.SQL(", ").join(sql.SQL("{} IS NULL").format(sql.Identifier(c)) for c in needed),
                              any_null=sql.SQL(" OR ").join(sql.SQL("{} IS NULL").format(sql.Identifier(c))
                                                            for c in needed)), (output_id,))
        found = cur.fetchone()
        if found is None:
            return
        topic, partition, offset, *null = found
        columns = [c for c, is_null in zip(needed, null) if is_null]
        raise SinkSchemaError(
            f"{self.sink.where(output_id)}: the row of {topic}/{partition} offset {offset} has NULL in "
            f"{', '.join(columns)}, which the upsert needs to know the row's key and which change is newer. Nothing "
            f"was written or committed; the batch stays planned, and no retry changes it. Filter such rows out in the "
            f"transform (WHERE {columns[0]} IS NOT NULL) or give them a value, then clear the spark_job task.")

    def _check_one_partition(self, cur, output_id: int, keys) -> None:
        cur.execute(self._sql("SELECT {key}, array_agg(DISTINCT kafka_topic || '/' || kafka_partition) FROM {changes} "
                              "WHERE ({key}) IN (SELECT {key} FROM {keys}) GROUP BY {key} "
                              "HAVING count(DISTINCT (kafka_topic, kafka_partition)) > 1 LIMIT 1", keys=keys))
        found = cur.fetchone()
        if found is None:
            return
        *key, places = found
        shown = ", ".join(f"{c}={v!r}" for c, v in zip(self.settings.key, key))
        raise SinkSchemaError(
            f"{self.sink.where(output_id)}: key ({shown}) has changes in {' and '.join(sorted(places))}; offsets order "
            f"a key's changes only within one partition, so which is newer is unknown. Nothing was written or "
            f"committed; the batch stays planned. Set sink.version_column to a column of the transform's output that "
            f"orders a key's changes (Debezium's source.lsn or ts_ms, an updated_at), then clear the spark_job task.")

    # ---- reads ------------------------------------------------------------------------------------

    def output_ids(self, cur) -> list[int] | None:
        """The output ids with a change in the log; None without a log."""
        if not self.sink._columns(cur, SUFFIX):
            return None
        cur.execute(self._sql("SELECT DISTINCT batch_id FROM {changes} ORDER BY 1"))
        return [r[0] for r in cur.fetchall()]
