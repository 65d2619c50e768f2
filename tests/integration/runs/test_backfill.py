"""Airflow backfills (``airflow backfill create``, executed by a real scheduler) and replays:
history re-runs exactly, from the offsets the ledger recorded (docs/architecture.md, What each kind of run reads).

* covered intervals re-execute their recorded batches with today's code, replacing the output;
* never-processed history before the first planned offset gets new, non-overlapping batches;
* intervals after the frontier are refused;
* a backfill and an hourly run at the same time keep the ledger consistent;
* a run with logical date L reads [L, L+1h) whoever created it, so a backfill over hours first run
  by `airflow dags test` or the scheduler replays each hour's batch once;
* two replays of one batch at once replay it once.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import yaml

from offsetbatch.sinks.files import TableLayout

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 10, 5, tzinfo=timezone.utc)
H = timedelta(hours=1)
V2 = "SELECT event_id, kind, user_id, event_time, kafka_partition, kafka_offset, 'v2' AS transform_version FROM records"


def _set_transform(p, sql: str) -> None:
    cfg = yaml.safe_load(p.config_path.read_text())
    cfg["transform"] = {"sql": sql}
    p.config_path.write_text(yaml.safe_dump(cfg))


def _versions(p, batch_id: int) -> set:
    t = ds.dataset(TableLayout(p.table).data(batch_id), format="parquet", partitioning="hive").to_table()
    return set(t.column("transform_version").to_pylist()) if "transform_version" in t.column_names else {None}


def _scheduled_pipeline(make_pipeline, services, **overrides):
    """A pipeline the scheduler may run, with a start date in the future so that unpausing it
    creates no scheduled runs of its own (backfills ignore the start date). It stays paused while
    the test sets it up with in-process runs (``dag.test``), which the scheduler would otherwise
    pick up too."""
    p = make_pipeline(airflow={"retries": 0, "start_date": "2030-01-01T00:00:00+00:00"}, **overrides)
    p.register()
    return p


def _backfill(services, p, start: datetime, end: datetime, via: str = "cli") -> list[dict]:
    """A backfill over logical dates [start, end] (``airflow backfill create``, or the REST API the
    UI's Backfill dialog calls), then wait for its runs."""
    services.airflow("dags", "unpause", p.dag_id)
    before = len(services.runs(p.dag_id))
    if via == "rest":
        status, body = services.rest("POST", "/api/v2/backfills", {
            "dag_id": p.dag_id, "from_date": start.isoformat(), "to_date": end.isoformat(),
            "reprocess_behavior": "completed", "max_active_runs": 2})
        assert status == 200, body
    else:
        services.airflow("backfill", "create", "--dag-id", p.dag_id, "--from-date", start.isoformat(),
                         "--to-date", end.isoformat(), "--reprocess-behavior", "completed")
    hours = int((end - start) / H) + 1
    runs = services.wait_for_runs(p.dag_id, before + hours)
    return [r for r in runs if r["run_id"].startswith("backfill__")]


def _plan_log(services, p, run_id: str) -> str:
    home = Path(services.env["AIRFLOW_HOME"]) / "logs" / f"dag_id={p.dag_id}" / f"run_id={run_id}" / "task_id=plan"
    return "\n".join(f.read_text() for f in sorted(home.rglob("*.log")))


def _hourly(p, hours: int, start: datetime) -> None:
    """One run per produced hour, each reading to the log end (runs without a logical date)."""
    for h in range(hours):
        p.produce(600, start=start + h * H, hours=1, partitions=2)
        out = p.run(None)
        assert out.ok, out.output[-4000:]


def _hours_by_logical_date(p, services, how: str) -> None:
    """Three hourly runs at logical dates BASE, BASE+1h, BASE+2h, each reading [L, L+1h): manual runs
    (whose Airflow data interval is [L-1h, L)), the first by the command ``airflow dags test DAG L``,
    the others by ``DAG.test`` in the suite's warm runner (what that command calls, without a new
    Airflow process each); or created by the scheduler (scheduled runs: catch-up from the start
    date to the end date)."""
    for h in range(3):
        p.produce(600, start=BASE + h * H, hours=1, partitions=2)
    if how == "dags test":
        for h in range(3):
            # run_after now, as the command sets it: a backfill that reuses a run keeps its run_after,
            # and the scheduler starts no run before its run_after
            out = p.run(BASE + h * H, run_after=datetime.now(timezone.utc), cli=h == 0)
            assert out.ok, out.output[-4000:]
        return
    services.airflow("dags", "unpause", p.dag_id)
    runs = services.wait_for_runs(p.dag_id, 3)
    assert sorted((r["logical_date"][:19], r["run_type"], r["state"]) for r in services.runs(p.dag_id)) == \
        [((BASE + h * H).isoformat()[:19], "scheduled", "success") for h in range(3)], runs


@pytest.mark.parametrize("how", ["dags test", "scheduler"])
def test_backfill_over_hours_first_run_by_logical_date_replays_each_batch_once(make_pipeline, airflow_services, how):
    """The runs at BASE and BASE+1h already exist, so Airflow's backfill clears and re-runs them
    (they keep their run ids; their run type becomes backfill). Each must replay exactly its own
    hour's batch with the new transform, whatever interval Airflow recorded for the old run."""
    # The DAG's schedule ends at BASE+2h. With catch-up (scheduler) unpausing creates the three runs;
    # without it unpausing creates none (its latest interval is past the end date), and `dags test`
    # runs at dates inside [start, end] execute their tasks (before the start date they would not).
    p = make_pipeline("_sch" if how == "scheduler" else "_dt", airflow={
        "retries": 0, "start_date": BASE.isoformat(), "end_date": (BASE + 2 * H).isoformat(), "catchup": how == "scheduler"})
    p.register()
    _hours_by_logical_date(p, airflow_services, how)
    before = {b.batch_id: b for b in p.ledger.list_batches(p.name)}
    assert sorted((b.batch_id, b.status) for b in before.values()) == [(1, "committed"), (2, "committed"),
                                                                          (3, "committed")]
    hour_of = {b.batch_id: b.stats["data_interval_start"].replace(tzinfo=timezone.utc) for b in before.values()}
    assert [hour_of[i] for i in (1, 2, 3)] == [BASE, BASE + H, BASE + 2 * H]  # one hour per logical date
    frontier = p.ledger.frontier_rows(p.name)

    _set_transform(p, V2)  # the transform bug was fixed: re-run the first two hours
    airflow_services.airflow("dags", "unpause", p.dag_id)
    airflow_services.airflow("backfill", "create", "--dag-id", p.dag_id, "--from-date", BASE.isoformat(),
                             "--to-date", (BASE + H).isoformat(), "--reprocess-behavior", "completed")
    airflow_services.wait_for_runs(p.dag_id, 3)
    runs = airflow_services.runs(p.dag_id)
    backfilled = sorted((r["logical_date"][:19], r["state"]) for r in runs if r["run_type"] == "backfill")
    assert backfilled == [(BASE.isoformat()[:19], "success"), ((BASE + H).isoformat()[:19], "success")], runs

    replays = [b for b in p.ledger.list_batches(p.name) if b.kind == "replay"]
    assert sorted((b.target_batch_id, b.status, b.stats["run_type"]) for b in replays) == \
        [(1, "committed", "backfill"), (2, "committed", "backfill")], p.describe()
    for b in replays:  # same ranges as the recorded batch
        assert [(r.topic, r.partition, r.from_offset, r.until_offset) for r in b.ranges] == \
               [(r.topic, r.partition, r.from_offset, r.until_offset) for r in before[b.target_batch_id].ranges]
    assert _versions(p, 1) == {"v2"} and _versions(p, 2) == {"v2"} and _versions(p, 3) == {None}
    assert p.ledger.frontier_rows(p.name) == frontier  # the frontier did not move
    report = p.check()
    assert report.ok, report.summary()


def test_two_replays_of_one_batch_at_once_replay_it_once(make_pipeline):
    """A manual replay of batch 1 started twice at the same moment (as a backfill and a replay
    trigger would): the second run joins the first one's pending replay instead of replaying the
    batch on top of it, both runs succeed, nothing is left planned, every record once."""
    p = make_pipeline()
    p.produce(800, start=BASE, hours=1, partitions=2)
    assert p.run(BASE).ok
    p.register()  # two `dags test` processes would otherwise race to insert the new DAG's Asset row
    _set_transform(p, V2)
    replay = {"mode": "replay", "batch_ids": "1", "reason": "two at once"}
    # Two distinct Airflow runs: `dags test` without a logical date replaces any other such run of the
    # DAG (Airflow matches them by their empty logical date), so each gets a date of its own; a
    # replay by batch id reads the same offsets whatever its date.
    at = [BASE + 10 * H + i * H for i in range(2)]
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(
            lambda logical: p.run(logical, run_after=logical + 100 * H, conf=replay, own_process=True), at))
    assert all(o.ok for o in outcomes), [o.output[-3000:] for o in outcomes if not o.ok]
    logs = "".join(o.output for o in outcomes)
    assert "executes it too (unchanged) instead of replaying batch 1 again" in logs, logs[-4000:]
    batches = p.ledger.list_batches(p.name)
    assert sorted((b.kind, b.target_batch_id, b.status) for b in batches) == \
        [("incremental", None, "committed"), ("replay", 1, "committed")], p.describe()
    assert _versions(p, 1) == {"v2"}
    assert not list(Path(TableLayout(p.table).meta, "attempts").glob("batch_id=*/attempt=*/_manifest.json"))
    report = p.check()
    assert report.ok, report.summary()


