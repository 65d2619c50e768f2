"""Named fault points for crash tests. Production never sets ``OFFSETBATCH_FAULTS``; the
exactly-once tests set it to crash a run at one boundary and then prove a rerun recovers.

    plan.after_commit         the plan task dies after its ledger transaction committed
    job.kill_during_write     the Spark driver is SIGKILLed while its first data files are being written
    commit.before_transaction the commit task dies after the job, before touching the ledger
    commit.in_transaction     the commit task dies inside its transaction (it rolls back)
    commit.after_transaction  the commit task dies after its transaction, before publishing the output
    commit.before_copy        (postgres sink) inside the ledger transaction, after the batch row, the
                              frontier CAS and the DELETE of the batch's old rows, before the COPY
    commit.after_copy         (postgres sink) inside the ledger transaction, after the COPY, before COMMIT
    commit.iceberg_metadata_written  (iceberg sink) inside the Iceberg commit: the new table metadata
                              file is written, the catalog row not yet swapped to it
    commit.after_iceberg_commit      (iceberg sink) after each table's snapshot commit (rows, then
                              rejected records), before the ledger marks the batch published; in
                              upsert mode the rows' table is the table of changes, so this is
                              before the upserted table's snapshot
    commit.after_iceberg_upsert      (iceberg sink, upsert mode) after the upserted table's snapshot
    commit.delta_checked      (delta sink) a table read and found without the batch, its commit not
                              yet sent: a second writer paused here races the first
    commit.after_delta_commit        (delta sink) after each table's Delta commit (rows, then rejected
                              records), before the ledger marks the batch published; in upsert
                              mode the rows' table is the table of changes
    commit.after_delta_upsert        (delta sink, upsert mode) after the upserted table's merge commit
    commit.manifest_published (files sink on an object store) the batch's manifest is published, the
                              batch's other attempts and the replaced folder not yet deleted, the
                              ledger not yet marking the batch published
    commit.kafka_records_sent (kafka sink) every record of the batch sent and flushed inside its
                              open Kafka transaction, before the marker and the transaction's commit
    commit.after_kafka_commit (kafka sink) after the Kafka transaction committed, before the ledger
                              marks the batch published
    maintain.ledger_chunk_committed  (maintenance) after each chunk of ledger history is summarized
                              (or of old run events deleted) and committed, before the next chunk
    commit.files_group_swapping (files sink) a replay or retirement of a compacted batch: after the
                              first rename of the swap that takes its rows out of its group's folder
    commit.files_group_left   (files sink) the batch's rows are out of its group's folder (a replay
                              of the group's own id: its new rows in), its own output not yet published
    maintain.files_compaction_staged   (files sink) a day's compacted folder is written under
                              _offsetbatch/compactions/staged/, nothing swapped, no intent written
    maintain.files_compaction_swapping (files sink) after the first rename of a compaction's swap
                              (its intent written, the members' folders half moved to trash)
    maintain.files_retention_deleting  (files sink) after the first deletion of a retention action
    maintain.iceberg_compaction_written  (iceberg maintenance) the compacted files are written,
                              their snapshot not committed (they are orphans the sweep removes)
    maintain.iceberg_archive_written     (iceberg maintenance) the markers archive file is written,
                              the table property naming it not committed
    maintain.iceberg_expired  (iceberg maintenance) the expiry is committed, the files only the
                              expired snapshots referenced not yet deleted (their intent file lists them)
    maintain.iceberg_deleting (iceberg maintenance) after the first file of an expiry intent is deleted
    maintain.delta_archive_written   (delta maintenance) the markers archive is written, the checkpoint
                              and the log cleanup not done

A point fails by raising ``InjectedFault`` (the process unwinds: transactions roll back cleanly).
``point:kill`` instead SIGKILLs the process at that point, as the OOM killer or a lost node would:
no ``finally``, no rollback sent, the database sees a connection drop. ``point:pause`` writes
``<point>.paused`` into ``OFFSETBATCH_FAULTS_DIR`` and waits (up to 10 minutes) for
``<point>.resume`` there, so a test can look at the database while a commit holds its transaction.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)
ENV = "OFFSETBATCH_FAULTS"
DIR_ENV = "OFFSETBATCH_FAULTS_DIR"


class InjectedFault(RuntimeError):
    """Raised at a fault point named in OFFSETBATCH_FAULTS."""


def _points() -> dict[str, str]:
    """Point name -> action (``raise`` unless ``:kill`` or ``:pause`` follows the name)."""
    points = {}
    for item in os.environ.get(ENV, "").split(","):
        name, _, action = item.strip().partition(":")
        if name:
            points[name] = action or "raise"
    return points


def active(point: str) -> bool:
    return point in _points()


def checkpoint(point: str) -> None:
    action = _points().get(point)
    if action is None:
        return
    if action == "kill":
        log.error("fault injection: SIGKILL at %s (%s is set)", point, ENV)
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "pause":
        folder = Path(os.environ.get(DIR_ENV, "."))
        (folder / f"{point}.paused").write_text(str(os.getpid()))
        log.error("fault injection: paused at %s until %s exists", point, folder / f"{point}.resume")
        deadline = time.monotonic() + 600
        while not (folder / f"{point}.resume").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting for the test's go-ahead, not for a result
        return
    log.error("fault injection: failing at %s (%s is set)", point, ENV)
    raise InjectedFault(f"injected fault at {point}")
