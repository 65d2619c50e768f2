"""OpenLineage: a real DAG run with Airflow's OpenLineage provider (its file transport) reports,
for plan, spark_job and commit, the Kafka topic with the exact offsets the batch read and the
schema the job parsed, the sink's table and the rejected records with their row counts, and the
pipeline and batch; the Spark job is handed the parent-job settings. Checked field by field
against the ledger, not against the code's own output."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
BASE = datetime(2026, 11, 9, tzinfo=timezone.utc)


def test_a_run_reports_offsets_schema_table_and_row_counts_to_openlineage(make_pipeline, tmp_path):
    p = make_pipeline()
    events_file = tmp_path / "openlineage.jsonl"
    p.env = {**p.env, "AIRFLOW__OPENLINEAGE__DISABLED": "False", "AIRFLOW__OPENLINEAGE__NAMESPACE": "offsetbatch-test",
             "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file),
                                                            "append": True})}
    p.produce(300, start=BASE, hours=1, malformed_fraction=0.05)
    out = p.run(BASE)
    assert out.ok, out.output[-4000:]
    # the spark_job task handed the job the parent-job settings (the Spark provider's own injection)
    assert "spark.openlineage.parentJobName" in out.output and f"{p.dag_id}.spark_job" in out.output

    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    complete = {e["job"]["name"].removeprefix(f"{p.dag_id}."): e for e in events
                if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith(f"{p.dag_id}.")}
    assert set(complete) >= {"plan", "spark_job", "commit"}, sorted(complete)

    [batch] = p.ledger.list_batches(p.name, 10)
    ranges = sorted(({"batchId": 1, "topic": r.topic, "partition": r.partition, "from": r.from_offset,
                      "until": r.until_offset} for r in batch.ranges), key=lambda r: r["partition"])
    schema = [{"name": n, "type": t} for n, t in (f.strip().split(" ", 1) for f in p.cfg.value.schema_ddl.split(","))]
    for task in ("plan", "spark_job", "commit"):
        event = complete[task]
        [topic] = event["inputs"]
        assert (topic["namespace"], topic["name"]) == (f"kafka://{p.bootstrap}", p.topic), task
        assert sorted(topic["inputFacets"]["offsetbatch_offsets"]["ranges"], key=lambda r: r["partition"]) == ranges
        assert [{"name": f["name"], "type": f["type"]} for f in topic["facets"]["schema"]["fields"]] == schema
        facet = event["run"]["facets"]["offsetbatch"]
        assert (facet["pipeline"], facet["batches"]) == (p.name, [{"batchId": 1, "kind": "incremental"}]), task
    assert complete["plan"]["outputs"] == []
    table = str(Path(p.table))
    assert [(o["namespace"], o["name"]) for o in complete["spark_job"]["outputs"]] == \
        [("file", table), ("file", f"{table}/_rejected")]
    assert [(o["namespace"], o["name"], o["outputFacets"]["outputStatistics"]["rowCount"])
            for o in complete["commit"]["outputs"]] == \
        [("file", table, batch.stats["rows_out"]), ("file", f"{table}/_rejected", batch.stats["rows_rejected"])]
    assert batch.stats["rows_rejected"] == len(p.malformed()) > 0
