"""A maintenance pass expressed as data: each sink (and the ledger) says what it would do as a
list of ``Action``s, and ``offsetbatch.maintain`` prints them (``--dry-run``) or runs them in order.

An action is planned from what the target holds at planning time; its ``apply`` re-reads what it
needs, is idempotent, and finishes what an earlier killed pass began (each one says how), so a
SIGKILL anywhere leaves nothing that the next pass does not complete."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable


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
