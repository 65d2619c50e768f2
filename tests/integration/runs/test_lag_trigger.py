"""Runs started by waiting records (issue 42): ``airflow.trigger`` puts a ``LagTrigger`` on the
pipeline's input asset, the real triggerer runs it, the real scheduler (LocalExecutor) creates the
asset-triggered runs, and every record lands once, checked record by record by a reader that is
not the sink's (``verify``: pyarrow over the published manifests). No run is triggered by hand."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from harness import AirflowServices, worker_port

from offsetbatch.dag.input_asset import input_asset_uri
from offsetbatch.ledger.schema import events as ledger_events
from offsetbatch.ops.status import pipeline_status
from offsetbatch.pipeline import Pipeline
from offsetbatch_dev.sample.producer import ensure_topic
from offsetbatch_dev.stack.otlp_receiver import OtlpMetricsReceiver

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
POLL_S = 2
MAX_DELAY_S = 15


@pytest.fixture(scope="module")
def metrics():
    """Where Airflow's metrics go: an OpenTelemetry (OTLP/HTTP) receiver, as a collector would be."""
    receiver = OtlpMetricsReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def services(airflow_env, test_state, metrics):
    """API server, scheduler and triggerer: the path a lag-triggered run takes in production, with
    Airflow's metrics on (OpenTelemetry, to ``metrics``)."""
    s = AirflowServices(airflow_env, test_state / "airflow-lag", port=worker_port(18083), triggerer=True,
                        extra_env=metrics.env())
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


def _fired(p) -> list[dict]:
    """The ``run_triggered`` events the pipeline's runs wrote to the ledger, oldest first."""
    with p.ledger.reading() as conn:
        rows = conn.execute(ledger_events.select().where(ledger_events.c.pipeline == p.name,
                                                         ledger_events.c.kind == "run_triggered")
                            .order_by(ledger_events.c.id)).all()
    return [r.detail for r in rows]


def _watched(make_pipeline, services, suffix: str = "", **overrides):
    """A trigger-only pipeline (count 300, delay 15 s, poll 2 s) whose watcher the triggerer runs."""
    p = make_pipeline(suffix, airflow={"schedule": None, "retries": 0, **overrides.pop("airflow", {}),
                                       "trigger": {"min_records": 300, "max_delay": f"{MAX_DELAY_S}s",
                                                   "poll": f"{POLL_S}s"}}, **overrides)
    ensure_topic(p.bootstrap, p.topic, 2)
    p.register()
    services.airflow("dags", "unpause", p.dag_id)
    # Airflow registers an asset's watchers only for an active, unpaused DAG, when it is parsed: the
    # dag-processor's next parse, here a reserialize.
    services.airflow("dags", "reserialize")
    _wait_for_trigger(services, p.name)
    return p


