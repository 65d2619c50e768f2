"""The logic of the DAG's plan and commit tasks, kept out of the DAG file so it is testable.

Both return small JSON-able dicts (they become XComs). Both are idempotent per Airflow run, so
task retries and cleared runs are safe.
"""

from __future__ import annotations

import logging
from datetime import datetime

from offsetbatch import faults
from offsetbatch.commit import commit_batch, publish_pending
from offsetbatch.config import PipelineConfig
from offsetbatch.jobspec import JobSpec
from offsetbatch.kafka_source import KafkaSource, bootstrap_from_connection
from offsetbatch.layout import TableLayout
from offsetbatch.ledger import Ledger
from offsetbatch.planner import RunInfo, plan_for_run

log = logging.getLogger(__name__)


def _kafka(cfg: PipelineConfig) -> KafkaSource:
    return KafkaSource(bootstrap_from_connection(cfg.kafka.conn_id), cfg.kafka.isolation_level)


def write_spec(cfg: PipelineConfig, bootstrap: str, batch) -> str:
    uri = TableLayout(cfg.sink.path).spec(batch.batch_id)
    JobSpec(
        pipeline=cfg.name, batch_id=batch.batch_id, bootstrap=bootstrap,
        ranges=[r.to_dict() for r in batch.ranges], table=cfg.sink.path,
        value_format=cfg.value.format, schema_ddl=cfg.value.schema_ddl, required=list(cfg.value.required),
        transform_sql=cfg.transform.sql, transform_python=cfg.transform.python,
        event_time_column=cfg.sink.event_time_column, isolation_level=cfg.kafka.isolation_level,
        records_per_task=cfg.spark.records_per_task,
    ).save(uri)
    return uri


def plan_step(cfg: PipelineConfig, dag_id: str, run_id: str, interval_start: datetime | None,
              interval_end: datetime | None) -> dict:
    """Plan (or find) this run's batch and write its job spec."""
    ledger = Ledger.for_config(cfg)
    try:
        publish_pending(cfg, ledger)
        with _kafka(cfg) as kafka:
            result = plan_for_run(cfg, ledger, kafka, RunInfo(dag_id, run_id, interval_start, interval_end), cfg.sink.path)
            bootstrap = kafka.bootstrap
        faults.checkpoint("plan.after_commit")
        out = {"pipeline": cfg.name, "outcome": result.outcome, "needs_work": result.needs_work,
               "batch_id": None, "spec": None, "records": 0, "ranges": [],
               "gaps": [vars(g) for g in result.gaps]}
        if result.batch is not None:
            out.update(batch_id=result.batch.batch_id, records=result.batch.records,
                       ranges=[str(r) for r in result.batch.ranges])
        if result.needs_work:
            out["spec"] = write_spec(cfg, bootstrap, result.batch)
        return out
    finally:
        ledger.dispose()


def commit_step(cfg: PipelineConfig, batch_id: int, attempt: str) -> dict:
    """Commit a batch whose Spark job finished; returns the stats for the Asset event."""
    ledger = Ledger.for_config(cfg)
    try:
        with _kafka(cfg) as kafka:
            result = commit_batch(cfg, ledger, batch_id, attempt, kafka)
        return {"pipeline": cfg.name, "batch_id": batch_id, "outcome": result.outcome,
                **{k: v for k, v in result.stats.items() if isinstance(v, (int, float, str)) or v is None}}
    finally:
        ledger.dispose()
