"""``PostgresSink``: the seam's halves for a table in the ledger's database. The job half checks the
transform's columns and stages Parquet; the commit half loads a batch inside the ledger's
transaction (schema check and evolution, DELETE of the output id, COPY, the upsert's change log, the
rejected records), retires superseded batches, records ownership as a comment on the table, and
reads the table back through Spark's JDBC source.
"""

from __future__ import annotations

import json
import logging
import re
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterator

from offsetbatch import faults, storage
from offsetbatch.errors import SinkError, SinkSchemaError
from offsetbatch.jobspec import Manifest
from offsetbatch.sinks.base import Maintained, PublishesInLedgerTransaction, RejectedRows, Sink, StagedOutput
from offsetbatch.sinks.keyed import check_staged
from offsetbatch.sinks.postgres.change_log import SUFFIX, ChangeLog
from offsetbatch.sinks.postgres.copy_stream import copy_rows
from offsetbatch.sinks.postgres.schema import RECORD_COLUMNS, REJECTED_COLUMNS, RESERVED, TableSchema
from offsetbatch.sinks.postgres.settings import PostgresSettings

if TYPE_CHECKING:
    import sqlalchemy as sa
    from pyspark.sql import DataFrame, SparkSession

    from offsetbatch.sinks.maintenance import Action, Horizon, MaintenanceSettings

log = logging.getLogger(__package__)  # the package's logger: every postgres sink message under one name

OWNER_KEY = "offsetbatch"
NOT_UTF8 = "22021"  # character_not_in_repertoire: COPY met bytes that are not text in the database's encoding


