"""One Airflow DAG per pipeline config: plan → spark_job → commit.

Adding a pipeline is adding a YAML file: ``dags/offsetbatch_pipelines.py`` calls ``pipeline_dags``,
which builds one DAG per installed config (``offsetbatch.config.installed``:
``OFFSETBATCH_PIPELINES``, YAML files and folders of them separated by ``:``), and ``dags/offsetbatch_pipeline_errors.py``
calls ``raise_config_errors``, which fails with every config that does not load (file and field
named), so it shows as that file's DAG import error.

Why two files: Airflow keeps one import error per DAG file, and an import error marks *every* DAG
of its file stale (hidden, not scheduled), and a module that raises yields no DAG at all. So the
file that builds the DAGs never raises (it skips a bad config, logging why), and the other one
carries the errors: one bad YAML never hides the other pipelines.

``pipeline_dag(config)`` builds one pipeline's DAG for a DAG file of its own (a bad config then
raises ``ConfigError`` in that file, as before); ``maintenance_dag(config)`` its maintenance DAG.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

from offsetbatch import redact
from offsetbatch.config import DAG_ID_PREFIX, MAINTENANCE_DAG_SUFFIX, PIPELINES_DIR, installed
from offsetbatch.errors import ConfigError
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.request import dag_params

log = logging.getLogger(__name__)


def _config_path(config: str | Path) -> Path:
    path = Path(config)
    if not path.is_absolute() and PIPELINES_DIR is not None:
        path = PIPELINES_DIR / path
    if path.suffix not in (".yaml", ".yml"):
        path = path.with_suffix(".yaml")
    return path


def _doc(pipeline: Pipeline, target: str, asset_uri: str) -> str:
    cfg = pipeline.cfg
    source = ", ".join(cfg.kafka.topics) if cfg.kafka.topics else f"topics matching `{cfg.kafka.pattern}`"
    return (
        f"### {cfg.name}\n\n{cfg.description}\n\n"
        f"Reads {source} exactly once into {target} (asset `{asset_uri}`). Offsets are tracked in the offsets ledger "
        f"(`{redact.url(cfg.ledger.url or cfg.ledger.conn_id or '')}`), not by a consumer group; progress is published to "
        f"group `{cfg.group_id}` for lag tools.\n\n"
        f"Tasks: **plan** (ranges from the frontier) → **spark_job** (reads exactly those ranges) → "
        f"**commit** (manifest check, ledger transaction, publish). {_runner_doc(cfg)} Every task is idempotent per run: "
        f"clearing a run re-reads the same ranges and replaces their output.\n\n"
        f"**Trigger** with `mode`: `next` (default), `replay` (a window or batch ids: re-executes recorded "
        f"batches, replacing their output), `reset` (moves the frontier; dry run unless `dry_run` is off). "
        f"**Backfill** re-executes the batches of covered intervals and loads never-read history; it refuses "
        f"intervals after the frontier.\n\nConfig: `{cfg.source_file}`"
    )


def _runner_doc(cfg) -> str:
    if cfg.spark.on_connect:
        return (f"The Spark job runs on the Spark Connect server of connection `{cfg.spark.connect_conn_id}` "
                f"(`spark.runner: connect`).")
    return f"The Spark job runs with spark-submit through connection `{cfg.spark.conn_id}` (`spark.runner: spark-submit`)."


def pipeline_dags(sources: str | None = None) -> dict:
    """One DAG per installed config that loads, keyed by DAG id: a DAG file puts them in its globals
    (``globals().update(pipeline_dags())``). A config that does not load is skipped and logged, not
    raised: an import error would hide every DAG of the file (``raise_config_errors`` reports it).

    A task process parses the file for one DAG (Airflow's parsing context names it): then only that
    pipeline's config is loaded and its DAG built, so a task's start does not grow with the fleet
    (the file of 100 pipelines: 3.5 s of loading and building in every task process, else)."""
    found = installed.read(sources, names=_parsing_for())
    for message in (*found.missing, *found.errors):
        log.error("offsetbatch: pipeline config skipped, it has no DAG: %s", message)
    dags = {}
    for cfg in found.configs.values():
        try:
            dags[cfg.dag_id] = _build(Pipeline(cfg), Path(cfg.source_file))
        except Exception as exc:  # noqa: BLE001 - one pipeline's DAG must never hide the others'
            log.error("offsetbatch: pipeline config skipped, it has no DAG: %s", _build_error(cfg, exc))
            continue
        if cfg.maintenance.schedule:
            try:
                dags[cfg.maintenance_dag_id] = _build_maintenance(cfg, Path(cfg.source_file))
            except Exception as exc:  # noqa: BLE001 - nor its maintenance DAG the pipeline's
                log.error("offsetbatch: pipeline %s has no maintenance DAG: %s", cfg.name, _build_error(cfg, exc))
    return dags


def _parsing_for() -> tuple[str, ...] | None:
    """The pipeline names whose DAGs the parse is for: those a task process's DAG id may be of (a
    pipeline's DAG, or its maintenance DAG); ``None`` (all) for the dag-processor and other readers."""
    from airflow.sdk import get_parsing_context

    dag_id = get_parsing_context().dag_id
    if not dag_id or not dag_id.startswith(DAG_ID_PREFIX):
        return None
    name = dag_id[len(DAG_ID_PREFIX):]
    return (name, name.removesuffix(MAINTENANCE_DAG_SUFFIX)) if name.endswith(MAINTENANCE_DAG_SUFFIX) else (name,)


def _build_error(cfg, exc: Exception) -> str:
    """The import-error line of a config that loads but whose DAG cannot be built."""
    return redact.url(f"{cfg.source_file}: pipeline {cfg.name}'s DAG cannot be built: {type(exc).__name__}: "
                      f"{' '.join(str(exc).split())}")


def _buildable(cfg) -> str | None:
    """What ``_build`` would fail on before any task runs (the DAG's outlet: Airflow refuses an asset
    URI it cannot take), checked without building the whole DAG; ``None`` when nothing."""
    from airflow.sdk import Asset

    try:
        uri = Pipeline(cfg).sink.asset_uri()
        Asset(name=uri, uri=uri)
    except Exception as exc:  # noqa: BLE001 - reported, as the DAG factory skips it
        return _build_error(cfg, exc)
    return None


def raise_config_errors(sources: str | None = None) -> None:
    """Raise ``ConfigError`` naming every installed config file that does not load (the DAG import
    error of the DAG file that calls it); return when all load."""
    found = installed.read(sources)
    errors = [*found.missing, *found.errors, *filter(None, (_buildable(cfg) for cfg in found.configs.values()))]
    if errors:
        raise ConfigError(f"{len(errors)} offsetbatch pipeline config(s) have no DAG until fixed "
                          f"(the other pipelines are not affected):\n" + "\n".join(errors))


def pipeline_dag(config: str | Path):
    """Build the DAG of one pipeline config (a name in include/pipelines/ or a path), for a DAG file
    of its own; a bad config raises ``ConfigError`` (that file's import error)."""
    path = _config_path(config)
    return _build(Pipeline.load(path), path)


def maintenance_dag(config: str | Path):
    """Build the maintenance DAG of one pipeline config for a DAG file of its own (as
    ``pipeline_dag``); ``maintenance.schedule`` null gives a DAG that runs only when triggered."""
    path = _config_path(config)
    return _build_maintenance(Pipeline.load(path).cfg, path)


def _schedule(cfg, cfg_path: str):
    """The cron (a data-interval timetable), the lag trigger's asset, or either of them
    (``AssetOrTimeSchedule``): ``airflow.schedule`` and ``airflow.trigger``."""
    from airflow.timetables.interval import CronDataIntervalTimetable

    cron = CronDataIntervalTimetable(cfg.airflow.schedule, timezone="UTC") if cfg.airflow.schedule else None
    rule = cfg.airflow.trigger
    if rule is None:
        return cron
    from airflow.sdk import Asset, AssetOrTimeSchedule, AssetWatcher

    from offsetbatch.dag.input_asset import input_asset_uri
    from offsetbatch.dag.lag_trigger import LagTrigger
    from offsetbatch.plan.freshness import describe_rule

    uri = input_asset_uri(cfg.name)
    # Pipelines on one Kafka connection share the trigger's poll of the cluster (``LagTrigger``).
    trigger = LagTrigger(config_path=cfg_path, min_records=rule.min_records, max_delay=rule.max_delay, poll=rule.poll,
                         kafka_conn_id=cfg.kafka.conn_id, isolation_level=cfg.kafka.isolation_level)
    # The asset page shows the rule (its extra) and, on each event, why the trigger fired (the payload).
    waiting = Asset(name=uri, uri=uri, group="offsetbatch-input",
                    extra={"pipeline": cfg.name, "rule": describe_rule(rule)},
                    watchers=[AssetWatcher(name=f"{cfg.name}_waiting_records", trigger=trigger)])
    return [waiting] if cron is None else AssetOrTimeSchedule(timetable=cron, assets=[waiting])


def _queue(cfg, task: str) -> dict[str, str]:
    """``queue=`` for a task the pipeline routes (``airflow.queues``); nothing, so Airflow's
    ``[operators] default_queue`` applies, for one it does not."""
    queue = getattr(cfg.airflow.queues, task)
    return {"queue": queue} if queue else {}


def _build(pipeline: Pipeline, path: Path):
    """The DAG of ``pipeline``, read from ``path``: its tasks re-read the file, so they run today's config."""
    from airflow.sdk import Asset, dag

    from offsetbatch.dag.operators.pipeline_steps import CommitOperator, PlanOperator

    cfg, cfg_path = pipeline.cfg, str(path)
    sink = pipeline.sink
    # The outlet is the sink's real target (a table, an Iceberg table, a topic), never its staging;
    # named by its URI, so pipelines that write one target update one asset (Airflow deactivates an
    # asset whose URI another active asset has under another name, and fails its tasks).
    uri = sink.asset_uri()
    asset = Asset(name=uri, uri=uri)

    @dag(
        dag_id=cfg.dag_id,
        description=cfg.description or f"offsetbatch pipeline {cfg.name}",
        doc_md=_doc(pipeline, sink.target, asset.uri),
        schedule=_schedule(cfg, cfg_path),
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
    def offsetbatch_pipeline():
        # Each runner's operator imported only when used: the spark-submit provider brings OpenLineage's
        # listener (0.9 s of every task process's start).
        if cfg.spark.on_connect:
            from offsetbatch.dag.operators.spark_connect import BatchSparkConnectOperator

            spark_job = BatchSparkConnectOperator(task_id="spark_job", config_path=cfg_path,
                                                  conn_id=cfg.spark.connect_conn_id, conf=dict(cfg.spark.conf),
                                                  **_queue(cfg, "spark_job"))
        else:
            from offsetbatch.dag.operators.spark_submit import BatchSparkSubmitOperator

            spark_job = BatchSparkSubmitOperator(task_id="spark_job", config_path=cfg_path, conn_id=cfg.spark.conn_id,
                                                 conf=dict(cfg.spark.conf), verbose=False, **_queue(cfg, "spark_job"))

        plan = PlanOperator(task_id="plan", config_path=cfg_path, **_queue(cfg, "plan"))
        commit = CommitOperator(task_id="commit", config_path=cfg_path, outlets=[asset], **_queue(cfg, "commit"))
        plan >> spark_job >> commit

    return offsetbatch_pipeline()


def _build_maintenance(cfg, path: Path):
    """The pipeline's maintenance DAG (``maintenance.schedule``): one task, in the pipeline's pool."""
    from airflow.sdk import CronTriggerTimetable, dag

    from offsetbatch.dag.operators.maintenance import MaintainOperator

    @dag(
        dag_id=cfg.maintenance_dag_id,
        description=f"offsetbatch maintenance of {cfg.name}",
        doc_md=(f"### {cfg.name}: maintenance\n\nExpires old snapshots, compacts small files, deletes abandoned "
                f"attempts and trims the ledger's history past the retention of `maintenance:` in "
                f"`{cfg.source_file}`; the same pass as `offsetbatch maintain {cfg.name}`, audited in the ledger's "
                f"events. Runs in the pipeline's pool `{cfg.pool}`, so never beside one of its tasks."),
        schedule=CronTriggerTimetable(cfg.maintenance.schedule, timezone="UTC") if cfg.maintenance.schedule else None,
        start_date=cfg.airflow.start_date,
        catchup=False,
        max_active_runs=1,
        tags=["offsetbatch", "maintenance", *cfg.airflow.tags],
        default_args={"owner": cfg.airflow.owner, "retries": cfg.airflow.retries,
                      "retry_delay": timedelta(seconds=cfg.airflow.retry_delay_seconds), "pool": cfg.pool},
    )
    def offsetbatch_maintenance():
        MaintainOperator(task_id="maintain", config_path=str(path), **_queue(cfg, "maintain"))

    return offsetbatch_maintenance()
