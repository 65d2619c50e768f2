"""The spark_job task on a long-running Spark Connect server (``spark.connect_conn_id``): hourly
runs land every record exactly once without a spark-submit, and a spark_job task killed mid-write
(the Connect client; the server lives on) is re-run to exactly once (issue 18)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]
BASE = datetime(2026, 11, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)


def test_runs_on_spark_connect_land_exactly_once_through_a_killed_task(make_pipeline, spark_connect_server):
    p = make_pipeline()  # spark.connect_conn_id: the suite's Connect server (the module's mark)
    assert p.cfg.spark.connect_conn_id
    produced = p.produce(2400, start=BASE, hours=3, partitions=2)

    first = p.run(BASE)
    assert first.ok, first.output[-4000:]
    assert "Spark-Submit cmd" not in first.output  # no spark-submit, no JVM started by the run

    killed = p.run(BASE + H, faults="job.kill_during_write")
    assert not killed.ok
    assert "killing the Spark client (the spark_job task) mid-write" in killed.output
    assert spark_connect_server.pid()  # the server survives its client
    rerun = p.run(BASE + H)
    assert rerun.ok, rerun.output[-4000:]
    third = p.run(BASE + 2 * H)
    assert third.ok, third.output[-4000:]

    batches = sorted(p.ledger.list_batches(p.name), key=lambda b: b.batch_id)
    assert [b.status for b in batches] == ["committed"] * 3
    report = p.check()
    assert report.ok, report.summary()
    assert report.rejected_found == len(produced.malformed) > 0
