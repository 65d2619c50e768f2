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
every batch stages, as an append table would, until maintenance trims it (``trim``: of batches the
ledger has summarized, which nothing can replay any more, only each key's newest change stays); a
table upserted by an earlier offsetbatch (no log) gets one seeded from its rows on the first commit.
"""

from __future__ import annotations

import logging
from offsetbatch.errors import SinkSchemaError
from offsetbatch.sinks.postgres.schema import SUFFIX, TableSchema

log = logging.getLogger(__package__)

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
        self.fresh = cur.rowcount == 0  # N's first commit (not a replay, a retire or a rebuild of it)

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
        """After N's new changes are in the log: check them, then bring the table's rows of the keys
        N touches (or touched) up to the log. Returns (keys whose row is written, keys without a row)."""
        if getattr(self, "fresh", False):
            return self._apply_fresh(cur, output_id)
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

    def _apply_fresh(self, cur, output_id: int) -> tuple[int, int]:
        """N's first commit only adds changes, so a key's newest change is its newest in N or what
        it was before, and what it was before is the table's row, unless the key has none (never
        seen, or its newest change is a delete): only those keys are looked up in the log. Three
        statements against the table instead of a DELETE and an INSERT of every touched key (the
        general path, which a replay, a retire or a rebuild needs because they take changes away)."""
        from psycopg2 import sql

        newest = sql.Identifier(f"ob_newest_{output_id}")
        cols = [*self.sink._columns(cur)]
        order = self.settings.newest_first
        key_match = sql.SQL(" AND ").join(sql.SQL("t.{c} = n.{c}").format(c=sql.Identifier(c)) for c in self.settings.key)
        log_match = sql.SQL(" AND ").join(sql.SQL("c.{c} = n.{c}").format(c=sql.Identifier(c)) for c in self.settings.key)

        def tup(alias: str):
            return sql.SQL("({})").format(sql.SQL(", ").join(sql.SQL("{}.{}").format(sql.Identifier(alias), sql.Identifier(c))
                                                              for c in order))
        desc = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(c)) for c in order)
        cur.execute(self._sql("CREATE TEMPORARY TABLE {newest} ON COMMIT DROP AS SELECT DISTINCT ON ({key}) * "
                              "FROM {changes} WHERE batch_id = %s ORDER BY {key}, {desc}", newest=newest, desc=desc),
                    (output_id,))
        cur.execute(self._sql("ANALYZE {newest}", newest=newest))
        self._check_new(cur, output_id)
        if not self.settings.version_column:
            self._check_one_partition_fresh(cur, output_id, newest, key_match, log_match)
        # a key without a row whose log holds a newer change (a delete) keeps it: N's change is older
        cur.execute(self._sql("DELETE FROM {newest} n WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE {key_match}) "
                              "AND EXISTS (SELECT 1 FROM {changes} c WHERE {log_match} AND c.batch_id <> %s "
                              "AND {c_order} > {n_order})", newest=newest, key_match=key_match, log_match=log_match,
                              c_order=tup("c"), n_order=tup("n")), (output_id,))
        deleted = (sql.SQL("n.{} IS TRUE").format(sql.Identifier(self.settings.delete_column))
                   if self.settings.delete_column else sql.SQL("false"))
        cur.execute(self._sql("DELETE FROM {table} t USING {newest} n WHERE {key_match} AND {deleted} "
                              "AND {n_order} > {t_order}", newest=newest, key_match=key_match, deleted=deleted,
                              n_order=tup("n"), t_order=tup("t")))
        gone = cur.rowcount
        names = sql.SQL(", ").join(map(sql.Identifier, cols))
        updates = sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in cols
                                     if c not in self.settings.key)
        cur.execute(self._sql("INSERT INTO {table} AS t ({names}) SELECT {n_names} FROM {newest} n WHERE NOT ({deleted}) "
                              "ON CONFLICT ({key}) DO UPDATE SET {updates} WHERE {x_order} > {t_order}",
                              names=names, n_names=sql.SQL(", ").join(sql.SQL("n.{}").format(sql.Identifier(c))
                                                                       for c in cols),
                              newest=newest, deleted=deleted, updates=updates, x_order=tup("excluded"),
                              t_order=tup("t")))
        return cur.rowcount, gone

    def _check_one_partition_fresh(self, cur, output_id: int, newest, key_match, log_match) -> None:
        """``_check_one_partition`` for a first commit: N's keys against themselves, the table's
        row (whose partition every earlier change of the key shares), or, for a key without a row,
        the log."""
        cur.execute(self._sql("SELECT {key} FROM {changes} WHERE batch_id = %s GROUP BY {key} "
                              "HAVING count(DISTINCT (kafka_topic, kafka_partition)) > 1 LIMIT 1"), (output_id,))
        clash = cur.fetchone()
        if clash is None:
            cur.execute(self._sql("SELECT {n_key} FROM {newest} n WHERE EXISTS (SELECT 1 FROM {table} t WHERE "
                                  "{key_match} AND (t.kafka_topic, t.kafka_partition) <> (n.kafka_topic, "
                                  "n.kafka_partition)) OR (NOT EXISTS (SELECT 1 FROM {table} t WHERE {key_match}) AND "
                                  "EXISTS (SELECT 1 FROM {changes} c WHERE {log_match} AND (c.kafka_topic, "
                                  "c.kafka_partition) <> (n.kafka_topic, n.kafka_partition))) LIMIT 1",
                                  n_key=self._n_key(), newest=newest, key_match=key_match, log_match=log_match))
            clash = cur.fetchone()
        if clash is not None:
            self._refuse_two_partitions(cur, output_id, list(clash))

    def _n_key(self):
        from psycopg2 import sql

        return sql.SQL(", ").join(sql.SQL("n.{}").format(sql.Identifier(c)) for c in self.settings.key)

    def _newest_rows(self, cur, keys):
        from psycopg2 import sql

        cols = sql.SQL(", ").join(map(sql.Identifier, self.sink._columns(cur)))
        order = [sql.SQL("{} DESC").format(sql.Identifier(c)) for c in self.settings.newest_first]
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
        self._refuse_two_partitions(cur, output_id, key, places)

    def _refuse_two_partitions(self, cur, output_id: int, key: list, places: list | None = None) -> None:
        if places is None:  # where the key's changes are, for the message
            from psycopg2 import sql

            match = sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(c)) for c in self.settings.key)
            cur.execute(self._sql("SELECT array_agg(DISTINCT kafka_topic || '/' || kafka_partition) FROM {changes} "
                                  "WHERE {match}", match=match), key)
            places = cur.fetchone()[0] or []
        shown = ", ".join(f"{c}={v!r}" for c, v in zip(self.settings.key, key))
        raise SinkSchemaError(
            f"{self.sink.where(output_id)}: key ({shown}) has changes in {' and '.join(sorted(places))}; offsets order "
            f"a key's changes only within one partition, so which is newer is unknown. Nothing was written or "
            f"committed; the batch stays planned. Set sink.version_column to a column of the transform's output that "
            f"orders a key's changes (Debezium's source.lsn or ts_ms, an updated_at), then clear the spark_job task.")

    # ---- maintenance: the log bounded by the ledger's history -----------------------------------

    def trim(self, cur, pipeline: str) -> int:
        """Delete the changes of summarized output ids (``ledger.history``: in no batch
        row of the ledger any more, at or below its summary's last id) that a newer change of the
        same key, also summarized, supersedes. A summarized batch can no longer be replayed or
        retired, so of its keys' changes only the newest can still decide (when a kept batch
        holding a newer one is replayed or retired); a delete that is a key's newest stays, as the
        version its row outlives. Returns the rows deleted."""
        from psycopg2 import sql

        cur.execute("SELECT last_batch_id FROM ob_history_batches WHERE pipeline = %s", (pipeline,))
        found = cur.fetchone()
        if found is None or not self.sink._columns(cur, SUFFIX):
            return 0
        self._plan_for_probes(cur)
        cur.execute(self._sql("CREATE TEMPORARY TABLE ob_trimmed ON COMMIT DROP AS SELECT DISTINCT batch_id FROM "
                              "{changes} WHERE batch_id <= %s EXCEPT SELECT batch_id FROM ob_batches WHERE pipeline = %s"),
                    (found[0], pipeline))
        newest_first = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(c))
                                          for c in self.settings.newest_first)
        cur.execute(self._sql("DELETE FROM {changes} WHERE ctid IN (SELECT ctid FROM (SELECT ctid, row_number() OVER "
                              "(PARTITION BY {key} ORDER BY {newest_first}) AS n FROM {changes} WHERE batch_id IN "
                              "(SELECT batch_id FROM ob_trimmed)) ranked WHERE n > 1)", newest_first=newest_first))
        return cur.rowcount

    # ---- reads ------------------------------------------------------------------------------------

    def output_ids(self, cur) -> list[int] | None:
        """The output ids with a change in the log; None without a log."""
        if not self.sink._columns(cur, SUFFIX):
            return None
        cur.execute(self._sql("SELECT DISTINCT batch_id FROM {changes} ORDER BY 1"))
        return [r[0] for r in cur.fetchall()]
