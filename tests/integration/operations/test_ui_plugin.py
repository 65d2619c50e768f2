"""The Airflow UI plugin against a real ``airflow api-server`` that loads ``plugins/`` and a ledger
holding real batches from real DAG runs (Spark, the broker), one of them after a data-loss gap.

* JSON API with authentication on (simple auth manager, a password login) and off (all-admins
  mode): unauthenticated requests are refused; the figures equal the ledger's.
* Headless Chromium (Debian's ``chromium``) logs in through Airflow's login page, opens the
  Pipelines page, the pipeline page and a DAG run's "Kafka batches" tab, checks the figures shown
  against the ledger and Kafka, and saves a screenshot of each page.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import quote, urlparse

import pytest
from harness import worker_port

from offsetbatch.paths import local_dir
from offsetbatch_dev import PROJECT_ROOT
from offsetbatch.source.admin import KafkaAdmin

pytestmark = [pytest.mark.integration, pytest.mark.spark_connect]  # Spark jobs on the suite's Connect server
BASE = datetime(2026, 10, 1, tzinfo=timezone.utc)
H = timedelta(hours=1)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def ui_pipeline(airflow_env, kafka_broker, test_state, spark_connect_server):
    """Two hourly batches, a forward reset (gap rows, reason 'reset'), one more batch after the gap,
    then records left unread so the lag is not zero; its jobs on the suite's Connect server."""
    from harness import CONNECT_CONN_ID, Pipeline

    name = "ui_orders"
    root = test_state / "pipelines" / name
    shutil.rmtree(root, ignore_errors=True)
    p = Pipeline(name=name, topic="t-ui-orders", env=airflow_env, root=root, bootstrap=kafka_broker.bootstrap,
                 ledger_url=f"sqlite:///{root}/ledger.db", overrides={"spark": {"connect_conn_id": CONNECT_CONN_ID}})
    p.produce(800, start=BASE, hours=2, partitions=2)
    for hour in (0, 1):
        outcome = p.run(BASE + hour * H)  # logical date L reads [L, L+1h)
        assert outcome.ok, outcome.output[-4000:]
    p.produce(200, start=BASE + 2 * H, hours=1, partitions=2)  # skipped by the reset below: never read
    reset = p.run(None, conf={"mode": "reset", "reset_to": "latest", "dry_run": False, "reason": "ui test"})
    assert reset.ok, reset.output[-4000:]
    p.produce(300, start=BASE + 3 * H, hours=1, partitions=2)
    after = p.run(BASE + 3 * H)
    assert after.ok, after.output[-4000:]
    p.produce(120, start=BASE + 5 * H, hours=1, partitions=2)  # not read yet: the lag
    yield p
    p.ledger.dispose()


def _services(airflow_env, test_state, pipeline, port: int, auth: bool):
    from harness import AirflowServices

    return AirflowServices(airflow_env, test_state / f"ui-api-{port}", port=port, scheduler=False, auth=auth,
                           extra_env={"AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
                                      "OFFSETBATCH_PIPELINES": str(pipeline.config_path)})


@pytest.fixture(scope="module")
def ui_server(airflow_env, test_state, ui_pipeline):
    s = _services(airflow_env, test_state, ui_pipeline, worker_port(18081), auth=True)
    s.start()
    yield s
    s.stop()


def _get(url: str, token: str | None = None) -> tuple[int, dict | str, dict]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *a, **k):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=60) as resp:
            body = resp.read().decode()
            return resp.status, (json.loads(body) if "json" in resp.headers.get("content-type", "") else body), dict(resp.headers)
    except urllib.error.HTTPError as err:
        body = err.read().decode()
        return err.code, (json.loads(body) if body.startswith("{") else body), dict(err.headers)


