"""Runs started by waiting records (issue 42): ``airflow.trigger`` puts a ``LagTrigger`` on the
pipeline's input asset, the real triggerer runs it, the real scheduler (LocalExecutor) creates the
asset-triggered runs, and every record lands once, checked record by record by a reader that is
not the sink's (``verify``: pyarrow over the published manifests). No run is triggered by hand."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from harness import AirflowServices, worker_port

from offsetbatch.dag.factory import input_asset_uri
from offsetbatch_dev.sample.producer import ensure_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
POLL_S = 2
MAX_DELAY_S = 15


@pytest.fixture(scope="module")
def services(airflow_env, test_state):
    """API server, scheduler and triggerer: the path a lag-triggered run takes in production."""
    s = AirflowServices(airflow_env, test_state / "airflow-lag", port=worker_port(18083), triggerer=True)
    s.start()
    yield s
    s.stop()


def _quiet_for(services, dag_id: str, polls: int, runs: int) -> None:
    """``polls`` polls of the trigger go by (a negative needs time to pass) and the DAG still has
    ``runs`` runs: nothing was started while nothing waited."""
    time.sleep(polls * POLL_S)
    assert len(services.runs(dag_id)) == runs, services.runs(dag_id)


def _trigger_events(services, uri: str) -> list[dict]:
    """The events the lag trigger put on the pipeline's input asset (their payloads), oldest first."""
    status, body = services.rest("GET", f"/api/v2/assets?uri_pattern={uri}")
    assert status == 200, body
    [asset] = [a for a in body["assets"] if a["uri"] == uri]
    status, body = services.rest("GET", f"/api/v2/assets/events?asset_id={asset['id']}&limit=100")
    assert status == 200, body
    return [e["extra"]["payload"] for e in sorted(body["asset_events"], key=lambda e: (e["timestamp"], e["id"]))]


def _trigger_event_times(services, uri: str) -> list[str]:
    status, body = services.rest("GET", f"/api/v2/assets?uri_pattern={uri}")
    [asset] = [a for a in body["assets"] if a["uri"] == uri]
    status, body = services.rest("GET", f"/api/v2/assets/events?asset_id={asset['id']}&limit=100")
    return sorted(e["timestamp"] for e in body["asset_events"])


def _write_timeline(services, p, runs: list[dict], events_at: list[str]) -> None:
    """Where each lag-triggered run's seconds went (issue 42's per-run cost, on this path: real
    scheduler, LocalExecutor, triggerer, Spark Connect), from Airflow's own records, to
    tests/artifacts/lag-trigger-timeline.json: the trigger's event, the run's queueing and start,
    each task's queueing, start and duration; the run's overhead is its wall time less the Spark
    job's."""
    import json

    from offsetbatch_dev import PROJECT_ROOT

    def at(stamp: str | None) -> datetime | None:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None

    timeline = []
    for run, event in zip(sorted(runs, key=lambda r: r["queued_at"]), events_at):
        status, body = services.rest("GET", f"/api/v2/dags/{p.dag_id}/dagRuns/{run['run_id']}/taskInstances")
        assert status == 200, body
        tasks = {ti["task_id"]: ti for ti in body["task_instances"]}
        start, end = at(run["start_date"]), at(run["end_date"])
        row = {"event": event, "event_to_queued_s": (at(run["queued_at"]) - at(event)).total_seconds(),
               "queued_to_start_s": (start - at(run["queued_at"])).total_seconds(),
               "run_wall_s": (end - start).total_seconds()}
        for task in ("plan", "spark_job", "commit"):
            ti = tasks[task]
            row[f"{task}_queued_s"] = (at(ti["start_date"]) - at(ti["queued_when"])).total_seconds() \
                if ti.get("queued_when") else None
            row[f"{task}_s"] = ti["duration"]
        row["overhead_s"] = round(row["run_wall_s"] - (row["spark_job_s"] or 0), 3)
        timeline.append(row)
    folder = PROJECT_ROOT / "tests" / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lag-trigger-timeline.json").write_text(json.dumps(timeline, indent=1))


def _wait_for_trigger(services, name: str, timeout_s: float = 120) -> None:
    """Until the triggerer has started the pipeline's watcher (its log names the trigger)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if f"pipeline {name}: lag trigger watching its waiting records" in services.log("triggerer"):
            return
        time.sleep(0.5)  # polling a log file, not a stand-in for readiness
    raise TimeoutError(f"the triggerer did not start {name}'s lag trigger in {timeout_s}s:\n"
                       f"{services.log('triggerer')[-3000:]}")


def test_waiting_records_start_runs_that_drain_a_burst_exactly_once(make_pipeline, services):
    """A quiet topic starts nothing. A burst of 1,000 records, with batches capped at 400: the
    count rule (300) starts a run, the trigger re-arms once the frontier moved and starts the
    next, and the last 200 (under the count) wait for the delay rule (15 s): three runs, each
    asset-triggered, every record once. Then nothing more runs while nothing waits. The triggerer
    killed (SIGKILL) and started again: the next records still land once."""
    p = make_pipeline(airflow={"schedule": None, "retries": 0,
                               "trigger": {"min_records": 300, "max_delay": f"{MAX_DELAY_S}s", "poll": f"{POLL_S}s"}},
                      caps={"max_records_per_batch": 400})
    ensure_topic(p.bootstrap, p.topic, 2)
    p.register()
    services.airflow("dags", "unpause", p.dag_id)
    # Airflow registers an asset's watchers only for an active, unpaused DAG, when it is parsed: the
    # dag-processor's next parse, here a reserialize.
    p.register()
    _wait_for_trigger(services, p.name)
    _quiet_for(services, p.dag_id, polls=4, runs=0)

    now = datetime.now(timezone.utc)
    p.produce(1000, start=now, hours=1, partitions=2, malformed_fraction=0.0)
    runs = services.wait_for_runs(p.dag_id, 3, timeout_s=600)
    assert [(r["run_type"], r["state"]) for r in runs] == [("asset_triggered", "success")] * 3, runs
    batches = sorted(p.ledger.list_batches(p.name), key=lambda b: b.batch_id)
    assert [(b.status, b.records) for b in batches] == [("committed", 400), ("committed", 400), ("committed", 200)]
    events = _trigger_events(services, input_asset_uri(p.name))
    assert [e["reason"] for e in events] == ["records", "records", "delay"], [(e["reason"], e["waiting_records"]) for e in events]
    assert events[0]["waiting_records"] >= 300 and events[1]["waiting_records"] == 600, events
    assert events[2]["waiting_records"] == 200 and events[2]["oldest_age_s"] >= MAX_DELAY_S, events
    report = p.check()
    assert report.ok, report.summary()
    _write_timeline(services, p, runs, events_at=_trigger_event_times(services, input_asset_uri(p.name)))
    _quiet_for(services, p.dag_id, polls=4, runs=3)

    services.kill_triggerer()
    p.produce(350, start=datetime.now(timezone.utc), hours=1, partitions=2, malformed_fraction=0.0)
    runs = services.wait_for_runs(p.dag_id, 4, timeout_s=600)
    assert [r["state"] for r in runs] == ["success"] * 4, runs
    report = p.check()
    assert report.ok, report.summary()
    assert sum(b.records for b in p.ledger.list_batches(p.name)) == 1350
