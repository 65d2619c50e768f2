"""Ledger errors. Each message names the pipeline, the partition/offsets involved and what to do."""

from offsetbatch.errors import OffsetbatchError, RunRequestError


class LedgerError(OffsetbatchError):
    """Base class for ledger errors."""


class LedgerLockTimeout(LedgerError):
    """Another run of the same pipeline held the ledger lock for too long."""


class LedgerMissingError(LedgerError):
    """The ledger database (or its schema) does not exist, and nothing asked to create it."""


class LedgerUnreachableError(LedgerError):
    """The ledger database could not be reached (server down, wrong host, bad credentials)."""


class LedgerReadOnlyError(LedgerError):
    """The ledger cannot be written (a read-only file or database): no retry fixes that."""


class OwnershipError(LedgerError):
    """The ledger and the pipeline's table do not belong together (a lost, replaced or mistyped ledger)."""


class StaleCommitError(LedgerError):
    """A commit's compare-and-set found a frontier other than the one its batch was planned from."""


class SummarizedBatchError(LedgerError, RunRequestError):
    """A batch asked for by id (a replay, ``offsetbatch batch``) or reached by a replay window or a
    rewind was summarized by ledger maintenance: its ranges are gone, only its partition's span is
    left (``ob_history``), so nothing can re-read it exactly."""
