"""The postgres sink's settings: the ``sink:`` mapping of the pipeline YAML, its identifiers checked
(letters, digits, ``_``; never formatted into SQL text), and its connection bound to the ledger's
(``PostgresSettings.bind_ledger``): the rows and the offsets commit in one transaction only if they
live in one database.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from offsetbatch import redact
from offsetbatch.sinks.base import StagedSettings
from offsetbatch.sinks.keyed import KeyedSettings

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_IDENT = 63 - len("_rejected")  # PostgreSQL truncates names longer than 63 bytes


def check_identifier(name: str, what: str) -> str:
    """Refuse a name that is not a plain SQL identifier (it is quoted anyway, never injected)."""
    if not isinstance(name, str) or not IDENT.match(name) or len(name) > MAX_IDENT:
        raise ValueError(f"{what} {name!r} is not a plain SQL identifier: use letters, digits and '_', starting with "
                         f"a letter or '_', at most {MAX_IDENT} characters (quotes, spaces, ';' and other SQL "
                         f"metacharacters are refused)")
    return name


class PostgresSettings(KeyedSettings, StagedSettings):
    type: Literal["postgres"] = "postgres"
    table: str = Field(description="target 'schema.table' in the ledger's PostgreSQL database")
    url: str | None = Field(None, exclude=True,
                            description="SQLAlchemy URL of the table's database: the ledger's (filled from ledger: "
                                        "when omitted; never written to job specs)")
    conn_id: str | None = Field(None, description="Airflow connection of the table's database: the ledger's")

    @field_validator("table")
    @classmethod
    def _schema_table(cls, v: str) -> str:
        parts = v.split(".")
        if len(parts) != 2:
            raise ValueError(f"must be 'schema.table' (e.g. 'public.events'), got {v!r}")
        check_identifier(parts[0], "schema")
        check_identifier(parts[1], "table")
        return v

    @classmethod
    def check_column(cls, name: str, what: str) -> str:
        return check_identifier(name, what)

    @model_validator(mode="after")
    def _consistent(self) -> "PostgresSettings":
        if self.event_time_column:
            raise ValueError("event_time_column sub-partitions Parquet folders and has no meaning for a postgres "
                             "table; remove it (index or partition the table in PostgreSQL instead)")
        if self.url and self.conn_id:
            raise ValueError("give the table's database as 'url' or 'conn_id', not both (or neither: the ledger's)")
        return self

    @classmethod
    def bind_ledger(cls, sink: dict, ledger: Any) -> dict:
        """The sink's connection is the ledger's: fill it in, or refuse a different one. The rows and
        the offsets commit in one transaction only if they live in one database."""
        if isinstance(ledger, dict):
            l_url, l_conn = ledger.get("url"), ledger.get("conn_id", "offsetbatch_ledger")
        else:
            l_url, l_conn = getattr(ledger, "url", None), getattr(ledger, "conn_id", "offsetbatch_ledger")
        s_url, s_conn = sink.get("url"), sink.get("conn_id")
        why = ("a postgres sink's table must live in the ledger's PostgreSQL database: its rows and the batch's "
               "offsets are committed in one transaction, which is what makes each batch land exactly once")
        if l_url:
            if l_url.split(":", 1)[0].startswith("sqlite"):
                raise ValueError(f"sink.type postgres: the ledger is SQLite ({l_url}); {why}. Put the ledger in "
                                 f"PostgreSQL (ledger.url or its Airflow connection)")
            if s_conn:
                raise ValueError(f"sink.conn_id {s_conn!r} cannot be checked against ledger.url; {why}. Remove "
                                 f"sink.conn_id (the sink uses the ledger's database)")
            if s_url and _same_database(s_url) != _same_database(l_url):
                raise ValueError(f"sink.url points at database {_shown(s_url)} but the ledger is at {_shown(l_url)}; "
                                 f"{why}. Remove sink.url (the sink uses the ledger's database) or move the ledger")
            return {**sink, "url": l_url, "conn_id": None}
        if s_url:
            raise ValueError(f"sink.url {_shown(s_url)} cannot be checked against the ledger's connection "
                             f"{l_conn!r}; {why}. Remove sink.url (the sink uses the ledger's database)")
        if s_conn and s_conn != l_conn:
            raise ValueError(f"sink.conn_id {s_conn!r} is not the ledger's connection {l_conn!r}; {why}. Remove "
                             f"sink.conn_id (the sink uses the ledger's database)")
        return {**sink, "conn_id": l_conn, "url": None}


def _same_database(url: str) -> tuple:
    import sqlalchemy as sa

    u = sa.make_url(url)
    return (u.get_backend_name(), (u.host or "localhost").lower(), u.port or 5432, u.database)


def _shown(url: str) -> str:
    import sqlalchemy as sa

    try:
        return redact.url(sa.make_url(url).render_as_string(hide_password=True))
    except Exception:  # noqa: BLE001 - a malformed URL is shown as given, minus nothing secret we can find
        return "<unparseable URL>"
