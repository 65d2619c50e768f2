"""Maintenance between real runs (issue 43): hourly runs through Airflow on the real broker and
Spark, then ``offsetbatch maintain`` as an operator runs it (the CLI, its own process), SIGKILLed
in the middle of a step, the next hourly run going on right after it, the next pass finishing what
the killed one began (no intent left), and a replay of a batch whose history the pass had rewritten (its Iceberg snapshot expired
and its files compacted; its files-sink folder compacted). Afterwards every valid record is in the
table exactly once, read by a reader that is not the sink's (pyiceberg's scan; pyarrow over the
table folder), the markers still name every published batch (``ledger rebuild`` reads the same
ranges the ledger holds), and the ledger's audit has the passes.

Each sink's steps are killed one by one, without Spark, in tests/integration/sinks/
test_iceberg_maintenance.py and test_files_maintenance.py; the ledger's history in
tests/integration/ledger/test_ledger_history.py. Here one kill per sink, inside a real
deployment's sequence of runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from harness import HELPER, RUNNER, RunOutcome, sample_sink

from offsetbatch.commit.rebuild import plan_rebuild
from offsetbatch.config import PIPELINES_DIR, load_config
from offsetbatch.pipeline import Pipeline as Loaded
from offsetbatch.sinks.iceberg.maintenance import INTENT_PREFIX
from offsetbatch.sinks.iceberg.rewrite import batch_bounds
from offsetbatch_dev import verify

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]
BASE = datetime(2026, 11, 20, tzinfo=timezone.utc)
H = timedelta(hours=1)
TABLE = "sample.sample_events"
# Tiny retention so one test's few batches are "old": snapshots and attempt folders past 1 s go,
# the newest two snapshots stay; two small files make a compaction.
POLICY = {"retain": "1s", "in_flight_grace": "1s", "min_input_files": 2}
ICEBERG_POLICY = {**POLICY, "retain_snapshots": 2}  # only an Iceberg table keeps snapshots (a files sink refuses it)


def _pipeline(make_pipeline, sink: str):
    if sink == "iceberg":
        sample = yaml.safe_load((PIPELINES_DIR / "iceberg" / "sample_events_iceberg.yaml").read_text())
        p = make_pipeline("_i", value=sample["value"], transform=sample["transform"], maintenance=ICEBERG_POLICY,
                          sink={**sample_sink("iceberg"), "event_time_column": None})
        cfg = yaml.safe_load(p.config_path.read_text())
        cfg["sink"]["warehouse"] = str(p.root / "warehouse")
        p.config_path.write_text(yaml.safe_dump(cfg))
        p.cfg = load_config(p.config_path)
        url = f"sqlite:///{p.root}/ledger.iceberg.db"

        def check():
            return verify.check_iceberg(url, TABLE, p.expected_ids(), p.malformed(), p.ledger, p.name)
        return p, check
    p = make_pipeline("_f", maintenance=POLICY)
    # rejected records past the retention are deleted by design: ids and the ledger are what is checked
    return p, lambda: verify.check(p.table, p.expected_ids(), None, p.ledger, p.name)


def _maintain(p, *args: str, faults: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in p.env.items() if k != "OFFSETBATCH_FAULTS"}
    if faults:
        env["OFFSETBATCH_FAULTS"] = faults
    return subprocess.run([sys.executable, "-m", "offsetbatch.ops.cli", "--pipelines", str(p.config_path), "--json",
                           "maintain", p.name, *args], env=env, capture_output=True, text=True, timeout=300)


def _maintenance_dag_run(p):
    """One run of the pipeline's maintenance DAG (``maintenance_dag``, a DAG file of its own) on the
    suite's warm Airflow runner, as the scheduler would start it."""
    dag_file = Path(p.env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{p.name}_maintenance.py"
    dag_file.write_text("# Airflow DAG under test (the DAG bag's safe mode parses only files naming airflow and dag)\n"
                        "from offsetbatch.dag.factory import maintenance_dag\n\n"
                        f"dag = maintenance_dag({str(p.config_path)!r})\n")
    log = p.root / "runs" / "maintenance-dag.log"
    request = {"dag_file": str(dag_file), "dag_id": p.cfg.maintenance_dag_id, "logical": "none",
               "run_after": datetime.now(timezone.utc).isoformat(), "conf": {}}
    try:
        rc = RUNNER.run(request, p.env, log)
        if rc is None:  # the warm runner is busy or set up otherwise: a process of its own
            proc = subprocess.run([sys.executable, str(HELPER), *(request[k] for k in ("dag_file", "dag_id", "logical",
                                                                                         "run_after")), "{}"],
                                  env=p.env, capture_output=True, text=True, timeout=600)
            log.write_text(proc.stdout + proc.stderr)
            rc = proc.returncode
    finally:
        dag_file.unlink()
    out = log.read_text(errors="replace") if log.exists() else ""
    return RunOutcome(rc == 0 and "state=failed" not in out, out, None)


def _age(p, days: int = 2) -> None:
    """Date every file of the table back ``days`` (the batches of a closed day, past the retention)."""
    then = time.time() - days * 86400
    for path in Path(p.root).rglob("*"):
        if path.is_file() and "runs" not in path.parts:
            os.utime(path, (then, then))


def _state(p) -> list[tuple[str, int]]:
    """Every file under the pipeline's folder (table, warehouse, catalog) with its size."""
    return sorted((str(f.relative_to(p.root)), f.stat().st_size) for f in Path(p.root).rglob("*")
                  if f.is_file() and "runs" not in f.parts and not f.name.startswith("ledger.db"))


def _assert_rewritten(p, sink: str) -> None:
    """Iceberg: batch 2's snapshot expired (its marker archived) and its rows in a compacted file
    holding other batches' rows too; files: batch 2's folder joined into a compaction group."""
    if sink == "iceberg":
        table = verify.iceberg_table(f"sqlite:///{p.root}/ledger.iceberg.db", TABLE)
        summaries = [s.summary.additional_properties for s in table.snapshots()]
        assert "2" not in {s.get("offsetbatch.batch-id") for s in summaries} and "offsetbatch.markers-archive" in table.properties
        holding_2 = [t.file for t in table.scan(row_filter="batch_id = 2").plan_files()]
        assert holding_2 and all(lo < hi for lo, hi in (batch_bounds(table, f) for f in holding_2))
        assert len(table.scan().plan_files()) < 4, "the three hourly batches' files were compacted"
        return
    group = json.loads(Path(p.table, "_offsetbatch", "compactions", "batch_id=1.json").read_text())
    assert {1, 2, 3} <= set(group["members"]) and not Path(p.table, "batch_id=2").exists()


@pytest.mark.parametrize("sink,kill", [("iceberg", "maintain.iceberg_expired"),
                                       ("files", "maintain.files_compaction_swapping")])
def test_runs_go_on_through_a_killed_maintenance_pass_and_a_replay_of_rewritten_history(make_pipeline, sink, kill):
    p, check = _pipeline(make_pipeline, sink)
    p.produce(1200, start=BASE, hours=4)
    for h in range(3):
        out = p.run(BASE + h * H)
        assert out.ok, out.output[-4000:]
    _age(p)

    before = _state(p)
    dry = _maintain(p, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = json.loads(dry.stdout)
    assert planned["dry_run"] and planned["actions"], planned
    assert _state(p) == before, "a dry run changed files"

    killed = _maintain(p, faults=f"{kill}:kill")
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:] + killed.stderr[-3000:]
    out = p.run(BASE + 3 * H)  # the next hourly run does not wait for maintenance to be finished
    assert out.ok, out.output[-4000:]
    report = check()
    assert report.ok, report.summary()

    done = _maintain(p)
    assert done.returncode == 0, done.stderr[-3000:]
    changed = {a["step"]: a["done"] for a in json.loads(done.stdout)["actions"]}
    assert any(v for d in changed.values() for v in (d or {}).values()), changed  # the pass finished the work
    _assert_rewritten(p, sink)  # batch 2's history is no longer what its run wrote
    intents = [f for f in Path(p.root).rglob("*") if f.name.startswith(INTENT_PREFIX) or f.name.startswith("pending-")]
    assert not intents, intents  # the killed pass's half-done step was finished

    out = p.run(None, conf={"mode": "replay", "batch_ids": "2", "reason": "after maintenance"})
    assert out.ok, out.output[-4000:]
    again = _maintenance_dag_run(p)  # the last pass as Airflow runs it: the maintenance DAG's task
    assert again.ok, again.output[-4000:]

    report = check()
    assert report.ok, report.summary()
    pipeline = Loaded.load(p.config_path)
    committed = {b.output_id for b in p.ledger.list_batches(p.name, 100) if b.status == "committed"}
    assert set(pipeline.sink.published_ids()) == committed
    rebuilt = plan_rebuild(p.name, pipeline.sink)
    for batch in p.ledger.list_batches(p.name, 100):
        if batch.status == "committed" and batch.kind != "replay":
            assert sorted((r.topic, r.partition, r.from_offset, r.until_offset) for r in rebuilt.batches[batch.batch_id].ranges) \
                == sorted((r.topic, r.partition, r.from_offset, r.until_offset) for r in batch.ranges)
    passes = [(e["actor"], e["detail"].get("status")) for e in p.ledger.list_events(p.name, 100)
              if e["kind"] == "maintenance"]
    assert [s for _, s in passes].count("done") == 2 and [s for _, s in passes].count("started") == 3  # the killed
    assert passes[0][0] == "dag_test"  # pass left its start; the newest is the DAG run's (its triggering user)
