"""Nothing lost by misconfiguration: a broken transform, schema or schedule is refused before
anything is planned (a DAG import error naming the file and the field), and a transform that only
Spark can find wrong (an unknown column) fails the job in seconds, before it reads Kafka.

Each test costs at most one real DAG run; the import-error test runs no Spark at all."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from harness import HELPER, SCHEMA

pytestmark = pytest.mark.integration
BASE = datetime(2026, 9, 14, tzinfo=timezone.utc)
READING = re.compile(r"batch \d+ attempt \S+: reading \d+ range\(s\)")  # the job's line just before read_ranges

# Each a bad config as a user would write it, with the field and the words the DAG import error must show.
BAD = {
    "bad_sql": ({"transform": {"sql": "SELEC event_id FRM records"}}, "transform.sql",
                "not valid Spark SQL: Invalid expression / Unexpected token at line 1, column 16, near 'FRM'"),
    "bad_ddl": ({"value": {"format": "json", "schema": "event_id STRING, kind STRIN"}}, "value.schema",
                "not valid Spark DDL: Expecting ) at line 1, column 23, near 'STRIN'"),
    "bad_module": ({"transform": {"python": "no_such_transforms.clean"}}, "transform.python",
                   "cannot import module 'no_such_transforms' (ModuleNotFoundError"),
    "bad_cron": ({"airflow": {"schedule": "every hour"}}, "airflow.schedule", "'every hour' is not a cron expression"),
    "never_fires": ({"airflow": {"schedule": "0 0 31 2 *"}}, "airflow.schedule", "'0 0 31 2 *' never fires"),
    "write_back": ({"kafka": {"topics": ["events"]},
                    "sink": {"type": "kafka", "topic": "events", "path": "${OFFSETBATCH_HOME}/bad-configs/write-back"}},
                   "(top level)", "sink.topic 'events' is a topic this pipeline reads"),
    "relative_ledger": ({"ledger": {"url": "sqlite:///relative_ledger.db"}}, "ledger.url",
                        "is a relative SQLite path, which each task resolves against its own working directory"),
    "reflect": ({"transform": {"sql": "SELECT event_id, reflect('java.lang.System', 'getenv', 'AIRFLOW_CONN_KAFKA_DEFAULT')"
                                      " AS leak FROM records"}}, "transform",
                "'sql' reaches past the records into the JVM or the job hosts' files (reflect(...))"),
    "wide_decimal": ({"value": {"format": "json", "schema": "event_id STRING, amount DECIMAL(99,200)"}}, "value.schema",
                     "DECIMAL(99, 200) is not a Spark decimal"),
}
# Nine levels of nine aliases (9**9 values once expanded): refused at once, not after the DAG
# processor's import timeout, which would hide every other DAG of its file.
ALIAS_BOMB = "\n".join(['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]'] +
                       [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)])


def _write_pipeline(airflow_env: dict, root: Path, name: str, change: dict) -> tuple[Path, Path, Path]:
    """A pipeline's YAML and one-line DAG file, as ``harness.Pipeline`` writes them, without loading
    the config (it does not load) or creating the ledger (nothing may create it)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    ledger = root / "ledger.db"
    cfg = {
        "name": name,
        "kafka": {"conn_id": "kafka_default", "topics": [f"t-{name}".replace("_", "-")]},
        "value": {"format": "json", "schema": SCHEMA},
        "transform": {"sql": "SELECT event_id, kind FROM records"},
        "sink": {"path": str(root / "table")},
        "ledger": {"url": f"sqlite:///{ledger}"},
        "airflow": {"retries": 0},
        **change,
    }
    config = root / f"{name}.yaml"
    config.write_text(yaml.safe_dump(cfg))
    dag_file = Path(airflow_env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{name}.py"
    dag_file.write_text("# Airflow DAG under test\nfrom offsetbatch.dag.factory import pipeline_dag\n\n"
                        f"dag = pipeline_dag({str(config)!r})\n")
    return config, dag_file, ledger


def _import_errors(airflow_env: dict, dag_files: list[Path]) -> dict[str, str]:
    """What Airflow's DAG processor reports for each file: ``DagBag(dag_folder=<file>)`` in a
    subprocess with the suite's Airflow environment."""
    code = ("import json, sys\nfrom airflow.dag_processing.dagbag import DagBag\nout = {}\n"
            "for f in sys.argv[1:]:\n    bag = DagBag(dag_folder=f)\n"
            "    out[f] = {'dags': sorted(bag.dags), 'errors': [str(e) for e in bag.import_errors.values()]}\n"
            "print('IMPORT_ERRORS ' + json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code, *map(str, dag_files)], env=airflow_env, capture_output=True,
                          text=True, timeout=300)
    line = [x for x in proc.stdout.splitlines() if x.startswith("IMPORT_ERRORS ")]
    assert proc.returncode == 0 and line, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(line[-1].removeprefix("IMPORT_ERRORS "))
    for f, result in found.items():
        assert result["dags"] == [] and len(result["errors"]) == 1, (f, result)
    return {f: result["errors"][0] for f, result in found.items()}


def test_bad_configs_are_dag_import_errors_and_plan_nothing(airflow_env, test_state):
    written = {key: _write_pipeline(airflow_env, test_state / "pipelines" / f"bad_configs_{key}",
                                    f"bad_configs_{key}", change)
               for key, (change, _, _) in BAD.items()}
    bomb, bomb_dag, _ = _write_pipeline(airflow_env, test_state / "pipelines" / "bad_configs_bomb", "bad_configs_bomb", {})
    bomb.write_text(ALIAS_BOMB + "\n" + bomb.read_text())
    try:
        started = time.monotonic()
        errors = _import_errors(airflow_env, [bomb_dag, *(dag_file for _, dag_file, _ in written.values())])
        assert f"{bomb}: the YAML expands to more than 100,000 values through its anchors and aliases" \
            in errors[str(bomb_dag)], errors[str(bomb_dag)]
        assert time.monotonic() - started < 60, "the DAG processor would time out on it"
        for key, (config, dag_file, _) in written.items():
            _, field, message = BAD[key]
            text = errors[str(dag_file)]
            assert f"{config}: invalid pipeline config: field '{field}': " in text, text
            assert message in text, text

        # A run of the bad-SQL pipeline cannot start: no DAG, so no plan, no ledger, no Spark.
        config, dag_file, ledger = written["bad_sql"]
        proc = subprocess.run([sys.executable, str(HELPER), str(dag_file), "offsetbatch_bad_configs_bad_sql", BASE.isoformat(),
                               datetime(2030, 6, 1, tzinfo=timezone.utc).isoformat(), "{}"],
                              env=airflow_env, capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "DAG offsetbatch_bad_configs_bad_sql not found" in out, out[-3000:]
        assert "field 'transform.sql'" in out, out[-3000:]
        assert all(not ledger.exists() for _, _, ledger in written.values()), "a ledger was created"
    finally:
        for dag_file in [bomb_dag, *(dag_file for _, dag_file, _ in written.values())]:  # the DAG folder is shared
            dag_file.unlink(missing_ok=True)


def test_unknown_column_fails_the_job_before_it_reads_kafka(make_pipeline):
    p = make_pipeline(transform={"sql": "SELECT event_id, no_such_column FROM records"})
    p.produce(200, start=BASE, hours=1, partitions=2)
    started = time.monotonic()
    run = p.run(BASE)
    seconds = time.monotonic() - started

    run.assert_failed_with("TransformAnalysisError")
    out = run.output
    [batch] = p.ledger.list_batches(p.name, 10)
    assert f"pipeline {p.name} batch {batch.batch_id}: the transform.sql 'SELECT event_id, no_such_column FROM " \
           f"records' fails analysis" in out, out[-4000:]
    assert "UNRESOLVED_COLUMN" in out and "`no_such_column`" in out and "Nothing was read from Kafka" in out
    assert not READING.search(out), "the job read Kafka before analyzing the transform"

    # The plan stays as it was made: one planned batch, for the next run once the SQL is fixed.
    assert batch.status == "planned" and sum(r.size for r in batch.ranges) == 200
    assert not list(Path(p.table).rglob("*.parquet"))
    job = _task_seconds(out, "starting task_id=spark_job", "the Spark job failed")
    print(f"spark_job task (spark-submit, Spark start-up, analysis) failed after {job:.1f}s; whole run {seconds:.1f}s")
    assert job < 60 and seconds < 120, (job, seconds)


def _task_seconds(output: str, start: str, end: str) -> float:
    """Seconds between the first log lines containing ``start`` and ``end`` (Airflow's ISO timestamps)."""
    def at(text: str) -> datetime:
        line = next(x for x in output.splitlines() if text in x)
        return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
    return (at(end) - at(start)).total_seconds()