class PostgresSink(TableSchema, PublishesInLedgerTransaction, Maintained, Sink):
    type = "postgres"
    Settings = PostgresSettings

    def __init__(self, pipeline_name: str, settings: PostgresSettings):
        super().__init__(pipeline_name, settings)
        self.schema_name, self.table_name = settings.table.split(".")
        self._engine = None

    # ---- names -----------------------------------------------------------------------------

    def _ident(self, suffix: str = ""):
        from psycopg2 import sql

        return sql.Identifier(self.schema_name, self.table_name + suffix)

    @property
    def rejected_table(self) -> str:
        return f"{self.settings.table}_rejected"

    @property
    def target(self) -> str:
        return f"table {self.settings.table}"

    def asset_uri(self) -> str:
        """``postgres://host:port/database/schema/table``, the Postgres provider's asset URI."""
        from offsetbatch.sinks.uris import postgres_table_uri

        try:
            url = self._url()
        except Exception as exc:  # noqa: BLE001 - a name must never cost the DAG (sinks.uris)
            log.warning("%s: its database connection cannot be read while the DAG is built (%s); the asset is "
                        "named after connection %r", self.where(), exc, self.settings.conn_id)
            return f"postgres://{self.settings.conn_id}:5432/default/{self.schema_name}/{self.table_name}"
        return postgres_table_uri(url, self.schema_name, self.table_name)

    def lineage_dataset(self) -> tuple[str, str]:
        from offsetbatch.sinks.uris import postgres_dataset

        return postgres_dataset(self.asset_uri())

    # ---- job half --------------------------------------------------------------------------

    def stage(self, spark: "SparkSession", data: "DataFrame", rejected: RejectedRows, batch_id: int,
              attempt: str, output_id: int | None = None) -> StagedOutput:
        """Parquet as every sink stages, after checking the columns the table needs: each row must
        say which record it came from (the UNIQUE (kafka_topic, kafka_partition, kafka_offset)
        constraint), and ``batch_id`` is the sink's."""
        cols = set(data.columns)
        missing = [c for c in RECORD_COLUMNS if c not in cols]
        if missing:
            raise SinkError(f"{self.where(batch_id)}: the transform's output lacks {', '.join(missing)}; the "
                            f"postgres sink keeps one row per Kafka record, identified by (kafka_topic, "
                            f"kafka_partition, kafka_offset). Add them to the transform's SELECT list. Nothing was "
                            f"committed; the batch stays planned.")
        clash = [c for c in RESERVED if c in cols]
        if clash:
            raise SinkError(f"{self.where(batch_id)}: the transform's output has a column {clash[0]!r}, which the "
                            f"postgres sink fills itself with the batch id. Rename it in the transform. Nothing was "
                            f"committed.")
        check_staged(self.settings, dict(data.dtypes), self.where(batch_id))
        return super().stage(spark, data, rejected, batch_id, attempt, output_id)

    # ---- connections -------------------------------------------------------------------------

    def _url(self) -> str:
        if self.settings.url:
            return self.settings.url
        if self.settings.conn_id:
            from offsetbatch.ledger.engine import url_from_connection

            return url_from_connection(self.settings.conn_id)
        raise SinkError(f"{self.where()}: no connection (the pipeline config fills it from ledger:); build the sink "
                        f"from the pipeline's config, not from a job spec")

    @contextmanager
    def _connect(self) -> Iterator["sa.Connection"]:
        """A connection of the sink's own (ownership checks, CLI); commits are made on the ledger's."""
        import sqlalchemy as sa
        from sqlalchemy.pool import NullPool

        if self._engine is None:
            self._engine = sa.create_engine(self._url(), poolclass=NullPool)
        with self._engine.begin() as conn:
            yield conn

    @staticmethod
    def _cursor(conn: "sa.Connection"):
        if conn.dialect.name != "postgresql":
            raise SinkError("the postgres sink needs the ledger in PostgreSQL (the table is loaded in the ledger's "
                            f"transaction), but the ledger is {conn.dialect.name}. Point ledger.url or the ledger's "
                            f"Airflow connection at the PostgreSQL database that holds the table.")
        return conn.connection.driver_connection.cursor()

    def _exists(self, cur, suffix: str = "") -> bool:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (self._quoted(suffix),))
        return cur.fetchone()[0]

    def _quoted(self, suffix: str = "") -> str:
        """The table's name as ``to_regclass`` parses it (a parameter, quoted: never SQL text)."""
        return f'"{self.schema_name}"."{self.table_name}{suffix}"'

    def _columns(self, cur, suffix: str = "") -> dict[str, str]:
        cur.execute("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
                    "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                    (self._quoted(suffix),))
        return dict(cur.fetchall())

    # ---- commit half, inside the ledger transaction ------------------------------------------

    def publish_in_transaction(self, conn: "sa.Connection", batch_id: int, output_id: int, attempt: str,
                               ledger_id: str) -> None:
        """Replace ``output_id``'s rows with ``attempt``'s, in ``conn``'s (the ledger's) transaction:
        schema check and evolution first (nothing written if a column's type changed), then DELETE,
        COPY, and the same for rejected records. Idempotent because the transaction is all or nothing."""
        manifest_uri = self.staging.staging_manifest(batch_id, attempt)
        if not storage.exists(manifest_uri):
            raise SinkError(f"{self.where(output_id)}: the manifest of attempt {attempt} of batch {batch_id} is gone "
                            f"({manifest_uri}); the batch cannot be loaded. Replay batch {output_id}.")
        manifest = Manifest.load(manifest_uri)
        import psycopg2

        try:
            self._load_batch(self._cursor(conn), manifest, batch_id, output_id, attempt, ledger_id)
        except psycopg2.Error as exc:
            if getattr(exc, "pgcode", None) == NOT_UTF8:
                raise SinkSchemaError(self._not_utf8(exc, manifest, batch_id, output_id)) from exc
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise SinkError(f"{self.where(output_id)}: PostgreSQL refused the load of attempt {attempt} of batch "
                            f"{batch_id}: {first}. The transaction was rolled back: nothing was written or committed, "
                            f"the batch stays planned. Fix the cause and re-run the commit task.") from exc

    def _not_utf8(self, exc, manifest: Manifest, batch_id: int, output_id: int) -> str:
        """What PostgreSQL's refusal of text that is not UTF-8 means (issue 41, case 1): the record
        (by the COPY's line), the column, and what to do; no retry loads it, and every later batch
        would wait behind it."""
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        found = re.search(r"COPY (\S+), line (\d+)(?:, column (\w+))?", getattr(exc.diag, "context", None) or "")
        where, column = f"a row of batch {batch_id}", ""
        if found:
            rejected = found.group(1).endswith("_rejected")
            at, record, columns = _row_at(manifest.rejected_files if rejected else manifest.data_files,
                                          int(found.group(2)) - 1)
            number = at + 1 if at is not None else int(found.group(2))
            where = f"batch {batch_id}'s {'rejected record' if rejected else 'row'} {number}"
            where += f" ({record})" if record else ""
            columns = columns or ([found.group(3)] if found.group(3) else [])
            column = f" in column {', '.join(columns)}" if columns else ""
        return (f"{self.where(output_id)}: {where} holds text that is not valid UTF-8{column}, "
                f"which PostgreSQL refuses ({first}). Nothing was written or committed; the batch stays planned, "
                f"and no retry loads it. Make the transform give valid text (make_valid_utf8(col), or "
                f"try_validate_utf8(col) for NULL instead) or keep the column binary (bytea), then clear the "
                f"spark_job task.")

    def _load_batch(self, cur, manifest: Manifest, batch_id: int, output_id: int, attempt: str, ledger_id: str) -> None:
        cur.execute("SET LOCAL TIME ZONE 'UTC'")
        columns = self._prepare(cur, manifest.data_files, output_id)
        self._prepare_rejected(cur)
        self._claim_in(cur, ledger_id)
        changes = self._change_log(cur, output_id)
        self._delete(cur, output_id, rows=changes is None)
        faults.checkpoint("commit.before_copy")
        names, types = [n for n, _ in columns], [t for _, t in columns]
        loaded = self._copy(cur, SUFFIX if changes else "", manifest.data_files, names, types, output_id) if columns else 0
        if loaded != manifest.rows_out:
            raise SinkError(f"{self.where(output_id)}: COPY loaded {loaded} rows but the manifest of attempt "
                            f"{attempt} says {manifest.rows_out}; the transaction is rolled back. Re-run the spark_job "
                            f"task.")
        merged = ""
        if changes:
            written, gone = changes.apply(cur, output_id)
            merged = f" (upsert: {written} key(s) rewritten from the change log, {gone} without a row now)"
        rej_cols = [c for c, _ in REJECTED_COLUMNS[1:]]
        rejected = self._copy(cur, "_rejected", manifest.rejected_files, rej_cols,
                              [t for _, t in REJECTED_COLUMNS[1:]], output_id)
        if rejected != manifest.rows_rejected:
            raise SinkError(f"{self.where(output_id)}: COPY loaded {rejected} rejected records but the manifest says "
                            f"{manifest.rows_rejected}; the transaction is rolled back. Re-run the spark_job task.")
        faults.checkpoint("commit.after_copy")
        log.info("%s: loaded %d rows%s and %d rejected records in the ledger's transaction", self.where(output_id),
                 loaded, merged, rejected)

    def _change_log(self, cur, output_id: int) -> ChangeLog | None:
        """Upsert: the change log, ready, with ``output_id``'s earlier changes taken out (their keys
        noted); None in append mode or before the table exists."""
        if self.settings.mode != "upsert":
            return None
        changes = ChangeLog(self)
        if not changes.prepare(cur, output_id):
            return None
        changes.forget(cur, output_id)
        return changes

    def retire_in_transaction(self, conn: "sa.Connection", output_id: int) -> None:
        cur = self._cursor(conn)
        changes = self._change_log(cur, output_id)
        self._delete(cur, output_id, rows=changes is None)
        if changes:
            changes.apply(cur, output_id)

    def _delete(self, cur, output_id: int, rows: bool = True) -> None:
        """``output_id``'s rejected records and (``rows``) its rows; an upsert's rows follow its change log."""
        from psycopg2 import sql

        for suffix in ("", "_rejected") if rows else ("_rejected",):
            if self._exists(cur, suffix):
                cur.execute(sql.SQL("DELETE FROM {} WHERE batch_id = %s").format(self._ident(suffix)), (output_id,))

    def _copy(self, cur, suffix: str, files: list[str], names: list[str], types: list[str], output_id: int) -> int:
        return copy_rows(cur, self._ident(suffix), files, names, types, output_id)

    # ---- ownership: a comment on the table -------------------------------------------------------

    def _claim_in(self, cur, ledger_id: str) -> None:
        from psycopg2 import sql

        if not self._exists(cur) or self._owner(cur) is not None:
            return
        mark = json.dumps({OWNER_KEY: {"ledger_id": ledger_id, "pipeline": self.pipeline_name,
                                       "claimed_at": datetime.now(timezone.utc).isoformat()}})
        cur.execute(sql.SQL("COMMENT ON TABLE {} IS %s").format(self._ident()), (mark,))

    def _owner(self, cur) -> dict | None:
        if not self._exists(cur):
            return None
        cur.execute("SELECT obj_description(to_regclass(%s), 'pg_class')", (self._quoted(),))
        text = cur.fetchone()[0]
        try:
            return json.loads(text)[OWNER_KEY] if text else None
        except (ValueError, KeyError, TypeError):
            return None

    def owner(self) -> dict | None:
        """Recorded as a comment on the table (``COMMENT ON TABLE``), written in the transaction
        that first loads it."""
        with self._connect() as conn:
            return self._owner(self._cursor(conn))

    def claim(self, ledger_id: str) -> None:
        with self._connect() as conn:
            self._claim_in(self._cursor(conn), ledger_id)

    def check_writable(self) -> None:
        """Before the plan opens the ledger: a table written in the other mode, or upserted by another
        key, is refused naming both (``TableSchema._check_keyed``), before any Spark job."""
        with self._connect() as conn:
            self._check_keyed(self._cursor(conn), self.where())

    def maintenance(self, policy: "MaintenanceSettings", horizon: "Horizon") -> list["Action"]:
        """Upsert mode: the change log's rows that bounded ledger history made useless; append
        mode has nothing to maintain (the ledger's batch rows are its markers)."""
        if self.settings.mode != "upsert":
            return []
        from offsetbatch.sinks.maintenance import Action

        def apply() -> dict[str, int]:
            with self._connect() as conn:
                gone = ChangeLog(self).trim(self._cursor(conn), self.pipeline_name)
            log.info("%s: change log trimmed by %d superseded change(s) of summarized batches", self.where(), gone)
            return {"changes": gone}
        return [Action("postgres.trim-change-log", f"{self.settings.table}{SUFFIX}",
                       "delete the changes of summarized batches that a newer change of the same key, also "
                       "summarized, supersedes", {}, apply)]

    def published_ids(self) -> list[int]:
        from psycopg2 import sql

        with self._connect() as conn:
            cur = self._cursor(conn)
            if not self._exists(cur):
                return []
            logged = ChangeLog(self).output_ids(cur) if self.settings.mode == "upsert" else None
            if logged is not None:  # an upsert's table keeps only each key's newest change: the log has them all
                return logged
            cur.execute(sql.SQL("SELECT DISTINCT batch_id FROM {} ORDER BY 1").format(self._ident()))
            return [r[0] for r in cur.fetchall()]

    def describe(self, output_id: int) -> str:
        return f"{self.settings.table} (batch_id = {output_id})"

    def locations(self, output_id: int) -> dict[str, str]:
        return {"table": f"{self.settings.table} WHERE batch_id = {output_id}",
                "rejected": f"{self.rejected_table} WHERE batch_id = {output_id}"}

    # ---- read path -------------------------------------------------------------------------------

    def read_committed(self, spark: "SparkSession") -> "DataFrame":
        """The table through Spark's JDBC source (needs PostgreSQL's JDBC driver on Spark's
        classpath). Every row belongs to a committed batch; SQL readers simply query the table."""
        return self._jdbc(spark, self.settings.table)

    def read_rejected(self, spark: "SparkSession") -> "DataFrame":
        return self._jdbc(spark, self.rejected_table)

    def _jdbc(self, spark: "SparkSession", table: str) -> "DataFrame":
        import sqlalchemy as sa

        u = sa.make_url(self._url())
        reader = (spark.read.format("jdbc")
                  .option("url", f"jdbc:postgresql://{u.host or 'localhost'}:{u.port or 5432}/{u.database}")
                  .option("dbtable", table))
        if u.username:
            reader = reader.option("user", u.username)
        if u.password:
            reader = reader.option("password", u.password)
        return reader.load()


def _row_at(files: list[str], row: int) -> tuple[int | None, str | None, list[str]]:
    """The staged row that holds text that is not UTF-8: the ``row``-th (0-based, over ``files`` in
    the COPY's order) when it does, else the first that does (a value with a line break makes the
    COPY's line numbers run ahead of the rows). Returns its index, its record as ``topic/partition
    offset N`` (``None`` when the rows do not carry it) and its text columns that are not UTF-8;
    ``(None, None, [])`` when no row has any. Read only on this error path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = None
    for path in files:
        fs, local = storage._fs(path)  # noqa: SLF001 - as the COPY stream reads them
        with fs.open(local, "rb") as fh:
            part = pq.ParquetFile(fh).read()
        table = part if table is None else pa.concat_tables([table, part], promote_options="permissive")
    if table is None:
        return None, None, []
    text = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    bad_at: dict[int, list[str]] = {}
    for name in text:
        for i, raw in enumerate(table.column(name).cast(pa.binary()).to_pylist()):
            if raw is not None and not _utf8(raw):
                bad_at.setdefault(i, []).append(name)
    if not bad_at:
        return None, None, []
    at = row if row in bad_at else min(bad_at)
    coords = ("kafka_topic", "kafka_partition", "kafka_offset")
    if not set(coords) <= set(table.column_names):
        return at, None, bad_at[at]
    v = table.slice(at, 1).select(list(coords)).to_pylist()[0]
    return at, f"{v['kafka_topic']}/{v['kafka_partition']} offset {v['kafka_offset']}", bad_at[at]


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
