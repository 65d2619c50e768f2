"""The logic of the DAG's three tasks, kept out of the DAG file and the operator so it is testable.

    plan_step          plan (or find) the run's batches and write their job specs; or carry out a reset
    spark_submission   what the spark_job task submits: the batches still to run, one attempt id, the
                       job's arguments; raises ``NothingToRun`` when there is none (the task skips)
    spark_job_secrets  the secrets the job gets in a private file (``offsetbatch.job_secrets``)
    spark_redundant    after a failed spark-submit: whether other runs committed the batches meanwhile
    spark_failure      after a failed spark-submit that stands: one line saying what failed and what next
    commit_step        commit the run's batches from the finished attempt's manifests

All return small JSON-able values (they become XComs). All are idempotent per Airflow run, so task
retries and cleared runs are safe.
"""

from __future__ import annotations

import logging
import re
import signal
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from offsetbatch import faults, storage
from offsetbatch.commit import ownership
from offsetbatch.commit.protocol import commit_batch
from offsetbatch.commit.publication import publish_pending
from offsetbatch.dag.asset_partitions import partition_keys
from offsetbatch.errors import KafkaAuthError, KafkaConnectionError, KafkaUnreachableError, SparkConnectServerError
from offsetbatch.ledger import Ledger
from offsetbatch.model import Batch
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.planner import RunInfo, plan_for_run
from offsetbatch.plan.request import RunRequest, from_params, run_interval
from offsetbatch.plan import schemas as batch_schemas
from offsetbatch.plan.reset import run_reset
from offsetbatch.plan.schemas import Schemas
from offsetbatch.source.admin import KafkaAdmin
from offsetbatch.source.connection import KafkaClientConfig, from_connection

log = logging.getLogger(__name__)


def write_spec(pipeline: Pipeline, client: KafkaClientConfig, batch: Batch, schemas: Schemas | None = None) -> str:
    """The job spec of ``batch`` (``Pipeline.job_spec``), where the job and the commit find it."""
    uri = pipeline.sink.staging.spec(batch.batch_id)
    found = {role: s.to_spec() for role, s in (schemas or {}).items() if s is not None}
    pipeline.job_spec(client, batch, found.get("value"), found.get("key")).save(uri)
    return uri


def plan_step(pipeline: Pipeline, dag_id: str, run_id: str, logical_date: datetime | None,
              params: dict | None = None, run_type: str | None = None, actor: str | None = None,
              airflow_interval: tuple[datetime | None, datetime | None] = (None, None),
              trigger: dict | None = None) -> dict:
    """Plan (or find) this run's batches and write their job specs, or carry out a reset.

    The run reads the schedule interval of its logical date (``plan.request.run_interval``), not
    ``airflow_interval``, which Airflow infers differently for manual runs and keeps stale on runs a
    backfill reuses. The trigger parameters are checked before the ledger is opened, so a bad value
    changes nothing. ``trigger``: why the lag trigger started the run, kept in the ledger's events."""
    cfg = pipeline.cfg
    interval = run_interval(cfg.airflow.schedule, logical_date) or (None, None)
    if logical_date is not None and tuple(airflow_interval) != interval:
        log.info("pipeline %s run %s (%s, logical date %s): reads the schedule interval [%s, %s); Airflow's "
                 "data interval for this run, [%s, %s), is not used", cfg.name, run_id, run_type, _iso(logical_date),
                 _iso(interval[0]), _iso(interval[1]), _iso(airflow_interval[0]), _iso(airflow_interval[1]))
    request = from_params(cfg.name, params, run_type, interval, actor)
    log.info("pipeline %s run %s: %s run, mode %s, %s", cfg.name, run_id, run_type or "manual", request.mode,
             f"interval [{_iso(interval[0])}, {_iso(interval[1])})" if interval[0] else "no interval: reads to the log end")
    # Kafka first: a connection the broker refuses (credentials, certificate, ACLs) fails the task
    # before the ledger is even opened, so the ledger stays byte-identical.
    with pipeline.kafka() as kafka:
        kafka.partitions(cfg.kafka.topics, cfg.kafka.pattern)  # an ACL denial fails here, before the ledger
        pipeline.sink.check_source(cfg.reads_topic, kafka)
        pipeline.sink.check_writable()
        # The schema registry too: down, refusing the credentials, or without the subject, it fails
        # the task here, before the ledger is opened. A reset needs no schema.
        schemas = batch_schemas.resolve_all(pipeline) if request.mode != "reset" else None
        with pipeline.ledger(create=ownership.creates_ledger(pipeline.sink)) as ledger:
            return _plan_with(pipeline, ledger, kafka, request, RunInfo(dag_id, run_id, interval[0], interval[1],
                                                                         request, run_type, trigger), interval,
                               schemas)


