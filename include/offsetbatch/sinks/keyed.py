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
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal, Sequence

from pydantic import BaseModel, Field, field_validator, model_validator

from offsetbatch.errors import SinkSchemaError

if TYPE_CHECKING:
    import pyarrow as pa

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


@dataclass(frozen=True)
class UpsertRule:
    """What identifies a row and which of its changes is newer (the sink's settings)."""

    key: Sequence[str]
    version_column: str | None = None
    delete_column: str | None = None

    @property
    def order(self) -> list[tuple[str, str]]:
        """Sort keys: each key's newest change first."""
        return [(k, "ascending") for k in self.key] + [(c, "descending") for c in newest_first(self.version_column)]


def newest_per_key(candidates: "pa.Table", rule: UpsertRule) -> "pa.Table":
    """Each key's newest change among ``candidates`` (deletes included), by ``rule.order``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ordered = candidates.sort_by(rule.order)
    if ordered.num_rows == 0:
        return ordered
    first = pa.array([True] + [False] * (ordered.num_rows - 1))
    for k in rule.key:
        col = ordered.column(k)
        differs = pc.not_equal(col.slice(1), col.slice(0, ordered.num_rows - 1))
        first = pc.or_(first, pa.concat_arrays([pa.array([True]), differs.combine_chunks()]))
    return ordered.filter(first)


def check_changes(candidates: "pa.Table", rule: UpsertRule, where: str) -> None:
    """A NULL key or version orders nothing; without a version, a key's changes must come from
    one partition. Refused, naming the record, as the PostgreSQL sink does."""
    import pyarrow.compute as pc

    refuse_nulls(candidates, [*rule.key, *([rule.version_column] if rule.version_column else [])], where)
    if rule.version_column or candidates.num_rows == 0:
        return
    places = candidates.group_by(list(rule.key)).aggregate([("kafka_partition", "count_distinct"),
                                                            ("kafka_topic", "count_distinct")])
    spread = places.filter(pc.or_(pc.greater(places.column("kafka_partition_count_distinct"), 1),
                                  pc.greater(places.column("kafka_topic_count_distinct"), 1)))
    if spread.num_rows:
        shown = ", ".join(f"{k}={spread.column(k)[0].as_py()!r}" for k in rule.key)
        raise SinkSchemaError(
            f"{where}: key ({shown}) has changes in more than one partition; offsets order a key's changes only "
            f"within one partition, so which is newer is unknown. The table was not changed. Set sink.version_column "
            f"to a column of the transform's output that orders a key's changes (Debezium's source.lsn or ts_ms, an "
            f"updated_at), then replay the batch.")


def refuse_nulls(rows: "pa.Table", columns: Sequence[str], where: str) -> None:
    """A change whose key (or version) is NULL, which no key filter finds again, refuses the
    refresh, naming its record."""
    import pyarrow.compute as pc

    for column in columns:
        nulls = pc.is_null(rows.column(column))
        if pc.any(nulls).as_py():
            row = rows.filter(nulls).slice(0, 1).to_pylist()[0]
            raise SinkSchemaError(
                f"{where}: the row of {row['kafka_topic']}/{row['kafka_partition']} offset {row['kafka_offset']} has "
                f"NULL in {column}, which the upsert needs to know the row's key and which change is newer. The table "
                f"was not changed; no retry changes it. Filter such rows out in the transform (WHERE {column} IS NOT "
                f"NULL) or give them a value, then replay the batch.")
