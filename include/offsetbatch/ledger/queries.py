"""Read-only, paged ledger queries: ``Ledger.list_batches`` and the UI plugin's pages and JSON API
(``offsetbatch.monitor``) both read batch history through them.

They must stay fast with tens of thousands of batches: history pages are keyset-paged on the
primary key (``batch_id < before``), a page's ranges come in one ``IN`` query (not one per batch),
the run tab uses ``ix_ob_batches_run`` and the 24-hour figures ``ix_ob_batches_committed``.

``page_rows`` and ``range_rows`` take a connection and return rows (the building blocks); the UI
functions take a ``Ledger``, read in one connection of ``Ledger.reading()`` and return JSON-ready dicts.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Iterable

import sqlalchemy as sa

from offsetbatch.ledger.schema import batches, gaps, ranges

if TYPE_CHECKING:
    from offsetbatch.ledger.store import Ledger

MAX_PAGE = 500


# ---- building blocks (a connection in, rows out) ----------------------------------------------


def page_rows(conn: sa.Connection, pipeline: str, limit: int, before: int | None = None) -> list[sa.Row]:
    """Up to ``limit`` batch rows, newest first, with ``batch_id < before`` if given (keyset paging
    on the primary key: a deep page costs what the first one does)."""
    q = sa.select(batches).where(batches.c.pipeline == pipeline)
    if before is not None:
        q = q.where(batches.c.batch_id < before)
    return conn.execute(q.order_by(batches.c.batch_id.desc()).limit(limit)).all()


def range_rows(conn: sa.Connection, pipeline: str, ids: Iterable[int]) -> dict[int, list[sa.Row]]:
    """The range rows of batches ``ids`` in one ``IN`` query, by batch id, each ordered by topic
    and partition. A replay has no ranges of its own: ask for its ``target_batch_id``."""
    out: dict[int, list[sa.Row]] = defaultdict(list)
    ids = sorted(set(ids))
    if not ids:
        return out
    rows = conn.execute(sa.select(ranges).where(ranges.c.pipeline == pipeline, ranges.c.batch_id.in_(ids))
                        .order_by(ranges.c.batch_id, ranges.c.topic, ranges.c.partition))
    for r in rows:
        out[r.batch_id].append(r)
    return out


# ---- the UI's reads (a Ledger in, JSON-ready dicts out) ---------------------------------------


def _iso(v: Any) -> Any:
    if isinstance(v, datetime):
        return (v if v.tzinfo else v.replace(tzinfo=timezone.utc)).isoformat()
    return v


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    if a is None or b is None:
        return None
    a, b = (x if x.tzinfo else x.replace(tzinfo=timezone.utc) for x in (a, b))
    return round((b - a).total_seconds(), 1)


def _range_dict(r: sa.Row) -> dict:
    return {"topic": r.topic, "partition": r.partition, "from_offset": r.from_offset,
            "until_offset": r.until_offset, "records": r.until_offset - r.from_offset,
            "rows_read": r.rows_read, "rows_rejected": r.rows_rejected}


def _batch_rows(conn: sa.Connection, pipeline: str, rows: list) -> list[dict]:
    """Batch rows with their ranges (a replay shows its target's ranges), in two queries."""
    read = range_rows(conn, pipeline, (r.target_batch_id or r.batch_id for r in rows))
    out = []
    for r in rows:
        folder = r.target_batch_id or r.batch_id
        rs = [_range_dict(x) for x in read.get(folder, [])]
        out.append({
            "batch_id": r.batch_id, "kind": r.kind, "status": r.status, "dag_id": r.dag_id, "run_id": r.run_id,
            "run_type": r.run_type,
            "data_interval_start": _iso(r.data_interval_start), "data_interval_end": _iso(r.data_interval_end),
            "planned_at": _iso(r.planned_at), "committed_at": _iso(r.committed_at),
            "published_at": _iso(r.published_at), "attempts": r.attempts,
            "records": sum(x["records"] for x in rs), "rows_in": r.rows_in, "rows_out": r.rows_out,
            "rows_rejected": r.rows_rejected, "bytes_in": r.bytes_in, "job_seconds": r.job_seconds,
            "commit_seconds": r.commit_seconds, "duration_seconds": _seconds(r.planned_at, r.committed_at),
            "lag_at_plan": r.lag_at_plan, "target_batch_id": r.target_batch_id, "superseded_by": r.superseded_by,
            "output_id": folder, "output_path": r.output_path,  # the UI asks the sink where that is
            "ranges": rs,
        })
    return out


def batch_page(ledger: Ledger, pipeline: str, before: int | None = None, limit: int = 50) -> dict:
    """One page of batch history, newest first; ``next_before`` pages on (``None`` on the last page)."""
    limit = max(1, min(limit, MAX_PAGE))
    with ledger.reading() as conn:
        rows = page_rows(conn, pipeline, limit + 1, before)
        more = len(rows) > limit
        rows = rows[:limit]
        total = conn.execute(sa.select(sa.func.count()).select_from(batches)
                             .where(batches.c.pipeline == pipeline)).scalar_one()
        page = _batch_rows(conn, pipeline, rows)
    return {"pipeline": pipeline, "total": total, "limit": limit, "before": before,
            "next_before": rows[-1].batch_id if more else None, "batches": page}


def batches_for_run(ledger: Ledger, pipeline: str, run_id: str) -> list[dict]:
    """Every batch an Airflow run planned (``ix_ob_batches_run``)."""
    with ledger.reading() as conn:
        rows = conn.execute(sa.select(batches).where(batches.c.pipeline == pipeline, batches.c.run_id == run_id)
                            .order_by(batches.c.batch_id)).all()
        return _batch_rows(conn, pipeline, rows)


def summary(ledger: Ledger, pipeline: str, now: datetime | None = None) -> dict:
    """Last batch, batch counts by status, and the last 24 hours' committed rows and data loss."""
    now = now or datetime.now(timezone.utc)
    since = now - timedelta(hours=24)
    with ledger.reading() as conn:
        last = page_rows(conn, pipeline, 1)
        last_committed = conn.execute(
            sa.select(batches.c.batch_id, batches.c.committed_at)
            .where(batches.c.pipeline == pipeline, batches.c.status == "committed")
            .order_by(batches.c.batch_id.desc()).limit(1)).first()
        counts = dict(conn.execute(sa.select(batches.c.status, sa.func.count()).where(batches.c.pipeline == pipeline)
                                   .group_by(batches.c.status)).all())
        day = conn.execute(
            sa.select(sa.func.count(), sa.func.sum(batches.c.rows_in), sa.func.sum(batches.c.rows_out),
                      sa.func.sum(batches.c.rows_rejected))
            .where(batches.c.pipeline == pipeline, batches.c.committed_at >= since)).one()
        lost = conn.execute(
            sa.select(sa.func.count(), sa.func.sum(gaps.c.until_offset - gaps.c.from_offset))
            .where(gaps.c.pipeline == pipeline, gaps.c.detected_at >= since)).one()
        last_rows = _batch_rows(conn, pipeline, last)
    last_batch = last_rows[0] if last_rows else None
    return {
        "pipeline": pipeline,
        "last_batch": last_batch,
        "last_batch_age_seconds": _seconds(_parse(last_batch["planned_at"]) if last_batch else None, now),
        "last_commit_age_seconds": _seconds(last_committed.committed_at if last_committed else None, now),
        "batches_by_status": counts,
        "last_24h": {"batches": day[0], "rows_in": day[1] or 0, "rows_out": day[2] or 0, "rows_rejected": day[3] or 0,
                     "gaps": lost[0], "records_lost": lost[1] or 0},
    }


def _parse(v: str | None) -> datetime | None:
    return datetime.fromisoformat(v) if v else None


def lag_history(ledger: Ledger, pipeline: str, points: int = 200) -> list[dict]:
    """Lag at planning of the last ``points`` incremental batches, oldest first, with the lag left
    after each batch (lag minus the records it read)."""
    with ledger.reading() as conn:
        rows = conn.execute(
            sa.select(batches.c.batch_id, batches.c.planned_at, batches.c.status, batches.c.lag_at_plan)
            .where(batches.c.pipeline == pipeline, batches.c.kind == "incremental", batches.c.lag_at_plan.is_not(None))
            .order_by(batches.c.batch_id.desc()).limit(points)).all()
        ids = [r.batch_id for r in rows]
        read = dict(conn.execute(
            sa.select(ranges.c.batch_id, sa.func.sum(ranges.c.until_offset - ranges.c.from_offset))
            .where(ranges.c.pipeline == pipeline, ranges.c.batch_id.in_(ids)).group_by(ranges.c.batch_id)).all()) if ids else {}
    return [{"batch_id": r.batch_id, "at": _iso(r.planned_at), "status": r.status, "lag": r.lag_at_plan,
             "records": int(read.get(r.batch_id) or 0), "lag_after": max(r.lag_at_plan - int(read.get(r.batch_id) or 0), 0)}
            for r in reversed(rows)]


def gap_rows(ledger: Ledger, pipeline: str, limit: int = 200) -> list[dict]:
    """Offsets the pipeline never read (retention before reading, or a forward reset), newest first."""
    with ledger.reading() as conn:
        rows = conn.execute(sa.select(gaps).where(gaps.c.pipeline == pipeline)
                            .order_by(gaps.c.id.desc()).limit(limit)).all()
    return [{"topic": r.topic, "partition": r.partition, "from_offset": r.from_offset, "until_offset": r.until_offset,
             "records": r.until_offset - r.from_offset, "reason": r.reason, "detected_at": _iso(r.detected_at)}
            for r in rows]


def mark_gaps(page: list[dict], gap_list: list[dict]) -> None:
    """Flag each batch that starts right after a gap (it read on from where the lost offsets end)."""
    ends = {(g["topic"], g["partition"], g["until_offset"]): g for g in gap_list}
    for b in page:
        b["after_gaps"] = [ends[k] for k in ((r["topic"], r["partition"], r["from_offset"]) for r in b["ranges"])
                           if k in ends] if b["kind"] == "incremental" else []