def _plan_with(pipeline: Pipeline, ledger: Ledger, kafka: KafkaAdmin, request: RunRequest, run: RunInfo,
               interval: tuple, schemas: Schemas | None = None) -> dict:
    """The plan (or reset) itself, once Kafka has accepted the pipeline's user and topics (and the
    schema registry, ``schemas``, resolved before the ledger was opened)."""
    cfg = pipeline.cfg
    ownership.check(cfg.name, ledger, pipeline.sink)
    if request.mode == "reset":
        return _reset(pipeline, ledger, kafka, request)
    publish_pending(pipeline, ledger)
    result = plan_for_run(pipeline, ledger, kafka, run)
    client = kafka.client
    faults.checkpoint("plan.after_commit")
    per_batch: dict[int, Schemas] = {}
    if result.needs_work and schemas and any(schemas.values()):
        per_batch = batch_schemas.pin(pipeline, ledger, result.batches, schemas)
    batches = [{"batch_id": b.batch_id, "kind": b.kind, "target": b.target_batch_id, "records": b.records,
                "ranges": [str(r) for r in b.ranges],
                "spec": write_spec(pipeline, client, b, per_batch.get(b.batch_id)) if result.needs_work else None}
               for b in result.batches]
    return {"pipeline": cfg.name, "mode": request.mode, "outcome": result.outcome,
            "needs_work": result.needs_work, "batches": batches, "gaps": [vars(g) for g in result.gaps],
            "run_type": run.run_type, "interval": [_iso(interval[0]), _iso(interval[1])]}


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat() if ts is not None else None


def _reset(pipeline: Pipeline, ledger: Ledger, kafka: KafkaAdmin, request: RunRequest) -> dict:
    plan = run_reset(pipeline, ledger, kafka, request)
    return {"pipeline": pipeline.name, "mode": "reset", "outcome": "dry_run" if request.dry_run else "reset",
            "needs_work": False, "batches": [], "reset": plan.to_dict()}


@dataclass(frozen=True)
class SparkSubmission:
    """One spark-submit of the batches a run still has to execute, under one attempt id (its own
    staging folders; the commit reads the manifests of exactly this attempt)."""

    batches: list[Batch]
    attempt: str
    application_args: list[str]
    name: str
    spec_uris: list[str] = field(default_factory=list)  # the job specs, for a Spark Connect run in the task


def spark_job_secrets(pipeline: Pipeline) -> dict[str, str]:
    """The secrets the job needs, from the pipeline's connections at submit time: the Kafka ones
    (``kafka.*``: SASL login, client key; none for PLAINTEXT) and an object store's (``fs.s3a.*``,
    ``storage.s3.S3Settings.hadoop_options``). The operator hands them over in a private file
    (``offsetbatch.job_secrets``), never in arguments or the job spec."""
    secrets = from_connection(pipeline.cfg.kafka.conn_id).spark_secrets()
    if pipeline.cfg.sink.storage_conn_id:
        from offsetbatch.storage.s3 import S3Settings

        secrets.update(S3Settings.from_connection(pipeline.cfg.sink.storage_conn_id).hadoop_options())
    return secrets


class NothingToRun(Exception):
    """The spark_job task has nothing to do (the operator turns it into a skip, with this reason)."""


def spark_submission(pipeline: Pipeline, plan: dict | None, try_number: int) -> SparkSubmission:
    """The batches of ``plan`` (the plan task's XCom) that are still ``planned``, each counted as one
    more attempt in the ledger. Raises ``NothingToRun`` when the plan is empty or everything is
    already committed, which makes a cleared or retried run cheap and safe."""
    if not plan or not plan.get("needs_work"):
        raise NothingToRun(f"nothing to run: plan outcome is {plan and plan.get('outcome')}")
    cfg = pipeline.cfg
    with pipeline.ledger() as ledger:
        found = [ledger.get_batch(cfg.name, b["batch_id"]) for b in plan["batches"]]
        todo = [b for b in found if b.status == "planned"]
        if not todo:
            raise NothingToRun(f"pipeline {cfg.name}: nothing left to run: {_states(found, cfg.name)}")
        for b in todo:
            ledger.count_attempt(cfg.name, b.batch_id)
    specs = {b["batch_id"]: b["spec"] for b in plan["batches"]}
    attempt = f"{try_number}-{uuid.uuid4().hex[:12]}"
    for b in todo:
        log.info("pipeline %s batch %d (%s%s) attempt %s: submitting Spark job for %d records: %s", cfg.name,
                 b.batch_id, b.kind, f", replaces batch {b.target_batch_id}" if b.target_batch_id else "",
                 attempt, b.records, b.describe_ranges())
    args = [arg for b in todo for arg in ("--spec", specs[b.batch_id])] + ["--attempt", attempt]
    name = f"offsetbatch-{cfg.name}-batch-{'-'.join(str(b.batch_id) for b in todo)}"
    return SparkSubmission(todo, attempt, args, name, [specs[b.batch_id] for b in todo])


def _states(batches: list, name: str) -> str:
    """Why planned batches no longer need a job: committed (by an earlier try or another run), or
    abandoned by an operator's reset while this run waited (issue 41, case 15: it said "committed")."""
    parts = []
    for b in batches:
        if b.status == "committed":
            parts.append(f"batch {b.batch_id} is already committed")
        else:
            parts.append(f"batch {b.batch_id} was {b.status} meanwhile (an operator's reset or replay; "
                         f"'offsetbatch batch {name} {b.batch_id}' shows by whom and why), so it is not read")
    return "; ".join(parts)


