"""The maintenance seam: what a pass hands a sink and what the sink hands back.

* ``MaintenanceSettings``: ``maintenance:`` in a pipeline's YAML: how long history is kept and how
  small files are joined. Every field has a default, so a pipeline without the block is maintained
  by ``offsetbatch maintain`` with them; ``schedule`` alone decides whether Airflow runs it (a DAG of
  its own per pipeline).
* ``Horizon``: the times every action of one pass agrees on.
* ``Action``: a pass expressed as data. Each sink (``Maintained.maintenance``) and the ledger say
  what they would do as a list of actions; ``offsetbatch.maintenance`` prints them (``--dry-run``)
  or runs them in order. An action is planned from what the target holds at planning time; its
  ``apply`` re-reads what it needs, is idempotent, and finishes what an earlier killed pass began
  (each one says how), so a SIGKILL anywhere leaves nothing that the next pass does not complete.

It sits below every sink so a sink can say what it would do without knowing who runs it; each sink's
own maintenance is in its package (``sinks.files.maintenance``, ``sinks.iceberg.maintenance``,
``sinks.postgres.change_log``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from offsetbatch import validation

MiB = 1024 * 1024


class MaintenanceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schedule: str | None = Field(None, description="cron of the pipeline's maintenance DAG (e.g. '30 3 * * *'); "
                                 "null: no DAG, run 'offsetbatch maintain' yourself")
    retain: float = Field(7 * 86400.0, gt=0, description="how long snapshots, abandoned attempts, trash and rejected "
                          "records are kept ('7d'; seconds)")
    retain_snapshots: int = Field(100, ge=1, description="Iceberg: at least this many of the newest snapshots are "
                                  "kept, however old")
    in_flight_grace: float = Field(86400.0, gt=0, description="files no snapshot or manifest names are deleted only "
                                   "when older than this (an attempt may still be writing them; '1d')")
    target_file_size: int = Field(128 * MiB, ge=MiB, description="compaction joins small files into files of about "
                                  "this many bytes")
    min_input_files: int = Field(4, ge=2, description="a partition (and day) is compacted when it holds at least "
                                 "this many files smaller than target_file_size")
    ledger_retain: float = Field(90 * 86400.0, gt=0, description="ledger batches, ranges and routine events older than "
                                 "this are summarized ('90d'); the frontier, gaps and the audit of resets, replays "
                                 "and maintenance are kept")

    @field_validator("retain", "in_flight_grace", "ledger_retain", mode="before")
    @classmethod
    def _duration(cls, v: object) -> object:
        return validation.parse_duration(v)

    @field_validator("target_file_size", mode="before")
    @classmethod
    def _size(cls, v: object) -> object:
        return validation.parse_size(v)

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return None if v is None else validation.check_cron(v)

    @model_validator(mode="after")
    def _grace_within_retention(self) -> "MaintenanceSettings":
        if self.in_flight_grace > self.retain:
            raise ValueError(f"in_flight_grace ({self.in_flight_grace:g} s) is longer than retain ({self.retain:g} s): "
                             f"files of abandoned attempts would outlive the history that explains them; shorten "
                             f"in_flight_grace or lengthen retain")
        return self



@dataclass
class Action:
    """One step of a pass. ``step`` names it for logs and the audit (``iceberg.expire-snapshots``),
    ``summary`` is the line a dry run prints, ``counts`` the figures it expects to change, and
    ``apply`` does it, returning the figures it changed."""

    step: str
    target: str
    summary: str
    counts: dict[str, int] = field(default_factory=dict)
    apply: Callable[[], dict[str, int]] = lambda: {}

    def describe(self) -> str:
        return f"{self.step} on {self.target}: {self.summary}"


@dataclass(frozen=True)
class Horizon:
    """The times a pass keeps things after, computed once so every action of a pass agrees."""

    now: datetime
    retain_before: datetime      # snapshots, attempts, trash, rejected records older than this may go
    grace_before: datetime       # unreferenced files older than this may go (younger: maybe in flight)
    ledger_before: datetime      # ledger history older than this is summarized
