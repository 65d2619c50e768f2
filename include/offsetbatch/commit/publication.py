"""How a committed batch's output becomes visible to readers: two strategies, picked once by the
sink's publication trait (``sinks.base``) and run by the commit protocol without asking which sink
it is.

* ``AfterLedgerCommit`` (files, iceberg, kafka): the ledger transaction commits the batch and moves
  the frontier; then, under the pipeline lock, the sink publishes exactly the committed attempt and
  the ledger marks the batch published. The sink marks the publication in its target (a published
  manifest, a snapshot summary, a marker inside the Kafka transaction), so a crash between the two
  leaves a committed, unpublished batch that ``publish_pending`` rolls forward; every plan and
  commit calls it first. A reader never sees a batch the ledger has not committed.
* ``InLedgerTransaction`` (postgres, a table in the ledger's own database): inside the transaction
  that commits the batch, after the frontier compare-and-set: superseded batches' rows removed,
  the batch's rows loaded, ``published_at`` set, one ``COMMIT``. Rows and offsets are visible
  together or not at all; there is nothing to roll forward, only staging to clean up.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod

import sqlalchemy as sa

from offsetbatch.ledger import Ledger
from offsetbatch.pipeline import Pipeline
from offsetbatch.sinks import PublishesAfterLedgerCommit, PublishesInLedgerTransaction

log = logging.getLogger(__name__)


class Publication(ABC):
    """One pipeline's publication, on one ledger."""

    def __init__(self, pipeline: Pipeline, ledger: Ledger):
        self.pipeline = pipeline
        self.ledger = ledger

    @abstractmethod
    def publish(self, conn: sa.Connection, batch_id: int, output_id: int, attempt: str) -> None:
        """Make committed batch ``batch_id``'s ``attempt`` the output of ``output_id`` and mark the
        batch published, under the pipeline lock held by ``conn``. Idempotent."""

    def within_commit(self, conn: sa.Connection, batch_id: int, output_id: int, attempt: str) -> None:
        """Inside the ledger transaction that commits the batch, after the frontier CAS."""

    @abstractmethod
    def after_commit(self, batch_id: int) -> None:
        """After that transaction committed."""

    def settle(self, batch_id: int) -> None:
        """A retried task finds the batch committed by its own earlier try: finish what that try may
        have left undone after its transaction."""

    def _superseded(self, conn: sa.Connection, batch_id: int) -> list[int]:
        old = self.ledger.superseded_by(conn, self.pipeline.name, batch_id)
        for output_id in old:
            log.info("pipeline %s batch %d: output of superseded batch %d removed; batch %d re-read its ranges",
                     self.pipeline.name, batch_id, output_id, batch_id)
        return old


class AfterLedgerCommit(Publication):
    def __init__(self, pipeline: Pipeline, ledger: Ledger):
        super().__init__(pipeline, ledger)
        self.sink: PublishesAfterLedgerCommit = pipeline.sink  # type: ignore[assignment]

    def publish(self, conn: sa.Connection, batch_id: int, output_id: int, attempt: str) -> None:
        sink, name = self.pipeline.sink, self.pipeline.name
        if sink.owner() is None:  # the first publish records which ledger owns the output
            sink.claim(self.ledger.identity)
        superseded = self.ledger.superseded_by(conn, name, batch_id)
        self.sink.publish(batch_id, output_id, attempt, superseded=superseded,
                          kind=self.ledger.get_batch(name, batch_id, conn).kind)
        for old in self._superseded(conn, batch_id):
            self.sink.retire(old)
        self.ledger.mark_published(conn, name, batch_id)

    def after_commit(self, batch_id: int) -> None:
        publish_pending(self.pipeline, self.ledger, current=batch_id)


class InLedgerTransaction(Publication):
    def __init__(self, pipeline: Pipeline, ledger: Ledger):
        super().__init__(pipeline, ledger)
        self.sink: PublishesInLedgerTransaction = pipeline.sink  # type: ignore[assignment]

    def publish(self, conn: sa.Connection, batch_id: int, output_id: int, attempt: str) -> None:
        """Superseded batches' output first (the new batch re-read their records; a unique
        constraint would refuse them twice), then the attempt's output, then the batch marked
        published, all committed by the caller's transaction."""
        for old in self._superseded(conn, batch_id):
            self.sink.retire_in_transaction(conn, old)
        self.sink.publish_in_transaction(conn, batch_id, output_id, attempt, self.ledger.identity)
        self.ledger.mark_published(conn, self.pipeline.name, batch_id)

    within_commit = publish

    def after_commit(self, batch_id: int) -> None:
        self.pipeline.sink.cleanup(batch_id)

    def settle(self, batch_id: int) -> None:
        self.pipeline.sink.cleanup(batch_id)  # that try may have died between its COMMIT and the cleanup


def publication_for(pipeline: Pipeline, ledger: Ledger) -> Publication:
    """The strategy the pipeline's sink asks for by its trait."""
    sink = pipeline.sink
    if isinstance(sink, PublishesInLedgerTransaction):
        return InLedgerTransaction(pipeline, ledger)
    if isinstance(sink, PublishesAfterLedgerCommit):
        return AfterLedgerCommit(pipeline, ledger)
    raise TypeError(f"sink type {sink.type!r} ({type(sink).__name__}) has no publication trait "
                    f"(PublishesAfterLedgerCommit or PublishesInLedgerTransaction)")


def publish_pending(pipeline: Pipeline, ledger: Ledger, current: int | None = None) -> list[int]:
    """Publish committed batches whose output is not visible yet: ``current`` (just committed) and
    any a crash left behind after its transaction (rolled forward). Under the pipeline lock, so two
    tasks never publish the same files at once."""
    publication = publication_for(pipeline, ledger)
    done = []
    with ledger.lock(pipeline.name) as conn:
        for batch_id, output_id, attempt in ledger.unpublished(conn, pipeline.name):
            publication.publish(conn, batch_id, output_id, attempt)
            if batch_id != current:
                log.warning("pipeline %s batch %d: was committed but not published; published it now",
                            pipeline.name, batch_id)
            done.append(batch_id)
    return done
