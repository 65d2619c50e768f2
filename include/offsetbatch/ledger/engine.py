"""Connecting to the ledger database, and the per-pipeline lock that serializes plan and commit.

SQLite: every transaction is ``BEGIN IMMEDIATE`` (takes the write lock up front, so a
read-then-write can never interleave with another writer), WAL journal, ``synchronous=FULL``.
PostgreSQL: a ``SELECT … FOR UPDATE`` on the pipeline's row, tried with NOWAIT first so a waiting
run can say it is waiting.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from offsetbatch import redact
from offsetbatch.ledger import schema
from offsetbatch.ledger.errors import (LedgerError, LedgerLockTimeout, LedgerMissingError, LedgerReadOnlyError,
                                       LedgerUnreachableError)

log = logging.getLogger(__name__)
LOCK_TIMEOUT_S = 120


def url_from_connection(conn_id: str, field: str = "ledger.conn_id") -> str:
    """SQLAlchemy URL of an Airflow connection (``sqlite`` host = file path; ``postgres``)."""
    from offsetbatch.connections import get_connection

    conn = get_connection(conn_id, field)
    if conn.conn_type == "sqlite":
        return f"sqlite:///{conn.host}"
    if conn.conn_type in ("postgres", "postgresql"):
        return sa.URL.create(
            "postgresql+psycopg2", username=conn.login or None, password=conn.password or None,
            host=conn.host or "127.0.0.1", port=conn.port or 5432, database=conn.schema or "postgres",
        ).render_as_string(hide_password=False)
    url = conn.extra_dejson.get("sqlalchemy_url")
    if url:
        return url
    raise LedgerError(
        f"connection '{conn_id}' has conn_type '{conn.conn_type}'; the ledger needs 'sqlite', 'postgres', "
        f"or an extra 'sqlalchemy_url'"
    )


def open_engine(url: str, create: bool = False) -> sa.Engine:
    """An engine on an existing ledger; ``create`` makes a missing one (file or schema) instead of
    refusing. A ledger is never created by accident: a missing ledger next to an existing table
    would re-read everything the table holds."""
    u = sa.make_url(url)
    shown = redact.url(u.render_as_string(hide_password=True))  # a ?password= too
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:":
        path = Path(u.database)
        if not path.exists():
            if not create:
                raise LedgerMissingError(_missing(shown, f"the file {path} does not exist"))
            path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            has_schema = sa.inspect(conn).has_table(schema.schema_version.name)
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        if u.get_backend_name() == "sqlite":
            raise LedgerUnreachableError(
                f"cannot open the ledger file at {shown}: {reason}. Nothing was changed. A damaged file must be "
                f"restored from a backup, or moved away and rebuilt from the table ('offsetbatch ledger rebuild')."
            ) from None
        raise LedgerUnreachableError(
            f"cannot reach the ledger at {shown}: {reason}. Nothing was changed. Check that the database "
            f"server is up and the ledger connection (ledger.url or its Airflow connection) is right "
            f"('offsetbatch doctor')."
        ) from None
    if not has_schema and not create:
        engine.dispose()
        raise LedgerMissingError(_missing(shown, "the database has no offsetbatch ledger tables"))
    return engine


def _missing(shown: str, why: str) -> str:
    return (f"no offsetbatch ledger at {shown}: {why}. Nothing was changed, and offsetbatch does not create a "
            f"ledger implicitly (a new ledger next to an existing table would re-read what the table holds). A new "
            f"deployment: 'offsetbatch ledger init' (the first run of a pipeline whose table is empty also creates "
            f"it). A ledger that moved: point ledger.url or the ledger's Airflow connection at it. A lost ledger: "
            f"'offsetbatch ledger rebuild PIPELINE' rebuilds it from the table.")


def create_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": LOCK_TIMEOUT_S})

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # let SQLAlchemy's "begin" below decide
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):
            # Reads (``read_only`` connections) take no write lock; everything else does, up front.
            conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("read_only") else "BEGIN IMMEDIATE")

        return engine
    return sa.create_engine(url, pool_pre_ping=True)


def now() -> datetime:
    return datetime.now(timezone.utc)


def migrate(engine: sa.Engine) -> int:
    """Apply missing schema versions; returns the version now in force."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(7305118)"))  # one migrator at a time
        schema.schema_version.create(conn, checkfirst=True)
        current = conn.execute(sa.select(sa.func.max(schema.schema_version.c.version))).scalar() or 0
        if current > schema.LATEST:
            raise LedgerError(
                f"the ledger at {redact.url(engine.url.render_as_string(hide_password=True))} has schema version {current}, newer than this "
                f"offsetbatch ({schema.LATEST}); upgrade offsetbatch"
            )
        for version in range(current + 1, schema.LATEST + 1):
            schema.MIGRATIONS[version - 1](conn)
            conn.execute(schema.schema_version.insert().values(version=version, applied_at=now()))
            log.info("ledger schema migrated to version %d", version)
    return schema.LATEST


