"""The commit's asset event as Airflow's partitioned assets see it (Airflow 3.2+,
``outlet_events[asset].add_partitions``): each batch's time slice as a partition key, so a DAG
scheduled with ``PartitionedAssetTimetable`` on the pipeline's asset processes exactly the hour
that landed.

The keys are hours, in UTC, formatted ``%Y-%m-%dT%H:%M:%S``: the ``input_format`` of Airflow's
temporal partition mappers (``StartOfHourMapper``, ``StartOfDayMapper``…), so a downstream DAG can
roll hours up into days. They are the start of the batch's data interval (a replay: its target
batch's, the hour it rewrites) and every hour its records' Kafka timestamps span (the job observes
the first and the last): a first batch reading a backlog of 10:00-12:59 at 12:00 emits 10:00,
11:00 and 12:00, so a downstream DAG reading "that hour" misses none (issue 41, case 14). At most
``MAX_KEYS`` hours, the newest. A run with neither (a manual run over an empty range) emits a plain
event.

Opt-in (``airflow.asset_partitions``): Airflow queues no plain ``schedule=[asset]`` DAG for a
partitioned event (``AssetManager._queue_dagruns``), so turning it on for an asset whose
consumers are not partition-aware would stop them.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from offsetbatch.ledger import Ledger

log = logging.getLogger(__name__)

KEY_FORMAT = "%Y-%m-%dT%H:%M:%S"  # Airflow's temporal mappers' default input_format
MAX_KEYS = 744  # a month of hours: a larger backlog's first batch names its newest month
HOUR_US = 3_600_000_000


def partition_key(ledger: "Ledger", name: str, batch_id: int) -> str | None:
    """``batch_id``'s time slice as a partition key (a replay: its target's), ``None`` without one."""
    batch = ledger.get_batch(name, batch_id)
    source = ledger.get_batch(name, batch.target_batch_id) if batch.target_batch_id else batch
    start = source.stats.get("data_interval_start")
    if start is None:
        return None
    start = start.replace(tzinfo=timezone.utc) if start.tzinfo is None else start.astimezone(timezone.utc)
    return start.strftime(KEY_FORMAT)


def partition_keys(ledger: "Ledger", name: str, batch_id: int, record_span_us: tuple[int, int] | None) -> list[str]:
    """The batch's interval key and every hour from its first record's to its last record's."""
    keys = set(filter(None, [partition_key(ledger, name, batch_id)]))
    if record_span_us is not None:
        first, last = (us - us % HOUR_US for us in record_span_us)
        hours = range(max(first, last - (MAX_KEYS - 1) * HOUR_US), last + 1, HOUR_US)
        keys.update(datetime.fromtimestamp(us / 1_000_000, timezone.utc).strftime(KEY_FORMAT) for us in hours)
    return sorted(keys)[-MAX_KEYS:]


def add_partitions(outlet_event, result: dict) -> list[str]:
    """Put the committed batches' keys on the asset event (``result``: ``commit_step``'s); returns them."""
    keys = sorted({k for b in result.get("batches", []) for k in b.get("partition_keys") or []})
    if keys:
        outlet_event.add_partitions(keys)
        log.info("pipeline %s: asset event with partition(s) %s", result.get("pipeline"), ", ".join(keys))
    else:
        log.warning("pipeline %s: batch(es) %s have no data interval (a run reading to the log end), so the asset "
                    "event carries no partition; partition-aware DAGs on the asset are not triggered by it",
                    result.get("pipeline"), result.get("batch_ids"))
    return keys