def test_backfill_of_never_processed_history_plans_new_batches(make_pipeline, airflow_services):
    # The pipeline starts reading at BASE+2h; the two hours before are history nobody read.
    p = _scheduled_pipeline(make_pipeline, airflow_services, starting_policy=(BASE + 2 * H).isoformat())
    for h in range(4):
        p.produce(500, start=BASE + h * H, hours=1, partitions=2)
    first = p.run(None)
    assert first.ok, first.output[-4000:]
    [incremental] = p.ledger.list_batches(p.name)
    frontier = p.ledger.frontier_rows(p.name)
    history = {po for po in p.produced if po[1] < incremental.ranges[po[0]].from_offset}
    assert history, "the starting policy left history unread"
    assert not p.check().ok  # before the backfill, the first two hours are missing

    runs = _backfill(airflow_services, p, BASE, BASE + 2 * H)  # hours 0, 1 (history) and 2 (covered)
    assert [r["state"] for r in runs] == ["success"] * 3, runs
    batches = p.ledger.list_batches(p.name)
    kinds = sorted((b.kind, b.status) for b in batches)
    assert kinds == [("backfill", "committed"), ("backfill", "committed"), ("incremental", "committed"),
                     ("replay", "committed")], kinds
    assert p.ledger.frontier_rows(p.name) == frontier
    report = p.check()  # every record of all four hours exactly once, no overlapping ranges
    assert report.ok, report.summary()