def _wait_for_trigger(services, name: str, timeout_s: float = 120) -> None:
    """Until the triggerer has started the pipeline's watcher (its log names the trigger)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if f"pipeline {name}: lag trigger watching its waiting records" in services.log("triggerer"):
            return
        time.sleep(0.5)  # polling a log file, not a stand-in for readiness
    raise TimeoutError(f"the triggerer did not start {name}'s lag trigger in {timeout_s}s:\n"
                       f"{services.log('triggerer')[-3000:]}")


def _wait_for_log(services, text: str, times: int = 1, timeout_s: float = 60) -> None:
    """Until the triggerer has logged ``text`` ``times`` times."""
    deadline = time.monotonic() + timeout_s
    while services.log("triggerer").count(text) < times:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the triggerer did not log {text!r} in {timeout_s}s:\n{services.log('triggerer')[-3000:]}")
        time.sleep(0.5)  # polling a log file, not a stand-in for readiness


def test_waiting_records_start_runs_that_drain_a_burst_exactly_once(make_pipeline, services, metrics):
    """A quiet topic starts nothing. A burst of 1,000 records, with batches capped at 400: the
    count rule (300) starts a run, the trigger re-arms once the frontier moved and starts the
    next, and the last 200 (under the count) wait for the delay rule (15 s): three runs, each
    asset-triggered, every record once. Then nothing more runs while nothing waits. The triggerer
    killed (SIGKILL) and started again: the next records still land once. A second pipeline on the
    same Kafka connection, on a topic that stays quiet, shares the trigger's poll of the cluster
    throughout and never starts a run."""
    sibling = _watched(make_pipeline, services, "_sibling")
    p = _watched(make_pipeline, services, caps={"max_records_per_batch": 400})
    _wait_for_log(services, "the shared poll serves 2 pipeline(s)")
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
    # each run kept why the trigger started it; status shows the newest (issue 42: freshness visible)
    fired = _fired(p)
    assert [(f["run_id"], f["reason"]) for f in fired] == \
        [(r["run_id"], e["reason"]) for r, e in zip(sorted(runs, key=lambda r: r["queued_at"]), events)]
    last = pipeline_status(Pipeline.load(p.config_path), p.ledger, None).last_fired
    assert (last["run_id"], last["reason"]) == (fired[-1]["run_id"], "delay")
    _write_timeline(services, p, runs, events_at=_trigger_event_times(services, input_asset_uri(p.name)))
    _quiet_for(services, p.dag_id, polls=4, runs=3)
    # the lag reached Airflow's metrics backend (OpenTelemetry here) from the triggerer: the burst
    # waiting, then nothing (4 polls after the last run); the oldest record's age when the delay
    # rule decided
    lag = metrics.gauge(f"airflow.offsetbatch.{p.name}.lag_records")
    assert lag and max(lag) >= 300 and lag[-1] == 0, (lag, metrics.names())
    assert max(metrics.gauge(f"airflow.offsetbatch.{p.name}.lag_seconds")) >= MAX_DELAY_S, metrics.names()

    services.kill_triggerer()
    p.produce(350, start=datetime.now(timezone.utc), hours=1, partitions=2, malformed_fraction=0.0)
    runs = services.wait_for_runs(p.dag_id, 4, timeout_s=600)
    assert [r["state"] for r in runs] == ["success"] * 4, runs
    report = p.check()
    assert report.ok, report.summary()
    assert sum(b.records for b in p.ledger.list_batches(p.name)) == 1350
    assert services.runs(sibling.dag_id) == []
    # the restarted triggerer groups both again (its log is kept across the restart: a second such line)
    _wait_for_log(services, "the shared poll serves 2 pipeline(s)", times=2)


def test_a_broker_stopped_for_a_minute_fails_no_run_and_the_waiting_records_land_after(make_pipeline, services,
                                                                                      kafka_broker):
    """Records wait (under the count), then the broker stops for 60 s: the trigger cannot read, says
    so in the triggerer's log and backs off, starts nothing and fails nothing. The broker back, the
    records that waited through the outage are past the delay rule: one run lands them once."""
    p = _watched(make_pipeline, services)
    p.produce(120, start=datetime.now(timezone.utc), hours=1, partitions=2, malformed_fraction=0.0)
    kafka_broker.stop(hard=True)
    try:
        time.sleep(60)  # the outage itself: what is under test is the trigger through it
        assert services.runs(p.dag_id) == [], "no run starts while the broker is down"
        warned = [line for line in services.log("triggerer").splitlines()
                  if f"pipeline {p.name}: lag trigger could not read the waiting records" in line]
        assert len(warned) >= 2, services.log("triggerer")[-3000:]  # it kept trying, not once and gave up
        assert "trying again in" in warned[-1]
    finally:
        kafka_broker.start()
    runs = services.wait_for_runs(p.dag_id, 1, timeout_s=300)
    assert [(r["run_type"], r["state"]) for r in runs] == [("asset_triggered", "success")], runs
    [fired] = _fired(p)
    assert (fired["reason"], fired["waiting_records"]) == ("delay", 120), fired
    assert fired["oldest_age_s"] >= MAX_DELAY_S, fired
    report = p.check()
    assert report.ok, report.summary()


def test_an_hourly_run_and_a_lag_triggered_run_at_one_moment_read_the_records_once(make_pipeline, services):
    """The cron and the trigger both want the same records: the pipeline's pool is closed, the
    scheduler creates the hourly run of the last full hour (its data interval holds the records)
    and the trigger fires on the same records while that run waits. Airflow holds the trigger's
    event while the DAG is at ``max_active_runs`` (1); the pool opened, the hourly run reads every
    record in one batch, then the asset-triggered run starts and finds nothing left. Both succeed,
    and the trigger does not fire again."""
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    p = make_pipeline(airflow={"schedule": "0 * * * *", "catchup": False, "start_date": hour.isoformat(),
                               "retries": 0, "trigger": {"min_records": 300, "max_delay": f"{MAX_DELAY_S}s",
                                                         "poll": f"{POLL_S}s"}})
    ensure_topic(p.bootstrap, p.topic, 2)
    p.register()
    services.airflow("pools", "set", p.cfg.pool, "0", "closed: both runs must be queued before either reads")
    p.produce(500, start=hour, hours=1, partitions=2, malformed_fraction=0.0)
    services.airflow("dags", "unpause", p.dag_id)  # the scheduler creates the hourly run at once (no catch-up)
    services.airflow("dags", "reserialize")  # and registers the watcher
    _wait_for_trigger(services, p.name)
    deadline = time.monotonic() + 120
    while not _trigger_event_times(services, input_asset_uri(p.name)):
        assert time.monotonic() < deadline, services.log("triggerer")[-3000:]
        time.sleep(1)  # polling the REST API for the trigger's event
    [hourly] = services.runs(p.dag_id)  # the trigger's run is held back: the hourly one holds the DAG's slot
    assert (hourly["run_type"], hourly["state"]) in {("scheduled", "queued"), ("scheduled", "running")}, hourly
    services.airflow("pools", "set", p.cfg.pool, "1", f"offsetbatch pipeline {p.name}")

    runs = services.wait_for_runs(p.dag_id, 2, timeout_s=300)
    assert sorted((r["run_type"], r["state"]) for r in runs) == [("asset_triggered", "success"),
                                                                 ("scheduled", "success")], runs
    [batch] = p.ledger.list_batches(p.name)
    assert (batch.status, batch.records, batch.run_id) == ("committed", 500, hourly["run_id"])  # the hourly run read
    [fired] = _fired(p)
    assert fired["run_id"] == next(r["run_id"] for r in runs if r["run_type"] == "asset_triggered")
    report = p.check()
    assert report.ok, report.summary()
    _quiet_for(services, p.dag_id, polls=4, runs=2)  # the frontier moved past every record: no new firing
