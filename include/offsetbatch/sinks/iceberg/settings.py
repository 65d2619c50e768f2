"""The iceberg sink's settings: the ``sink:`` mapping of the pipeline YAML.

    sink:
      type: iceberg
      staging: /data/staging/events       # staging root: the Spark job writes Parquet here, as for every sink
      catalog: offsetbatch_ledger         # SQLAlchemy URL or Airflow connection; default: the ledger's database
      namespace: analytics
      table: events                       # the rejected records go to events_rejected
      warehouse: /data/warehouse          # where new tables' files live: a local path or URI
      partition_by: ["day(event_time)"]   # optional: column (identity), year|month|day|hour(column)
      mode: upsert                        # optional: one row per key (sinks/keyed.py), from events_changes
      key: [event_id]

``catalog`` is never written into job specs (a URL may hold a password): the Spark job stages
Parquet and needs no catalog; only the commit task opens it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from offsetbatch.sinks.base import StagedSettings, absolute_location
from offsetbatch.sinks.keyed import KeyedSettings

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TRANSFORMS = ("identity", "year", "month", "day", "hour")
PARTITION = re.compile(r"^(?:(?P<transform>year|month|day|hour)\((?P<inner>[A-Za-z_][A-Za-z0-9_]*)\)|"
                       r"(?P<column>[A-Za-z_][A-Za-z0-9_]*))$")


CONN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,250}$")


def parse_partition(spec: str) -> tuple[str, str]:
    """``"day(event_time)"`` -> ``("day", "event_time")``; ``"country"`` -> ``("identity", "country")``."""
    m = PARTITION.match(spec.replace(" ", ""))
    if not m:
        raise ValueError(f"partition_by entry {spec!r} is neither a column name nor year|month|day|hour(column)")
    return (m["transform"], m["inner"]) if m["transform"] else ("identity", m["column"])


class IcebergSettings(KeyedSettings, StagedSettings):
    type: Literal["iceberg"] = "iceberg"
    catalog: str | None = Field(None, exclude=True,
                                description="the SQL catalog: a SQLAlchemy URL (postgresql://…, sqlite:///…) or an "
                                            "Airflow connection id; default: the ledger's database")
    catalog_is_ledger: bool = Field(False, exclude=True, description="set when catalog was filled from ledger:")
    catalog_name: str = Field("offsetbatch", description="the catalog's name (its rows in iceberg_tables)")
    namespace: str = Field(description="Iceberg namespace of the table (created if missing)")
    table: str = Field(description="table name; rejected records go to <table>_rejected")
    warehouse: str = Field(description="where new tables' files live: an absolute path or a URI")
    partition_by: list[str] = Field(default_factory=list,
                                    description="partition spec of a new table: column (identity) or "
                                                "year|month|day|hour(column)")

    @field_validator("namespace", "table", "catalog_name")
    @classmethod
    def _plain_name(cls, v: str, info) -> str:
        if not NAME.match(v):
            raise ValueError(f"{info.field_name} {v!r} must be letters, digits and '_', starting with a letter or '_'")
        return v

    @field_validator("catalog")
    @classmethod
    def _url_or_connection(cls, v: str | None) -> str | None:
        """A URL must parse (and a SQLite one be one absolute file); anything else is a connection id."""
        if v is None:
            return v
        if "://" in v or v.startswith("sqlite:"):
            from offsetbatch.validation import check_ledger_url  # config imports the sinks

            return check_ledger_url(v, databases=None)  # pyiceberg's SQL catalog takes any
        if not CONN_ID.match(v):
            raise ValueError(f"catalog {v!r} is neither a SQLAlchemy URL (postgresql+psycopg2://user@host/db, "
                             f"sqlite:////path/catalog.db) nor an Airflow connection id (letters, digits, '_', '-', '.')")
        return v

    @field_validator("warehouse")
    @classmethod
    def _absolute_warehouse(cls, v: str) -> str:
        return absolute_location(v)

    @field_validator("partition_by")
    @classmethod
    def _partitions(cls, v: list[str]) -> list[str]:
        seen = set()
        for spec in v:
            key = parse_partition(spec)
            if key in seen:
                raise ValueError(f"partition_by repeats {spec!r}")
            seen.add(key)
        return v

    @model_validator(mode="after")
    def _warehouse_storage(self) -> "IcebergSettings":
        from offsetbatch import storage

        on_s3 = storage.is_s3(self.warehouse)
        if on_s3 and not self.storage_conn_id:
            raise ValueError(f"sink.warehouse {self.warehouse!r} is on an S3 API: set sink.storage_conn_id to the "
                             f"Airflow connection (type aws) that holds its endpoint, region and credentials")
        if on_s3 != storage.is_s3(self.staging):
            raise ValueError(f"sink.staging {self.staging!r} and sink.warehouse {self.warehouse!r} must both be on the object "
                             f"store or both not: the snapshot adds the staged files where they are")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "IcebergSettings":
        if self.event_time_column:
            raise ValueError("event_time_column sub-partitions Parquet folders; an Iceberg table is partitioned by "
                             "its spec instead: use partition_by: [\"day(<column>)\"]")
        return self

    @property
    def identifier(self) -> tuple[str, str]:
        """The table readers query: in upsert mode, one row per key."""
        return (self.namespace, self.table)

    @property
    def marked_identifier(self) -> tuple[str, str]:
        """The table each batch's snapshot (and its marker) goes to: the table itself, or in upsert
        mode the table of changes it is derived from (``sinks/iceberg/upsert.py``)."""
        return (self.namespace, f"{self.table}_changes") if self.upserts else self.identifier

    @property
    def rejected_identifier(self) -> tuple[str, str]:
        return (self.namespace, f"{self.table}_rejected")

    @property
    def partitions(self) -> list[tuple[str, str]]:
        return [parse_partition(p) for p in self.partition_by]

    @classmethod
    def bind_ledger(cls, sink: dict, ledger: Any) -> dict:
        """No ``catalog`` (or the ledger's own): the ledger's database, its URL or its Airflow
        connection. For a SQLite ledger that means the file next to it, ``<ledger>.iceberg.db``
        (``offsetbatch.sinks.iceberg.catalog`` says why)."""
        if isinstance(ledger, dict):
            url, conn_id = ledger.get("url"), ledger.get("conn_id", "offsetbatch_ledger")
        else:
            url, conn_id = getattr(ledger, "url", None), getattr(ledger, "conn_id", "offsetbatch_ledger")
        given = sink.get("catalog")
        if not given or given == (url or conn_id):
            return {**sink, "catalog": url or conn_id, "catalog_is_ledger": True}
        return {**sink, "catalog_is_ledger": False}
