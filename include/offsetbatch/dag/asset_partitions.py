"""The commit's asset event as Airflow's partitioned assets see it (Airflow 3.2+,
``outlet_events[asset].add_partitions``): each batch's time slice as a partition key, so a DAG
scheduled with ``PartitionedAssetTimetable`` on the pipeline's asset processes exactly the hour
that landed.

The key is the start of the batch's data interval, in UTC, formatted ``%Y-%m-%dT%H:%M:%S``: the
``input_format`` of Airflow's temporal partition mappers (``StartOfHourMapper``,
``StartOfDayMapper``…), so a downstream DAG can roll hours up into days. A replay's key is its
target batch's: it rewrites that hour. A run without an interval (a manual run reading to the log
end) has no time slice and emits a plain event.

Opt-in (``airflow.asset_partitions``): Airflow queues no plain ``schedule=[asset]`` DAG for a
partitioned event (``AssetManager._queue_dagruns``), so turning it on for an asset whose
consumers are not partition-aware would stop them.
"""

from __future__ import annotations

import logging
from datetime import timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from offsetbatch.ledger import Ledger

log = logging.getLogger(__name__)

KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"  # Airflow's temporal mappers' default input_format


def partition_key(ledger: "Ledger", name: str, batch_id: int) -> str | None:
    """``batch_id``'s time slice as a partition key (a replay: its target's), ``None`` without one."""
    batch = ledger.get_batch(name, batch_id)
    source = ledger.get_batch(name, batch.target_batch_id) if batch.target_batch_id else batch
    start = source.stats.get("data_interval_start")
    if start is None:
        return None
    start = start.replace(tzinfo=timezone.utc) if start.tzinfo is None else start.astimezone(timezone.utc)
    return start.strftime(KEY_FORMAT)


def add_partitions(outlet_event, result: dict) -> list[str]:
    """Put the committed batches' keys on the asset event (``result``: ``commit_step``'s); returns them."""
    keys = sorted({b["partition_key"] for b in result.get("batches", []) if b.get("partition_key")})
    if keys:
        outlet_event.add_partitions(keys)
        log.info("pipeline %s: asset event with partition(s) %s", result.get("pipeline"), ", ".join(keys))
    else:
        log.warning("pipeline %s: batch(es) %s have no data interval (a run reading to the log end), so the asset "
                    "event carries no partition; partition-aware DAGs on the asset are not triggered by it",
                    result.get("pipeline"), result.get("batch_ids"))
    return keys