def test_backfill_after_the_frontier_is_refused(make_pipeline, airflow_services):
    p = _scheduled_pipeline(make_pipeline, airflow_services)
    _hourly(p, 1, BASE)
    p.produce(400, start=BASE + 3 * H, hours=1, partitions=2)  # produced, not read yet
    snapshot = p.snapshot()

    [run] = _backfill(airflow_services, p, BASE + 3 * H, BASE + 3 * H, via="rest")
    assert run["state"] == "failed"
    log = _plan_log(airflow_services, p, run["run_id"])
    assert "reaches records the pipeline has not read yet" in log and f"{p.topic}/0 offsets [" in log, log[-3000:]
    assert p.snapshot() == snapshot


def test_backfill_while_the_hourly_run_is_triggered(make_pipeline, airflow_services):
    p = _scheduled_pipeline(make_pipeline, airflow_services)
    _hourly(p, 2, BASE)
    p.produce(600, start=BASE + 2 * H, hours=1, partitions=2)  # the next hour, for the hourly run

    services = airflow_services
    services.airflow("dags", "unpause", p.dag_id)
    before = len(services.runs(p.dag_id))
    services.airflow("backfill", "create", "--dag-id", p.dag_id, "--from-date", BASE.isoformat(),
                     "--to-date", (BASE + H).isoformat(), "--reprocess-behavior", "completed")
    out = services.airflow("dags", "trigger", p.dag_id, "-o", "json").stdout  # the hourly run, during the backfill
    triggered = json.loads([line for line in out.splitlines() if line.startswith("[{")][-1])[0]["dag_run_id"]
    runs = services.wait_for_runs(p.dag_id, before + 3)
    new = [r for r in runs if r["run_id"].startswith("backfill__") or r["run_id"] == triggered]
    assert len(new) == 3, runs
    assert all(r["state"] == "success" for r in runs), runs

    batches = p.ledger.list_batches(p.name)
    assert sorted(b.target_batch_id for b in batches if b.kind == "replay") == [1, 2]
    assert all(b.status == "committed" for b in batches), p.describe()
    report = p.check()  # includes: incremental ranges contiguous up to the frontier, nothing overlapping
    assert report.ok, report.summary()


