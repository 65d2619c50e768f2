"""Incremental runs through real Airflow, real Spark (spark-submit, local[2]) and the real broker,
checked record by record against what was produced (docs/architecture.md, Invariants 1, 2, 5)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from offsetbatch.source.admin import KafkaAdmin
from offsetbatch_dev import verify

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)


def test_hourly_runs_land_every_record_exactly_once(make_pipeline):
    p = make_pipeline()
    produced = p.produce(3000, start=BASE, hours=3, partitions=3)
    for hour in (0, 1, 2):
        # `airflow dags test DAG L` first (the CLI a user types), then dag.test(L) as the CLI calls it:
        # a manual run with logical date L reads [L, L+1h)
        outcome = p.run(BASE + hour * H, cli=hour == 0)
        assert outcome.ok, outcome.output[-4000:]

    batches = sorted(p.ledger.list_batches(p.name), key=lambda b: b.batch_id)
    assert [b.status for b in batches] == ["committed"] * 3
    # Each run's batch holds exactly its hour's records (cut by record timestamp at interval end).
    per_hour = [produced.by_hour[(BASE + h * H).strftime("%Y-%m-%dT%H:00Z")] for h in range(3)]
    assert [b.records for b in batches] == per_hour
    report = p.check()
    assert report.ok, report.summary()
    assert report.rejected_found == len(produced.malformed) > 0
    assert verify.output_batches(p.table) == Counter({b.batch_id: b.stats["rows_out"] for b in batches})
    # Each commit's asset event, as Airflow stored it, names the target and the batch's exact ranges.
    assert _asset_events(p) == [(f"file://{p.table}", [str(r) for r in b.ranges]) for b in batches]
    # Progress is published to the pipeline's consumer group, readable by standard lag tools.
    with KafkaAdmin(p.bootstrap) as kafka:
        assert kafka.group_offsets(p.cfg.group_id) == p.ledger.frontier_now(p.name)


def _asset_events(p) -> list[tuple[str, list[str]]]:
    """The DAG's asset events in Airflow's metadata database: (asset URI, the ranges of their batches)."""
    engine = sa.create_engine(p.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT a.uri, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                "WHERE e.source_dag_id = :dag ORDER BY e.id"), {"dag": p.dag_id}).all()
    finally:
        engine.dispose()
    out = []
    for uri, extra in rows:
        extra = json.loads(extra) if isinstance(extra, str) else extra
        out.append((uri, [r for b in extra["batches"] for r in b["ranges"]]))
    return out


@pytest.mark.spark_connect  # the claim is the plan's (a committed run is skipped): its jobs on the suite's Connect server
def test_clearing_a_committed_run_changes_nothing(make_pipeline):
    p = make_pipeline()
    p.produce(1200, start=BASE, hours=2)
    first = p.run(BASE)
    second = p.run(BASE + H)
    assert first.ok and second.ok, second.output[-4000:]
    before = p.snapshot()
    assert len(before["batches"]) == 2

    again = p.run(BASE, run_after=first.run_after)  # the same Airflow run, cleared and re-run
    assert again.ok, again.output[-4000:]
    assert "already planned it (committed)" in again.output
    assert p.snapshot() == before
    report = p.check()
    assert report.ok, report.summary()


def test_a_batch_over_a_backlog_announces_every_hour_its_records_span(make_pipeline):
    """Issue 41, case 14: with ``airflow.asset_partitions``, a batch whose records span hours (here a
    run reading to the log end over three hours of backlog) puts each of those hours on its asset
    event, from the record timestamps the job observes; the interval's hour alone missed two."""
    p = make_pipeline("_span", airflow={"asset_partitions": True})
    p.produce(300, start=BASE, hours=3, partitions=2)
    out = p.run(None)  # manual, mode next: no interval, reads to the log end
    assert out.ok, out.output[-4000:]
    keys = ", ".join((BASE + h * H).strftime("%Y-%m-%dT%H:%M:%S") for h in range(3))
    assert f"pipeline {p.name}: asset event with partition(s) {keys}" in out.output, out.output[-3000:]
    assert p.check().ok
