"""The app (FastAPI) in-process over the monitor's test ledger (``conftest.py``): URLs, status codes
and messages, with authorization stubbed. The page logic itself: ``test_monitor_pages.py``."""

from __future__ import annotations

import re

import pytest


@pytest.fixture
def client(sources, config_folder, monkeypatch):
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    from offsetbatch.monitor import app as app_module

    monkeypatch.setattr(app_module, "_may_read", lambda *a, **k: True)
    app = app_module.create_app(sources)
    app.dependency_overrides[get_user] = lambda: "tester"
    with TestClient(app) as c:
        c.folder = config_folder
        yield c


@pytest.mark.parametrize("path", ["/api/pipelines/orders/batches?before=99999999999999999999999",
                                  "/api/pipelines/orders/batches?before=-3", "/api/pipelines/orders/batches?before=x"])
def test_api_before_must_be_a_positive_64_bit_integer(client, path):
    r = client.get(path)
    assert r.status_code == 422
    assert r.json()["detail"].startswith("invalid query parameter 'before'") and "positive 64-bit integer" in r.json()["detail"]


def test_page_with_a_bad_before_says_why(client):
    r = client.get("/pipelines/orders?before=99999999999999999999999")
    assert r.status_code == 422 and "invalid query parameter &#x27;before&#x27;" in r.text


def test_unknown_pipeline_404_does_not_show_the_config_folder(client):
    for path in ("/api/pipelines/nope", "/pipelines/nope"):
        r = client.get(path)
        assert r.status_code == 404
        assert "no pipeline &#x27;nope&#x27;" in r.text or "no pipeline 'nope'" in r.text
        assert "2 pipeline(s) are configured" in r.text and str(client.folder) not in r.text


def test_run_tab_of_a_dag_that_is_no_pipeline_is_a_404_that_explains_itself(client):
    r = client.get("/api/runs/not_a_dag/manual__1")
    assert r.status_code == 404 and r.json() == {"detail": "no offsetbatch pipeline has DAG id 'not_a_dag'"}
    r = client.get("/runs/not_a_dag/manual__1")
    assert r.status_code == 404 and 'id="not-a-pipeline"' in r.text and "<code>not_a_dag</code>" in r.text
    assert str(client.folder) not in r.text
    assert client.get("/runs/offsetbatch_orders/run_1").status_code == 200
    assert client.get("/dags/not_a_dag").status_code == 404


def test_pipeline_api_and_page_show_the_audit_log(client):
    body = client.get("/api/pipelines/orders").json()
    [reset] = [e for e in body["events"] if e["kind"] == "frontier_reset"]
    assert (reset["actor"], reset["reason"], reset["summary"]) == ("alice", "bad deploy <b>", "reset to latest: t/0 20→35")
    assert all(e["kind"] != "batch_committed" for e in body["events"])
    html = client.get("/pipelines/orders").text
    row = re.search(r'<tr class="event notable"[^>]*data-kind="frontier_reset">(.*?)</tr>', html, re.S).group(1)
    assert "alice" in row and "bad deploy &lt;b&gt;" in row and "t/0 20→35" in row


def test_a_missing_ledger_is_a_503_naming_the_pipeline(client):
    for path in ("/api/pipelines/lost", "/api/pipelines/lost/batches", "/pipelines/lost"):
        r = client.get(path)
        assert r.status_code == 503 and "pipeline lost: cannot read its ledger" in r.text, path
    body = client.get("/api/pipelines").json()  # the other pipeline still shows
    assert [p["name"] for p in body["pipelines"]] == ["orders"] and "pipeline lost" in body["errors"][0]


def test_routes_answer_from_the_pages(client):
    assert [p["name"] for p in client.get("/api/pipelines").json()["pipelines"]] == ["orders"]
    page = client.get("/api/pipelines/orders/batches?limit=2").json()
    assert [b["batch_id"] for b in page["batches"]] == [3, 2] and page["next_before"] == 2
    assert client.get("/api/pipelines/orders/lag?points=2").json()["pipeline"] == "orders"
    run = client.get("/api/runs/offsetbatch_orders/run_2").json()
    assert (run["pipeline"], run["dag_id"], run["run_id"], [b["batch_id"] for b in run["batches"]]) == \
        ("orders", "offsetbatch_orders", "run_2", [3])
    r = client.get("/dags/offsetbatch_orders", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("/pipelines/orders")
    assert client.get("/").status_code == 200 and 'data-pipeline="orders"' in client.get("/").text


def test_a_dag_the_user_may_not_read_is_a_403(client, monkeypatch):
    from offsetbatch.monitor import app as app_module

    monkeypatch.setattr(app_module, "_may_read", lambda user, pipeline, runs=False: False)
    r = client.get("/api/pipelines/orders")
    assert r.status_code == 403 and r.json() == {"detail": "you may not read DAG offsetbatch_orders (pipeline orders)"}
    r = client.get("/api/runs/offsetbatch_orders/run_1")
    assert r.status_code == 403 and r.json() == {"detail": "you may not read runs of DAG offsetbatch_orders"}
    assert client.get("/api/pipelines").json() == {"pipelines": [], "errors": []}


def test_the_pipeline_page_says_what_starts_the_runs_and_when_the_lag_trigger_last_fired(client):
    """The rule and the newest ``run_triggered`` event (what a lag-triggered run's plan writes)."""
    from offsetbatch.ledger import Ledger

    config = client.folder / "orders.yaml"
    assert "trigger" not in client.get("/pipelines/orders").text.split('id="runs"')[1].split("</p>")[0]
    config.write_text(config.read_text() + "airflow: {schedule: null, trigger: {min_records: 500, poll: 5s}}\n")
    runs = client.get("/pipelines/orders").text.split('id="runs"')[1].split("</p>")[0]
    assert "no schedule" in runs and "a run starts when 500 records wait" in runs
    assert "it has not started a run yet" in runs
    with Ledger(f"sqlite:///{client.folder.parent}/ledger.db") as led, led.lock("orders") as conn:
        led.event(conn, "orders", "run_triggered", {"reason": "records", "waiting_records": 812, "partitions": 1,
                                                     "oldest_age_s": None, "fired_at": "2026-11-26T12:00:05+00:00",
                                                     "events": 1, "run_id": "asset_triggered__x"})
    runs = client.get("/pipelines/orders").text.split('id="runs"')[1].split("</p>")[0]
    assert 'data-field="last_fired" data-value="2026-11-26T12:00:05+00:00">2026-11-26 12:00:05<' in runs
    assert 'data-value="records">lag trigger fired (records): 812 records waited in 1 partition(s); ' \
           "run asset_triggered__x<" in runs
    assert client.get("/api/pipelines/orders").json()["status"]["last_fired"]["run_id"] == "asset_triggered__x"
