"""A lost or replaced ledger never makes a run re-read what the table holds (docs/architecture.md,
Ownership): three hourly runs, the ledger deleted, the next run refused with the ways out; a fresh
empty ledger in its place refused too; ``offsetbatch ledger rebuild --apply``; the next run goes on
exactly where the lost ledger stood, checked record by record."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from offsetbatch.ledger import Ledger
from offsetbatch.source.admin import KafkaAdmin

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 10, 20, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _cli(p, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["offsetbatch", "--pipelines", str(p.root), *args], env=p.env, capture_output=True,
                          text=True, timeout=120)


def test_a_lost_ledger_is_refused_then_rebuilt_from_the_table(make_pipeline):
    p = make_pipeline()
    p.produce(1800, start=BASE, hours=4, partitions=2)
    for h in range(3):
        out = p.run(BASE + h * H)
        assert out.ok, out.output[-4000:]
    before = p.snapshot()
    ledger_file = Path(p.ledger_url.removeprefix("sqlite:///"))
    p.ledger.dispose()
    for f in ledger_file.parent.glob(ledger_file.name + "*"):  # the database and its WAL files
        f.unlink()

    lost = p.run(BASE + 3 * H)
    lost.assert_failed_with("no offsetbatch ledger at")
    assert "'offsetbatch ledger rebuild PIPELINE' rebuilds it from the table" in lost.output
    assert not ledger_file.exists(), "a run must not create a ledger over a table that holds batches"
    status = _cli(p, "status", p.name)
    assert status.returncode == 1 and "no offsetbatch ledger at" in status.stderr and not ledger_file.exists()

    init = _cli(p, "--json", "ledger", "init", p.name)  # an empty ledger where the lost one was
    assert init.returncode == 0, init.stderr
    [made] = json.loads(init.stdout)
    assert made["created"] is True
    replaced = p.run(BASE + 3 * H)  # the table's owner marker names the lost ledger
    replaced.assert_failed_with(f"(pipeline {p.name}), but this run uses ledger {made['ledger_id']}")
    assert "'offsetbatch ledger rebuild" in replaced.output
    assert Ledger(p.ledger_url).committed_ids(p.name) == set()  # refused before planning anything

    dry = _cli(p, "--json", "ledger", "rebuild", p.name)
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["batches"] == [1, 2, 3] and plan["gaps"] == [] and plan["applied"] is False
    applied = _cli(p, "ledger", "rebuild", p.name, "--apply")
    assert applied.returncode == 0, applied.stderr
    p.ledger = Ledger(p.ledger_url)
    assert [(b[0], b[1], b[2], b[3]) for b in p.snapshot()["batches"]] == before["batches"]
    def frontier(snap: dict) -> list[tuple]:
        return [(f["topic"], f["partition"], f["start_offset"], f["next_offset"], f["batch_id"]) for f in snap["frontier"]]

    assert frontier(p.snapshot()) == frontier(before)

    resumed = p.run(BASE + 3 * H)
    assert resumed.ok, resumed.output[-4000:]
    report = p.check()  # every produced record exactly once, the rejected ones once, ranges contiguous
    assert report.ok, report.summary()
    with KafkaAdmin(p.bootstrap) as kafka:
        ends = {tp: po.latest for tp, po in kafka.offsets(list(p.ledger.frontier_now(p.name))).items()}
    assert p.ledger.frontier_now(p.name) == ends
