"""The upsert a team writes by hand without offsetbatch, the peer of the upsert bench (issue 44):
Spark's JDBC writer appends a batch's changes to a staging table, then one ``INSERT … ON CONFLICT
… DO UPDATE … WHERE`` newer and one ``DELETE`` of the keys the batch deletes.

It is not atomic, which is why the bench shows its time and not a verdict: the JDBC writer commits
each Spark partition in a transaction of its own and the merge is another, nothing records which
offsets were applied (a crash between them either loses the batch or applies it twice with no way
to tell), and a delete leaves nothing behind, so a replayed older change of a deleted key brings
it back. Runs in the bench's process, on ``local[2]``; the Spark session's start is not timed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterable

import sqlalchemy as sa

COLUMNS = ("id", "name", "balance", "lsn")


def driver_jar() -> Path:
    """PostgreSQL's JDBC driver from Maven Central (scripts/maven/postgres-jdbc.pom.xml), once."""
    from offsetbatch_dev.stack import artifacts
    from offsetbatch.paths import cache_dir

    out = cache_dir() / "postgres-jdbc"
    artifacts._resolve("postgres-jdbc.pom.xml", out)  # noqa: SLF001 - the same resolver as every jar here
    return next(out.glob("postgresql-*.jar"))


class JdbcUpsert:
    """``table`` upserted by key ``id`` and version ``lsn`` the hand-written way."""

    def __init__(self, url: str, table: str = "public.bench_jdbc"):
        """``url``: the SQLAlchemy URL of a local PostgreSQL (user ``postgres``, trust auth)."""
        self.url, self.table, self.stage = url, table, f"{table}_stage"
        parsed = sa.engine.make_url(url)
        self.jdbc = (f"jdbc:postgresql://{parsed.host}:{parsed.port}/{parsed.database}"
                     f"?user={parsed.username}&reWriteBatchedInserts=true")
        self.engine = sa.create_engine(url)
        self.spark = None

    def seed_from(self, source: str) -> float:
        """The table as a copy of ``source``'s live rows (its key and version columns), keyed."""
        t0 = time.monotonic()
        with self.engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {self.table}"))
            conn.execute(sa.text(f"CREATE TABLE {self.table} AS SELECT {', '.join(COLUMNS)} FROM {source}"))
            conn.execute(sa.text(f"ALTER TABLE {self.table} ADD PRIMARY KEY (id)"))
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text(f"VACUUM ANALYZE {self.table}"))
        return time.monotonic() - t0

    def start(self) -> None:
        from pyspark.sql import SparkSession

        self.spark = (SparkSession.builder.master("local[2]").appName("bench-jdbc-upsert")
                      .config("spark.jars", str(driver_jar())).config("spark.ui.enabled", "false")
                      .config("spark.sql.shuffle.partitions", "2").getOrCreate())

    def apply(self, files: Iterable[str]) -> tuple[float, float]:
        """One batch: (seconds of the JDBC write to the staging table, seconds of the merge)."""
        t0 = time.monotonic()
        changes = self.spark.read.parquet(*files).select(*COLUMNS, "deleted")
        (changes.write.mode("overwrite").option("truncate", "true").option("batchsize", 10_000)
         .option("driver", "org.postgresql.Driver")
         .jdbc(self.jdbc, self.stage))
        t1 = time.monotonic()
        updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "id")
        short = self.table.rsplit(".", 1)[-1]
        with self.engine.begin() as conn:
            conn.execute(sa.text(
                f"INSERT INTO {self.table} ({', '.join(COLUMNS)}) SELECT DISTINCT ON (id) {', '.join(COLUMNS)} "
                f"FROM {self.stage} WHERE NOT deleted ORDER BY id, lsn DESC "
                f"ON CONFLICT (id) DO UPDATE SET {updates} WHERE excluded.lsn > {short}.lsn"))
            conn.execute(sa.text(f"DELETE FROM {self.table} t USING {self.stage} s "
                                 f"WHERE s.deleted AND s.id = t.id AND s.lsn >= t.lsn"))
        return t1 - t0, time.monotonic() - t1

    def differences(self, table: str) -> int:
        """Keys whose (key, version) differ between ``table`` (the sink's) and the peer's, both ways:
        0 means both upserts left the same rows."""
        with self.engine.connect() as conn:
            return conn.execute(sa.text(
                f"SELECT count(*) FROM ((SELECT id, lsn FROM {table} EXCEPT SELECT id, lsn FROM {self.table}) "
                f"UNION ALL (SELECT id, lsn FROM {self.table} EXCEPT SELECT id, lsn FROM {table})) d")).scalar_one()

    def stop(self) -> None:
        if self.spark is not None:
            self.spark.stop()
        self.engine.dispose()
