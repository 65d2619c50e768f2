"""The logic of the DAG's plan and commit tasks, kept out of the DAG file so it is testable.

Both return small JSON-able dicts (they become XComs). Both are idempotent per Airflow run, so
task retries and cleared runs are safe. The plan task also carries out ``mode: reset`` (the run
then has no Spark work).
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
from offsetbatch.model import Batch
from offsetbatch.planner import RunInfo, plan_for_run
from offsetbatch.requests import RunRequest, from_params
from offsetbatch.reset import run_reset

log = logging.getLogger(__name__)


def _kafka(cfg: PipelineConfig) -> KafkaSource:
    return KafkaSource(bootstrap_from_connection(cfg.kafka.conn_id), cfg.kafka.isolation_level)


def write_spec(cfg: PipelineConfig, bootstrap: str, batch: Batch) -> str:
    """The job spec of ``batch``; a replay writes (and later publishes) under its target's id."""
    uri = TableLayout(cfg.sink.path).spec(batch.batch_id)
    JobSpec(
        pipeline=cfg.name, batch_id=batch.output_id, bootstrap=bootstrap,
        ranges=[r.to_dict() for r in batch.ranges], table=cfg.sink.path,
        value_format=cfg.value.format, schema_ddl=cfg.value.schema_ddl, required=list(cfg.value.required),
        transform_sql=cfg.transform.sql, transform_python=cfg.transform.python,
        event_time_column=cfg.sink.event_time_column, isolation_level=cfg.kafka.isolation_level,
        records_per_task=cfg.spark.records_per_task,
    ).save(uri)
    return uri


def plan_step(cfg: PipelineConfig, dag_id: str, run_id: str, interval_start: datetime | None,
              interval_end: datetime | None, params: dict | None = None, run_type: str | None = None,
              actor: str | None = None) -> dict:
    """Plan (or find) this run's batches and write their job specs, or carry out a reset.

    The trigger parameters are checked before the ledger is opened, so a bad value changes nothing."""
    request = from_params(cfg.name, params, run_type, (interval_start, interval_end), actor)
    ledger = Ledger.for_config(cfg)
    try:
        if request.mode == "reset":
            return _reset(cfg, ledger, request)
        publish_pending(cfg, ledger)
        with _kafka(cfg) as kafka:
            run = RunInfo(dag_id, run_id, interval_start, interval_end, request)
            result = plan_for_run(cfg, ledger, kafka, run, cfg.sink.path)
            bootstrap = kafka.bootstrap
        faults.checkpoint("plan.after_commit")
        batches = [{"batch_id": b.batch_id, "kind": b.kind, "target": b.target_batch_id, "records": b.records,
                    "ranges": [str(r) for r in b.ranges],
                    "spec": write_spec(cfg, bootstrap, b) if result.needs_work else None}
                   for b in result.batches]
        return {"pipeline": cfg.name, "mode": request.mode, "outcome": result.outcome,
                "needs_work": result.needs_work, "batches": batches, "gaps": [vars(g) for g in result.gaps]}
    finally:
        ledger.dispose()


def _reset(cfg: PipelineConfig, ledger: Ledger, request: RunRequest) -> dict:
    with _kafka(cfg) as kafka:
        plan = run_reset(cfg, ledger, kafka, request)
    return {"pipeline": cfg.name, "mode": "reset", "outcome": "dry_run" if request.dry_run else "reset",
            "needs_work": False, "batches": [], "reset": plan.to_dict()}


def commit_step(cfg: PipelineConfig, batch_ids: list[int], attempt: str) -> dict:
    """Commit the batches of a run whose Spark job finished, in batch order; returns the stats for
    the Asset event (totals, and per batch)."""
    ledger = Ledger.for_config(cfg)
    try:
        per_batch = []
        with _kafka(cfg) as kafka:
            for batch_id in batch_ids:
                result = commit_batch(cfg, ledger, batch_id, attempt, kafka)
                per_batch.append({"batch_id": batch_id, "outcome": result.outcome,
                                  **{k: v for k, v in result.stats.items()
                                     if isinstance(v, (int, float, str)) or v is None}})
        totals = {k: sum(b.get(k) or 0 for b in per_batch) for k in ("rows_in", "rows_out", "rows_rejected")}
        return {"pipeline": cfg.name, "batch_ids": list(batch_ids), **totals, "batches": per_batch}
    finally:
        ledger.dispose()
