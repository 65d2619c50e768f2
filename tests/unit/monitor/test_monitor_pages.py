"""The page logic (``monitor.pages``) without FastAPI, on the monitor's test ledger (``conftest.py``):
the dicts the JSON API returns and the HTML pages render, and the errors the routes map to statuses."""

from __future__ import annotations

import pytest

from offsetbatch.monitor.pages import Forbidden, NotFound, Pages, Unavailable


@pytest.fixture
def site(sources) -> Pages:
    return Pages(sources)


def test_pipelines_lists_each_readable_pipeline_and_says_which_ledger_cannot_be_read(site):
    listing = site.pipelines()
    [row] = listing["pipelines"]
    assert (row["name"], row["dag_id"], row["state"]) == ("orders", "offsetbatch_orders", "error")  # the gap is data loss
    assert row["lag_seconds"] is None  # Kafka unknown
    assert row["status"]["kafka_error"] == "no Kafka in unit tests"
    assert row["summary"]["last_batch"]["batch_id"] == 3 and row["summary"]["last_24h"]["records_lost"] == 15
    texts = [f["text"] for f in row["findings"]]
    assert any(t.startswith("Kafka unreachable") for t in texts) and any("15 records in 1 gap(s)" in t for t in texts)
    [error] = listing["errors"]
    assert error.startswith("pipeline lost: cannot read its ledger: ") and "orders" not in error


def test_pipelines_leaves_out_what_the_user_may_not_read(sources):
    shown = Pages(sources, lambda pipeline, runs: pipeline.name != "orders").pipelines()
    assert shown["pipelines"] == [] and [e.split(":")[0] for e in shown["errors"]] == ["pipeline lost"]
    assert Pages(sources, lambda pipeline, runs: False).pipelines() == {"pipelines": [], "errors": []}


def test_pipeline_page_pages_history_newest_first(site):
    pipeline = site.pipeline("orders")
    first = site.detail(pipeline, limit=2)
    assert [b["batch_id"] for b in first["page"]["batches"]] == [3, 2]
    assert (first["page"]["total"], first["page"]["before"], first["page"]["next_before"]) == (3, None, 2)
    older = site.detail(pipeline, before=first["page"]["next_before"], limit=2)["page"]
    assert [b["batch_id"] for b in older["batches"]] == [1] and older["next_before"] is None
    api = site.batches(pipeline, before=2, limit=2)  # the batches API: the same page, gaps marked, not located
    assert {k: v for k, v in api.items() if k != "batches"} == {k: v for k, v in older.items() if k != "batches"}
    assert [(b["batch_id"], b["after_gaps"]) for b in api["batches"]] == [(1, [])] and "output" not in api["batches"][0]


def test_pipeline_page_shows_gaps_the_batch_after_them_and_the_audit_log(site):
    d = site.detail(site.pipeline("orders"))
    [gap] = d["gaps"]
    assert (gap["from_offset"], gap["until_offset"], gap["records"], gap["reason"]) == (20, 35, 15, "reset")
    after = {b["batch_id"]: [g["until_offset"] for g in b["after_gaps"]] for b in d["page"]["batches"]}
    assert after == {3: [35], 2: [], 1: []}
    [reset] = [e for e in d["events"] if e["kind"] == "frontier_reset"]
    assert (reset["actor"], reset["reason"], reset["summary"]) == ("alice", "bad deploy <b>", "reset to latest: t/0 20→35")
    assert all(e["kind"] != "batch_committed" for e in d["events"])
    assert [p["batch_id"] for p in d["lag_history"]] == [1, 2, 3] and {p["lag"] for p in d["lag_history"]} == {50}
    assert [p["batch_id"] for p in site.detail(site.pipeline("orders"), points=2)["lag_history"]] == [2, 3]


def test_batches_are_located_at_the_sink_path_they_were_planned_with(site, config_folder):
    root = config_folder.parent
    outputs = {b["batch_id"]: b["output"] for b in site.detail(site.pipeline("orders"))["page"]["batches"]}
    assert outputs == {3: f"{root}/orders/batch_id=3", 2: f"{root}/orders/batch_id=2",
                       1: f"{root}/old_orders/batch_id=1"}
    assert all("output_path" not in b for b in site.detail(site.pipeline("orders"))["page"]["batches"])


