"""What ledger maintenance summarized (``ledger.history`` writes it), as the rest of the ledger reads
it: the totals and per-partition spans of summarized batches, the offsets they read as ranges, and
the refusal of a batch id that is only a summary now."""

from __future__ import annotations

import sqlalchemy as sa

from offsetbatch.ledger.errors import SummarizedBatchError
from offsetbatch.ledger.schema import gaps, history, history_batches
from offsetbatch.model import OffsetRange, TopicPartition, subtract


def history_totals(conn: sa.Connection, name: str) -> sa.Row | None:
    """The pipeline's summary of summarized batches (``ob_history_batches``), ``None`` if none."""
    return conn.execute(sa.select(history_batches).where(history_batches.c.pipeline == name)).first()

def history_spans(conn: sa.Connection, name: str) -> dict[TopicPartition, sa.Row]:
    """Per partition, the offsets summarized batches read (``ob_history``)."""
    rows = conn.execute(sa.select(history).where(history.c.pipeline == name)
                        .order_by(history.c.topic, history.c.partition))
    return {TopicPartition(r.topic, r.partition): r for r in rows}

def summarized_pieces(conn: sa.Connection, name: str, kept: list[OffsetRange]) -> list[tuple[int, OffsetRange]]:
    """The offsets summarized batches read, exactly: each partition's summary span without the
    ``kept`` committed ranges and the gap rows inside it (invariant 1 makes the rest theirs), as
    ranges of the partition's last summarized batch id, ``frontier_before`` set: they chain."""
    spans = history_spans(conn, name)
    if not spans:
        return []
    used: dict[TopicPartition, list[tuple[int, int]]] = {}
    for r in kept:
        used.setdefault(r.tp, []).append((r.from_offset, r.until_offset))
    for g in conn.execute(sa.select(gaps).where(gaps.c.pipeline == name)):
        used.setdefault(TopicPartition(g.topic, g.partition), []).append((g.from_offset, g.until_offset))
    return [(row.last_batch_id, OffsetRange(tp.topic, tp.partition, a, b, frontier_before=a))
            for tp, row in spans.items()
            for a, b in subtract((row.from_offset, row.until_offset), used.get(tp, []))]

def refuse_summarized(conn: sa.Connection, name: str, ids: list[int]) -> None:
    """Raise ``SummarizedBatchError`` if one of ``ids`` (batches with no row) was summarized."""
    done = history_totals(conn, name)
    gone = sorted(i for i in ids if done is not None and done.first_batch_id <= i <= done.last_batch_id)
    if not gone:
        return
    spans = history_spans(conn, name)
    shown = ", ".join(f"{tp} [{r.from_offset}, {r.until_offset})" for tp, r in list(spans.items())[:4])
    shown += f" … {len(spans) - 4} more partition(s)" if len(spans) > 4 else ""
    until = done.last_committed_at.isoformat() if done.last_committed_at else "?"
    raise SummarizedBatchError(
        f"pipeline {name}: batch(es) {', '.join(map(str, gone[:6]))}{' …' if len(gone) > 6 else ''} were "
        f"summarized by ledger maintenance (maintenance.ledger_retain): {done.batches:,} finished batches between "
        f"{done.first_batch_id} and {done.last_batch_id}, committed until {until}, are kept only as the offsets "
        f"they read per partition ({shown}), so their ranges are gone and they cannot be replayed or looked at "
        f"one by one. Nothing was changed. Replay only batches 'offsetbatch batches {name}' still lists (there "
        f"is no replay by offsets; a replay window must not reach these offsets); to keep batches replayable "
        f"for longer, raise maintenance.ledger_retain.")