def _expected(p) -> dict:
    """What the pages must show, from the ledger and Kafka directly."""
    batches = sorted(p.ledger.list_batches(p.name, 1000), key=lambda b: b.batch_id)
    frontier = p.ledger.frontier_now(p.name)
    with KafkaAdmin(p.bootstrap) as kafka:
        ends = {tp: po.latest for tp, po in kafka.offsets(list(frontier)).items()}
    committed = [b for b in batches if b.status == "committed"]
    return {
        "batches": batches, "frontier": frontier, "lag": sum(ends[tp] - frontier[tp] for tp in frontier),
        "rows_out": sum(b.stats["rows_out"] for b in committed),
        "rejected": sum(b.stats["rows_rejected"] for b in committed),
        "gaps": [g for _, g in p.ledger.list_gaps(p.name)],
    }


def test_api_refuses_unauthenticated_requests_and_serves_the_ledger(ui_pipeline, ui_server):
    p, url = ui_pipeline, f"{ui_server.url}/offsetbatch"
    for path in ("/api/pipelines", f"/api/pipelines/{p.name}", f"/api/pipelines/{p.name}/batches",
                 f"/api/pipelines/{p.name}/lag", f"/api/runs/{p.dag_id}/any"):
        status, body, _ = _get(url + path)
        assert status == 401, (path, status, body)
    assert _get(url + "/api/pipelines", token="not-a-jwt")[0] == 403
    assert _get(url + f"/api/pipelines/{p.name}/batches?before=99999999999999999999999")[0] == 401  # login first
    status, _, headers = _get(url + f"/pipelines/{p.name}")  # a page: sent to Airflow's login
    assert status == 303 and "/auth/login" in headers["location"] and quote(f"/offsetbatch/pipelines/{p.name}", safe="") in headers["location"]

    token = ui_server.token()
    exp = _expected(p)
    status, body, _ = _get(url + "/api/pipelines", token)
    assert status == 200, body
    [row] = body["pipelines"]
    assert row["name"] == p.name and row["state"] == "error"  # the reset's gap is data loss within 24 h
    assert {(x["topic"], x["partition"]): x["frontier"] for x in row["status"]["partitions"]} == \
        {(tp.topic, tp.partition): o for tp, o in exp["frontier"].items()}
    assert row["status"]["lag_records"] == exp["lag"] == 120
    assert row["summary"]["last_24h"]["rows_out"] == exp["rows_out"] > 0
    assert row["summary"]["last_24h"]["rows_rejected"] == exp["rejected"] > 0
    assert row["summary"]["last_24h"]["records_lost"] == sum(g.until_offset - g.from_offset for g in exp["gaps"]) == 200

    # Batch history, paged two at a time, is the ledger's, newest first, ranges included.
    seen, before = [], None
    while True:
        status, page, _ = _get(url + f"/api/pipelines/{p.name}/batches?limit=2" + (f"&before={before}" if before else ""), token)
        assert status == 200 and page["total"] == len(exp["batches"])
        seen += page["batches"]
        before = page["next_before"]
        if before is None:
            break
    assert [b["batch_id"] for b in seen] == [b.batch_id for b in reversed(exp["batches"])]
    for shown, b in zip(seen, reversed(exp["batches"])):
        assert [(r["topic"], r["partition"], r["from_offset"], r["until_offset"]) for r in shown["ranges"]] == \
            [(r.topic, r.partition, r.from_offset, r.until_offset) for r in b.ranges]
        assert (shown["status"], shown["rows_out"], shown["run_id"]) == (b.status, b.stats["rows_out"], b.run_id)
    assert [b["batch_id"] for b in seen if b["after_gaps"]] == [exp["batches"][-1].batch_id]

    lag = _get(url + f"/api/pipelines/{p.name}/lag", token)[1]["points"]
    assert [x["batch_id"] for x in lag] == [b.batch_id for b in exp["batches"]]  # every batch is incremental here
    assert all(x["lag"] >= x["records"] for x in lag)

    last = exp["batches"][-1]
    status, run, _ = _get(url + f"/api/runs/{p.dag_id}/{quote(last.run_id, safe='')}", token)
    assert status == 200 and [b["batch_id"] for b in run["batches"]] == [last.batch_id]
    assert run["batches"][0]["output"].endswith(f"/batch_id={last.batch_id}")
    status, body, _ = _get(url + "/api/pipelines/no_such_pipeline", token)
    assert status == 404 and "no pipeline 'no_such_pipeline'" in body["detail"]
    assert "1 pipeline(s) are configured" in body["detail"] and str(p.root) not in body["detail"]

    # A batch id past BIGINT is refused with a reason, not a 500.
    status, body, _ = _get(url + f"/api/pipelines/{p.name}/batches?before=99999999999999999999999", token)
    assert status == 422 and "'before'" in body["detail"] and "positive 64-bit integer" in body["detail"]

    # The run tab of a DAG no pipeline has: 404 for the API, and a 404 page that explains itself.
    status, body, _ = _get(url + "/api/runs/not_a_pipeline/manual__x", token)
    assert status == 404 and body["detail"] == "no offsetbatch pipeline has DAG id 'not_a_pipeline'"
    status, html, _ = _get(url + "/runs/not_a_pipeline/manual__x", token)
    assert status == 404 and 'id="not-a-pipeline"' in html and "<code>not_a_pipeline</code>" in html

    # The audit log: the reset of the fixture, with its reason and who triggered it.
    status, body, _ = _get(url + f"/api/pipelines/{p.name}", token)
    [reset] = [e for e in body["events"] if e["kind"] == "frontier_reset"]
    assert reset["reason"] == "ui test" and reset["actor"] and reset["at"]
    assert reset["summary"].startswith("reset to latest: ")


