"""Ledger operations. Writes take a ``Connection`` from ``Ledger.lock(pipeline)`` so that a whole
plan or commit is one transaction under the pipeline's lock; reads open their own."""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from datetime import datetime
from typing import Iterator

import sqlalchemy as sa

from offsetbatch.ledger import engine as eng
from offsetbatch.ledger import summaries
from offsetbatch.ledger.errors import LedgerError, StaleCommitError, SummarizedBatchError
from offsetbatch.ledger.rows import page_rows, range_rows
from offsetbatch.ledger.schema import batches, events, frontier, gaps, history, history_batches, ledger_info, ranges
from offsetbatch.model import Batch, Gap, OffsetRange, TopicPartition

log = logging.getLogger(__name__)


# The commit's per-partition updates. SQLite: one executemany (calls into the library, no network).
# PostgreSQL: psycopg2's executemany is a round trip per row, so one statement per table over
# ``unnest`` of four arrays: one round trip, compiled once, and its rowcount still proves that every
# partition's compare-and-set matched.
_PG_FRONTIER_CAS = sa.text(
    "UPDATE ob_frontier AS f SET next_offset = v.until_offset, batch_id = :batch_id, updated_at = :t "
    "FROM unnest(CAST(:topics AS text[]), CAST(:parts AS integer[]), CAST(:expected AS bigint[]), "
    "CAST(:untils AS bigint[])) AS v(topic, part, expected, until_offset) "
    "WHERE f.pipeline = :pipeline AND f.topic = v.topic AND f.partition = v.part AND f.next_offset = v.expected")
_PG_RANGE_STATS = sa.text(
    "UPDATE ob_ranges AS r SET rows_read = v.rows_read, rows_rejected = v.rows_rejected "
    "FROM unnest(CAST(:topics AS text[]), CAST(:parts AS integer[]), CAST(:rows AS bigint[]), "
    "CAST(:rejected AS bigint[])) AS v(topic, part, rows_read, rows_rejected) "
    "WHERE r.pipeline = :pipeline AND r.batch_id = :batch_id AND r.topic = v.topic AND r.partition = v.part")
# A batch's ranges in one statement: at 10,000 partitions SQLAlchemy's insertmanyvalues took 0.3 s of
# client-side parameter rendering (70,000 bound values), a quarter of the plan.
_PG_INSERT_RANGES = sa.text(
    "INSERT INTO ob_ranges (pipeline, batch_id, topic, partition, from_offset, until_offset, frontier_before) "
    "SELECT :pipeline, :batch_id, v.topic, v.part, v.from_offset, v.until_offset, v.frontier_before "
    "FROM unnest(CAST(:topics AS text[]), CAST(:parts AS integer[]), CAST(:froms AS bigint[]), "
    "CAST(:untils AS bigint[]), CAST(:befores AS bigint[])) AS v(topic, part, from_offset, until_offset, frontier_before)")
# New partitions' frontier rows and their audit events, one statement each (a first plan at 10,000
# partitions spent 1.2 s in insertmanyvalues' parameter rendering).
_PG_START_FRONTIER = sa.text(
    "INSERT INTO ob_frontier (pipeline, topic, partition, start_offset, next_offset, updated_at) "
    "SELECT :pipeline, v.topic, v.part, v.start_offset, v.start_offset, :t "
    "FROM unnest(CAST(:topics AS text[]), CAST(:parts AS integer[]), CAST(:offsets AS bigint[])) "
    "AS v(topic, part, start_offset)")
_PG_START_EVENTS = sa.text(
    "INSERT INTO ob_events (pipeline, at, kind, detail) "
    "SELECT :pipeline, :t, 'partition_started', CAST(v.detail AS json) "
    "FROM unnest(CAST(:details AS text[])) WITH ORDINALITY AS v(detail, n) ORDER BY v.n")
_FRONTIER_CAS = (frontier.update()
                 .where(frontier.c.topic == sa.bindparam("b_topic"),
                        frontier.c.partition == sa.bindparam("b_partition"),
                        frontier.c.next_offset == sa.bindparam("b_expected"))
                 .values(next_offset=sa.bindparam("b_until")))
_RANGE_STATS = (ranges.update()
                .where(ranges.c.topic == sa.bindparam("b_topic"), ranges.c.partition == sa.bindparam("b_partition"))
                .values(rows_read=sa.bindparam("b_rows"), rows_rejected=sa.bindparam("b_rejected")))


