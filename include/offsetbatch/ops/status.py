"""Where a pipeline stands: per partition frontier, log end, lag in records and in time; the
last batches; data lost in the last 24 hours. One structure feeds the CLI's tables, its ``--json``
output and the UI."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone

from offsetbatch.ledger import Ledger
from offsetbatch.ledger.queries import trigger_summary
from offsetbatch.ledger.rows import data_loss, last_event
from offsetbatch.model import Batch, TopicPartition
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.freshness import describe_rule, missing_sources
from offsetbatch.source.admin import KafkaAdmin


@dataclass
class PartitionStatus:
    topic: str
    partition: int
    start_offset: int
    frontier: int
    log_end: int | None
    lag_records: int | None
    lag_seconds: float | None  # age of the oldest record not yet committed; 0 when caught up
    last_batch: int | None
    # why lag_seconds is not that age: the oldest waiting record is stamped in the future
    lag_note: str | None = None


@dataclass
class PipelineStatus:
    pipeline: str
    dag_id: str
    partitions: list[PartitionStatus] = field(default_factory=list)
    batches: list[dict] = field(default_factory=list)
    kafka_error: str | None = None
    # offsets never read, by gap rows recorded in the last 24 h (retention skipped, forward reset)
    gaps_24h: int = 0
    records_lost_24h: int = 0
    # what starts its runs: the cron and the lag trigger's rule (airflow.schedule, airflow.trigger)
    schedule: str | None = None
    trigger: str | None = None
    # when the lag trigger last started a run, and why (its newest ``run_triggered`` event)
    last_fired: dict | None = None
    # the pipeline's topics (or its pattern) the cluster does not have: no run, no trigger reads them
    missing: list[str] = field(default_factory=list)

    @property
    def lag_records(self) -> int | None:
        lags = [p.lag_records for p in self.partitions]
        return None if any(v is None for v in lags) else sum(lags)

    def to_dict(self) -> dict:
        return {**asdict(self), "lag_records": self.lag_records}


def batch_dict(b: Batch) -> dict:
    return {
        "batch_id": b.batch_id, "kind": b.kind, "status": b.status, "run_id": b.run_id, "records": b.records,
        "ranges": [r.to_dict() for r in b.ranges], "target_batch_id": b.target_batch_id,
        "superseded_by": b.superseded_by,
        **{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in b.stats.items()},
    }


def pipeline_status(pipeline: Pipeline, ledger: Ledger, kafka: KafkaAdmin | None, batches: int = 5) -> PipelineStatus:
    cfg = pipeline.cfg
    st = PipelineStatus(cfg.name, cfg.dag_id, batches=[batch_dict(b) for b in ledger.list_batches(cfg.name, batches)],
                        schedule=cfg.airflow.schedule,
                        trigger=describe_rule(cfg.airflow.trigger) if cfg.airflow.trigger else None)
    st.gaps_24h, st.records_lost_24h = data_lost(ledger, cfg.name)
    if cfg.airflow.trigger is not None:
        st.last_fired = last_fired(ledger, cfg.name)
    rows = ledger.frontier_rows(cfg.name)
    tps = {TopicPartition(r["topic"], r["partition"]): r for r in rows}
    ends: dict[TopicPartition, int] = {}
    stamps: dict[TopicPartition, int] = {}
    if kafka is not None:
        try:
            present = {tp.topic for tp in kafka.partitions(cfg.kafka.topics, cfg.kafka.pattern)}
            st.missing = missing_sources(pipeline, present)
        except Exception as exc:  # noqa: BLE001 - status must still show the ledger side
            st.kafka_error = f"{type(exc).__name__}: {exc}"
    if kafka is not None and tps and st.kafka_error is None:
        try:
            ends = {tp: po.latest for tp, po in kafka.offsets(list(tps)).items()}
            behind = {tp: r["next_offset"] for tp, r in tps.items() if ends.get(tp, 0) > r["next_offset"]}
            stamps = kafka.timestamps_at(behind)
        except Exception as exc:  # noqa: BLE001 - status must still show the ledger side
            st.kafka_error = f"{type(exc).__name__}: {exc}"
    now_ms = time.time() * 1000
    for tp, r in sorted(tps.items()):
        end = ends.get(tp)
        lag = None if end is None else max(end - r["next_offset"], 0)
        age, note = _time_lag(lag, stamps.get(tp), r, now_ms)
        st.partitions.append(PartitionStatus(tp.topic, tp.partition, r["start_offset"], r["next_offset"], end, lag, age,
                                             r["batch_id"], note))
    return st


def _time_lag(lag: int | None, stamp_ms: int | None, frontier_row: dict, now_ms: float) -> tuple[float | None, str | None]:
    """(seconds, note): the age of the oldest waiting record; when that record is stamped in the
    future its age says nothing, and the partition has waited at least since its frontier last moved."""
    if lag == 0:
        return 0.0, None
    if stamp_ms is None:
        return None, None
    if stamp_ms <= now_ms:
        return round((now_ms - stamp_ms) / 1000, 1), None
    moved = frontier_row["updated_at"]
    moved = moved if moved.tzinfo else moved.replace(tzinfo=timezone.utc)  # SQLite keeps no zone
    when = datetime.fromtimestamp(min(stamp_ms, 253_402_300_799_000) / 1000, timezone.utc)
    return (round(max(now_ms / 1000 - moved.timestamp(), 0), 1),
            f"offset {frontier_row['next_offset']} is stamped {when:%Y-%m-%d %H:%M}Z, in the future; waiting since "
            f"the frontier last moved")


def last_fired(ledger: Ledger, name: str) -> dict | None:
    """When the lag trigger last started a run and why: the detail its run recorded, with ``at``
    (when the trigger fired, else when the run planned) and a one-line ``summary``."""
    with ledger.reading() as conn:
        row = last_event(conn, name, "run_triggered")
    if row is None:
        return None
    detail = dict(row.detail or {})
    at = row.at if row.at.tzinfo else row.at.replace(tzinfo=timezone.utc)  # SQLite keeps no zone
    return {**detail, "at": detail.get("fired_at") or at.isoformat(), "summary": trigger_summary(detail)}


def data_lost(ledger: Ledger, name: str, hours: int = 24) -> tuple[int, int]:
    """(gap rows, records skipped) recorded in the last ``hours``: an operator must see data loss
    where they look first, not only in the audit log."""
    since = datetime.now(timezone.utc) - timedelta(hours=hours)
    with ledger.reading() as conn:
        return data_loss(conn, name, since)
