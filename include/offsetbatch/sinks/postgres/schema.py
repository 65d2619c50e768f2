"""The postgres sink's table schema: the staged Parquet's columns as PostgreSQL types (Spark's own
schema from the file footer first, Arrow's as the fallback), which existing column types take
which staged ones (widening only), and the DDL, run in the ledger's transaction before any row is
written: ``CREATE TABLE`` on first use, ``ALTER TABLE … ADD COLUMN`` for new columns, a refusal
naming the column whose type changed, the upsert key's UNIQUE check, and ``<table>_rejected``.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

from offsetbatch import storage
from offsetbatch.errors import SinkError, SinkSchemaError

if TYPE_CHECKING:
    import pyarrow as pa

    from offsetbatch.sinks.postgres.settings import PostgresSettings

log = logging.getLogger(__package__)  # the package's logger: every postgres sink message under one name

RECORD_COLUMNS = {"kafka_topic": "text", "kafka_partition": "integer", "kafka_offset": "bigint"}
SUFFIX = "_changes"  # the upsert's change log: <table>_changes (``change_log``)
RESERVED = ("batch_id",)
REJECTED_COLUMNS = [("batch_id", "bigint NOT NULL"), ("kafka_topic", "text"), ("kafka_partition", "integer"),
                    ("kafka_offset", "bigint"), ("kafka_timestamp", "timestamp with time zone"), ("kafka_key", "bytea"),
                    ("raw_value", "bytea"), ("error", "text")]


# ---- Parquet → PostgreSQL types ---------------------------------------------------------------

_SPARK_TYPES = {
    "string": "text", "varchar": "text", "char": "text", "boolean": "boolean", "byte": "smallint",
    "short": "smallint", "integer": "integer", "long": "bigint", "float": "real", "double": "double precision",
    "date": "date", "timestamp": "timestamp with time zone", "timestamp_ntz": "timestamp without time zone",
    "binary": "bytea",
}
# an existing column of the key type accepts staged values of these types (widening only)
_WIDENS = {
    "bigint": {"integer", "smallint"}, "integer": {"smallint"}, "double precision": {"real"},
    "numeric": {"smallint", "integer", "bigint"},
}


def _spark_pg_type(t: Any) -> str:
    """A Spark SQL type (from the JSON schema Spark stores in its Parquet footers) as PostgreSQL's."""
    if isinstance(t, dict):
        return "jsonb"  # struct, array, map
    m = re.fullmatch(r"decimal\((\d+),\s*(\d+)\)", t)
    if m:
        return f"numeric({m.group(1)},{m.group(2)})"
    base = re.sub(r"\(.*\)$", "", t)
    if base not in _SPARK_TYPES:
        raise KeyError(t)
    return _SPARK_TYPES[base]


def _arrow_pg_type(t: "pa.DataType") -> str:
    """Fallback when a Parquet file has no Spark schema (files written by other tools)."""
    import pyarrow as pa

    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_boolean(t):
        return "boolean"
    for test, name in ((pa.types.is_int8, "smallint"), (pa.types.is_int16, "smallint"), (pa.types.is_int32, "integer"),
                       (pa.types.is_int64, "bigint"), (pa.types.is_float32, "real"),
                       (pa.types.is_float64, "double precision"), (pa.types.is_date32, "date")):
        if test(t):
            return name
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz else "timestamp without time zone"
    if pa.types.is_decimal(t):
        return f"numeric({t.precision},{t.scale})"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytea"
    if pa.types.is_nested(t):
        return "jsonb"
    raise KeyError(str(t))


