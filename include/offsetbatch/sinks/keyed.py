"""``mode: upsert``: the settings of the sinks that keep one row per key (postgres, iceberg), and
what their commits share: which columns identify a row, which change of a key is newer, and which
rows delete their key.

    sink:
      mode: upsert
      key: [account_id]
      version_column: lsn      # optional: default, the record's offset (a key in one partition)
      delete_column: deleted   # optional: a boolean column; true deletes the key
"""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from offsetbatch.errors import SinkSchemaError

COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RECORD_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset")  # a change's place in Kafka
POSITION = ("kafka_offset", "kafka_partition", "kafka_topic")  # ties of version_column, newest first


def newest_first(version_column: str | None) -> list[str]:
    """The one rule of every upsert: a key's newest change has the greatest ``version_column``
    (when set), then offset, partition, topic. The columns, most significant first, each sorted
    descending; the sinks write it in SQL (PostgreSQL) or as an Arrow sort (Iceberg)."""
    return ([version_column] if version_column else []) + list(POSITION)


class KeyedSettings(BaseModel):
    """The ``mode``/``key``/``version_column``/``delete_column`` fields and their checks; a sink's
    settings inherit them next to their own."""

    mode: Literal["append", "upsert"] = "append"
    key: list[str] = Field(default_factory=list, description="upsert: the columns that identify a row")
    version_column: str | None = Field(
        None, description="upsert: a column of the transform's output whose greater value is the newer change of a "
                          "key (Debezium's source.lsn or ts_ms); default: the record's offset, which orders the "
                          "changes of a key only while the key stays in one partition")
    delete_column: str | None = Field(
        None, description="upsert: a boolean column of the transform's output; a row where it is true deletes its "
                          "key (a tombstone or a Debezium 'd' mapped by the transform)")

    COLUMN_WORDS: ClassVar[str] = "a plain column name: letters, digits and '_', starting with a letter or '_'"

    @classmethod
    def check_column(cls, name: str, what: str) -> str:
        """A sink whose names reach SQL text refuses more (``PostgresSettings``)."""
        if not isinstance(name, str) or not COLUMN.match(name):
            raise ValueError(f"{what} {name!r} is not {cls.COLUMN_WORDS}")
        return name

    @field_validator("key")
    @classmethod
    def _key_columns(cls, v: list[str]) -> list[str]:
        for col in v:
            cls.check_column(col, "key column")
        if len(set(v)) != len(v):
            raise ValueError(f"key columns repeat: {v}")
        return v

    @field_validator("version_column", "delete_column")
    @classmethod
    def _column(cls, v: str | None) -> str | None:
        return None if v is None else cls.check_column(v, "column")

    @model_validator(mode="after")
    def _keyed(self) -> "KeyedSettings":
        if self.mode == "upsert" and not self.key:
            raise ValueError("mode 'upsert' needs 'key': the columns that identify a row, e.g. key: [order_id]")
        if self.mode == "append":
            given = [f for f in ("key", "version_column", "delete_column") if getattr(self, f)]
            if given:
                raise ValueError(f"{', '.join(repr(f) for f in given)} only mean something with mode 'upsert'; remove "
                                 f"{'them' if len(given) > 1 else 'it'} or set mode: upsert")
        for field in ("version_column", "delete_column"):
            if getattr(self, field) in self.key:
                raise ValueError(f"{field} {getattr(self, field)!r} is also a key column; a change's version and its "
                                 f"delete flag cannot identify the row")
        if self.version_column and self.version_column == self.delete_column:
            raise ValueError("version_column and delete_column name the same column")
        return self

    @property
    def upserts(self) -> bool:
        return self.mode == "upsert"

    @property
    def newest_first(self) -> list[str]:
        """``newest_first(version_column)``: the columns that order a key's changes."""
        return newest_first(self.version_column)

    def needed_columns(self) -> list[str]:
        """The staged columns an upsert reads: the key, the version and delete flag, the record's place."""
        return [*self.key, *(c for c in (self.version_column, self.delete_column) if c), *RECORD_COLUMNS]


def check_staged(settings: KeyedSettings, dtypes: dict[str, str], where: str) -> None:
    """In the job, before anything is staged: the columns the upsert reads are in the transform's
    output (Spark's ``dtypes``), and the delete flag is a boolean. No retry fixes either: the
    task fails at once (``SinkSchemaError``)."""
    if not settings.upserts:
        return
    absent = [c for c in settings.needed_columns() if c not in dtypes]
    if absent:
        raise SinkSchemaError(f"{where}: upsert column(s) {', '.join(absent)} (sink.key, version_column, "
                              f"delete_column, and the record's {', '.join(RECORD_COLUMNS)}) are not in the "
                              f"transform's output ({', '.join(dtypes)}). Fix the sink's settings or the "
                              f"transform. Nothing was committed.")
    if settings.delete_column and dtypes[settings.delete_column] != "boolean":
        kind = dtypes[settings.delete_column]
        raise SinkSchemaError(f"{where}: delete_column {settings.delete_column!r} is {kind}, not boolean; make "
                              f"the transform give true for a row that deletes its key (e.g. op = 'd'). Nothing "
                              f"was committed.")
