"""Read-only views of the ledger for people: the UI plugin's pages and JSON API
(``offsetbatch.monitor``) and the CLI's history and audit log. Each takes a ``Ledger``, reads in one
connection of ``Ledger.reading()`` and returns JSON-ready dicts, built on the row queries of
``ledger.rows`` (which ``Ledger`` itself uses: this module sits above both).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from offsetbatch.ledger.rows import (
                                     MAX_PAGE,
                                     data_loss,
                                     event_query,
                                     page_rows,
                                     range_rows,
                                     )
from offsetbatch.ledger.schema import batches, events, gaps, ranges
from offsetbatch.ledger import summaries
from offsetbatch.ledger.store import Ledger

# Leaving the routine events out (``rows.ROUTINE_EVENTS``) is a filter no index serves (ob_events is
# indexed on pipeline and time only), so the UI looks for audit events among this many newest events
# (~40 days of hourly runs) and stays flat as history grows; the CLI looks through all of them.
EVENT_WINDOW = 2000


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


def _batch_rows(conn: sa.Connection, name: str, rows: list) -> list[dict]:
    """Batch rows with their ranges (a replay shows its target's ranges), in two queries."""
    read = range_rows(conn, name, (r.target_batch_id or r.batch_id for r in rows))
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


def batch_page(ledger: Ledger, name: str, before: int | None = None, limit: int = 50) -> dict:
    """One page of batch history, newest first; ``next_before`` pages on (``None`` on the last page)."""
    limit = max(1, min(limit, MAX_PAGE))
    with ledger.reading() as conn:
        rows = page_rows(conn, name, limit + 1, before)
        more = len(rows) > limit
        rows = rows[:limit]
        total = conn.execute(sa.select(sa.func.count()).select_from(batches)
                             .where(batches.c.pipeline == name)).scalar_one()
        page = _batch_rows(conn, name, rows)
        summarized = _history(conn, name)
    return {"pipeline": name, "total": total, "limit": limit, "before": before,
            "next_before": rows[-1].batch_id if more else None, "batches": page, "summarized": summarized}


def history_summary(ledger: Ledger, name: str) -> dict | None:
    """What ledger maintenance summarized (``ledger.history``), ``None`` if nothing."""
    with ledger.reading() as conn:
        return _history(conn, name)


def _history(conn: sa.Connection, name: str) -> dict | None:
    """The summary of summarized batches and each partition's span: two small tables (one row per
    pipeline, one per partition), whatever the history's length."""
    done = summaries.history_totals(conn, name)
    if done is None:
        return None
    spans = summaries.history_spans(conn, name)
    return {"batches": done.batches, "replays": done.replays, "first_batch_id": done.first_batch_id,
            "last_batch_id": done.last_batch_id, "first_committed_at": _iso(done.first_committed_at),
            "last_committed_at": _iso(done.last_committed_at), "rows_in": done.rows_in, "rows_out": done.rows_out,
            "rows_rejected": done.rows_rejected,
            "partitions": [{"topic": tp.topic, "partition": tp.partition, "from_offset": r.from_offset,
                            "until_offset": r.until_offset, "batches": r.batches, "first_batch_id": r.first_batch_id,
                            "last_batch_id": r.last_batch_id, "rows_read": r.rows_read,
                            "rows_rejected": r.rows_rejected} for tp, r in spans.items()]}


def history_line(summarized: dict | None, shown: int = 4) -> str | None:
    """The one line ``offsetbatch batches`` and ``status`` print under the kept batches."""
    if not summarized:
        return None
    parts = summarized["partitions"]
    spans = ", ".join(f"{p['topic']}/{p['partition']} [{p['from_offset']}, {p['until_offset']})" for p in parts[:shown])
    spans += f" … {len(parts) - shown} more partition(s)" if len(parts) > shown else ""
    return (f"{summarized['batches']:,} batches before {summarized['last_batch_id'] + 1} summarized by maintenance "
            f"(ids {summarized['first_batch_id']}..{summarized['last_batch_id']}, committed "
            f"{summarized['first_committed_at']} .. {summarized['last_committed_at']}; offsets per partition: "
            f"{spans or 'none'})")


def batches_for_run(ledger: Ledger, name: str, run_id: str) -> list[dict]:
    """Every batch an Airflow run planned (``ix_ob_batches_run``). Sorted here, not by SQL: asked for
    ``ORDER BY batch_id``, SQLite walks the primary key of a year of batches instead of the index (22 ms
    at 100,000 batches against 2.5, docs/benchmarks.md, *Growth*); a run plans a few batches."""
    with ledger.reading() as conn:
        rows = conn.execute(sa.select(batches).where(batches.c.pipeline == name, batches.c.run_id == run_id)).all()
        return _batch_rows(conn, name, sorted(rows, key=lambda r: r.batch_id))


def summary(ledger: Ledger, name: str, now: datetime | None = None) -> dict:
    """Last batch, batch counts by status, and the last 24 hours' committed rows and data loss."""
    now = now or datetime.now(timezone.utc)
    since = now - timedelta(hours=24)
    with ledger.reading() as conn:
        last = page_rows(conn, name, 1)
        last_committed = conn.execute(
            sa.select(batches.c.batch_id, batches.c.committed_at)
            .where(batches.c.pipeline == name, batches.c.status == "committed")
            .order_by(batches.c.batch_id.desc()).limit(1)).first()
        counts = dict(conn.execute(sa.select(batches.c.status, sa.func.count()).where(batches.c.pipeline == name)
                                   .group_by(batches.c.status)).all())
        day = conn.execute(
            sa.select(sa.func.count(), sa.func.sum(batches.c.rows_in), sa.func.sum(batches.c.rows_out),
                      sa.func.sum(batches.c.rows_rejected))
            .where(batches.c.pipeline == name, batches.c.committed_at >= since)).one()
        lost = data_loss(conn, name, since)
        last_rows = _batch_rows(conn, name, last)
        summarized = _history(conn, name)
    last_batch = last_rows[0] if last_rows else None
    return {
        "pipeline": name,
        "last_batch": last_batch,
        "last_batch_age_seconds": _seconds(_parse(last_batch["planned_at"]) if last_batch else None, now),
        "last_commit_age_seconds": _seconds(last_committed.committed_at if last_committed else None, now),
        "batches_by_status": counts,
        "last_24h": {"batches": day[0], "rows_in": day[1] or 0, "rows_out": day[2] or 0, "rows_rejected": day[3] or 0,
                     "gaps": lost[0], "records_lost": lost[1]},
        "summarized": summarized,
    }


def _parse(v: str | None) -> datetime | None:
    return datetime.fromisoformat(v) if v else None


def lag_history(ledger: Ledger, name: str, points: int = 200) -> list[dict]:
    """Lag at planning of the last ``points`` incremental batches, oldest first, with the lag left
    after each batch (lag minus the records it read)."""
    with ledger.reading() as conn:
        rows = conn.execute(
            sa.select(batches.c.batch_id, batches.c.planned_at, batches.c.status, batches.c.lag_at_plan)
            .where(batches.c.pipeline == name, batches.c.kind == "incremental", batches.c.lag_at_plan.is_not(None))
            .order_by(batches.c.batch_id.desc()).limit(points)).all()
        ids = [r.batch_id for r in rows]
        read = dict(conn.execute(
            sa.select(ranges.c.batch_id, sa.func.sum(ranges.c.until_offset - ranges.c.from_offset))
            .where(ranges.c.pipeline == name, ranges.c.batch_id.in_(ids)).group_by(ranges.c.batch_id)).all()) if ids else {}
    return [{"batch_id": r.batch_id, "at": _iso(r.planned_at), "status": r.status, "lag": r.lag_at_plan,
             "records": int(read.get(r.batch_id) or 0), "lag_after": max(r.lag_at_plan - int(read.get(r.batch_id) or 0), 0)}
            for r in reversed(rows)]


def gap_rows(ledger: Ledger, name: str, limit: int = 200) -> list[dict]:
    """Offsets the pipeline never read (retention before reading, or a forward reset), newest first."""
    with ledger.reading() as conn:
        rows = conn.execute(sa.select(gaps).where(gaps.c.pipeline == name)
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


def event_rows(ledger: Ledger, name: str, limit: int = 20, routine: bool = False,
               window: int | None = None) -> list[dict]:
    """The audit log, newest first (``event_query``): when, what, who (``actor``: ``cli:<user>`` or
    the Airflow user who triggered the run), why (``reason``, when one was given), a one-line
    ``summary`` and the recorded ``detail`` as is. ``window``: look only among that many newest
    events (``EVENT_WINDOW``: a page must not scan the whole history)."""
    limit = max(1, min(limit, MAX_PAGE))
    with ledger.reading() as conn:
        since = None
        if window is not None and not routine:
            since = conn.execute(sa.select(events.c.at).where(events.c.pipeline == name)
                                 .order_by(events.c.at.desc()).offset(window - 1).limit(1)).scalar()
        rows = conn.execute(event_query(name, limit, routine, since)).all()
    out = []
    for r in rows:
        detail = r.detail if isinstance(r.detail, dict) else {}
        out.append({"id": r.id, "at": _iso(r.at), "kind": r.kind, "actor": r.actor, "batch_id": r.batch_id,
                    "reason": detail.get("reason") or None, "summary": event_summary(r.kind, detail),
                    "detail": detail})
    return out


def event_summary(kind: str, d: dict) -> str:
    """One line saying what an audit event changed, from what its writer recorded."""
    if kind == "frontier_reset":
        moved = [f"{m['topic']}/{m['partition']} {'new' if m.get('frontier') is None else m['frontier']}→{m['to']}"
                 for m in d.get("moves", []) if m.get("direction") != "unchanged"]
        text = f"reset to {d.get('target', '?')}: " + (", ".join(moved[:4]) or "nothing moved")
        text += f" … {len(moved) - 4} more" if len(moved) > 4 else ""
        if d.get("superseded"):
            text += f"; superseded batch(es) {', '.join(map(str, d['superseded']))}"
        if d.get("abandoned"):
            text += f"; abandoned batch(es) {', '.join(map(str, d['abandoned']))}"
        return text
    if kind == "data_loss_skipped":
        lost = (d.get("until") or 0) - (d.get("from") or 0)
        return (f"{d.get('topic')}/{d.get('partition')} [{d.get('from')}, {d.get('until')}): {lost:,} records deleted "
                f"by retention before they were read, skipped (on_data_loss: skip)")
    if kind == "partition_started":
        return f"{d.get('topic')}/{d.get('partition')} starts at offset {d.get('offset')} ({d.get('policy')})"
    if kind == "batch_planned":
        what = f"replay of batch {d['replays']}" if d.get("replays") else f"{d.get('kind', '?')} batch"
        return f"{what} planned by run {d.get('run_id')}: {d.get('records') or 0:,} records"
    if kind == "batch_committed":
        return ", ".join(f"{k} {v}" for k, v in d.items() if k in ("rows_in", "rows_out", "rows_rejected")) or "committed"
    if kind == "run_triggered":
        return trigger_summary(d)
    if kind == "maintenance":
        return maintenance_summary(d)
    if kind == "batch_resumed":
        return f"re-executed unchanged by run {d.get('by_run')}"
    return ", ".join(f"{k}: {v}" for k, v in d.items() if k != "reason")


def maintenance_summary(d: dict) -> str:
    """A maintenance pass in one line: its status and what its actions changed."""
    done = [f"{a['step']} ({', '.join(f'{k} {v:,}' for k, v in a['done'].items()) or 'nothing'})"
            for a in d.get("actions", []) if a.get("done") is not None]
    text = f"maintenance {d.get('status', '?')}"
    if d.get("status") == "started":
        return f"{text}: {len(d.get('actions', []))} action(s) planned"
    text += f" in {d.get('seconds', 0):.1f} s: " + ("; ".join(done) or "nothing to do")
    return text + (f"; error: {d['error']}" if d.get("error") else "")


def trigger_summary(d: dict) -> str:
    """Why the lag trigger fired, in one line: the rule that decided and what it saw."""
    seen = f"{d.get('waiting_records') or 0:,} records waited in {d.get('partitions') or 0} partition(s)"
    if d.get("oldest_age_s") is not None:
        seen += f", the oldest {d['oldest_age_s']:.0f} s"
    folded = f" ({d['events']} firings in one run)" if (d.get("events") or 1) > 1 else ""
    return f"lag trigger fired ({d.get('reason') or '?'}): {seen}; run {d.get('run_id')}{folded}"
