"""When the lag trigger last fired, and why: the run reads it from the asset events that queued it
(``fired_by``), the plan keeps it in the ledger's events (``run_triggered``), and ``status``, the
UI and the audit log show it. The triggerer's real events are in
tests/integration/runs/test_lag_trigger.py; here the context's shape is Airflow's own
(``TriggeringAssetEventsAccessor``) around hand-built events."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from rich.console import Console

from offsetbatch.dag.input_asset import fired_by, input_asset_uri
from offsetbatch.ledger import Ledger, queries
from offsetbatch.ops.report import status_table
from offsetbatch.ops.status import PipelineStatus, last_fired

URI = input_asset_uri("orders")
T0 = datetime(2026, 11, 26, 12, 0, 5, tzinfo=timezone.utc)
RULE = "a run starts when 1,000 records wait (polled every 5s)"


def _event(uri: str, at: datetime, extra: dict):
    return SimpleNamespace(asset=SimpleNamespace(name=uri, uri=uri), source_aliases=[], timestamp=at, extra=extra)


def _payload(reason: str, records: int, age: float | None = None) -> dict:
    return {"from_trigger": True, "payload": {"pipeline": "orders", "reason": reason, "waiting_records": records,
                                              "partitions": 2, "oldest_age_s": age, "rule": RULE}}


def _accessor(*events):
    from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

    return TriggeringAssetEventsAccessor.build(events)


def test_a_run_the_trigger_started_knows_the_newest_firing_and_how_many_it_took():
    later = T0.replace(second=35)
    found = fired_by(_accessor(_event(URI, T0, _payload("records", 1200)),
                               _event(URI, later, _payload("delay", 300, 121.4)),
                               _event("s3://other/table", later, {"rows_out": 5})), URI)
    assert found == {"reason": "delay", "waiting_records": 300, "partitions": 2, "oldest_age_s": 121.4, "rule": RULE,
                     "fired_at": later.isoformat(), "events": 2}


def test_other_runs_were_not_started_by_the_trigger():
    assert fired_by(None, URI) is None  # a scheduled, manual or backfill run
    assert fired_by(_accessor(), URI) is None
    # an event on the input asset that no trigger sent (someone posted it through the REST API)
    assert fired_by(_accessor(_event(URI, T0, {"note": "by hand"})), URI) is None


def test_the_ledger_keeps_each_firing_status_shows_the_newest_and_the_audit_log_leaves_them_out(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path}/ledger.db", create=True)
    try:
        assert last_fired(led, "orders") is None
        for run_id, fired in (("asset_triggered__1", {"reason": "records", "waiting_records": 1200, "partitions": 2,
                                                      "oldest_age_s": None, "fired_at": T0.isoformat(), "events": 1}),
                              ("asset_triggered__2", {"reason": "delay", "waiting_records": 300, "partitions": 1,
                                                      "oldest_age_s": 121.4, "fired_at": None, "events": 3})):
            with led.lock("orders") as conn:
                led.event(conn, "orders", "run_triggered", {**fired, "run_id": run_id})
        newest = last_fired(led, "orders")
        assert newest["run_id"] == "asset_triggered__2" and newest["reason"] == "delay"
        assert newest["at"].startswith(str(datetime.now(timezone.utc).year))  # no fired_at: when the run planned
        assert newest["summary"] == ("lag trigger fired (delay): 300 records waited in 1 partition(s), the oldest "
                                     "121 s; run asset_triggered__2 (3 firings in one run)")
        assert queries.event_rows(led, "orders") == []  # routine: one per lag-triggered run
        assert [e["kind"] for e in queries.event_rows(led, "orders", routine=True)] == ["run_triggered"] * 2
    finally:
        led.dispose()


def test_the_status_table_says_when_the_trigger_last_fired_or_that_it_has_not():
    console = Console(width=250, record=True)
    fired = {"at": T0.isoformat(), "reason": "records",
             "summary": "lag trigger fired (records): 1,200 records waited in 2 partition(s); run asset_triggered__1"}
    console.print(status_table(PipelineStatus("p", "offsetbatch_p", schedule=None, trigger=RULE, last_fired=fired)))
    console.print(status_table(PipelineStatus("q", "offsetbatch_q", schedule=None, trigger=RULE)))
    console.print(status_table(PipelineStatus("r", "offsetbatch_r", schedule="0 * * * *")))
    text = " ".join(console.export_text().split())
    assert f"lag trigger last fired 2026-11-26 12:00:05Z: {fired['summary']}" in text
    assert "lag trigger: has not started a run yet" in text
    assert "runs: schedule 0 * * * * data lost in the last 24 h" in text  # no trigger line without a rule
