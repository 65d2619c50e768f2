"""Sink targets as Airflow asset URIs, in the schemes Airflow's providers define (AIP-60): the
DAG's outlet names the table or topic a pipeline writes, so downstream DAGs and lineage see the
real target, never the staging area.

    files      file:///table                        (or the table's own URI, s3://…)
    postgres   postgres://host:port/database/schema/table
    iceberg    iceberg://catalog/namespace/table
    kafka      kafka://first-bootstrap-server/topic

Names only: no user or password ever goes into a URI. DAGs are built at parse time, so a
connection that cannot be resolved there (a secrets backend the DAG processor cannot reach) names
the target by its connection id instead, with a warning, rather than hiding the pipeline's DAG.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

log = logging.getLogger(__name__)


def ascii_uri(uri: str) -> str:
    """``uri`` with its non-ASCII characters percent-encoded (UTF-8), as RFC 3986 writes them:
    Airflow refuses an asset URI that is not ASCII, and a table folder may be named in any script."""
    from urllib.parse import quote

    return "".join(c if c.isascii() else quote(c) for c in uri)


def kafka_topic_uri(conn_id: str, topic: str) -> str:
    from offsetbatch.source.connection import from_connection

    try:
        server = from_connection(conn_id, "sink.conn_id").bootstrap.split(",")[0].strip()
    except Exception as exc:  # noqa: BLE001 - a name must never cost the DAG
        log.warning("Kafka connection %r cannot be read while the DAG is built (%s): the asset of topic %s is "
                    "named after the connection id", conn_id, exc, topic)
        server = conn_id
    return f"kafka://{server}/{topic}"


def postgres_table_uri(url: str, schema: str, table: str) -> str:
    u = sa.make_url(url)
    return f"postgres://{u.host or 'localhost'}:{u.port or 5432}/{u.database or 'postgres'}/{schema}/{table}"


# OpenLineage's dataset naming (namespace, name) of each kind of target, next to its asset URI: each
# sink's ``lineage_dataset`` picks its own.

def location_dataset(uri: str) -> tuple[str, str]:
    """A folder: ``file`` and its path, or ``s3://bucket`` and its key (s3a is Hadoop's name for S3)."""
    from urllib.parse import urlsplit

    parts = urlsplit(location_uri(uri))
    if parts.scheme == "file":
        return "file", parts.path
    if parts.scheme in ("s3", "s3a"):
        return f"s3://{parts.netloc}", parts.path.lstrip("/")
    return f"{parts.scheme}://{parts.netloc}", parts.path


def location_uri(path: str) -> str:
    """A local path as a ``file://`` URI; a URI as it is."""
    return path if "://" in path else f"file://{path}"


def postgres_dataset(uri: str) -> tuple[str, str]:
    """``postgres://host:port`` and ``database.schema.table``."""
    server, _, path = uri.removeprefix("postgres://").partition("/")
    database, schema, table = path.strip("/").split("/", 2)
    return f"postgres://{server}", f"{database}.{schema}.{table}"


def kafka_dataset(uri: str) -> tuple[str, str]:
    """``kafka://bootstrap-server`` and the topic."""
    server, _, topic = uri.removeprefix("kafka://").partition("/")
    return f"kafka://{server}", topic


def iceberg_dataset(uri: str) -> tuple[str, str]:
    """``iceberg://catalog`` and ``namespace.table``."""
    catalog, _, path = uri.removeprefix("iceberg://").partition("/")
    return f"iceberg://{catalog}", path.strip("/").replace("/", ".")
