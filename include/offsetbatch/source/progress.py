"""After a commit or a reset, best effort: the ledger's frontier as the pipeline's consumer group offsets, so
Kafka's own lag tools show progress. The ledger stays the truth; a failure here never fails a
committed batch."""

from __future__ import annotations

import logging

from offsetbatch.config import PipelineConfig
from offsetbatch.ledger import Ledger
from offsetbatch.source.admin import KafkaAdmin

log = logging.getLogger(__name__)


def publish_progress(cfg: PipelineConfig, ledger: Ledger, kafka: KafkaAdmin) -> bool:
    """After a commit or a reset; ``False`` (logged) when Kafka refused it."""
    frontier = ledger.frontier_now(cfg.name)
    try:
        kafka.commit_group(cfg.group_id, frontier)
        return True
    except Exception as exc:  # noqa: BLE001 - progress publication must never fail a committed batch
        log.warning("pipeline %s: could not publish the frontier to consumer group %s (%s); the ledger is "
                    "unaffected and stays the source of truth", cfg.name, cfg.group_id, exc)
        return False
