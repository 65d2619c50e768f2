"""The ledger and the table know each other; a lost ledger is rebuilt from the table's manifests
(logic on a real SQLite ledger and a local files-sink folder; the integration suite deletes a real
pipeline's ledger between DAG runs)."""

from __future__ import annotations

import pytest

from offsetbatch.commit import ownership
from offsetbatch.commit.rebuild import apply_rebuild, plan_rebuild
from offsetbatch.errors import RebuildRefusedError
from offsetbatch.jobspec import Manifest, RangeReport
from offsetbatch.ledger import Ledger, LedgerMissingError, OwnershipError
from offsetbatch.model import TopicPartition
from offsetbatch.sinks.files import FilesSink

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _publish(sink: FilesSink, output_id: int, ranges: list[tuple[int, int, int]]) -> None:
    """A published output as the commit leaves it: a manifest with one range per (partition, from, until)."""
    reports = [RangeReport("t", p, a, b, b - a, 1, a, b - 1, 10 * (b - a)) for p, a, b in ranges]
    rows = sum(r.rows for r in reports)
    Manifest("orders", output_id, reports, rows, rows - len(reports), len(reports), 10 * rows, [], [], 1.5,
             "4.3.0", attempt=f"a{output_id}").save(sink.layout.staging_manifest(output_id, f"a{output_id}"))
    sink.publish(output_id, output_id, f"a{output_id}")


def test_a_missing_ledger_is_never_created_by_opening_it(tmp_path):
    url = f"sqlite:///{tmp_path}/nested/ledger.db"
    with pytest.raises(LedgerMissingError, match=r"no offsetbatch ledger at .*ledger.db: the file .* does not exist"):
        Ledger(url)
    assert not (tmp_path / "nested").exists()
    with Ledger(url, create=True) as ledger:
        first = ledger.identity
    with Ledger(url) as ledger:
        assert ledger.identity == first and len(first) == 36


def test_a_table_refuses_a_ledger_that_does_not_own_it(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"), "orders")
    assert ownership.creates_ledger(sink)
    with Ledger(f"sqlite:///{tmp_path}/a.db", create=True) as owner, \
            Ledger(f"sqlite:///{tmp_path}/b.db", create=True) as other:
        _publish(sink, 1, [(0, 0, 10)])
        # no marker yet, published output the ledger never committed: a lost or replaced ledger
        with pytest.raises(OwnershipError, match=r"holds 1 published batch\(es\) \(1\), but ledger .* has no record "
                                                 r"of this pipeline.*'offsetbatch ledger rebuild orders'"):
            ownership.check("orders", other, sink)
        sink.claim(owner.identity)
        assert not ownership.creates_ledger(sink)
        ownership.check("orders", owner, sink)
        with pytest.raises(OwnershipError, match=f"belongs to ledger {owner.identity} \\(pipeline orders\\), but this "
                                                 f"run uses ledger {other.identity}"):
            ownership.check("orders", other, sink)
        with pytest.raises(OwnershipError, match="pipeline orders\\), but this run .* \\(pipeline billing\\)"):
            ownership.check("billing", owner, sink)


def test_rebuild_restores_batches_frontier_and_gaps_and_claims_the_table(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"), "orders")
    _publish(sink, 1, [(0, 0, 100), (1, 0, 40)])
    _publish(sink, 2, [(0, 100, 180)])
    _publish(sink, 4, [(0, 200, 260), (1, 40, 90)])  # batch 3 was superseded: its offsets [180, 200) skipped
    sink.claim("the-lost-ledger")
    plan = plan_rebuild("orders", sink)
    assert plan.frontier == {T0: 260, T1: 90} and plan.starts == {T0: 0, T1: 0}
    assert [(g.partition, g.from_offset, g.until_offset, g.reason) for g in plan.gaps] == [(0, 180, 200, "rebuild")]

    with Ledger(f"sqlite:///{tmp_path}/new.db", create=True) as ledger:
        apply_rebuild(ledger, sink, plan, actor="test")
        ownership.check("orders", ledger, sink)  # the table now belongs to the rebuilt ledger
        assert ledger.frontier_now("orders") == {T0: 260, T1: 90}
        assert ledger.committed_ids("orders") == {1, 2, 4}
        b4 = ledger.get_batch("orders", 4)
        assert [str(r) for r in b4.ranges] == ["t/0[200,260)", "t/1[40,90)"]
        assert (b4.stats["rows_out"], b4.stats["committed_attempt"]) == (108, "a4")
        assert [(g.from_offset, g.until_offset) for _, g in ledger.list_gaps("orders")] == [(180, 200)]
        assert ledger.list_events("orders")[0]["kind"] == "ledger_rebuilt"
        with pytest.raises(RebuildRefusedError, match="already has batches of this pipeline"):
            apply_rebuild(ledger, sink, plan)


def test_rebuild_refuses_overlapping_output_and_an_empty_table(tmp_path):
    sink = FilesSink.at(str(tmp_path / "table"), "orders")
    with pytest.raises(RebuildRefusedError, match="holds no published batch"):
        plan_rebuild("orders", sink)
    _publish(sink, 1, [(0, 0, 100)])
    _publish(sink, 2, [(0, 90, 150)])
    with pytest.raises(RebuildRefusedError, match=r"batches 1 and 2 both hold offsets \[90, 100\) of t/0"):
        plan_rebuild("orders", sink)


def test_a_new_empty_output_under_a_ledger_that_published_elsewhere_is_refused(tmp_path):
    """The same pipeline and ledger with a new, empty sink path would plan on from the frontier into
    the new place and split the pipeline's data: refused, naming where the ledger published."""
    from offsetbatch.model import OffsetRange

    first = FilesSink.at(str(tmp_path / "table"), "orders")
    moved = FilesSink.at(str(tmp_path / "tables" / "orders"), "orders")
    with Ledger(f"sqlite:///{tmp_path}/ledger.db", create=True) as ledger:
        with ledger.lock("orders") as conn:
            ledger.start_partitions(conn, "orders", {T0: 0}, "earliest")
            batch = ledger.insert_batch(conn, "orders", "incremental", [OffsetRange("t", 0, 0, 10, 0)], dag_id="d",
                                        run_id="r1", interval=(None, None), output_path=first.settings.path)
            ledger.commit_batch(conn, batch, {"committed_attempt": "a1"}, {T0: {"rows": 10}})
        ownership.check("orders", ledger, moved)  # committed, not yet published (a crash): rolled forward, not refused
        _publish(first, 1, [(0, 0, 10)])
        first.claim(ledger.identity)
        with ledger.lock("orders") as conn:
            ledger.mark_published(conn, "orders", 1)
        ownership.check("orders", ledger, first)
        with pytest.raises(OwnershipError, match=r"the table .*/tables/orders holds no batch and no owner mark, but "
                                                 r"ledger .* has published batches of pipeline orders up to batch 1, "
                                                 r"to .*/table\. Nothing was changed"):
            ownership.check("orders", ledger, moved)