DOWNSTREAM = '''\
from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

with DAG(dag_id={dag_id!r}, schedule=PartitionedAssetTimetable(assets=Asset(name={uri!r}, uri={uri!r})),
         catchup=False, tags=["offsetbatch-test"]):
    @task
    def hour(dag_run=None):
        print("processing partition", dag_run.partition_key)

    hour()
'''


def test_asset_partitions_trigger_a_partition_aware_dag_with_each_batchs_hour(make_pipeline, airflow_services):
    """With ``airflow.asset_partitions``, the commit's asset event carries each batch's hour as a
    partition key (Airflow 3.3's partitioned assets), next to the batch in ``extra``; a DAG
    scheduled with ``PartitionedAssetTimetable`` on the pipeline's asset gets one run per hour, with
    that hour as its ``partition_key``, created by the real scheduler."""
    from offsetbatch.pipeline import Pipeline

    p = make_pipeline("_parts", airflow={"retries": 0, "start_date": BASE.isoformat(), "asset_partitions": True})
    uri = Pipeline(p.cfg).sink.asset_uri()
    downstream = f"downstream_{p.name}"
    dag_file = p.dag_file.parent / f"{downstream}.py"
    dag_file.write_text(DOWNSTREAM.format(dag_id=downstream, uri=uri))
    try:
        p.register()
        airflow_services.airflow("dags", "unpause", downstream)
        p.produce(400, start=BASE, hours=2, partitions=2)
        for h in range(2):
            out = p.run(BASE + h * H)
            assert out.ok, out.output[-4000:]
            key = (BASE + h * H).strftime("%Y-%m-%dT%H:%M:%S")
            assert f"asset event with partition(s) {key}" in out.output
        runs = airflow_services.wait_for_runs(downstream, 2)
        assert sorted((r["partition_key"], r["run_type"], r["state"]) for r in runs) == \
            [(f"2026-10-05T0{h}:00:00", "asset_triggered", "success") for h in range(2)], runs
        # the event's extra still names the batch and its offsets
        status, body = airflow_services.rest("GET", f"/api/v2/assets/events?source_dag_id={p.dag_id}&limit=10")
        assert status == 200, body
        events = sorted(body["asset_events"], key=lambda e: e["partition_key"])
        assert [(e["partition_key"], e["extra"]["batch_ids"], e["extra"]["batches"][0]["ranges"] != [])
                for e in events] == [("2026-10-05T00:00:00", [1], True), ("2026-10-05T01:00:00", [2], True)], events
    finally:
        dag_file.unlink(missing_ok=True)
