"""One Airflow DAG per pipeline config: plan → spark_job → commit.

DAG files stay thin (``dags/<pipeline>.py`` calls ``pipeline_dag``). A bad config raises
``ConfigError`` at parse time, so it shows as a DAG import error naming the file and field.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from offsetbatch.config import PIPELINES_DIR, PipelineConfig, load_config
from offsetbatch.run_request import dag_params


def _config_path(config: str | Path) -> Path:
    path = Path(config)
    if not path.is_absolute():
        path = PIPELINES_DIR / path
    if path.suffix not in (".yaml", ".yml"):
        path = path.with_suffix(".yaml")
    return path


def _doc(cfg: PipelineConfig) -> str:
    source = ", ".join(cfg.kafka.topics) if cfg.kafka.topics else f"topics matching `{cfg.kafka.pattern}`"
    return (
        f"### {cfg.name}\n\n{cfg.description}\n\n"
        f"Reads {source} exactly once into `{cfg.sink.path}`. Offsets are tracked in the offsets ledger "
        f"(`{cfg.ledger.url or cfg.ledger.conn_id}`), not by a consumer group; progress is published to "
        f"group `{cfg.group_id}` for lag tools.\n\n"
        f"Tasks: **plan** (ranges from the frontier) → **spark_job** (reads exactly those ranges) → "
        f"**commit** (manifest check, ledger transaction, publish). Every task is idempotent per run: "
        f"clearing a run re-reads the same ranges and replaces their output.\n\n"
        f"**Trigger** with `mode`: `next` (default), `replay` (a window or batch ids: re-executes recorded "
        f"batches, replacing their output), `reset` (moves the frontier; dry run unless `dry_run` is off). "
        f"**Backfill** re-executes the batches of covered intervals and loads never-read history; it refuses "
        f"intervals after the frontier.\n\nConfig: `{cfg.source_file}`"
    )


def pipeline_dag(config: str | Path):
    """Build the DAG of one pipeline config (a name in include/pipelines/ or a path)."""
    from airflow.sdk import Asset, dag, get_current_context, task
    from airflow.timetables.interval import CronDataIntervalTimetable

    from offsetbatch.operators.batch_spark_submit import BatchSparkSubmitOperator

    path = _config_path(config)
    cfg = load_config(path)
    cfg_path = str(path)
    table = cfg.sink.path if "://" in cfg.sink.path else f"file://{cfg.sink.path}"
    asset = Asset(name=f"offsetbatch.{cfg.name}", uri=table)

    @dag(
        dag_id=cfg.dag_id,
        description=cfg.description or f"offsetbatch pipeline {cfg.name}",
        doc_md=_doc(cfg),
        schedule=CronDataIntervalTimetable(cfg.airflow.schedule, timezone="UTC"),
        start_date=cfg.airflow.start_date,
        end_date=cfg.airflow.end_date,
        catchup=cfg.airflow.catchup,
        max_active_runs=1,
        params=dag_params(),
        tags=["offsetbatch", *cfg.airflow.tags],
        default_args={
            "owner": cfg.airflow.owner,
            "retries": cfg.airflow.retries,
            "retry_delay": timedelta(seconds=cfg.airflow.retry_delay_seconds),
            "pool": cfg.pool,
        },
    )
    def pipeline():
        @task(task_id="plan")
        def plan() -> dict:
            from offsetbatch.tasks import plan_step

            ctx = get_current_context()
            dag_run = ctx["dag_run"]
            return plan_step(load_config(cfg_path), ctx["dag"].dag_id, ctx["run_id"], ctx.get("logical_date"),
                             params=dict(ctx["params"]), run_type=getattr(dag_run.run_type, "value", dag_run.run_type),
                             actor=getattr(dag_run, "triggering_user_name", None) or "airflow",
                             airflow_interval=(ctx.get("data_interval_start"), ctx.get("data_interval_end")))

        spark_job = BatchSparkSubmitOperator(
            task_id="spark_job",
            config_path=cfg_path,
            conn_id=cfg.spark.conn_id,
            conf=dict(cfg.spark.conf),
            verbose=False,
        )

        @task(task_id="commit", outlets=[asset])
        def commit() -> dict:
            from offsetbatch.tasks import commit_step

            ctx = get_current_context()
            planned = ctx["ti"].xcom_pull(task_ids="plan")
            attempt = ctx["ti"].xcom_pull(task_ids="spark_job")
            result = commit_step(load_config(cfg_path), [b["batch_id"] for b in planned["batches"]], attempt)
            ctx["outlet_events"][asset].extra = result
            return result

        plan() >> spark_job >> commit()

    return pipeline()
