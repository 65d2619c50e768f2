"""Opening the iceberg sink's SQL catalog (pyiceberg's ``SqlCatalog``: the tables of Iceberg's
JDBC catalog, ``iceberg_tables`` and ``iceberg_namespace_properties``, in SQLite or PostgreSQL).

``catalog`` in the sink settings is a SQLAlchemy URL or an Airflow connection id (resolved like
the ledger's). A SQLite ledger's own file is never the catalog: the commit publishes while it
holds the ledger's transaction, and a second writer on the same SQLite file would make that
transaction fail ("database is locked"). The default for a SQLite ledger is the file next to it,
``<ledger>.iceberg.db``.

``FaultPointCatalog`` adds one fault point inside pyiceberg's commit, after the new metadata file
is written and before the catalog row is swapped to it (the compare-and-set that *is* the commit):
the crash tests kill the process there.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from offsetbatch import faults, redact
from offsetbatch.errors import SinkError

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

    from offsetbatch.sinks.iceberg.settings import IcebergSettings

METADATA_WRITTEN = "commit.iceberg_metadata_written"


def catalog_url(settings: "IcebergSettings", name: str) -> str:
    """The catalog's SQLAlchemy URL (the secret part stays here: never logged, never in a job spec)."""
    import sqlalchemy as sa

    target = settings.catalog
    if not target:
        raise SinkError(f"pipeline {name}: the iceberg sink has no catalog (the pipeline config fills it from "
                        f"ledger:); build the sink from the pipeline's config, not from a job spec")
    if "://" in target:
        url = target
    else:
        from offsetbatch.ledger.engine import url_from_connection

        url = url_from_connection(target, "sink.catalog")
    u = sa.make_url(url)
    if u.get_backend_name() == "sqlite" and u.database and u.database != ":memory:" and settings.catalog_is_ledger:
        # the ledger's own SQLite file: use the sibling file (module docstring)
        url = u.set(database=sibling_catalog(u.database)).render_as_string(hide_password=False)
    return url


def sibling_catalog(ledger_file: str) -> str:
    stem = ledger_file[:-3] if ledger_file.endswith(".db") else ledger_file
    return f"{stem}.iceberg.db"


def warehouse_uri(warehouse: str) -> str:
    return warehouse if "://" in warehouse else f"file://{warehouse}"


def shown(url: str) -> str:
    import sqlalchemy as sa

    try:
        return redact.url(sa.make_url(url).render_as_string(hide_password=True))
    except Exception:  # noqa: BLE001 - a malformed URL is not shown at all
        return "<unparseable URL>"


def _catalog_class() -> type:
    from pyiceberg.catalog.sql import SqlCatalog

    class FaultPointCatalog(SqlCatalog):
        """``SqlCatalog`` with the fault point ``commit.iceberg_metadata_written`` (module docstring)."""

        _committing = False

        def commit_table(self, table, requirements, updates):  # type: ignore[no-untyped-def]
            self._committing = True
            try:
                return super().commit_table(table, requirements, updates)
            finally:
                self._committing = False

        def _write_metadata(self, metadata, io, metadata_path):  # type: ignore[no-untyped-def,override]
            SqlCatalog._write_metadata(metadata, io, metadata_path)
            if self._committing:
                faults.checkpoint(METADATA_WRITTEN)

    return FaultPointCatalog


def _file_io_properties(settings: "IcebergSettings") -> dict[str, str]:
    """pyiceberg's FileIO settings for a table on an S3 API, from the sink's ``aws`` connection."""
    if not settings.storage_conn_id:
        return {}
    from offsetbatch.storage.s3 import S3Settings

    return S3Settings.from_connection(settings.storage_conn_id).pyiceberg_properties()


@contextmanager
def open_catalog(settings: "IcebergSettings", name: str) -> Iterator["SqlCatalog"]:
    """The SQL catalog, its tables created on first use; its engine disposed of afterwards."""
    url = catalog_url(settings, name)
    try:
        catalog = _catalog_class()(settings.catalog_name, uri=url, warehouse=warehouse_uri(settings.warehouse),
                                   **_file_io_properties(settings))
    except Exception as exc:  # noqa: BLE001 - any driver error: name the catalog and the pipeline
        raise SinkError(f"pipeline {name}: cannot open the Iceberg SQL catalog {settings.catalog_name!r} at "
                        f"{shown(url)}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}. Check "
                        f"sink.catalog (a SQLAlchemy URL or an Airflow connection id). Nothing was published; the "
                        f"commit task's retry publishes the batch.") from exc
    try:
        yield catalog
    finally:
        catalog.engine.dispose()
