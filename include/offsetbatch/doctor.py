"""``offsetbatch doctor``: is everything a pipeline run needs in place? Each check says what is
wrong and how to fix it; nothing is changed."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from offsetbatch.config import PipelineConfig


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _run(name: str, fn, fix: str) -> Check:
    try:
        return Check(name, True, fn() or "ok")
    except Exception as exc:  # noqa: BLE001 - a check reports any failure, it never raises
        return Check(name, False, f"{type(exc).__name__}: {exc}", fix)


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
    from offsetbatch.spark_jars import spark_connector_jars

    jars = spark_connector_jars()
    return f"{len(jars)} jars, e.g. {jars[0].rsplit('/', 1)[-1]}"


def _airflow_conn(conn_id: str, conn_type: str) -> str:
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    if conn.conn_type != conn_type:
        raise RuntimeError(f"connection {conn_id} has conn_type {conn.conn_type!r}, expected {conn_type!r}")
    if conn_type == "spark" and not conn.host:
        raise RuntimeError(f"connection {conn_id} has no host (master); an empty master means YARN")
    return f"{conn.conn_type} {conn.host or conn.extra_dejson.get('bootstrap.servers', '')}"


def _kafka(cfg: PipelineConfig) -> str:
    from offsetbatch.kafka_source import KafkaSource, bootstrap_from_connection

    with KafkaSource(bootstrap_from_connection(cfg.kafka.conn_id)) as kafka:
        found = kafka.partitions(cfg.kafka.topics, cfg.kafka.pattern)
        missing = sorted(set(cfg.kafka.topics or []) - {tp.topic for tp in found})
        if missing:
            raise RuntimeError(f"{kafka.bootstrap} is up but topic(s) {', '.join(missing)} do not exist")
        return f"{kafka.bootstrap}: {len(found)} partition(s)"


def _ledger(cfg: PipelineConfig) -> str:
    from offsetbatch.ledger import Ledger
    from offsetbatch.ledger.schema import LATEST

    with Ledger.for_config(cfg) as ledger:
        rows = ledger.frontier_rows(cfg.name)
        return f"{ledger.engine.url.render_as_string()} (schema v{LATEST}, {len(rows)} partition(s) tracked)"


def run_checks(configs: dict[str, PipelineConfig]) -> list[Check]:
    checks = [
        _run("java", _java, "install Java 17 (Debian: apt-get install openjdk-17-jre-headless)"),
        _run("pyspark", _pyspark, "run 'make setup' (it reinstalls pyspark==4.3.0 last)"),
        _run("spark kafka connector", _connector, "run 'make setup' once with access to Maven Central"),
    ]
    spark_conns = {c.spark.conn_id for c in configs.values()}
    kafka_conns = {c.kafka.conn_id for c in configs.values()}
    for conn_id in sorted(spark_conns):
        checks.append(_run(f"airflow connection {conn_id}", lambda c=conn_id: _airflow_conn(c, "spark"),
                           'define it, e.g. AIRFLOW_CONN_SPARK_DEFAULT=\'{"conn_type":"spark","host":"local[*]",'
                           '"extra":{"deploy-mode":"client"}}\' (scripts/env.sh does)'))
    for conn_id in sorted(kafka_conns):
        checks.append(_run(f"airflow connection {conn_id}", lambda c=conn_id: _airflow_conn(c, "kafka"),
                           'define it, e.g. AIRFLOW_CONN_KAFKA_DEFAULT=\'{"conn_type":"kafka","extra":'
                           '{"bootstrap.servers":"127.0.0.1:9092"}}\' (scripts/env.sh does)'))
    for cfg in configs.values():
        checks.append(_run(f"{cfg.name}: kafka", lambda c=cfg: _kafka(c),
                           "start the broker ('offsetbatch-stack kafka start' locally) or fix the connection; "
                           f"create missing topics or fix kafka.topics in {cfg.source_file}"))
        checks.append(_run(f"{cfg.name}: ledger", lambda c=cfg: _ledger(c),
                           f"check ledger.url / ledger.conn_id in {cfg.source_file}; for PostgreSQL, that the "
                           f"server is up and the database exists"))
    return checks
