"""Bounded ledger history: batches, ranges and routine events past ``maintenance.ledger_retain``
are folded into summaries (``ob_history`` per partition, ``ob_history_batches`` per pipeline), so a
pipeline's ledger stays the same size after 500,000 batches. The frontier, the gaps and the audit of
resets, replays, rebuilds and maintenance are never touched.

What is summarized: finished incremental batches (``committed`` and published; for the postgres
sink publication is inside the commit's transaction) committed before the horizon, with the replays
of each (a replay has no ranges of its own: it goes with its target, or both stay). Never summarized:
a planned or committed-unpublished batch, the target of a planned replay, a batch the frontier names
(``ob_frontier.batch_id``: the newest of its partition), backfill batches (history before the start,
bounded by what Kafka held then), superseded and abandoned batches (the audit of a reset).

A summary row's span ``[from_offset, until_offset)`` holds, by invariant 1, exactly the offsets of
the summarized ranges plus the kept committed ranges and gap rows inside it: ``Ledger.all_ranges``
and ``ranges_in_use`` hand those offsets back as ranges of the partition's last summarized batch, so
contiguity checks still hold, and a replay (by id or window) or a rewind reaching them is refused.

Each chunk (``CHUNK_BATCHES`` batches, fewer with many partitions) is one transaction under the
pipeline's ledger lock: batches, ranges and their events deleted, summaries merged. A SIGKILL
between chunks loses nothing; the next pass continues where it stopped (eligibility is re-read in
each chunk's transaction, so plans and commits may run between chunks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from offsetbatch import faults
from offsetbatch.ledger import Ledger, summaries
from offsetbatch.ledger import engine as eng
from offsetbatch.ledger.schema import batches, events, frontier, history, history_batches, ranges

FAULT = "maintain.ledger_chunk_committed"
CHUNK_BATCHES = 10_000
CHUNK_RANGES = 200_000   # a chunk deletes at most about this many ranges (10,000 partitions: 20 batches)

# Kept forever, whatever their age: the audit of what an operator or the pipeline decided about the
# offsets (resets, data skipped, a partition's first offset, rebuilds, maintenance passes). Listed
# for the record: deletion goes by the two lists below, so a kind not named there (a new one) is kept.
AUDIT_EVENTS = ("frontier_reset", "data_loss_skipped", "partition_started", "ledger_rebuilt", "maintenance")
# The per-batch bookkeeping of an incremental batch (its planning, commit, resumption and the schema
# it was decoded with): deleted in the transaction that summarizes the batch. A replay's are kept:
# they are the audit of who replayed what and why.
BATCH_EVENTS = ("batch_planned", "batch_committed", "batch_resumed", "value_schema")
# Why a lag trigger fired, one per triggered run and no batch: deleted once older than the horizon,
# but for the newest of each kind (``offsetbatch status`` says when the trigger last fired).
RUN_EVENTS = ("run_triggered",)
_EVENT_SLACK = timedelta(hours=1)   # a batch's events are written between its planned_at and just after its commit


@dataclass
class Chunk:
    """What one transaction summarizes: incremental ``targets`` and the ``replays`` of them."""

    targets: list[int] = field(default_factory=list)
    replays: list[int] = field(default_factory=list)
    cursor: int = 0        # the last batch id looked at
    done: bool = True      # no batch after ``cursor`` can be summarized at this horizon
    since: datetime | None = None   # the targets' events were written from then
    until: datetime | None = None   # to then (``ix_ob_events_pipeline`` is searched over that span only)

    @property
    def ids(self) -> list[int]:
        return self.targets + self.replays



def summarize(ledger: Ledger, name: str, before: datetime, limit: int = CHUNK_BATCHES) -> dict[str, int]:
    """Summarize every eligible batch committed before ``before``, one transaction per chunk, with
    the fault point ``maintain.ledger_chunk_committed`` after each commit. Idempotent: a second run
    (or the run after a SIGKILL) finds only what is left."""
    done = {"batches": 0, "replays": 0, "ranges": 0, "events": 0, "chunks": 0}
    cursor = 0
    while True:
        with ledger.lock(name) as conn:
            chunk = select_chunk(conn, name, before, cursor, limit)
            if chunk.ids:
                for k, v in _fold(conn, name, chunk).items():
                    done[k] += v
        if chunk.ids:
            done["chunks"] += 1
            faults.checkpoint(FAULT)
        if chunk.done:
            return done
        cursor = chunk.cursor


def drop_run_events(ledger: Ledger, name: str, before: datetime, limit: int = CHUNK_BATCHES) -> dict[str, int]:
    """Delete ``RUN_EVENTS`` older than ``before`` but the newest of each kind, ``limit`` per
    transaction (along ``ix_ob_events_pipeline``)."""
    total = 0
    while True:
        with ledger.lock(name) as conn:
            ids = conn.execute(sa.select(events.c.id).where(_old_run_events(conn, name, before))
                               .order_by(events.c.at).limit(limit)).scalars().all()
            if ids:
                total += conn.execute(events.delete().where(events.c.pipeline == name, events.c.id.in_(ids))).rowcount
        if not ids:
            return {"events": total}
        faults.checkpoint(FAULT)


def select_chunk(conn: sa.Connection, name: str, before: datetime, cursor: int, limit: int) -> Chunk:
    """The next batches after id ``cursor`` (at most ``limit`` looked at) that may be summarized,
    read in ``conn``'s transaction. Looking stops at the first batch planned at or after ``before``
    (ids are given in planning order under the lock, so none after it was committed before)."""
    rows = conn.execute(sa.select(batches.c.batch_id, batches.c.kind, batches.c.status, batches.c.target_batch_id,
                                  batches.c.published_at, batches.c.committed_at, batches.c.planned_at)
                        .where(batches.c.pipeline == name, batches.c.batch_id > cursor)
                        .order_by(batches.c.batch_id).limit(limit)).all()
    looked = [r for r in rows if utc(r.planned_at) < before]
    chunk = Chunk(cursor=looked[-1].batch_id if looked else cursor,
                  done=len(rows) < limit or len(looked) < len(rows))
    named = set(conn.execute(sa.select(frontier.c.batch_id).where(
        frontier.c.pipeline == name, frontier.c.batch_id.is_not(None))).scalars())
    targets = [r.batch_id for r in looked if r.kind == "incremental" and r.target_batch_id is None
               and _finished(r, before) and r.batch_id not in named]
    if not targets:
        return chunk
    replays: dict[int, list[sa.Row]] = {}
    for r in conn.execute(sa.select(batches.c.batch_id, batches.c.target_batch_id, batches.c.status,
                                    batches.c.published_at, batches.c.committed_at)
                          .where(batches.c.pipeline == name, _among(batches.c.target_batch_id, targets))):
        replays.setdefault(r.target_batch_id, []).append(r)
    chunk.targets = [t for t in targets if all(_finished(r, before) for r in replays.get(t, []))]
    chunk.replays = sorted(r.batch_id for t in chunk.targets for r in replays.get(t, []))
    keep = set(chunk.targets)
    chosen = [r for r in looked if r.batch_id in keep]
    if chosen:
        chunk.since = min(utc(r.planned_at) for r in chosen)
        chunk.until = max(utc(r.committed_at) for r in chosen) + _EVENT_SLACK
    return chunk


def _fold(conn: sa.Connection, name: str, chunk: Chunk) -> dict[str, int]:
    """In ``conn``'s transaction: merge ``chunk`` into the summaries, then delete its per-batch
    events, ranges and batch rows."""
    spans = conn.execute(
        sa.select(ranges.c.topic, ranges.c.partition, sa.func.min(ranges.c.from_offset).label("lo"),
                  sa.func.max(ranges.c.until_offset).label("hi"), sa.func.count().label("n"),
                  sa.func.min(ranges.c.batch_id).label("first"), sa.func.max(ranges.c.batch_id).label("last"),
                  sa.func.min(batches.c.committed_at).label("t0"), sa.func.max(batches.c.committed_at).label("t1"),
                  sa.func.sum(ranges.c.rows_read).label("read"), sa.func.sum(ranges.c.rows_rejected).label("rej"))
        .join(batches, sa.and_(batches.c.pipeline == ranges.c.pipeline, batches.c.batch_id == ranges.c.batch_id))
        .where(ranges.c.pipeline == name, _among(ranges.c.batch_id, chunk.targets))
        .group_by(ranges.c.topic, ranges.c.partition)).all()
    for s in spans:
        _merge_span(conn, name, s)
    totals = conn.execute(
        sa.select(sa.func.count().label("n"), sa.func.min(batches.c.batch_id).label("first"),
                  sa.func.max(batches.c.batch_id).label("last"), sa.func.min(batches.c.committed_at).label("t0"), sa.func.max(batches.c.committed_at).label("t1"),
                  sa.func.sum(batches.c.rows_in).label("rows_in"), sa.func.sum(batches.c.rows_out).label("rows_out"),
                  sa.func.sum(batches.c.rows_rejected).label("rows_rejected"))
        .where(batches.c.pipeline == name, batches.c.batch_id.in_(chunk.ids))).one()
    path = conn.execute(sa.select(batches.c.output_path).where(
        batches.c.pipeline == name, batches.c.batch_id == totals.last)).scalar()
    _merge_totals(conn, name, totals, len(chunk.replays), path)
    gone = conn.execute(events.delete().where(_events_of(name, chunk))).rowcount
    n_ranges = conn.execute(ranges.delete().where(ranges.c.pipeline == name,
                                                  ranges.c.batch_id.in_(chunk.targets))).rowcount
    conn.execute(batches.delete().where(batches.c.pipeline == name, batches.c.batch_id.in_(chunk.ids)))
    return {"batches": len(chunk.ids), "replays": len(chunk.replays), "ranges": n_ranges, "events": gone}


def _merge_span(conn: sa.Connection, name: str, s: sa.Row) -> None:
    """Fold one partition's summarized ranges into its ``ob_history`` row (one row per partition)."""
    key = (history.c.pipeline == name, history.c.topic == s.topic, history.c.partition == s.partition)
    old = conn.execute(sa.select(history).where(*key)).first()
    values = dict(from_offset=s.lo, until_offset=s.hi, batches=s.n, first_batch_id=s.first, last_batch_id=s.last,
                  first_committed_at=s.t0, last_committed_at=s.t1, rows_read=s.read or 0, rows_rejected=s.rej or 0,
                  updated_at=eng.now())
    if old is None:
        conn.execute(history.insert().values(pipeline=name, topic=s.topic, partition=s.partition, **values))
        return
    conn.execute(history.update().where(*key).values(
        from_offset=min(old.from_offset, s.lo), until_offset=max(old.until_offset, s.hi),
        batches=old.batches + s.n, first_batch_id=min(old.first_batch_id, s.first),
        last_batch_id=max(old.last_batch_id, s.last),
        first_committed_at=_earliest(old.first_committed_at, s.t0), last_committed_at=_latest(old.last_committed_at, s.t1),
        rows_read=old.rows_read + (s.read or 0), rows_rejected=old.rows_rejected + (s.rej or 0), updated_at=eng.now()))


