"""Which offsetbatch errors no task retry can fix, and how a task tells Airflow so.

A refused trigger value, a bad config or a ledger that belongs to another table fails the same way
on every attempt: retrying it only delays the failure (2 retries 30 s apart by default) and buries
the message under retry logs. Such errors are re-raised as Airflow's ``AirflowFailException``
(``airflow.sdk.exceptions`` in Airflow 3; ``airflow.exceptions`` only re-exports it with a
deprecation warning), which fails the task at once, with the same message. Errors a retry can fix
(Kafka or the ledger unreachable, a lock held by another run, a crashed Spark job) keep their
retries.

    with fail_without_retry():
        return plan_step(...)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from offsetbatch.errors import (
    ArtifactError,
    ConfigError,
    PipelineError,
    SchemaNotFoundError,
    SchemaRegistryAuthError,
    SchemaRegistryConnectionError,
    SchemaRegistryRefusedError,
    SchemaWireFormatError,
    SinkSchemaError,
    SinkTargetError,
)
from offsetbatch.ledger.errors import LedgerMissingError, LedgerReadOnlyError, OwnershipError

# PipelineError: RunRequestError, BackfillRefusedError, DataLossError, PartitionVanishedError,
# TopicNotFoundError: a run refused before anything changed, the same on every attempt. ArtifactError:
# a Spark jar that is not installed (OFFSETBATCH_SPARK_JARS, the cache). The schema registry's: an
# unknown schema id/GUID/subject (404) or another 4xx, credentials or TLS refused (401/403, an
# unverified certificate), bad connection settings, a record not in Confluent's wire format; named
# although their bases are here too, so that moving one in errors.py cannot make it retried.
# SchemaRegistryUnavailableError (refused, timed out, 5xx) is not: a retry may find the registry back.
PERMANENT: tuple[type[Exception], ...] = (PipelineError, ConfigError, OwnershipError, LedgerMissingError,
                                          LedgerReadOnlyError, SinkSchemaError, SinkTargetError, ArtifactError,
                                          SchemaNotFoundError, SchemaRegistryRefusedError, SchemaRegistryAuthError,
                                          SchemaRegistryConnectionError, SchemaWireFormatError)


def is_permanent(exc: BaseException) -> bool:
    """Whether ``exc`` fails every attempt alike, so a retry would only delay the failure."""
    return isinstance(exc, PERMANENT)


def names_permanent(type_names: Iterable[str]) -> bool:
    """Whether an error the Spark job recorded by its classes' names (its process is gone) is one of
    ``PERMANENT``: the job's own errors reach the task only as the names it left."""
    names = set(type_names)
    return any(cls.__name__ in names for cls in PERMANENT)


@contextmanager
def fail_without_retry() -> Iterator[None]:
    """Re-raise a permanent offsetbatch error as ``AirflowFailException`` with the same message (the
    original chained as its cause, so the log shows its type and traceback), so Airflow fails the
    task now instead of retrying it."""
    try:
        yield
    except PERMANENT as exc:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(str(exc)) from exc
