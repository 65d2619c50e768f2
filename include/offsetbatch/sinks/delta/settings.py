"""The delta sink's settings: the ``sink:`` mapping of the pipeline YAML.

    sink:
      type: delta
      staging: /data/staging/events       # staging root: the Spark job writes Parquet here, as for every sink
      table: /data/delta/events           # the Delta table's location (a local path or s3://…)
      partition_by: [event_date]          # optional: columns of the transform's output (identity partitions)
      mode: upsert                        # optional: one row per key (sinks/keyed.py), from <table>_changes
      key: [event_id]

Rejected records go to the Delta table beside it, ``<table>_rejected``; in upsert mode every change
goes to ``<table>_changes`` and ``<table>`` holds each key's newest. Beside, not inside: a table's
vacuum deletes files its log does not name, which would be another table's.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from offsetbatch.sinks.base import StagedSettings, absolute_location
from offsetbatch.sinks.keyed import KeyedSettings

COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class DeltaSettings(KeyedSettings, StagedSettings):
    type: Literal["delta"] = "delta"
    table: str = Field(description="the Delta table's location: an absolute path or s3:// (s3a://) URI; rejected "
                                   "records go to <table>_rejected beside it")
    partition_by: list[str] = Field(default_factory=list,
                                    description="partition columns of a new table (columns of the transform's output)")

    @field_validator("table")
    @classmethod
    def _absolute_table(cls, v: str) -> str:
        return absolute_location(v)

    @field_validator("partition_by")
    @classmethod
    def _columns(cls, v: list[str]) -> list[str]:
        for column in v:
            if not COLUMN.match(column):
                raise ValueError(f"partition_by entry {column!r} is not a column name (Delta partitions by a column's "
                                 f"value; derive a day in the transform: CAST(event_time AS DATE) AS event_date)")
        if len(set(v)) != len(v):
            raise ValueError(f"partition_by repeats a column: {v}")
        if "batch_id" in v:
            raise ValueError("partition_by may not name batch_id: a folder per batch defeats compaction; replays "
                             "find a batch's rows by the column's statistics instead")
        return v

    @model_validator(mode="after")
    def _table_storage(self) -> "DeltaSettings":
        from offsetbatch import storage

        if storage.is_s3(self.table) != storage.is_s3(self.staging):
            raise ValueError(f"sink.staging {self.staging!r} and sink.table {self.table!r} must both be on the object "
                             f"store or both not (one sink.storage_conn_id reaches both)")
        if self.event_time_column:
            raise ValueError("event_time_column sub-partitions Parquet folders; a Delta table is partitioned by "
                             "partition_by instead: add the day in the transform (CAST(event_time AS DATE) AS "
                             "event_date) and set partition_by: [event_date]")
        return self

    @property
    def marked_table(self) -> str:
        """The table each batch's commit (and its marker) goes to: the table itself, or in upsert mode
        the table of changes it is derived from (``sinks/delta/upsert.py``)."""
        return f"{self.table}_changes" if self.upserts else self.table

    @property
    def rejected_table(self) -> str:
        return f"{self.table}_rejected"
