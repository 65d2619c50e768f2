"""Bounded ledger history (``ledger.history``) on SQLite and a real PostgreSQL: old
finished batches folded into per-partition summaries, nothing live touched, ids never reused, a
summarized batch refused by replay, passes idempotent and resumable after a SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from offsetbatch.ledger import Ledger, queries, summaries
from offsetbatch.ledger import history as ledger_history
from offsetbatch.ledger.errors import SummarizedBatchError
from offsetbatch.ledger.schema import batches, events, frontier, gaps, history, history_batches, ranges
from offsetbatch.maintenance import ledger_actions
from offsetbatch.model import Gap, OffsetRange, TopicPartition
from offsetbatch.sinks.maintenance import Horizon
from offsetbatch_dev.verify import contiguity

pytestmark = pytest.mark.integration

NAME = "p"
T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
OLD = 60      # batches 1..60 are old; batch 3 alone reads t/2
CHUNK = 10


def _url(request, tmp_path, tag: str = "") -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/ledger{tag}.db"
    return request.getfixturevalue("postgres").create_database(f"hist_{uuid.uuid4().hex[:8]}")


@pytest.fixture(params=["sqlite", "postgresql"])
def url_of(request, tmp_path):
    """A maker of fresh empty ledger URLs on one backend (a test may need two ledgers)."""
    return lambda tag="": _url(request, tmp_path, tag)


@pytest.fixture
def built(url_of):
    """A ledger with the scenario below, and the horizon splitting its old and young history."""
    ledger = Ledger(url_of(), create=True)
    split = _scenario(ledger)
    yield ledger, split
    ledger.dispose()


def _batch(ledger: Ledger, conn, tps: list[TopicPartition], size: int = 10, run: str = "r"):
    front = ledger.frontier(conn, NAME)
    planned = [OffsetRange(tp.topic, tp.partition, front[tp], front[tp] + size, frontier_before=front[tp]) for tp in tps]
    return ledger.insert_batch(conn, NAME, "incremental", planned, dag_id="d", run_id=run, interval=(None, None),
                               output_path="/out")


def _commit(ledger: Ledger, conn, b, publish: bool = True, size: int = 10) -> None:
    per = {r.tp: {"rows": size - 1, "rejected": 1} for r in b.ranges if r.frontier_before is not None}
    ledger.commit_batch(conn, b, {"rows_in": size * max(len(per), 1), "rows_out": 9, "rows_rejected": len(per),
                                  "committed_attempt": "a"}, per)
    if publish:
        ledger.mark_published(conn, NAME, b.batch_id)


def _incremental(ledger: Ledger, tps: list[TopicPartition], publish: bool = True) -> int:
    with ledger.lock(NAME) as conn:
        b = _batch(ledger, conn, tps)
        _commit(ledger, conn, b, publish)
        return b.batch_id


def _replay(ledger: Ledger, target: int, commit: bool = True) -> int:
    with ledger.lock(NAME) as conn:
        b = ledger.insert_batch(conn, NAME, "replay", [], dag_id="d", run_id=f"replay-{target}", interval=(None, None),
                                output_path="/out", target=ledger.get_batch(NAME, target, conn), reason="fix")
        if commit:
            _commit(ledger, conn, b)
        return b.batch_id


def _scenario(ledger: Ledger) -> datetime:
    """Old: 1..60 on t/0 and t/1 (3 also on t/2: the only batch of t/2, the frontier names it), a gap
    on t/1 after 20, a value_schema event on 5, a reset audited at 30, 61 with a planned replay 62,
    63 with a committed replay 64, 65 committed but unpublished, run_triggered events. Young (after
    the returned horizon): 66..70 and one run_triggered."""
    with ledger.lock(NAME) as conn:
        ledger.start_partitions(conn, NAME, {T0: 0, T1: 0, T2: 0}, "earliest")
    for i in range(1, OLD + 1):
        _incremental(ledger, [T0, T1, T2] if i == 3 else [T0, T1])
        with ledger.lock(NAME) as conn:
            if i % 10 == 0:
                ledger.event(conn, NAME, "run_triggered", {"run_id": f"r{i}", "reason": "lag"})
            if i == 5:
                ledger.event(conn, NAME, "value_schema", {"reader": 1}, 5)
            if i == 20:
                front = ledger.frontier(conn, NAME)[T1]
                ledger.skip_gap(conn, NAME, Gap("t", 1, front, front + 5, "retention"))
            if i == 30:
                ledger.event(conn, NAME, "frontier_reset", {"target": "latest", "reason": "test"}, actor="cli:me")
    assert _incremental(ledger, [T0]) == 61
    assert _replay(ledger, 61, commit=False) == 62
    assert _incremental(ledger, [T0]) == 63
    assert _replay(ledger, 63) == 64
    assert _incremental(ledger, [T1], publish=False) == 65
    time.sleep(0.05)
    split = datetime.now(timezone.utc)
    time.sleep(0.05)
    for _ in range(5):
        _incremental(ledger, [T0, T1])
    with ledger.lock(NAME) as conn:
        ledger.event(conn, NAME, "run_triggered", {"run_id": "young"})
    return split


SUMMARIZED = set(range(1, 61)) - {3} | {63, 64}
KEPT = {3, 61, 62, 65, 66, 67, 68, 69, 70}


def _horizon(split: datetime) -> Horizon:
    return Horizon(now=split, retain_before=split, grace_before=split, ledger_before=split)


def _run(ledger: Ledger, split: datetime, chunk: int = CHUNK) -> dict[str, dict[str, int]]:
    return {a.step: a.apply() for a in ledger_actions.actions(ledger, NAME, _horizon(split), chunk)}


def _dump(ledger: Ledger) -> dict:
    """Every table a pass may touch, as comparable values (no ids of events or times of summaries)."""
    with ledger.reading() as conn:
        def rows(table, order, drop=()):
            return [tuple(v for k, v in r._mapping.items() if k not in drop)
                    for r in conn.execute(sa.select(table).order_by(*order))]
        return {
            "batches": rows(batches, [batches.c.batch_id], ("planned_at", "committed_at", "published_at")),
            "ranges": rows(ranges, [ranges.c.batch_id, ranges.c.topic, ranges.c.partition]),
            "frontier": rows(frontier, [frontier.c.topic, frontier.c.partition], ("updated_at",)),
            "gaps": rows(gaps, [gaps.c.id], ("detected_at",)),
            "history": rows(history, [history.c.topic, history.c.partition],
                            ("updated_at", "first_committed_at", "last_committed_at")),
            "history_batches": rows(history_batches, [history_batches.c.pipeline],
                                    ("updated_at", "first_committed_at", "last_committed_at")),
            "events": sorted(Counter((r.kind, r.batch_id) for r in conn.execute(sa.select(events))).items(),
                             key=repr),
        }


def _expected_spans(ledger: Ledger) -> dict[TopicPartition, tuple]:
    """Per partition, from the ranges before a pass: (from, until, batches, first id, last id, rows, rejected)."""
    out: dict[TopicPartition, list] = {}
    with ledger.reading() as conn:
        for r in conn.execute(sa.select(ranges).where(ranges.c.batch_id.in_(sorted(SUMMARIZED)))):
            out.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
    return {tp: (min(r.from_offset for r in rs), max(r.until_offset for r in rs), len(rs),
                 min(r.batch_id for r in rs), max(r.batch_id for r in rs), sum(r.rows_read for r in rs),
                 sum(r.rows_rejected for r in rs)) for tp, rs in out.items()}


def test_a_pass_summarizes_old_finished_batches_and_keeps_everything_live(built):
    ledger, split = built
    spans = _expected_spans(ledger)
    front = ledger.frontier_rows(NAME)
    kept_before = {b.batch_id: b for b in ledger.list_batches(NAME, 500) if b.batch_id in KEPT}

    done = _run(ledger, split)

    assert done["ledger.summarize-history"]["batches"] == len(SUMMARIZED)
    assert done["ledger.summarize-history"]["chunks"] >= 5  # 70 batches looked at, 10 per transaction
    assert done["ledger.drop-run-events"] == {"events": 6}
    after = {b.batch_id: b for b in ledger.list_batches(NAME, 500)}
    assert set(after) == KEPT
    assert all(after[i].ranges == kept_before[i].ranges and after[i].status == kept_before[i].status for i in KEPT)
    assert [(r.tp, r.from_offset, r.until_offset) for r in after[62].ranges] == \
        [(r.tp, r.from_offset, r.until_offset) for r in kept_before[61].ranges]  # the pending replay's target
    assert ledger.frontier_rows(NAME) == front
    with ledger.reading() as conn:
        got = {tp: (r.from_offset, r.until_offset, r.batches, r.first_batch_id, r.last_batch_id, r.rows_read,
                    r.rows_rejected) for tp, r in summaries.history_spans(conn, NAME).items()}
        totals = summaries.history_totals(conn, NAME)
    assert got == spans and T2 not in got
    assert (totals.batches, totals.replays, totals.first_batch_id, totals.last_batch_id) == (61, 1, 1, 64)
    assert contiguity(ledger, NAME) == []  # summary spans count as covered, with the gap inside t/1's


def test_audit_events_are_kept_and_routine_ones_go(built):
    ledger, split = built
    _run(ledger, split)
    with ledger.reading() as conn:
        kinds = Counter((r.kind, r.batch_id) for r in conn.execute(sa.select(events)))
    assert kinds[("frontier_reset", None)] == 1 and kinds[("data_loss_skipped", None)] == 1
    assert kinds[("partition_started", None)] == 3
    assert kinds[("batch_planned", 64)] == 1 and kinds[("batch_committed", 64)] == 1  # a replay's audit
    assert not any(k[1] in SUMMARIZED - {64} for k in kinds)  # batch_planned/committed, value_schema of 5
    assert kinds[("batch_planned", 3)] == 1 and kinds[("batch_planned", 70)] == 1  # kept batches keep theirs
    assert kinds[("run_triggered", None)] == 1  # the young one
    assert set(ledger_history.AUDIT_EVENTS).isdisjoint(ledger_history.BATCH_EVENTS + ledger_history.RUN_EVENTS)


def test_ids_continue_and_a_summarized_batch_is_refused_by_name(built):
    ledger, split = built
    _run(ledger, split)
    assert _incremental(ledger, [T0]) == 71
    assert 5 in ledger.committed_ids(NAME) and 62 not in ledger.committed_ids(NAME) and ledger.knows(NAME)
    with ledger.reading() as conn:
        with pytest.raises(SummarizedBatchError, match=r"pipeline p: batch\(es\) 5 were summarized by ledger "
                                                       r"maintenance .* between 1 and 64.*t/0 \[0, .*there is no "
                                                       r"replay by offsets.*ledger_retain"):
            ledger.batches_by_id(conn, NAME, [5, 66])
        # a replay window reaching summarized offsets meets them as ranges of a summarized batch
        pieces = [status for i, status, _ in ledger.ranges_in_use(conn, NAME) if i in SUMMARIZED]
        assert pieces and set(pieces) == {"committed"}
    with pytest.raises(SummarizedBatchError, match="batch\\(es\\) 7 were summarized"):
        ledger.get_batch(NAME, 7)
    with pytest.raises(SummarizedBatchError, match=r"rewinding t/0 to offset 5 reaches history summarized"):
        with ledger.lock(NAME) as conn:
            ledger.move_frontier(conn, NAME, T0, ledger.frontier(conn, NAME)[T0], 5)


def test_ids_never_go_back_when_the_newest_batch_was_summarized(url_of):
    """Also: the newest trigger firing is kept however old (``status`` says when the trigger last fired)."""
    with Ledger(url_of(), create=True) as ledger:
        with ledger.lock(NAME) as conn:
            ledger.start_partitions(conn, NAME, {T0: 0}, "earliest")
        _incremental(ledger, [T0]), _incremental(ledger, [T0])
        assert _replay(ledger, 1) == 3  # the newest batch, not named by the frontier
        with ledger.lock(NAME) as conn:  # two old trigger firings: the newest stays (status shows it)
            ledger.event(conn, NAME, "run_triggered", {"run_id": "a"})
            ledger.event(conn, NAME, "run_triggered", {"run_id": "b"})
        time.sleep(0.02)
        _run(ledger, datetime.now(timezone.utc))
        assert {b.batch_id for b in ledger.list_batches(NAME)} == {2}
        assert [e["detail"]["run_id"] for e in ledger.list_events(NAME) if e["kind"] == "run_triggered"] == ["b"]
        with ledger.lock(NAME) as conn:
            assert Ledger.next_batch_id(conn, NAME) == 4


def test_pages_and_status_show_the_summary(built):
    ledger, split = built
    _run(ledger, split)
    seen, before = [], None
    while True:
        page = queries.batch_page(ledger, NAME, before, limit=4)
        seen += [b["batch_id"] for b in page["batches"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == sorted(KEPT, reverse=True) and page["total"] == len(KEPT)
    assert page["summarized"]["batches"] == 61 and page["summarized"]["last_batch_id"] == 64
    line = queries.history_line(page["summarized"])
    assert line.startswith("61 batches before 65 summarized by maintenance (ids 1..64") and "t/1 [0, " in line
    assert queries.summary(ledger, NAME)["summarized"] == page["summarized"]


def test_a_second_pass_and_a_dry_run_change_nothing(built):
    ledger, split = built
    before = _dump(ledger)
    planned = ledger_actions.actions(ledger, NAME, _horizon(split), CHUNK)  # a dry run lists, applies nothing
    assert [a.step for a in planned] == ["ledger.summarize-history", "ledger.drop-run-events"]
    assert planned[0].counts["batches"] == len(SUMMARIZED) and planned[0].counts["replays"] == 1
    assert planned[0].counts["ranges"] == 2 * 59 + 1  # 1..60 but 3 on t/0 and t/1, 63 on t/0
    assert _dump(ledger) == before
    _run(ledger, split)
    once = _dump(ledger)
    assert ledger_actions.actions(ledger, NAME, _horizon(split), CHUNK) == []
    assert _dump(ledger) == once


def test_a_pass_killed_after_a_chunk_is_completed_by_the_next(url_of):
    killed, whole = Ledger(url_of("a"), create=True), Ledger(url_of("b"), create=True)
    try:
        split_k, split_w = _scenario(killed), _scenario(whole)
        script = ("import sys; from datetime import datetime; from offsetbatch.ledger import Ledger; "
                  "from offsetbatch.maintenance import ledger_actions as h; "
                  "from offsetbatch.sinks.maintenance import Horizon; "
                  "t = datetime.fromisoformat(sys.argv[2]); "
                  "[a.apply() for a in h.actions(Ledger(sys.argv[1]), 'p', Horizon(t, t, t, t), 10)]")
        env = {**os.environ, "OFFSETBATCH_FAULTS": f"{ledger_history.FAULT}:kill"}
        proc = subprocess.run([sys.executable, "-c", script, killed.url, split_k.isoformat()], env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == -9, proc.stderr
        with killed.reading() as conn:
            first = summaries.history_totals(conn, NAME)
        assert 0 < first.batches < len(SUMMARIZED) + 1  # one chunk in, complete on its own
        assert contiguity(killed, NAME) == []
        _run(killed, split_k)
        _run(whole, split_w)
        assert _dump(killed) == _dump(whole)
    finally:
        killed.dispose()
        whole.dispose()
