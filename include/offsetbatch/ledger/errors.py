"""Ledger errors. Each message names the pipeline, the partition/offsets involved and what to do."""

from offsetbatch.errors import OffsetbatchError


class LedgerError(OffsetbatchError):
    """Base class for ledger errors."""


class LedgerLockTimeout(LedgerError):
    """Another run of the same pipeline held the ledger lock for too long."""


class StaleCommitError(LedgerError):
    """A commit's compare-and-set found a frontier other than the one its batch was planned from."""