def _merge_totals(conn: sa.Connection, name: str, t: sa.Row, replays: int, path: str | None) -> None:
    """Fold the chunk's batches into the pipeline's ``ob_history_batches`` row."""
    old = summaries.history_totals(conn, name)
    if old is None:
        conn.execute(history_batches.insert().values(
            pipeline=name, batches=t.n, replays=replays, first_batch_id=t.first, last_batch_id=t.last,
            first_committed_at=t.t0, last_committed_at=t.t1, rows_in=t.rows_in or 0, rows_out=t.rows_out or 0,
            rows_rejected=t.rows_rejected or 0, last_output_path=path, updated_at=eng.now()))
        return
    conn.execute(history_batches.update().where(history_batches.c.pipeline == name).values(
        batches=old.batches + t.n, replays=old.replays + replays, first_batch_id=min(old.first_batch_id, t.first),
        last_batch_id=max(old.last_batch_id, t.last), first_committed_at=_earliest(old.first_committed_at, t.t0),
        last_committed_at=_latest(old.last_committed_at, t.t1), rows_in=old.rows_in + (t.rows_in or 0),
        rows_out=old.rows_out + (t.rows_out or 0), rows_rejected=old.rows_rejected + (t.rows_rejected or 0),
        last_output_path=path if t.last >= old.last_batch_id else old.last_output_path, updated_at=eng.now()))


