"""The offsets ledger: batches, ranges, frontier, data-loss gaps and audit events.

The single source of truth for what was read. Airflow tasks own it; the Spark job never
touches it (docs/architecture.md, Data flow).
"""

from offsetbatch.ledger.errors import (
    LedgerError,
    LedgerLockTimeout,
    LedgerMissingError,
    LedgerReadOnlyError,
    LedgerUnreachableError,
    OwnershipError,
    StaleCommitError,
)
from offsetbatch.ledger.store import Ledger

__all__ = ["Ledger", "LedgerError", "LedgerLockTimeout", "LedgerMissingError", "LedgerReadOnlyError", "LedgerUnreachableError",
           "OwnershipError", "StaleCommitError"]