def staged_columns(schema: "pa.Schema") -> list[tuple[str, str]]:
    """(name, PostgreSQL type) of each column of a staged Parquet schema, in order. Spark's own
    schema (in the file's metadata) wins: it tells ``timestamp`` (an instant) from ``timestamp_ntz``,
    which Parquet's INT96 encoding does not."""
    spark_types: dict[str, Any] = {}
    meta = (schema.metadata or {}).get(b"org.apache.spark.sql.parquet.row.metadata")
    if meta:
        spark_types = {f["name"]: f["type"] for f in json.loads(meta).get("fields", [])}
    out = []
    for field in schema:
        try:
            pg = _spark_pg_type(spark_types[field.name]) if field.name in spark_types else _arrow_pg_type(field.type)
        except KeyError as exc:
            raise SinkError(f"column {field.name!r} has type {exc.args[0]}, which the postgres sink cannot map to a "
                            f"PostgreSQL type; cast it in the transform (e.g. to STRING)") from None
        out.append((field.name, pg))
    return out


def _base_type(pg: str) -> str:
    return re.sub(r"\(.*\)$", "", pg)


def compatible(existing: str, staged: str) -> bool:
    """Whether a table column of type ``existing`` takes staged values of type ``staged``."""
    if existing == staged:
        return True
    if _base_type(existing) == "numeric" and _base_type(staged) == "numeric":
        return existing == "numeric" or existing == staged
    return _base_type(staged) in _WIDENS.get(_base_type(existing), set())


# ---- the table's DDL --------------------------------------------------------------------------