def spark_redundant(pipeline: Pipeline, submission: SparkSubmission) -> str | None:
    """After a failed spark-submit: if other runs executing the same pending batches committed them
    meanwhile, this attempt was redundant, not failed: whatever it wrote is removed (the winner's
    publish may have removed its folder while it still wrote; what it wrote after that, and its
    ``_error.json``, would otherwise stay on the store for good: issue 41, case 3). Returns the
    reason to skip, or ``None`` when the failure stands."""
    cfg = pipeline.cfg
    with pipeline.ledger() as ledger:
        won = [ledger.get_batch(cfg.name, b.batch_id) for b in submission.batches]
    if all(w.status == "committed" and w.stats.get("committed_attempt") != submission.attempt for w in won):
        for w in won:
            pipeline.sink.discard(w.batch_id, submission.attempt)
        return (f"pipeline {cfg.name} batch(es) {[w.batch_id for w in won]} were committed by other attempts "
                f"(runs {sorted({w.run_id for w in won})}) while attempt {submission.attempt} ran; this attempt's "
                f"output is discarded")
    return None


def spark_failure(pipeline: Pipeline, submission: SparkSubmission, error: BaseException) -> str:
    """One line for the task log when the Spark step failed: pipeline, batches, ranges, attempt, the
    cause (a signal, the job's own last error, Kafka unreachable) and what the next run does."""
    cfg, sink = pipeline.cfg, pipeline.sink
    causes = []
    code = re.search(r"Error code is: (-?\d+)", str(error))
    if code and int(code.group(1)) < 0:
        sig = -int(code.group(1))
        causes.append(f"spark-submit was killed by signal {sig} ({signal.Signals(sig).name})"
                      if sig in signal.valid_signals() else f"spark-submit ended by signal {sig}")
    elif code:
        causes.append(f"spark-submit exited with code {code.group(1)}")
    lost_server = isinstance(error, SparkConnectServerError)  # then the job's last error is only its cut-off call
    if lost_server:
        causes.append(str(error))
    for b in submission.batches if not lost_server else ():
        uri = sink.staging.job_error(b.batch_id, submission.attempt)
        if storage.exists(uri):
            causes.append(f"the job's last error: {storage.read_json(uri).get('error', '?')}")
    if not causes:
        causes.append(f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}")
    ids = ", ".join(str(b.batch_id) for b in submission.batches)
    ranges = "; ".join(f"batch {b.batch_id}: {b.describe_ranges()}" for b in submission.batches)
    return (f"pipeline {cfg.name} batch(es) {ids} attempt {submission.attempt}: the Spark job failed ({'; '.join(causes)}). "
            f"Ranges: {ranges}. Nothing was committed; the next run (or a retry of this task) re-executes batch(es) "
            f"{ids} unchanged.")


def spark_error_types(pipeline: Pipeline, submission: SparkSubmission) -> set[str]:
    """The class names of the errors the job left for this attempt's batches (``job.run``)."""
    found: set[str] = set()
    for b in submission.batches:
        uri = pipeline.sink.staging.job_error(b.batch_id, submission.attempt)
        if storage.exists(uri):
            found.update(storage.read_json(uri).get("types") or [])
    return found


def _progress_client(pipeline: Pipeline) -> KafkaAdmin | None:
    """Kafka for the commit's best-effort group publication only: the commit itself needs the
    ledger and the staged output, not Kafka, so an outage or a rotated password after the Spark job
    must not hold it back (the next commit publishes the group's offsets again)."""
    try:
        return pipeline.kafka()
    except (KafkaAuthError, KafkaUnreachableError, KafkaConnectionError) as exc:
        log.warning("pipeline %s: committing without publishing group offsets: %s", pipeline.name, exc)
        return None


def commit_step(pipeline: Pipeline, batch_ids: list[int], attempt: str) -> dict:
    """Commit the batches of a run whose Spark job finished, in batch order; returns the Asset
    event's extra: totals, and per batch its offset ranges and stats."""
    with pipeline.ledger() as ledger:
        ownership.check(pipeline.name, ledger, pipeline.sink)
        per_batch = []
        kafka = _progress_client(pipeline)
        try:
            for batch_id in batch_ids:
                result = commit_batch(pipeline, ledger, batch_id, attempt, kafka)
                per_batch.append({"batch_id": batch_id, "outcome": result.outcome, "ranges": result.ranges,
                                  "partition_keys": partition_keys(ledger, pipeline.name, batch_id,
                                                                   result.record_span_us),
                                  **{k: v for k, v in result.stats.items()
                                     if isinstance(v, (int, float, str)) or v is None}})
        finally:
            if kafka is not None:
                kafka.close()
        totals = {k: sum(b.get(k) or 0 for b in per_batch) for k in ("rows_in", "rows_out", "rows_rejected")}
        return {"pipeline": pipeline.name, "batch_ids": list(batch_ids), **totals, "batches": per_batch}
