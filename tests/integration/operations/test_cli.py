"""The operator CLI against a real pipeline: figures match the broker and the ledger; exit codes."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest

from offsetbatch.source.admin import KafkaAdmin

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 4, tzinfo=timezone.utc)


def _cli(p, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["offsetbatch", "--pipelines", str(p.root), *args], env=p.env, capture_output=True, text=True, timeout=120)


def test_status_and_batch_figures_match_broker_and_ledger(make_pipeline):
    p = make_pipeline()
    p.produce(800, start=BASE, hours=1, partitions=2)
    assert p.run(BASE).ok  # logical date BASE reads [BASE, BASE+1h)
    lagging = p.produce(300, start=BASE + timedelta(hours=5), hours=1, partitions=2)  # not read yet

    res = _cli(p, "--json", "status", p.name)
    assert res.returncode == 0, res.stderr
    [st] = json.loads(res.stdout)
    frontier = p.ledger.frontier_now(p.name)
    with KafkaAdmin(p.bootstrap) as kafka:
        ends = {tp: po.latest for tp, po in kafka.offsets(list(frontier)).items()}
    got = {(x["topic"], x["partition"]): x for x in st["partitions"]}
    assert len(got) == 2
    for tp, offset in frontier.items():
        row = got[(tp.topic, tp.partition)]
        assert (row["frontier"], row["log_end"], row["lag_records"]) == (offset, ends[tp], ends[tp] - offset)
        # Oldest unread record was produced with a timestamp of BASE+5h (first of each partition's new records).
        expected_age = time.time() - (BASE + timedelta(hours=5)).timestamp()
        assert abs(row["lag_seconds"] - expected_age) < 120
    assert st["lag_records"] == lagging.total
    assert [b["batch_id"] for b in st["batches"]] == [1] and st["batches"][0]["status"] == "committed"

    res = _cli(p, "--json", "batch", p.name, "1")
    assert res.returncode == 0, res.stderr
    batch = json.loads(res.stdout)
    ledger_batch = p.ledger.get_batch(p.name, 1)
    assert batch["ranges"] == [r.to_dict() for r in ledger_batch.ranges]
    assert batch["rows_out"] == ledger_batch.stats["rows_out"] and batch["output"]["data"].endswith("/batch_id=1")

    human = _cli(p, "status", p.name)
    assert human.returncode == 0 and f"{p.topic}/0" in human.stdout


def _one_line(res: subprocess.CompletedProcess) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr[-3000:]
    return lines[0]


def test_exit_codes(make_pipeline, tmp_path):
    p = make_pipeline()
    assert _cli(p, "batch", p.name, "42").returncode == 3
    assert _cli(p, "status", "no_such_pipeline").returncode == 3
    assert _cli(p, "frobnicate").returncode == 2
    res = _cli(p, "batches", p.name, "--limit", "-5")
    assert res.returncode == 2 and "--limit: must be a positive integer, got '-5'" in res.stderr

    missing = subprocess.run(["offsetbatch", "--pipelines", str(tmp_path / "nope"), "status"], env=p.env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stdout == "" and "does not exist" in _one_line(missing)

    # A ledger that is not there: one line, exit 1, and the read does not create it.
    moved = tmp_path / "moved"
    moved.mkdir()
    gone = tmp_path / "gone.db"
    (moved / f"{p.name}.yaml").write_text(p.config_path.read_text().replace(p.ledger_url, f"sqlite:///{gone}"))
    res = subprocess.run(["offsetbatch", "--pipelines", str(moved), "--json", "status"], env=p.env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and res.stdout == "" and f"pipeline {p.name}: no offsetbatch ledger" in _one_line(res)
    assert not gone.exists()

    (p.root / "broken.yaml").write_text("name: broken\n")
    res = _cli(p, "status")
    assert res.returncode == 2 and "broken.yaml" in res.stderr and "field 'kafka'" in res.stderr


def test_resets_are_audited_and_their_data_loss_shows_in_status(make_pipeline):
    """Two CLI resets against the real broker (no DAG run): the forward one skips the backlog. The
    audit log names who, when and why; status counts the records lost in the last 24 h."""
    p = make_pipeline()
    produced = p.produce(120, start=BASE, hours=1, partitions=2)
    for to, reason in (("earliest", "start from the beginning"), ("latest", "skip the backlog")):
        res = _cli(p, "reset", p.name, "--to", to, "--apply", "--reason", reason)
        assert res.returncode == 0, res.stderr[-3000:]

    res = _cli(p, "--json", "events", p.name)
    assert res.returncode == 0, res.stderr
    resets = [e for e in json.loads(res.stdout) if e["kind"] == "frontier_reset"]
    assert [e["reason"] for e in resets] == ["skip the backlog", "start from the beginning"]  # newest first
    assert all(e["actor"].startswith("cli:") and e["at"] for e in resets)
    assert resets[0]["summary"].startswith("reset to latest: ")

    res = _cli(p, "--json", "status", p.name)
    assert res.returncode == 0, res.stderr
    [st] = json.loads(res.stdout)
    assert (st["gaps_24h"], st["records_lost_24h"]) == (len({part for part, _ in produced.offsets}), produced.total)
    human = _cli(p, "events", p.name)
    assert human.returncode == 0 and "skip the backlog" in human.stdout


def test_doctor_reports_each_check_and_how_to_fix_it(make_pipeline):
    p = make_pipeline()
    p.produce(10, start=BASE, hours=1, partitions=1)
    res = _cli(p, "--json", "doctor")
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert res.returncode == 0, res.stdout
    assert {"java", "pyspark", "spark kafka connector", "airflow connection spark_default",
            "airflow connection kafka_default", f"{p.name}: kafka", f"{p.name}: ledger"} <= set(checks)
    assert "1 partition(s)" in checks[f"{p.name}: kafka"]["detail"]

    dead = {**p.env, "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka",
                                                                "extra": {"bootstrap.servers": "127.0.0.1:1"}})}
    res = subprocess.run(["offsetbatch", "--pipelines", str(p.root), "--json", "doctor"], env=dead,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1
    failed = {c["name"]: c for c in json.loads(res.stdout) if not c["ok"]}
    assert set(failed) == {f"{p.name}: kafka"} and "start the broker" in failed[f"{p.name}: kafka"]["fix"]


@pytest.mark.spark_connect
def test_doctor_checks_the_connect_server_a_connect_pipeline_runs_on(make_pipeline):
    """A pipeline on Spark Connect is checked against its server (a gRPC handshake), not against
    spark_default, which it never uses; a server nothing listens on fails that check alone."""
    from harness import CONNECT_CONN_ID

    p = make_pipeline()
    p.produce(10, start=BASE, hours=1, partitions=1)
    res = _cli(p, "--json", "doctor")
    checks = {c["name"]: c for c in json.loads(res.stdout)}
    assert res.returncode == 0, res.stdout
    name = f"spark connect server of {CONNECT_CONN_ID}"
    assert "airflow connection spark_default" not in checks and checks[name]["detail"].endswith(" answers")
    assert "the Spark Connect server needs on its classpath" in checks[f"{p.name}: spark jars"]["detail"]

    gone = {**p.env, f"AIRFLOW_CONN_{CONNECT_CONN_ID.upper()}": json.dumps(
        {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 1})}
    res = subprocess.run(["offsetbatch", "--pipelines", str(p.root), "--json", "doctor"], env=gone,
                         capture_output=True, text=True, timeout=300)
    failed = {c["name"]: c for c in json.loads(res.stdout) if not c["ok"]}
    assert res.returncode == 1 and set(failed) == {name}
    assert "refused the connection" in failed[name]["detail"] and "spark-connect start" in failed[name]["fix"]
