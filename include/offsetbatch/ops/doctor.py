"""``offsetbatch doctor``: is everything a pipeline run needs in place? Each check says what is
wrong and how to fix it; nothing is changed."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from offsetbatch import redact
from offsetbatch.ops import lineage_transport
from offsetbatch.pipeline import Pipeline
from offsetbatch.plan.freshness import describe_rule


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _run(name: str, fn, fix: str) -> Check:
    try:
        return Check(name, True, redact.url(fn() or "ok"))  # a rendered ledger URL's ?password= too
    except Exception as exc:  # noqa: BLE001 - a check reports any failure, it never raises
        return Check(name, False, redact.url(f"{type(exc).__name__}: {exc}"), fix)


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("no 'java' on PATH (Spark and the Kafka broker need Java 17)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr.splitlines()
    return out[0] if out else java


def _pyspark() -> str:
    import pyspark

    if not pyspark.__version__.startswith("4.3."):
        raise RuntimeError(f"pyspark {pyspark.__version__} is installed, not 4.3.x (pyspark-client overwrote it?)")
    return f"pyspark {pyspark.__version__}"


def _connector() -> str:
    from offsetbatch.dag.spark_jars import spark_connector_jars

    jars = spark_connector_jars()
    return f"{len(jars)} jars, e.g. {jars[0].rsplit('/', 1)[-1]}"


def _airflow_conn(conn_id: str, conn_type: str) -> str:
    from offsetbatch.connections import get_connection

    conn = get_connection(conn_id, f"{conn_type} connection")
    if conn.conn_type != conn_type:
        raise RuntimeError(f"connection {conn_id} has conn_type {conn.conn_type!r}, expected {conn_type!r}")
    if conn_type == "spark" and not conn.host:
        raise RuntimeError(f"connection {conn_id} has no host (master); an empty master means YARN")
    if conn_type == "kafka":
        from offsetbatch.source.connection import from_connection

        return f"kafka {from_connection(conn_id).describe()}"  # every extra key checked, no secret shown
    return f"{conn.conn_type} {conn.host}"


def _connect_server(conn_id: str) -> str:
    """The connection defines a Spark Connect server, and it answers (a gRPC handshake, within the
    connection's answer_timeout)."""
    from offsetbatch.dag.connect_server import ConnectServer

    server = ConnectServer.from_connection(conn_id)
    server.check()
    return f"{server.describe()} answers"


def _runs_created_per_loop(triggered: int) -> str:
    """Airflow creates at most ``scheduler.max_dagruns_to_create_per_loop`` runs a loop and orders
    asset-triggered DAGs by nothing (their next run date is empty): with fewer than the
    lag-triggered pipelines, the same ones get their runs first every loop and the rest wait."""
    from airflow.configuration import conf

    per_loop = conf.getint("scheduler", "max_dagruns_to_create_per_loop")
    if per_loop < triggered:
        raise RuntimeError(f"scheduler.max_dagruns_to_create_per_loop is {per_loop}, fewer than the {triggered} "
                           f"lag-triggered pipelines: when more than {per_loop} want a run at once, the same "
                           f"{per_loop} get theirs first every scheduler loop and the others wait")
    return f"{per_loop} per loop, for {triggered} lag-triggered pipeline(s)"


def _kafka(pipeline: Pipeline) -> str:
    cfg = pipeline.cfg
    with pipeline.kafka() as kafka:
        found = kafka.partitions(cfg.kafka.topics, cfg.kafka.pattern)  # DESCRIBE on the topics
        missing = sorted(set(cfg.kafka.topics or []) - {tp.topic for tp in found})
        if missing:
            raise RuntimeError(f"{kafka.bootstrap} is up but topic(s) {', '.join(missing)} do not exist")
        kafka.check_access(found, cfg.group_id)  # READ on the topics, DESCRIBE and READ on the group
        return (f"{kafka.client.describe()}: {len(found)} partition(s); may describe and read the topics and "
                f"its group {cfg.group_id}")


def _ledger(pipeline: Pipeline) -> str:
    from offsetbatch.commit import ownership
    from offsetbatch.ledger import LedgerMissingError
    from offsetbatch.ledger.schema import LATEST

    cfg, sink = pipeline.cfg, pipeline.sink
    if ownership.creates_ledger(sink):  # a new pipeline: its first run creates the ledger if it is missing
        try:
            ledger = pipeline.ledger()
        except LedgerMissingError:
            return f"no ledger yet at {redact.url(pipeline.ledger_url())}; the first run creates it (nothing published yet)"
    else:
        ledger = pipeline.ledger()
    with ledger:
        ownership.check(cfg.name, ledger, sink)
        rows = ledger.frontier_rows(cfg.name)
        return (f"{ledger.engine.url.render_as_string(hide_password=True)} (ledger {ledger.identity}, schema "
                f"v{LATEST}, {len(rows)} partition(s) tracked; owns the {sink.target})")


def _transform(pipeline: Pipeline) -> str:
    """The config-load checks of the schema, transform and schedule again, reported as one line: a
    Python transform imports in this environment, not necessarily in Airflow's or Spark's."""
    from offsetbatch import validation

    cfg = pipeline.cfg

    parts = []
    if cfg.value.schema_ddl:
        parts.append(f"value.schema: {len(validation.check_schema_ddl(cfg.value.schema_ddl))} field(s)")
    if cfg.transform.sql:
        parts.append(f"transform.sql: {validation.check_transform_sql(cfg.transform.sql)}")
    elif cfg.transform.python:
        validation.check_python_callable(cfg.transform.python)
        parts.append(f"transform.python: {cfg.transform.python} imports and is callable")
    else:
        parts.append("no transform: parsed records are written as they are")
    if cfg.airflow.schedule is not None:
        parts.append(f"airflow.schedule: {validation.check_cron(cfg.airflow.schedule)!r}")
    if cfg.airflow.trigger is not None:
        parts.append(f"airflow.trigger: {describe_rule(cfg.airflow.trigger)}")
    return "; ".join(parts) + " (column names are checked by the Spark job before it reads Kafka)"


def _spark_jars(pipeline: Pipeline) -> str:
    """Every jar this pipeline's job needs: the connector's, its formats' and, for a sink on S3, S3A's."""
    from offsetbatch.dag.spark_jars import job_jars

    cfg = pipeline.cfg
    jars = len(job_jars(cfg.sink.root, cfg.value.format, cfg.key.format))
    if cfg.spark.on_connect:
        return f"{jars} jar(s) the Spark Connect server needs on its classpath (its job runs there)"
    return f"{jars} jar(s) for spark-submit"


def run_checks(pipelines: dict[str, Pipeline]) -> list[Check]:
    checks = [
        _run("java", _java, "install Java 17 (Debian: apt-get install openjdk-17-jre-headless)"),
        _run("pyspark", _pyspark, "run 'make setup' (it reinstalls pyspark==4.3.0 last)"),
        _run("spark kafka connector", _connector, "run 'make setup' once with access to Maven Central"),
        _run("openlineage transport", lineage_transport.check, lineage_transport.FIX),
    ]
    # Each pipeline's runner's connection only: a Connect pipeline never uses spark_default.
    spark_conns = {p.cfg.spark.conn_id for p in pipelines.values() if not p.cfg.spark.on_connect}
    connect_conns = {p.cfg.spark.connect_conn_id for p in pipelines.values() if p.cfg.spark.on_connect}
    kafka_conns = {p.cfg.kafka.conn_id for p in pipelines.values()}
    for conn_id in sorted(spark_conns):
        checks.append(_run(f"airflow connection {conn_id}", lambda c=conn_id: _airflow_conn(c, "spark"),
                           'define it, e.g. AIRFLOW_CONN_SPARK_DEFAULT=\'{"conn_type":"spark","host":"local[*]",'
                           '"extra":{"deploy-mode":"client"}}\' (scripts/env.sh does)'))
    for conn_id in sorted(connect_conns):
        checks.append(_run(f"spark connect server of {conn_id}", lambda c=conn_id: _connect_server(c),
                           "define the connection, e.g. AIRFLOW_CONN_SPARK_CONNECT_DEFAULT='{\"conn_type\":"
                           "\"spark_connect\",\"host\":\"127.0.0.1\",\"port\":15002}' (scripts/env.sh does), and start the server ('offsetbatch-stack "
                           "spark-connect start' locally), or set spark.runner: spark-submit"))
    triggered = sorted(name for name, p in pipelines.items() if p.cfg.airflow.trigger is not None)
    if triggered:
        checks.append(_run(f"scheduler: runs created per loop for {len(triggered)} lag-triggered pipeline(s)",
                           lambda: _runs_created_per_loop(len(triggered)),
                           f"set AIRFLOW__SCHEDULER__MAX_DAGRUNS_TO_CREATE_PER_LOOP (scheduler.max_dagruns_to_create_"
                           f"per_loop) to at least {len(triggered)} on the scheduler (scripts/env.sh and "
                           f"docker-compose.yaml set 1000)"))
    for conn_id in sorted(kafka_conns):
        checks.append(_run(f"airflow connection {conn_id}", lambda c=conn_id: _airflow_conn(c, "kafka"),
                           'define it, e.g. AIRFLOW_CONN_KAFKA_DEFAULT=\'{"conn_type":"kafka","extra":'
                           '{"bootstrap.servers":"127.0.0.1:9092"}}\' (scripts/env.sh does)'))
    for pipeline in pipelines.values():
        cfg = pipeline.cfg
        checks.append(_run(f"{cfg.name}: schema, transform, schedule", lambda p=pipeline: _transform(p),
                           f"fix value.schema / transform / airflow.schedule in {cfg.source_file}; for "
                           f"transform.python, install the module where Airflow and Spark run"))
        checks.append(_run(f"{cfg.name}: kafka", lambda p=pipeline: _kafka(p),
                           "start the broker ('offsetbatch-stack kafka start' locally) or fix the connection; "
                           f"create missing topics or fix kafka.topics in {cfg.source_file}"))
        checks.append(_run(f"{cfg.name}: ledger", lambda p=pipeline: _ledger(p),
                           f"check ledger.url / ledger.conn_id in {cfg.source_file}; for PostgreSQL, that the "
                           f"server is up and the database exists; a lost ledger: 'offsetbatch ledger rebuild "
                           f"{cfg.name}'"))
        checks.append(_run(f"{cfg.name}: spark jars", lambda p=pipeline: _spark_jars(p),
                           "run 'make setup' once with access to Maven Central, or provide the jars the message "
                           "names in OFFSETBATCH_SPARK_JARS"))
        for name, check, fix in pipeline.sink.doctor_checks():
            checks.append(_run(f"{cfg.name}: {name}", check, f"{fix} ({cfg.source_file})"))
    return checks