def test_the_sources_build_a_pipelines_sink_once(sources):
    pipeline = sources.pipelines()["orders"]
    assert sources.pipelines()["orders"] is pipeline and pipeline.sink is sources.pipelines()["orders"].sink
    assert pipeline.sink.settings.path == pipeline.cfg.sink.path


def test_latest_is_the_pipeline_api_answer(site):
    d = site.latest(site.pipeline("orders"), points=1)
    assert "page" not in d and [b["batch_id"] for b in d["last_batches"]] == [3, 2, 1]
    assert [p["batch_id"] for p in d["lag_history"]] == [3]
    assert set(d) >= {"name", "dag_id", "state", "findings", "lag_seconds", "status", "summary", "gaps", "events"}


def test_lag_answer(site):
    lag = site.lag(site.pipeline("orders"), points=2)
    assert lag["pipeline"] == "orders" and [(p["batch_id"], p["records"], p["lag_after"]) for p in lag["points"]] == \
        [(2, 10, 40), (3, 10, 40)]


def test_run_shows_the_batches_that_run_planned(site, config_folder):
    run = site.run("offsetbatch_orders", "run_1")
    assert (run["pipeline"], run["dag_id"], run["run_id"]) == ("orders", "offsetbatch_orders", "run_1")
    [b] = run["batches"]
    assert b["batch_id"] == 2 and b["output"] == f"{config_folder.parent}/orders/batch_id=2" and b["rejected_output"]
    assert [(r["from_offset"], r["until_offset"]) for r in b["ranges"]] == [(10, 20)]
    pipeline, batches = site.run_batches("offsetbatch_orders", "no_such_run")
    assert pipeline.name == "orders" and batches == []


def test_unknown_pipeline_or_dag_is_not_found_without_server_paths(site, config_folder):
    with pytest.raises(NotFound) as exc:
        site.pipeline("nope")
    assert str(exc.value) == ("no pipeline 'nope': 2 pipeline(s) are configured (OFFSETBATCH_PIPELINES); "
                              "the Pipelines page lists those you may read")
    assert site.run_batches("not_a_dag", "manual__1") == (None, [])
    with pytest.raises(NotFound, match=r"^no offsetbatch pipeline has DAG id 'not_a_dag'$"):
        site.run("not_a_dag", "manual__1")
    with pytest.raises(NotFound, match="no offsetbatch pipeline has DAG id not_a_dag: this tab shows"):
        site.pipeline_of_dag("not_a_dag")
    assert site.pipeline_of_dag("offsetbatch_orders").name == "orders"


def test_a_pipeline_the_user_may_not_read_is_forbidden(sources):
    site = Pages(sources, lambda pipeline, runs: not runs)
    assert site.pipeline("orders").name == "orders"
    with pytest.raises(Forbidden, match=r"^you may not read runs of DAG offsetbatch_orders$"):
        site.run_batches("offsetbatch_orders", "run_1")
    with pytest.raises(Forbidden, match=r"^you may not read DAG offsetbatch_orders \(pipeline orders\)$"):
        Pages(sources, lambda pipeline, runs: False).pipeline("orders")


@pytest.mark.parametrize("read", [lambda s, pipeline: s.detail(pipeline), lambda s, pipeline: s.latest(pipeline),
                                  lambda s, pipeline: s.batches(pipeline), lambda s, pipeline: s.lag(pipeline)])
def test_a_missing_ledger_is_unavailable_naming_the_pipeline(site, read):
    with pytest.raises(Unavailable, match=r"^pipeline lost: cannot read its ledger: "):
        read(site, site.pipeline("lost"))


def test_a_damaged_ledger_is_unavailable_and_hides_no_other_pipeline(site, add_pipeline, tmp_path):
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"not a database" * 100)
    add_pipeline("damaged", damaged)
    with pytest.raises(Unavailable, match=r"^pipeline damaged: cannot read its ledger: "):
        site.detail(site.pipeline("damaged"))
    listing = site.pipelines()
    assert [p["name"] for p in listing["pipelines"]] == ["orders"]
    assert sorted(e.split(":")[0] for e in listing["errors"]) == ["pipeline damaged", "pipeline lost"]


def test_page_logic_needs_no_web_framework():
    import subprocess
    import sys

    code = ("import sys; import offsetbatch.monitor.pages; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette') "
            "or m.startswith('airflow.api_fastapi')); print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