def test_api_without_authentication_in_all_admins_mode(airflow_env, test_state, ui_pipeline):
    p = ui_pipeline
    server = _services(airflow_env, test_state, p, worker_port(18082), auth=False)
    server.start()
    try:
        status, body, _ = _get(f"{server.url}/offsetbatch/api/pipelines/{p.name}")
        assert status == 200, body
        assert body["status"]["lag_records"] == _expected(p)["lag"]
        assert [b["batch_id"] for b in body["last_batches"]] == \
            sorted((b.batch_id for b in p.ledger.list_batches(p.name)), reverse=True)
        status, html, _ = _get(f"{server.url}/offsetbatch/")
        assert status == 200 and f'data-pipeline="{p.name}"' in html
    finally:
        server.stop()


def _artifacts() -> Path:
    out = Path(os.environ.get("OFFSETBATCH_TEST_ARTIFACTS", local_dir() / "test-artifacts")) / "ui"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def _value(frame, selector: str) -> str:
    return frame.locator(selector).get_attribute("data-value")


def _plugin_frame(page, path_part: str):
    """The plugin's iframe once it shows ``path_part`` (the UI mirrors the iframe's path into its own URL)."""
    page.wait_for_function("p => [...document.querySelectorAll('iframe')].some(f => f.contentWindow.location.pathname.startsWith(p))",
                           arg=path_part, timeout=60_000)
    frame = next(f for f in page.frames if f != page.main_frame and urlparse(f.url).path.startswith(path_part))
    frame.wait_for_load_state("load")
    return frame


