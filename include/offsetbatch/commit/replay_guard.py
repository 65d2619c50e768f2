"""A replay never replaces published rows with rejections without the operator saying so.

A replay re-reads its target's offsets and replaces the target's output. If today's code rejects
records the published output holds (a writer schema the registry no longer lists, a stricter
transform, a reader schema that cannot read an old writer), the commit would delete good rows and
write rejections in their place, and the run would go green (issue 41, case 7: a table went from
2 rows to 0). So the commit compares the replay's rejected count with the output it replaces and
refuses a replay that rejects more, naming the first newly rejected record's reason, unless the
run was triggered with ``allow_more_rejected``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from offsetbatch.errors import ReplayRejectsMoreError

if TYPE_CHECKING:
    from offsetbatch.jobspec import Manifest
    from offsetbatch.ledger import Ledger
    from offsetbatch.model import Batch

log = logging.getLogger(__name__)


def check_rejections(ledger: "Ledger", batch: "Batch", manifest: "Manifest") -> None:
    """Raise ``ReplayRejectsMoreError`` when replay ``batch`` rejects more records than the output
    it replaces did and the last run that executes it did not allow it (its ``batch_planned`` or
    ``batch_resumed`` event holds the flag: a second trigger that joins a refused replay decides)."""
    if batch.target_batch_id is None:
        return
    name = batch.pipeline
    current = ledger.published_writer(name, batch.target_batch_id)
    if current is None:
        return  # nothing of the target is published: nothing good is replaced
    before, after = int(current.stats.get("rows_rejected") or 0), manifest.rows_rejected
    if after <= before:
        return
    where = (f"pipeline {name} batch {batch.batch_id} (replays batch {batch.target_batch_id}, whose output is batch "
             f"{current.batch_id}'s now)")
    counts = (f"it rejects {after:,} record(s) where the output it replaces rejected {before:,} (rows "
              f"{int(current.stats.get('rows_out') or 0):,} → {manifest.rows_out:,})")
    if ledger.last_request(name, batch.batch_id).get("allow_more_rejected"):
        log.warning("%s: %s; allowed by the run's allow_more_rejected, so %d published row(s) become rejections",
                    where, counts, after - before)
        return
    first = _first_rejected(manifest.rejected_files)
    raise ReplayRejectsMoreError(
        f"{where}: {counts}. Committing it would replace records that are in the output now with rejections"
        f"{f'; the first rejected record: {first}' if first else ''}. Nothing was committed; the batch stays planned. "
        f"If that is meant (a stricter schema or transform on purpose), trigger the replay again with "
        f"allow_more_rejected ticked (CLI: offsetbatch replay … --allow-more-rejected); otherwise fix the cause (a "
        f"writer schema the registry no longer lists, a transform that now fails) and clear the spark_job task.")


def _first_rejected(files: list[str]) -> str | None:
    """``topic/partition offset N: error`` of the first staged rejected record, if any."""
    import pyarrow.parquet as pq

    from offsetbatch import storage

    for path in files:
        fs, local = storage._fs(path)  # noqa: SLF001 - staged files, as the sinks read them
        with fs.open(local, "rb") as fh:
            table = pq.read_table(fh, columns=["kafka_topic", "kafka_partition", "kafka_offset", "error"])
        if table.num_rows:
            row = table.slice(0, 1).to_pylist()[0]
            return f"{row['kafka_topic']}/{row['kafka_partition']} offset {row['kafka_offset']}: {row['error']}"
    return None
