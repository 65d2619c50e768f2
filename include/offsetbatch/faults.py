"""Named fault points for crash tests. Production never sets ``OFFSETBATCH_FAULTS``; the
exactly-once tests set it to crash a run at one boundary and then prove a rerun recovers.

    plan.after_commit         the plan task dies after its ledger transaction committed
    job.kill_during_write     the Spark driver is SIGKILLed while its first data files are being written
    commit.before_transaction the commit task dies after the job, before touching the ledger
    commit.in_transaction     the commit task dies inside its transaction (it rolls back)
    commit.after_transaction  the commit task dies after its transaction, before publishing the output
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)
ENV = "OFFSETBATCH_FAULTS"


class InjectedFault(RuntimeError):
    """Raised at a fault point named in OFFSETBATCH_FAULTS."""


def active(point: str) -> bool:
    return point in {p.strip() for p in os.environ.get(ENV, "").split(",") if p.strip()}


def checkpoint(point: str) -> None:
    if active(point):
        log.error("fault injection: failing at %s (%s is set)", point, ENV)
        raise InjectedFault(f"injected fault at {point}")