class TableSchema:
    """Creating and evolving the sink's tables: methods of ``PostgresSink`` (it mixes this class
    in), kept here with the type mapping they apply. They use the sink's names and catalog
    look-ups (``_ident``, ``_quoted``, ``_columns``, ``where``) and run on a cursor of the
    ledger's transaction."""

    settings: PostgresSettings
    schema_name: str
    table_name: str

    def _staged_schema(self, files: list[str]) -> "pa.Schema | None":
        import pyarrow.parquet as pq

        if not files:
            return None
        fs, local = storage._fs(files[0])  # noqa: SLF001
        with fs.open(local, "rb") as fh:
            return pq.ParquetFile(fh).schema_arrow

    def _prepare(self, cur, files: list[str], output_id: int) -> list[tuple[str, str]]:
        """Create the table, or check and evolve its columns; returns the staged (name, type) pairs."""
        from psycopg2 import sql

        schema = self._staged_schema(files)
        if schema is None:
            return []
        try:
            staged = staged_columns(schema)
        except SinkError as exc:
            raise SinkError(f"{self.where(output_id)}: {exc}. Nothing was written.") from None
        names = [n for n, _ in staged]
        for need, pg in RECORD_COLUMNS.items():
            if need not in names:
                raise SinkError(f"{self.where(output_id)}: the staged rows lack column {need!r}; the table keeps one "
                                f"row per Kafka record. Add it to the transform. Nothing was written.")
        existing = self._columns(cur)
        if not existing:
            defs = [sql.SQL("{} bigint NOT NULL").format(sql.Identifier("batch_id"))]
            defs += [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in staged]
            # An upserted table follows its change log (``change_log``), which keeps the record's
            # coordinates unique and finds a batch's changes: the table needs only its key's index,
            # and each index less is one less write per changed key.
            upserted = self.settings.mode == "upsert"
            if not upserted:
                defs.append(sql.SQL("UNIQUE ({})").format(sql.SQL(", ").join(map(sql.Identifier, RECORD_COLUMNS))))
            if self.settings.key:
                defs.append(sql.SQL("UNIQUE ({})").format(sql.SQL(", ").join(map(sql.Identifier, self.settings.key))))
            cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema_name)))
            cur.execute(sql.SQL("CREATE TABLE {} ({})").format(self._ident(), sql.SQL(", ").join(defs)))
            if not upserted:
                cur.execute(sql.SQL("CREATE INDEX {} ON {} (batch_id)").format(
                    sql.Identifier(f"{self.table_name}_batch_id_idx"[:63]), self._ident()))
            log.info("%s: created the table from the staged schema (%s)", self.where(output_id),
                     ", ".join(f"{n} {t}" for n, t in staged))
            return staged
        changed = [(n, existing[n], t) for n, t in staged if n in existing and not compatible(existing[n], t)]
        if changed:
            n, was, now = changed[0]
            raise SinkSchemaError(
                f"{self.where(output_id)}: column {n!r} is {was} in the table but the batch's rows have {now}"
                + (f" (and {len(changed) - 1} more column(s): {', '.join(c[0] for c in changed[1:])})" if len(changed) > 1 else "")
                + f". Nothing was written and nothing committed; the batch stays planned. Cast {n} back to {was} in the "
                f"transform, or migrate the column yourself (ALTER TABLE {self.settings.table} ALTER COLUMN {n} TYPE "
                f"{now} USING ...) and re-run the commit task.")
        self._check_keyed(cur, self.where(output_id))
        for n, t in staged:
            if n not in existing:
                cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(self._ident(), sql.Identifier(n), sql.SQL(t)))
                log.info("%s: added column %s %s", self.where(output_id), n, t)
        return staged

    def _unique_keys(self, cur) -> list[list[str]]:
        """The column lists of the table's unique indexes, each in index order."""
        cur.execute(
            "SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisunique GROUP BY i.indexrelid ORDER BY i.indexrelid",
            (self._quoted(),))
        return [r[0] for r in cur.fetchall()]

    def _check_keyed(self, cur, where: str) -> None:
        """The table's unique indexes say how it was written: an appended table is unique on the
        record's place (``kafka_topic, kafka_partition, kafka_offset``), an upserted one on its key
        (and its change log, ``<table>_changes``, is keyed the same). A mode or a key other than the
        table's is refused naming both, by the plan (``check_writable``) before any Spark job and by
        the commit before its transaction: writing on would leave one table and its change log keyed
        two ways. Nothing to check while the table does not exist."""
        if not self._exists(cur):
            return
        uniques = self._unique_keys(cur)
        place = set(RECORD_COLUMNS)
        keys = [u for u in uniques if set(u) != place]
        key, table = self.settings.key, self.settings.table
        new_table = ("Give the sink a new table (sink.table) and fill it with a rewind: README, *Change data "
                     "capture*, changing the key")
        if not self.settings.upserts:
            if keys and not any(set(u) == place for u in uniques):
                raise SinkSchemaError(
                    f"{where}: table {table} is an upserted table, one row per key ({', '.join(keys[0])}); append "
                    f"mode (one row per record) cannot write into it. Nothing was planned or changed. Set mode: "
                    f"upsert and key: [{', '.join(keys[0])}] again, or give the sink a new table (sink.table).")
            return
        if any(set(u) == set(key) for u in uniques):
            return
        if keys:
            raise SinkSchemaError(
                f"{where}: table {table} is upserted by key ({', '.join(keys[0])}), but sink.key is now "
                f"[{', '.join(key)}]. Nothing was planned or changed: the table and its change log {table}{SUFFIX} "
                f"would be keyed two ways. Set sink.key back to [{', '.join(keys[0])}], or use a new key in a new "
                f"table. {new_table}.")
        if any(set(u) == place for u in uniques):
            raise SinkSchemaError(
                f"{where}: table {table} was written in append mode (one row per record); mode upsert with key "
                f"[{', '.join(key)}] cannot take over its rows. Nothing was planned or changed. Set mode back to "
                f"append, or upsert into a new table. {new_table}.")
        raise SinkSchemaError(
            f"{where}: mode upsert needs a UNIQUE constraint on ({', '.join(key)}), which table {table} (not created "
            f"by offsetbatch) does not have. Nothing was planned or changed. Add it: ALTER TABLE {table} ADD UNIQUE "
            f"({', '.join(key)}), after removing duplicate keys.")

    def _prepare_rejected(self, cur) -> None:
        from psycopg2 import sql

        defs = [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in REJECTED_COLUMNS]
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema_name)))
        cur.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(self._ident("_rejected"),
                                                                         sql.SQL(", ").join(defs)))