def count(ledger: Ledger, name: str, before: datetime, limit: int) -> dict[str, int]:
    """What ``summarize`` would do now, walking the same chunks read-only (a dry run's figures)."""
    found = {"batches": 0, "replays": 0, "ranges": 0, "events": 0}
    cursor = 0
    with ledger.reading() as conn:
        while True:
            chunk = select_chunk(conn, name, before, cursor, limit)
            if chunk.targets:
                found["batches"] += len(chunk.ids)
                found["replays"] += len(chunk.replays)
                found["ranges"] += conn.execute(sa.select(sa.func.count()).select_from(ranges).where(
                    ranges.c.pipeline == name, ranges.c.batch_id.in_(chunk.targets))).scalar_one()
                found["events"] += conn.execute(sa.select(sa.func.count()).select_from(events)
                                                .where(_events_of(name, chunk))).scalar_one()
            if chunk.done:
                return found
            cursor = chunk.cursor


def _events_of(name: str, chunk: Chunk) -> sa.ColumnElement:
    """The per-batch events (``BATCH_EVENTS``) of the chunk's incremental batches."""
    return sa.and_(events.c.pipeline == name, events.c.at >= chunk.since, events.c.at <= chunk.until,
                   events.c.kind.in_(BATCH_EVENTS), events.c.batch_id.in_(chunk.targets))


