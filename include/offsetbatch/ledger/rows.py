"""The ledger's read building blocks: a connection in, rows out. ``Ledger`` (``store``) reads batch
history through them, and the views in ``queries`` (the UI plugin's pages and JSON API, the CLI)
build JSON-ready dicts on top of them.

They must stay fast with tens of thousands of batches: history pages are keyset-paged on the
primary key (``batch_id < before``), a page's ranges come in one ``IN`` query (not one per batch),
the run tab uses ``ix_ob_batches_run``, the 24-hour figures ``ix_ob_batches_committed`` and the
audit log ``ix_ob_events_pipeline``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Iterable

import sqlalchemy as sa

from offsetbatch.ledger.schema import batches, events, gaps, ranges

MAX_PAGE = 500
# Per-batch bookkeeping of incremental batches: one or two events per scheduled run. Left out of the
# audit view by default, so a reset or a replay does not scroll away within a day.
ROUTINE_EVENTS = ("batch_planned", "batch_committed", "batch_resumed")
# One per lag-triggered run (why the trigger fired): routine too, whatever the run planned.
ROUTINE_RUN_EVENTS = ("run_triggered",)


def page_rows(conn: sa.Connection, name: str, limit: int, before: int | None = None) -> list[sa.Row]:
    """Up to ``limit`` batch rows, newest first, with ``batch_id < before`` if given (keyset paging
    on the primary key: a deep page costs what the first one does)."""
    q = sa.select(batches).where(batches.c.pipeline == name)
    if before is not None:
        q = q.where(batches.c.batch_id < before)
    return conn.execute(q.order_by(batches.c.batch_id.desc()).limit(limit)).all()


def range_rows(conn: sa.Connection, name: str, ids: Iterable[int]) -> dict[int, list[sa.Row]]:
    """The range rows of batches ``ids`` in one ``IN`` query, by batch id, each ordered by topic
    and partition. A replay has no ranges of its own: ask for its ``target_batch_id``."""
    out: dict[int, list[sa.Row]] = defaultdict(list)
    ids = sorted(set(ids))
    if not ids:
        return out
    rows = conn.execute(sa.select(ranges).where(ranges.c.pipeline == name, ranges.c.batch_id.in_(ids))
                        .order_by(ranges.c.batch_id, ranges.c.topic, ranges.c.partition))
    for r in rows:
        out[r.batch_id].append(r)
    return out


def data_loss(conn: sa.Connection, name: str, since: datetime) -> tuple[int, int]:
    """(gap rows, records they skipped) recorded at or after ``since``: offsets never read, by
    retention (``on_data_loss: skip``) or a forward reset."""
    n, lost = conn.execute(
        sa.select(sa.func.count(), sa.func.sum(gaps.c.until_offset - gaps.c.from_offset))
        .where(gaps.c.pipeline == name, gaps.c.detected_at >= since)).one()
    return n, int(lost or 0)


def last_event(conn: sa.Connection, name: str, kind: str) -> sa.Row | None:
    """The newest event of ``kind`` (its ``at`` and ``detail``), read backwards along the pipeline's
    events: for a kind written every run (``run_triggered``) the walk is short."""
    return conn.execute(sa.select(events.c.at, events.c.detail)
                        .where(events.c.pipeline == name, events.c.kind == kind)
                        .order_by(events.c.at.desc(), events.c.id.desc()).limit(1)).first()


def event_query(name: str, limit: int, routine: bool = False, since: datetime | None = None) -> sa.Select:
    """The newest ``limit`` audit events (``ob_events``), newest first, read backwards along
    ``ix_ob_events_pipeline`` (not before ``since`` if given). Without ``routine``, the bookkeeping
    of incremental batches is left out (a replay's or backfill's planning stays: an operator asked
    for it)."""
    q = (sa.select(events, batches.c.kind.label("batch_kind"))
         .outerjoin(batches, sa.and_(batches.c.pipeline == events.c.pipeline, batches.c.batch_id == events.c.batch_id))
         .where(events.c.pipeline == name))
    if since is not None:
        q = q.where(events.c.at >= since)
    if not routine:
        q = q.where(events.c.kind.not_in(ROUTINE_RUN_EVENTS),
                    sa.or_(events.c.kind.not_in(ROUTINE_EVENTS), batches.c.kind.is_(None),
                          batches.c.kind != "incremental"))
    return q.order_by(events.c.at.desc(), events.c.id.desc()).limit(limit)
