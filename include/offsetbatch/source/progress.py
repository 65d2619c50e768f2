"""After a commit or a reset, best effort: the ledger's frontier as the pipeline's consumer group offsets, so
Kafka's own lag tools show progress. The ledger stays the truth; a failure here never fails a
committed batch."""

from __future__ import annotations

import logging

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from offsetbatch.ledger import Ledger
    from offsetbatch.source.admin import KafkaAdmin

log = logging.getLogger(__name__)


def publish_progress(name: str, group_id: str, ledger: "Ledger", kafka: "KafkaAdmin") -> bool:
    """Pipeline ``name``'s frontier as consumer group ``group_id``'s offsets, after a commit or a
    reset; ``False`` (logged) when Kafka refused it."""
    frontier = ledger.frontier_now(name)
    try:
        kafka.commit_group(group_id, frontier)
        return True
    except Exception as exc:  # noqa: BLE001 - progress publication must never fail a committed batch
        log.warning("pipeline %s: could not publish the frontier to consumer group %s (%s); the ledger is "
                    "unaffected and stays the source of truth", name, group_id, exc)
        return False