def test_browser_pages_show_the_ledger(ui_pipeline, ui_server):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium package"
    p, exp, shots = ui_pipeline, _expected(ui_pipeline), _artifacts()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1600})  # tall: the iframe shows whole pages
            page.goto(f"{ui_server.url}/")
            page.fill("input[name=username]", ui_server.USER)
            page.fill("input[name=password]", ui_server.PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(lambda u: "/auth/" not in u, timeout=60_000)

            # Pipelines page, from the navigation (the home page's asset events link table
            # URIs, which may contain "pipelines" too).
            page.get_by_test_id("nav-sidebar").get_by_role("link", name="Pipelines", exact=True).click()
            frame = _plugin_frame(page, "/offsetbatch/")
            row = f'tr.pipeline[data-pipeline="{p.name}"]'
            frame.wait_for_selector(row)
            assert int(_value(frame, f"{row} [data-field=lag_records]")) == exp["lag"]
            assert frame.locator(f"{row} [data-field=lag_records]").inner_text() == f"{exp['lag']:,}"
            assert int(_value(frame, f"{row} [data-field=rows_out_24h]")) == exp["rows_out"]
            assert frame.locator(f"{row} [data-field=rows_out_24h]").inner_text() == f"{exp['rows_out']:,}"
            assert int(_value(frame, f"{row} [data-field=rejected_24h]")) == exp["rejected"]
            assert int(_value(frame, f"{row} [data-field=last_batch]")) == exp["batches"][-1].batch_id
            assert frame.locator(f"{row} [data-field=state]").inner_text() == "error"
            assert "data loss in the last 24 h: 200 records" in frame.locator(row).inner_text()
            for tp, offset in exp["frontier"].items():
                assert int(_value(frame, f'tr.partitions[data-pipeline="{p.name}"] tr[data-tp="{tp}"] [data-field=frontier]')) == offset
            page.screenshot(path=str(shots / "pipelines.png"), full_page=True)

            # Pipeline page: batch history, gap rows, lag chart.
            frame.click(f'{row} a[href$="/pipelines/{p.name}"]')
            frame = _plugin_frame(page, f"/offsetbatch/pipelines/{p.name}")
            frame.wait_for_selector("table.batches")
            shown = [int(x) for x in frame.locator("table.batches tr[data-batch]").evaluate_all(
                "rows => rows.map(r => r.dataset.batch)")]
            assert shown == [b.batch_id for b in reversed(exp["batches"])]
            for b in exp["batches"]:
                cells = f'table.batches tr[data-batch="{b.batch_id}"]'
                assert int(_value(frame, f"{cells} [data-field=records]")) == b.records
                assert int(_value(frame, f"{cells} [data-field=rows_out]")) == b.stats["rows_out"]
                assert frame.locator(f"{cells} [data-field=status]").inner_text() == b.status
            gap_rows = frame.locator("#gaps tr.gap")
            assert gap_rows.count() == len(exp["gaps"]) == 2
            assert sum(int(x) for x in gap_rows.locator("[data-field=records]").evaluate_all(
                "els => els.map(e => e.dataset.value)")) == 200
            assert frame.locator("table.batches tr.after-gap").evaluate_all("rows => rows.map(r => r.dataset.batch)") == \
                [str(exp["batches"][-1].batch_id)]
            assert frame.locator("svg.chart circle").count() == len(exp["batches"])
            assert frame.locator("svg.chart line.gap").count() == len(exp["gaps"])
            reset = '#events tr[data-kind="frontier_reset"]'
            assert frame.locator(f"{reset} [data-field=reason]").inner_text() == "ui test"
            assert frame.locator(f"{reset} [data-field=actor]").inner_text() not in ("", "—")
            page.screenshot(path=str(shots / "pipeline.png"), full_page=True)

            # The DAG run's tab: the batch that run planned.
            last = exp["batches"][-1]
            page.goto(f"{ui_server.url}/dags/{p.dag_id}/runs/{quote(last.run_id, safe='')}")
            page.get_by_text("Kafka batches", exact=True).click()
            frame = _plugin_frame(page, "/offsetbatch/runs/")
            section = f'section.batch[data-batch="{last.batch_id}"]'
            frame.wait_for_selector(section)
            assert frame.locator("section.batch").count() == 1
            assert int(_value(frame, f"{section} [data-field=rows_out]")) == last.stats["rows_out"]
            assert int(_value(frame, f"{section} [data-field=rows_rejected]")) == last.stats["rows_rejected"]
            for r in last.ranges:
                tp = f'{section} tr[data-tp="{r.topic}/{r.partition}"]'
                assert (int(_value(frame, f"{tp} [data-field=from]")), int(_value(frame, f"{tp} [data-field=until]"))) == \
                    (r.from_offset, r.until_offset)
            href = frame.locator(f"{section} a[data-field=output]").get_attribute("href")
            assert href.startswith("file://") and href.endswith(f"batch_id%3D{last.batch_id}")
            page.screenshot(path=str(shots / "dag_run_tab.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(shots / "failure.png"), full_page=True)  # evidence for the failure report
            (shots / "failure-frames.html").write_text("\n\n".join(f"<!-- {f.url} -->\n{f.content()}" for f in page.frames))
            raise
        finally:
            browser.close()
    assert sorted(f.name for f in shots.iterdir()) == ["dag_run_tab.png", "pipeline.png", "pipelines.png"]