class Ledger:
    """The offsets ledger of one database (any number of pipelines)."""

    def __init__(self, url: str, create: bool = False):
        """Open the ledger at ``url``; raises ``LedgerMissingError`` unless it exists or ``create``
        (``offsetbatch ledger init``, a pipeline's first run on an empty table, tests)."""
        self.url = url
        self.engine = eng.open_engine(url, create)
        eng.migrate(self.engine)
        self._identity: str | None = None

    @property
    def identity(self) -> str:
        """This ledger's id, made once when it was created (tables record which ledger owns them)."""
        if self._identity is None:
            with self.reading() as conn:
                self._identity = conn.execute(sa.select(ledger_info.c.ledger_id)).scalar_one()
        return self._identity

    def knows(self, name: str) -> bool:
        """Whether this ledger has planned anything for ``pipeline``."""
        with self.reading() as conn:
            return conn.execute(sa.select(batches.c.batch_id).where(batches.c.pipeline == name).limit(1)).first() \
                is not None or summaries.history_totals(conn, name) is not None

    def committed_ids(self, name: str) -> set[int]:
        """Ids of the pipeline's committed batches: the output ids a table may hold. Ids maintenance
        summarized count as committed (only finished batches are summarized): every id between the
        summary's first and last batch that has no row left."""
        with self.reading() as conn:
            ids = set(conn.execute(sa.select(batches.c.batch_id).where(
                batches.c.pipeline == name, batches.c.status == "committed")).scalars())
            done = summaries.history_totals(conn, name)
            if done is not None:
                kept = set(conn.execute(sa.select(batches.c.batch_id).where(
                    batches.c.pipeline == name, batches.c.batch_id.between(done.first_batch_id, done.last_batch_id)))
                    .scalars())
                ids |= set(range(done.first_batch_id, done.last_batch_id + 1)) - kept
            return ids

    def existing_ids(self, name: str, ids: list[int]) -> set[int]:
        """Which of ``ids`` have a batch row (the rest never existed or were summarized)."""
        if not ids:
            return set()
        with self.reading() as conn:
            return set(conn.execute(sa.select(batches.c.batch_id).where(
                batches.c.pipeline == name, batches.c.batch_id.between(min(ids), max(ids)))).scalars()) & set(ids)

    def last_published(self, name: str) -> tuple[int, str | None] | None:
        """(batch id, output path) of the pipeline's newest published batch, ``None`` before the
        first publish: where the ledger says the pipeline's output is."""
        with self.reading() as conn:
            row = conn.execute(sa.select(batches.c.batch_id, batches.c.output_path).where(
                batches.c.pipeline == name, batches.c.status == "committed", batches.c.published_at.is_not(None))
                .order_by(batches.c.batch_id.desc()).limit(1)).first()
            done = summaries.history_totals(conn, name) if row is None else None
        if done is not None:  # everything published was summarized (the newest batch is kept, so rarely)
            return done.last_batch_id, done.last_output_path
        return (row.batch_id, row.output_path) if row else None

    def dispose(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> "Ledger":
        """``with pipeline.ledger() as ledger:`` disposes the engine's connections on exit."""
        return self

    def __exit__(self, *exc) -> None:
        self.dispose()

    @contextmanager
    def lock(self, name: str, timeout_s: float = eng.LOCK_TIMEOUT_S) -> Iterator[sa.Connection]:
        with eng.pipeline_lock(self.engine, name, timeout_s) as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[sa.Connection]:
        with eng.reading(self.engine) as conn:
            yield conn

    # ---- reads -------------------------------------------------------------------------

    @staticmethod
    def frontier(conn: sa.Connection, name: str) -> dict[TopicPartition, int]:
        rows = conn.execute(sa.select(frontier.c.topic, frontier.c.partition, frontier.c.next_offset)
                            .where(frontier.c.pipeline == name))
        return {TopicPartition(r.topic, r.partition): r.next_offset for r in rows}

    def frontier_now(self, name: str) -> dict[TopicPartition, int]:
        with self.reading() as conn:
            return self.frontier(conn, name)

    def _batch(self, conn: sa.Connection, row, read: list | None = None) -> Batch:
        """A batch row as a ``Batch``; ``read``: its range rows when the caller fetched a page's
        ranges at once (``rows.range_rows``), else they are read here."""
        stats = {k: row._mapping[k] for k in ("rows_in", "rows_out", "rows_rejected", "bytes_in", "job_seconds",
                                              "commit_seconds", "attempts", "planned_at", "committed_at",
                                              "published_at", "data_interval_start", "data_interval_end",
                                              "output_path", "committed_attempt", "run_type")}
        owner = row.target_batch_id if row.target_batch_id is not None else row.batch_id
        if read is None:
            read = conn.execute(sa.select(ranges).where(ranges.c.pipeline == row.pipeline, ranges.c.batch_id == owner)
                                .order_by(ranges.c.topic, ranges.c.partition)).all()
        # a replay re-reads its target's ranges; it never moves the frontier
        keep_cas = row.target_batch_id is None
        planned = [OffsetRange(r.topic, r.partition, r.from_offset, r.until_offset,
                               r.frontier_before if keep_cas else None) for r in read]
        return Batch(row.pipeline, row.batch_id, row.kind, row.status, planned, row.run_id, row.dag_id, stats,
                     target_batch_id=row.target_batch_id, superseded_by=row.superseded_by)

    def get_batch(self, name: str, batch_id: int, conn: sa.Connection | None = None) -> Batch:
        if conn is None:
            with self.reading() as c:
                return self.get_batch(name, batch_id, c)
        row = conn.execute(sa.select(batches).where(batches.c.pipeline == name, batches.c.batch_id == batch_id)).first()
        if row is None:
            summaries.refuse_summarized(conn, name, [batch_id])
            raise LedgerError(f"pipeline {name}: batch {batch_id} does not exist in the ledger")
        return self._batch(conn, row)

    def batch_for_run(self, conn: sa.Connection, name: str, run_id: str) -> Batch | None:
        row = conn.execute(
            sa.select(batches).where(batches.c.pipeline == name, batches.c.run_id == run_id,
                                     batches.c.kind == "incremental")
        ).first()
        return self._batch(conn, row) if row else None

    def planned_for_run(self, conn: sa.Connection, name: str, run_id: str) -> list[Batch]:
        """Backfill/replay batches a run planned and has not committed yet (a retried plan reuses them)."""
        rows = conn.execute(
            sa.select(batches).where(batches.c.pipeline == name, batches.c.run_id == run_id,
                                     batches.c.kind != "incremental", batches.c.status == "planned")
            .order_by(batches.c.batch_id)
        ).all()
        return [self._batch(conn, r) for r in rows]

    def pending_replays(self, conn: sa.Connection, name: str) -> dict[int, Batch]:
        """Replay batches planned and not committed yet, by the batch they replay (a new replay of
        one of them would re-read the same offsets on top of it)."""
        rows = conn.execute(sa.select(batches).where(
            batches.c.pipeline == name, batches.c.status == "planned", batches.c.target_batch_id.is_not(None))
            .order_by(batches.c.batch_id)).all()
        return {r.target_batch_id: self._batch(conn, r) for r in reversed(rows)}  # the oldest wins

    def batches_by_id(self, conn: sa.Connection, name: str, ids: list[int]) -> dict[int, Batch]:
        """The batches ``ids`` that exist; raises ``SummarizedBatchError`` if one was summarized
        (a replay of it, or a replay window over its offsets, cannot re-read it)."""
        rows = conn.execute(sa.select(batches).where(batches.c.pipeline == name, batches.c.batch_id.in_(ids))).all()
        found = {r.batch_id: self._batch(conn, r) for r in rows}
        summaries.refuse_summarized(conn, name, [i for i in ids if i not in found])
        return found

    def ranges_in_use(self, conn: sa.Connection, name: str,
                      statuses: tuple[str, ...] = ("planned", "committed")) -> list[tuple[int, str, OffsetRange]]:
        """(batch id, status, range) of the batches that own offsets: no new range may overlap them.
        With ``committed``, the offsets of summarized batches too, as ``committed`` ranges of the
        partition's last summarized batch id: a replay window or a rewind reaching them asks for
        that batch and is refused (``SummarizedBatchError``, ``move_frontier``)."""
        rows = conn.execute(
            sa.select(ranges, batches.c.status)
            .join(batches, sa.and_(batches.c.pipeline == ranges.c.pipeline, batches.c.batch_id == ranges.c.batch_id))
            .where(ranges.c.pipeline == name, batches.c.status.in_(statuses))
            .order_by(ranges.c.topic, ranges.c.partition, ranges.c.from_offset)
        ).all()
        out = [(r.batch_id, r.status, OffsetRange(r.topic, r.partition, r.from_offset, r.until_offset, r.frontier_before))
               for r in rows]
        if "committed" not in statuses:
            return out
        kept = [r for _, status, r in out if status == "committed"]
        out += [(batch_id, "committed", r) for batch_id, r in summaries.summarized_pieces(conn, name, kept)]
        return sorted(out, key=lambda x: (x[2].topic, x[2].partition, x[2].from_offset))

    def superseded_pending(self, conn: sa.Connection, name: str) -> list[Batch]:
        """Batches a rewind superseded whose ranges no new batch has re-read yet, oldest first."""
        rows = conn.execute(
            sa.select(batches).where(batches.c.pipeline == name, batches.c.status == "superseded",
                                     batches.c.superseded_by.is_(None)).order_by(batches.c.batch_id)
        ).all()
        return [self._batch(conn, r) for r in rows]

    @staticmethod
    def frontier_full(conn: sa.Connection, name: str) -> dict[TopicPartition, tuple[int, int]]:
        """(start offset, next offset) per partition."""
        rows = conn.execute(sa.select(frontier).where(frontier.c.pipeline == name))
        return {TopicPartition(r.topic, r.partition): (r.start_offset, r.next_offset) for r in rows}

    def pending(self, conn: sa.Connection, name: str, kind: str = "incremental") -> Batch | None:
        row = conn.execute(
            sa.select(batches).where(batches.c.pipeline == name, batches.c.status == "planned",
                                     batches.c.kind == kind).order_by(batches.c.batch_id)
        ).first()
        return self._batch(conn, row) if row else None

    def list_batches(self, name: str, limit: int = 50, before: int | None = None) -> list[Batch]:
        """Up to ``limit`` batches, newest first, with ``batch_id < before`` if given: the UI's paged
        query (``ledger.queries``), one query for the page and one ``IN`` query for its ranges."""
        with self.reading() as conn:
            rows = page_rows(conn, name, limit, before)
            read = range_rows(conn, name, (r.target_batch_id or r.batch_id for r in rows))
            return [self._batch(conn, r, read.get(r.target_batch_id or r.batch_id, [])) for r in rows]

    def all_ranges(self, name: str, committed_only: bool = True) -> list[tuple[int, OffsetRange]]:
        """Every range of the pipeline with its batch id, ordered by partition and offset. The offsets
        of summarized batches come as ranges of the partition's last summarized batch id
        (``summarized_pieces``), so checks of contiguity still see them covered."""
        with self.reading() as conn:
            q = (sa.select(ranges, batches.c.status)
                 .join(batches, sa.and_(batches.c.pipeline == ranges.c.pipeline, batches.c.batch_id == ranges.c.batch_id))
                 .where(ranges.c.pipeline == name))
            if committed_only:
                q = q.where(batches.c.status == "committed")
            rows = conn.execute(q.order_by(ranges.c.topic, ranges.c.partition, ranges.c.from_offset)).all()
            out = [(r.batch_id, OffsetRange(r.topic, r.partition, r.from_offset, r.until_offset, r.frontier_before))
                   for r in rows]
            kept = [r for (_, r), row in zip(out, rows) if row.status == "committed"]
            out += summaries.summarized_pieces(conn, name, kept)
        return sorted(out, key=lambda x: (x[1].topic, x[1].partition, x[1].from_offset))

    def list_gaps(self, name: str) -> list[tuple[int | None, Gap]]:
        with self.reading() as conn:
            rows = conn.execute(sa.select(gaps).where(gaps.c.pipeline == name).order_by(gaps.c.id)).all()
        return [(r.batch_id, Gap(r.topic, r.partition, r.from_offset, r.until_offset, r.reason)) for r in rows]

    def frontier_rows(self, name: str) -> list[dict]:
        with self.reading() as conn:
            rows = conn.execute(sa.select(frontier).where(frontier.c.pipeline == name)
                                .order_by(frontier.c.topic, frontier.c.partition)).all()
        return [dict(r._mapping) for r in rows]

    def last_request(self, name: str, batch_id: int) -> dict:
        """The detail of the last ``batch_planned`` or ``batch_resumed`` event of batch ``batch_id``:
        what the last run that executes it asked (empty if none)."""
        with self.reading() as conn:
            row = conn.execute(sa.select(events.c.detail).where(
                events.c.pipeline == name, events.c.batch_id == batch_id,
                events.c.kind.in_(("batch_planned", "batch_resumed"))).order_by(events.c.id.desc()).limit(1)).first()
        return dict(row[0] or {}) if row else {}

    def published_writer(self, name: str, output_id: int) -> Batch | None:
        """The committed batch whose rows are output ``output_id``'s now: the batch itself, or the
        last committed replay of it."""
        with self.reading() as conn:
            found = conn.execute(sa.select(sa.func.max(batches.c.batch_id)).where(
                batches.c.pipeline == name, batches.c.status == "committed",
                sa.or_(batches.c.batch_id == output_id, batches.c.target_batch_id == output_id))).scalar()
        return self.get_batch(name, found) if found is not None else None

    def list_events(self, name: str, limit: int = 100) -> list[dict]:
        with self.reading() as conn:
            rows = conn.execute(sa.select(events).where(events.c.pipeline == name)
                                .order_by(events.c.id.desc()).limit(limit)).all()
        return [dict(r._mapping) for r in rows]

    @staticmethod
    def unpublished(conn: sa.Connection, name: str) -> list[tuple[int, int, str]]:
        """(batch id, output folder id, committed attempt) of committed batches whose output is not
        in the table yet, in commit order."""
        rows = conn.execute(
            sa.select(batches.c.batch_id, batches.c.target_batch_id, batches.c.committed_attempt)
            .where(batches.c.pipeline == name, batches.c.status == "committed", batches.c.published_at.is_(None))
            .order_by(batches.c.batch_id)
        ).all()
        return [(r.batch_id, r.target_batch_id or r.batch_id, r.committed_attempt) for r in rows]

    # ---- writes (inside Ledger.lock) -----------------------------------------------------

    @staticmethod
    def event(conn: sa.Connection, name: str, kind: str, detail: dict | None = None,
              batch_id: int | None = None, actor: str | None = None) -> None:
        conn.execute(events.insert().values(pipeline=name, at=eng.now(), kind=kind, actor=actor,
                                            batch_id=batch_id, detail=detail or {}))

    def start_partitions(self, conn: sa.Connection, name: str, starts: dict[TopicPartition, int], policy: str) -> None:
        """Pin the first offset of newly discovered partitions (so ``latest`` is decided once), each
        with its audit event. Two statements (``unnest`` on PostgreSQL, SQLAlchemy's insertmanyvalues
        elsewhere), not two round trips per partition: a first plan at 10,000 partitions took 30 s
        that way on PostgreSQL."""
        if not starts:
            return
        t = eng.now()
        ordered = sorted(starts.items())
        details = [{"topic": tp.topic, "partition": tp.partition, "offset": offset, "policy": policy}
                   for tp, offset in ordered]
        if conn.dialect.name == "postgresql":
            conn.execute(_PG_START_FRONTIER, {"pipeline": name, "t": t, "topics": [tp.topic for tp, _ in ordered],
                                              "parts": [tp.partition for tp, _ in ordered],
                                              "offsets": [offset for _, offset in ordered]})
            conn.execute(_PG_START_EVENTS, {"pipeline": name, "t": t,
                                            "details": [json.dumps(d) for d in details]})
            return
        conn.execute(frontier.insert(), [dict(pipeline=name, topic=tp.topic, partition=tp.partition,
                                              start_offset=offset, next_offset=offset, updated_at=t)
                                         for tp, offset in ordered])
        conn.execute(events.insert(), [dict(pipeline=name, at=t, kind="partition_started", actor=None, batch_id=None,
                                            detail=d) for d in details])

    def skip_gap(self, conn: sa.Connection, name: str, gap: Gap) -> None:
        """Record offsets lost to retention and move the frontier over them, audited, in one
        transaction (on_data_loss: skip). Committed ranges stay contiguous but for gap rows."""
        res = conn.execute(
            frontier.update()
            .where(frontier.c.pipeline == name, frontier.c.topic == gap.topic,
                   frontier.c.partition == gap.partition, frontier.c.next_offset == gap.from_offset)
            .values(next_offset=gap.until_offset, updated_at=eng.now())
        )
        if res.rowcount != 1:
            raise StaleCommitError(f"pipeline {name}: frontier of {gap.topic}/{gap.partition} moved while skipping "
                                   f"gap [{gap.from_offset}, {gap.until_offset}); nothing was changed")
        self.record_gap(conn, name, gap)
        self.event(conn, name, "data_loss_skipped", {"topic": gap.topic, "partition": gap.partition,
                                                         "from": gap.from_offset, "until": gap.until_offset})

    @staticmethod
    def record_gap(conn: sa.Connection, name: str, gap: Gap) -> None:
        conn.execute(gaps.insert().values(pipeline=name, topic=gap.topic, partition=gap.partition,
                                          from_offset=gap.from_offset, until_offset=gap.until_offset,
                                          reason=gap.reason, detected_at=eng.now()))

    @staticmethod
    def drop_gaps_from(conn: sa.Connection, name: str, tp: TopicPartition, offset: int) -> int:
        """Forget skipped offsets at or after ``offset`` (a rewind will read them); trims a gap that straddles it."""
        where = sa.and_(gaps.c.pipeline == name, gaps.c.topic == tp.topic, gaps.c.partition == tp.partition)
        n = conn.execute(gaps.delete().where(where, gaps.c.from_offset >= offset)).rowcount
        n += conn.execute(gaps.update().where(where, gaps.c.from_offset < offset, gaps.c.until_offset > offset)
                          .values(until_offset=offset)).rowcount
        return n

    @staticmethod
    def move_frontier(conn: sa.Connection, name: str, tp: TopicPartition, expected: int, to: int,
                      start_offset: int | None = None) -> None:
        """Set one partition's frontier by compare-and-set (resets); ``start_offset`` moves the first
        planned offset too (a rewind before it). A rewind into summarized history is refused: the
        summarized batches' output could not be superseded (their rows are gone)."""
        span = conn.execute(sa.select(history).where(history.c.pipeline == name, history.c.topic == tp.topic,
                                                     history.c.partition == tp.partition)).first()
        if span is not None and to < expected and to < span.until_offset:
            raise SummarizedBatchError(
                f"pipeline {name}: rewinding {tp} to offset {to} reaches history summarized by ledger maintenance "
                f"(offsets [{span.from_offset}, {span.until_offset}) of batches {span.first_batch_id} to "
                f"{span.last_batch_id}); their ranges are gone, so their output could not be superseded and would be "
                f"read twice. Nothing was changed. Rewind {tp} to offset {span.until_offset} or later.")
        values = {"next_offset": to, "updated_at": eng.now()}
        if start_offset is not None:
            values["start_offset"] = start_offset
        res = conn.execute(frontier.update().where(frontier.c.pipeline == name, frontier.c.topic == tp.topic,
                                                   frontier.c.partition == tp.partition,
                                                   frontier.c.next_offset == expected).values(**values))
        if res.rowcount != 1:
            raise StaleCommitError(f"pipeline {name}: the frontier of {tp} is no longer {expected}; nothing was "
                                   f"changed. Look at 'offsetbatch status {name}' and retry.")

    @staticmethod
    def set_status(conn: sa.Connection, name: str, batch_ids: list[int], status: str, from_status: str) -> None:
        if batch_ids:
            conn.execute(batches.update().where(batches.c.pipeline == name, batches.c.batch_id.in_(batch_ids),
                                                batches.c.status == from_status).values(status=status))

    @staticmethod
    def mark_superseded_by(conn: sa.Connection, name: str, batch_id: int, by: int) -> None:
        conn.execute(batches.update().where(batches.c.pipeline == name, batches.c.batch_id == batch_id)
                     .values(superseded_by=by))

    @staticmethod
    def superseded_by(conn: sa.Connection, name: str, batch_id: int) -> list[int]:
        """Batches whose output ``batch_id`` replaces once it is published."""
        return list(conn.execute(sa.select(batches.c.batch_id).where(
            batches.c.pipeline == name, batches.c.superseded_by == batch_id)).scalars())

    @staticmethod
    def next_batch_id(conn: sa.Connection, name: str) -> int:
        """One past the highest id ever given, summarized ones included: ids never go back (an output
        id names one batch's data forever)."""
        top = conn.execute(sa.select(sa.func.max(batches.c.batch_id)).where(batches.c.pipeline == name)).scalar()
        done = conn.execute(sa.select(history_batches.c.last_batch_id)
                            .where(history_batches.c.pipeline == name)).scalar()
        return max(top or 0, done or 0) + 1

    def insert_batch(self, conn: sa.Connection, name: str, kind: str, planned: list[OffsetRange], *,
                     dag_id: str | None, run_id: str | None, interval: tuple[datetime | None, datetime | None],
                     output_path: str, target: Batch | None = None, lag_at_plan: int | None = None,
                     run_type: str | None = None, actor: str | None = None, reason: str | None = None,
                     allow_more_rejected: bool = False) -> Batch:
        """A new planned batch; a replay (``target``) stores no ranges of its own: it re-reads the target's.
        ``lag_at_plan``: records between the frontier and the log end at planning (the UI's lag history).
        ``allow_more_rejected`` (a replay's): kept in its ``batch_planned`` event for the commit's guard."""
        batch_id = self.next_batch_id(conn, name)
        conn.execute(batches.insert().values(
            pipeline=name, batch_id=batch_id, kind=kind, status="planned", dag_id=dag_id, run_id=run_id,
            data_interval_start=interval[0], data_interval_end=interval[1], planned_at=eng.now(),
            output_path=output_path, target_batch_id=target.batch_id if target else None, lag_at_plan=lag_at_plan,
            run_type=run_type,
        ))
        if target is not None:
            planned = [OffsetRange(r.topic, r.partition, r.from_offset, r.until_offset) for r in target.ranges]
            self.event(conn, name, "batch_planned", {"kind": kind, "run_id": run_id, "replays": target.batch_id,
                                                         "records": sum(r.size for r in planned), "reason": reason,
                                                         "allow_more_rejected": allow_more_rejected},
                       batch_id, actor=actor)
            return Batch(name, batch_id, kind, "planned", planned, run_id, dag_id, target_batch_id=target.batch_id)
        if planned and conn.dialect.name == "postgresql":
            conn.execute(_PG_INSERT_RANGES, {
                "pipeline": name, "batch_id": batch_id, "topics": [r.topic for r in planned],
                "parts": [r.partition for r in planned], "froms": [r.from_offset for r in planned],
                "untils": [r.until_offset for r in planned], "befores": [r.frontier_before for r in planned]})
        elif planned:
            conn.execute(ranges.insert(), [
                dict(pipeline=name, batch_id=batch_id, topic=r.topic, partition=r.partition,
                     from_offset=r.from_offset, until_offset=r.until_offset, frontier_before=r.frontier_before)
                for r in planned
            ])
        self.event(conn, name, "batch_planned", {"kind": kind, "run_id": run_id, "ranges": len(planned),
                                                     "records": sum(r.size for r in planned), "reason": reason},
                   batch_id, actor=actor)
        return Batch(name, batch_id, kind, "planned", list(planned), run_id, dag_id)

    def commit_batch(self, conn: sa.Connection, batch: Batch, stats: dict, range_stats: dict[TopicPartition, dict]) -> None:
        """Mark ``batch`` committed and advance the frontier by compare-and-set, in ``conn``'s transaction.

        Raises ``StaleCommitError`` (and the caller's transaction rolls back, changing nothing) if
        any partition's frontier is not the one the batch was planned from."""
        t = eng.now()
        moves = [{"b_topic": r.topic, "b_partition": r.partition, "b_expected": r.frontier_before,
                  "b_until": r.until_offset} for r in batch.ranges if r.frontier_before is not None]
        pg = conn.dialect.name == "postgresql"
        if moves:  # each row matches at most one primary key: rowcount == moves means every CAS held
            if pg:
                done = conn.execute(_PG_FRONTIER_CAS, {
                    "topics": [m["b_topic"] for m in moves], "parts": [m["b_partition"] for m in moves],
                    "expected": [m["b_expected"] for m in moves], "untils": [m["b_until"] for m in moves],
                    "batch_id": batch.batch_id, "t": t, "pipeline": batch.pipeline}).rowcount
            else:
                done = conn.execute(_FRONTIER_CAS.where(frontier.c.pipeline == batch.pipeline)
                                    .values(batch_id=batch.batch_id, updated_at=t), moves).rowcount
            if done != len(moves):
                self._raise_stale(conn, batch)
        stats_rows = [{"b_topic": tp.topic, "b_partition": tp.partition, "b_rows": st.get("rows"),
                       "b_rejected": st.get("rejected")} for tp, st in range_stats.items()]
        if stats_rows and batch.target_batch_id is None:  # a replay's target keeps its original stats
            if pg:
                conn.execute(_PG_RANGE_STATS, {
                    "topics": [r["b_topic"] for r in stats_rows], "parts": [r["b_partition"] for r in stats_rows],
                    "rows": [r["b_rows"] for r in stats_rows], "rejected": [r["b_rejected"] for r in stats_rows],
                    "pipeline": batch.pipeline, "batch_id": batch.batch_id})
            else:
                conn.execute(_RANGE_STATS.where(ranges.c.pipeline == batch.pipeline, ranges.c.batch_id == batch.batch_id),
                             stats_rows)
        res = conn.execute(
            batches.update().where(batches.c.pipeline == batch.pipeline, batches.c.batch_id == batch.batch_id,
                                   batches.c.status == "planned")
            .values(status="committed", committed_at=t, **stats)
        )
        if res.rowcount != 1:
            raise StaleCommitError(f"pipeline {batch.pipeline}: batch {batch.batch_id} is no longer 'planned'; nothing was committed")
        self.event(conn, batch.pipeline, "batch_committed", {k: v for k, v in stats.items() if v is not None}, batch.batch_id)

    @staticmethod
    def _raise_stale(conn: sa.Connection, batch: Batch) -> None:
        """Name a partition another run moved. Runs inside the failed commit's transaction (rolled
        back after), where the partitions whose CAS did match already show this batch's offsets."""
        rows = {TopicPartition(r.topic, r.partition): r for r in
                conn.execute(sa.select(frontier).where(frontier.c.pipeline == batch.pipeline))}
        now = {tp: row.next_offset for tp, row in rows.items()}

        def moved(r: OffsetRange) -> bool:
            row = rows.get(r.tp)
            mine = row is not None and row.batch_id == batch.batch_id and row.next_offset == r.until_offset
            return not mine and now.get(r.tp) != r.frontier_before

        r = next(r for r in batch.ranges if r.frontier_before is not None and moved(r))
        raise StaleCommitError(
            f"pipeline {batch.pipeline}: batch {batch.batch_id} was planned from offset {r.frontier_before} of "
            f"{r.topic}/{r.partition}, but the frontier is now {now.get(r.tp)}; another run moved it. Nothing was "
            f"committed. Re-run the DAG: the planner will re-plan from the current frontier."
        )

    def restore(self, conn: sa.Connection, name: str, starts: dict[TopicPartition, int],
                frontier_at: dict[TopicPartition, int], gap_rows: list[Gap],
                committed: list[tuple[int, list[OffsetRange], dict, dict[TopicPartition, tuple[int, int]]]],
                output_path: str, actor: str | None) -> None:
        """Write a rebuilt pipeline (``offsetbatch.commit.rebuild``) in ``conn``'s transaction: frontier rows,
        committed batches with their ranges and stats, gap rows, and one audit event."""
        t = eng.now()
        last = {r.tp: batch_id for batch_id, planned, _, _ in committed for r in planned
                if r.until_offset == frontier_at[r.tp]}  # the batch that moved each frontier last
        conn.execute(frontier.insert(), [
            dict(pipeline=name, topic=tp.topic, partition=tp.partition, start_offset=starts[tp],
                 next_offset=frontier_at[tp], batch_id=last.get(tp), updated_at=t) for tp in sorted(frontier_at)])
        for batch_id, planned, stats, per_range in committed:
            conn.execute(batches.insert().values(
                pipeline=name, batch_id=batch_id, kind="incremental", status="committed", planned_at=t,
                committed_at=t, published_at=t, output_path=output_path, **stats))
            conn.execute(ranges.insert(), [
                dict(pipeline=name, batch_id=batch_id, topic=r.topic, partition=r.partition,
                     from_offset=r.from_offset, until_offset=r.until_offset, frontier_before=r.frontier_before,
                     rows_read=per_range[r.tp][0], rows_rejected=per_range[r.tp][1]) for r in planned])
        for gap in gap_rows:
            self.record_gap(conn, name, gap)
        self.event(conn, name, "ledger_rebuilt", {"batches": len(committed), "gaps": len(gap_rows),
                                                     "table": output_path}, actor=actor)

    def count_attempt(self, name: str, batch_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(batches.update().where(batches.c.pipeline == name, batches.c.batch_id == batch_id)
                         .values(attempts=batches.c.attempts + 1))

    @staticmethod
    def mark_published(conn: sa.Connection, name: str, batch_id: int) -> None:
        conn.execute(batches.update().where(batches.c.pipeline == name, batches.c.batch_id == batch_id)
                     .values(published_at=eng.now()))