def count_run_events(ledger: Ledger, name: str, before: datetime) -> int:
    """How many ``RUN_EVENTS`` ``drop_run_events`` would delete now."""
    with ledger.reading() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(events)
                            .where(_old_run_events(conn, name, before))).scalar_one()


def _old_run_events(conn: sa.Connection, name: str, before: datetime) -> sa.ColumnElement:
    """``RUN_EVENTS`` before ``before``, the newest of each kind left out."""
    newest = [conn.execute(sa.select(events.c.id).where(events.c.pipeline == name, events.c.kind == kind)
                           .order_by(events.c.at.desc(), events.c.id.desc()).limit(1)).scalar() for kind in RUN_EVENTS]
    return sa.and_(events.c.pipeline == name, events.c.at < before, events.c.kind.in_(RUN_EVENTS),
                   events.c.id.not_in([i for i in newest if i is not None]))


def chunk_size(ledger: Ledger, name: str, chunk: int) -> int:
    """``chunk`` batches, fewer when each batch has many ranges (``CHUNK_RANGES`` per transaction)."""
    with ledger.reading() as conn:
        parts = conn.execute(sa.select(sa.func.count()).select_from(frontier)
                             .where(frontier.c.pipeline == name)).scalar_one()
    return max(1, min(chunk, CHUNK_RANGES // max(parts, 1)))


def _among(column: sa.ColumnElement, ids: list[int]) -> sa.ColumnElement:
    """``column IN ids`` with the ids' bounds too: SQLite then walks the index over that span
    (``ix_ob_batches_target``, the ranges' primary key) instead of the whole table, a chunk's ids
    being close together."""
    return sa.and_(column.between(min(ids), max(ids)), column.in_(ids))


def _finished(r: sa.Row, before: datetime) -> bool:
    """Committed, published and committed before ``before``: nothing live needs the row."""
    return (r.status == "committed" and r.published_at is not None and r.committed_at is not None
            and utc(r.committed_at) < before)


def utc(t: datetime) -> datetime:
    """SQLite gives naive datetimes back (the ledger writes UTC)."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return min((utc(x) for x in (a, b) if x is not None), default=None)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return max((utc(x) for x in (a, b) if x is not None), default=None)
