"""Manual triggers with the DAG's params (what the Trigger DAG form sends) and the operator CLI's
reset and replay, through real Airflow runs against the real broker.

* every invalid trigger value fails the run before anything changes (ledger dump identical);
* ``mode: replay`` re-executes recorded batches, replacing their output, frontier untouched;
* ``reset`` (form or CLI) is a dry run by default, audited when applied; a forward reset records
  the skipped offsets as gap rows; a rewind supersedes committed batches and the next runs
  replace their output, never duplicating a record.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from offsetbatch.sinks.files import TableLayout

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 10, 12, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _cli(p, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["offsetbatch", "--pipelines", str(p.root), *args], env=p.env, capture_output=True,
                          text=True, timeout=120)


def _two_batches(p):
    for h in range(2):
        p.produce(500, start=BASE + h * H, hours=1, partitions=2)
        out = p.run(None)
        assert out.ok, out.output[-4000:]


def test_invalid_trigger_values_fail_before_anything_changes(make_pipeline):
    p = make_pipeline()
    _two_batches(p)
    digest, files = p.ledger_digest(), p.snapshot()["files"]
    end = p.ledger.frontier_now(p.name)
    topic = p.topic
    cases = [
        ({"mode": "reset", "reset_to": json.dumps({"no-such-topic": {"0": 1}}), "dry_run": False},
         "names topic 'no-such-topic', which this pipeline does not read"),
        ({"mode": "reset", "reset_to": json.dumps({topic: {"7": 1}}), "dry_run": False},
         f"names partition {topic}/7, which does not exist"),
        ({"mode": "reset", "reset_to": json.dumps({topic: {"0": max(end.values()) + 10_000}}), "dry_run": False},
         "is outside the log [earliest 0, end"),
        # one parse error stands for the rest (tests/unit/plan/test_request.py has each); the others need Kafka or the ledger
        ({"mode": "reset", "reset_to": "yesterday", "dry_run": False}, "reset_to 'yesterday' is not an ISO-8601 timestamp"),
        ({"mode": "replay", "batch_ids": "1,99"}, "batch id(s) 99 do not exist"),
        ({"mode": "reset", "reset_to": "earliest", "dry_run": False},  # back over committed batches, no flag
         "Set allow_rewind"),
    ]
    for conf, message in cases:
        out = p.run(None, conf=conf)
        out.assert_failed_with(message)
        assert f"pipeline {p.name}" in out.output
        assert p.ledger_digest() == digest, f"ledger changed by {conf}"
    assert p.snapshot()["files"] == files


def test_replay_by_batch_id_replaces_that_batch_output(make_pipeline):
    p = make_pipeline()
    _two_batches(p)
    frontier = p.ledger.frontier_rows(p.name)
    before = p.snapshot()
    out = p.run(None, conf={"mode": "replay", "batch_ids": "1", "reason": "test replay"})
    assert out.ok, out.output[-4000:]
    [replay] = [b for b in p.ledger.list_batches(p.name) if b.kind == "replay"]
    assert (replay.target_batch_id, replay.status) == (1, "committed")
    assert p.ledger.frontier_rows(p.name) == frontier
    assert p.snapshot()["files"] != before["files"]  # batch 1's files were rewritten...
    report = p.check()  # ...and every record is still there exactly once
    assert report.ok, report.summary()

    res = _cli(p, "--json", "replay", p.name, "--batch", "2")
    assert res.returncode == 0, res.stderr
    shown = json.loads(res.stdout)
    assert shown["replays"] == [2] and shown["command"].startswith(f"airflow dags trigger {p.dag_id} --conf")
    assert _cli(p, "replay", p.name, "--batch", "42").returncode == 4

    # Today's config rejects records batch 2 published (only purchases have an amount): the replay is
    # refused at commit, loudly and at once, and the table keeps batch 2's rows (issue 41, case 7).
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["value"]["required"] = [*cfg["value"]["required"], "amount"]
    p.config_path.write_text(yaml.safe_dump(cfg))
    before = p.snapshot()
    refused = p.run(None, conf={"mode": "replay", "batch_ids": "2", "reason": "stricter schema"})
    refused.assert_failed_with("(replays batch 2, whose output is batch 2's now): it rejects ")
    assert "ReplayRejectsMoreError" in refused.output and "AirflowFailException" in refused.output
    assert "trigger the replay again with allow_more_rejected ticked" in refused.output
    after = p.snapshot()  # the same files, frontier and committed batches; the refused replay stays planned
    assert {k: after[k] for k in ("files", "frontier", "gaps")} == {k: before[k] for k in ("files", "frontier", "gaps")}
    assert [b for b in after["batches"] if b[1] != "planned"] == before["batches"]
    # Asked for, the same pending replay commits: batch 2's output is now the purchases only.
    allowed = p.run(None, conf={"mode": "replay", "batch_ids": "2", "allow_more_rejected": True,
                                "reason": "stricter schema, on purpose"})
    assert allowed.ok, allowed.output[-4000:]
    replays = [b for b in p.ledger.list_batches(p.name) if b.kind == "replay" and b.target_batch_id == 2]
    assert [b.status for b in replays] == ["committed"] and replays[0].stats["rows_rejected"] > 0


def test_reset_dry_run_then_forward_reset_from_the_trigger_form(make_pipeline):
    p = make_pipeline()
    _two_batches(p)
    p.produce(400, start=BASE + 2 * H, hours=1, partitions=2)  # unread
    digest = p.ledger_digest()
    dry = p.run(None, conf={"mode": "reset", "reset_to": "latest"})
    assert dry.ok and "DRY RUN" in dry.output, dry.output[-3000:]
    assert p.ledger_digest() == digest

    old = p.ledger.frontier_now(p.name)
    applied = p.run(None, conf={"mode": "reset", "reset_to": "latest", "dry_run": False, "reason": "skip a bad hour"})
    assert applied.ok, applied.output[-3000:]
    new = p.ledger.frontier_now(p.name)
    assert all(new[tp] > old[tp] for tp in old)
    skipped = {(tp.partition, o) for tp in old for o in range(old[tp], new[tp])}
    gaps = {(g.partition, g.from_offset, g.until_offset, g.reason) for _, g in p.ledger.list_gaps(p.name)}
    assert gaps == {(tp.partition, old[tp], new[tp], "reset") for tp in old}
    [event] = [e for e in p.ledger.list_events(p.name) if e["kind"] == "frontier_reset"]
    assert event["actor"] and event["detail"]["reason"] == "skip a bad hour"

    p.produce(300, start=BASE + 3 * H, hours=1, partitions=2)
    after = p.run(None)
    assert after.ok, after.output[-3000:]
    report = p.check(lost=skipped)  # skipped offsets absent, everything else exactly once
    assert report.ok, report.summary()


def test_cli_reset_rewind_supersedes_batches_and_rereads_them_once(make_pipeline):
    p = make_pipeline()
    _two_batches(p)
    first = p.ledger.get_batch(p.name, 1)
    target = {p.topic: {str(r.partition): r.from_offset + 10 for r in first.ranges}}  # inside batch 1

    refused = _cli(p, "reset", p.name, "--to", json.dumps(target), "--apply")
    assert refused.returncode == 4 and "allow_rewind" in refused.stderr, refused.stderr
    dry = _cli(p, "--json", "reset", p.name, "--to", json.dumps(target), "--allow-rewind")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["superseded"] == [1, 2] and not plan["applied"]
    assert {m["partition"]: m["to"] for m in plan["moves"]} == {r.partition: r.from_offset for r in first.ranges}

    res = _cli(p, "reset", p.name, "--to", json.dumps(target), "--allow-rewind", "--apply", "--reason", "re-read")
    assert res.returncode == 0, res.stderr
    assert {b.batch_id: b.status for b in p.ledger.list_batches(p.name)} == {1: "superseded", 2: "superseded"}
    assert p.ledger.frontier_now(p.name) == {r.tp: r.from_offset for r in first.ranges}

    for _ in range(2):  # the next runs re-read batch 1's and batch 2's ranges whole, replacing their output
        out = p.run(None)
        assert out.ok, out.output[-3000:]
        report = p.check()
        assert not report.duplicates, report.summary()
    batches = {b.batch_id: b for b in p.ledger.list_batches(p.name)}
    assert (batches[1].superseded_by, batches[2].superseded_by) == (3, 4)
    assert [r.from_offset for r in batches[3].ranges] == [r.from_offset for r in first.ranges]
    layout = TableLayout(p.table)
    assert not Path(layout.data(1)).exists() and not Path(layout.data(2)).exists()
    report = p.check()
    assert report.ok, report.summary()

    status = _cli(p, "--json", "status", p.name)
    st = json.loads(status.stdout)[0]
    assert st["lag_records"] == 0