@contextmanager
def pipeline_lock(engine: sa.Engine, name: str, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[sa.Connection]:
    """One transaction holding the pipeline's lock; commits on success, rolls back on error."""
    t0 = time.monotonic()
    try:
        _ensure_pipeline_row(engine, name)
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                # Before BEGIN IMMEDIATE: how long to wait for another writer (raw connection, no autobegin).
                conn.connection.driver_connection.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            with conn.begin():
                if engine.dialect.name == "postgresql":
                    _pg_lock(conn, name, timeout_s)
                waited = time.monotonic() - t0
                if waited > 1:
                    log.info("pipeline %s: got the ledger lock after waiting %.1fs for another run", name, waited)
                yield conn
    except sa.exc.DBAPIError as exc:
        text = str(exc.orig or exc).lower()
        if "readonly database" in text or "read-only transaction" in text:
            raise LedgerReadOnlyError(
                f"pipeline {name}: the ledger at {redact.url(engine.url.render_as_string(hide_password=True))} cannot be "
                f"written ({str(exc.orig or exc).strip().splitlines()[0]}); nothing was changed. Make it writable for "
                f"the user that runs the Airflow tasks (for SQLite, the file and its folder), or point ledger.url "
                f"or the ledger's connection at a writable database.") from None
        if isinstance(exc, OperationalError) and ("locked" in text or "lock timeout" in text):
            raise LedgerLockTimeout(
                f"pipeline {name}: another run held the ledger lock for more than {timeout_s:.0f}s; "
                f"nothing was changed. Check for a stuck plan/commit task of this pipeline and retry."
            ) from exc
        raise


def _pg_lock(conn: sa.Connection, name: str, timeout_s: float) -> None:
    sel = sa.select(schema.pipelines.c.name).where(schema.pipelines.c.name == name)
    conn.execute(sa.text("SAVEPOINT ob_lock"))
    try:
        conn.execute(sel.with_for_update(nowait=True))
        conn.execute(sa.text("RELEASE SAVEPOINT ob_lock"))
        return
    except OperationalError:
        conn.execute(sa.text("ROLLBACK TO SAVEPOINT ob_lock"))
    log.info("pipeline %s: another run holds the ledger lock; waiting up to %.0fs", name, timeout_s)
    conn.execute(sa.text(f"SET LOCAL lock_timeout = '{int(timeout_s * 1000)}ms'"))
    conn.execute(sel.with_for_update())


@contextmanager
def reading(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A read-only connection (no write lock on SQLite)."""
    with engine.connect().execution_options(read_only=True) as conn:
        yield conn


def _ensure_pipeline_row(engine: sa.Engine, name: str) -> None:
    with reading(engine) as conn:
        exists = conn.execute(sa.select(schema.pipelines.c.name).where(schema.pipelines.c.name == name)).first()
    if exists:
        return
    try:
        with engine.begin() as conn:
            conn.execute(schema.pipelines.insert().values(name=name, created_at=now()))
    except sa.exc.IntegrityError:
        pass  # created concurrently
