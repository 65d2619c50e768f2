"""Shared fixtures: a real Kafka broker and a real PostgreSQL cluster for the whole test session.

Both run on non-default loopback ports with their state under ``.local/tests/<worker>/`` (PostgreSQL runs
as the ``postgres`` user, which cannot enter pytest's root-only temp folders), so the suite never
disturbs a stack started by the README's demo command.
"""

from __future__ import annotations

import logging
import os
import shutil

import pytest
from harness import worker_port

from offsetbatch.dev.stack.kafka_broker import KafkaBroker
from offsetbatch.dev.stack.postgres import PostgresCluster
from offsetbatch.paths import PROJECT_ROOT

# One state folder and one set of ports per pytest-xdist worker (gw0, gw1, ...; gw0 without xdist).
TEST_STATE = PROJECT_ROOT / ".local" / "tests" / os.environ.get("PYTEST_XDIST_WORKER", "gw0")
TEST_KAFKA_PORT = worker_port(19092)
TEST_PG_PORT = worker_port(55432)

logging.getLogger("kafka").setLevel(logging.WARNING)
logging.getLogger("py4j").setLevel(logging.WARNING)  # its __del__ logs after pytest closed the stream


@pytest.fixture(scope="session")
def test_state():
    TEST_STATE.mkdir(parents=True, exist_ok=True)
    return TEST_STATE


@pytest.fixture(scope="session")
def kafka_broker(test_state):
    broker = KafkaBroker(port=TEST_KAFKA_PORT, home=test_state / "kafka")
    broker.wipe()
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def postgres(test_state):
    cluster = PostgresCluster(port=TEST_PG_PORT, home=test_state / "postgres")
    cluster.wipe()
    cluster.start()
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.home, ignore_errors=True)


@pytest.fixture(scope="session")
def spark():
    """One local Spark for in-process tests, launched with the Kafka connector: the driver JVM's
    classpath is fixed at launch, so every in-process session must share this one."""
    from pyspark.sql import SparkSession

    from offsetbatch.spark_jars import spark_connector_jars

    session = (
        SparkSession.builder.master("local[2]").appName("offsetbatch-tests")
        .config("spark.jars", ",".join(spark_connector_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_env(test_state, kafka_broker, postgres):
    """Environment for real Airflow runs: a private Airflow home and DAG folder, connections
    pointing at the test broker, ``local[*]`` Spark. Airflow's metadata lives in the test
    PostgreSQL, as in production: with SQLite, a running scheduler and API server and a CLI call
    at once can fail with "database is locked"."""
    import json
    import os
    import subprocess

    home, dags = test_state / "airflow", test_state / "dags"
    for d in (home, dags):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.create_database("airflow_tests"),
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_broker.bootstrap}}),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "client"}}),
        "OFFSETBATCH_HOME": str(test_state),
    }
    env.pop("OFFSETBATCH_FAULTS", None)
    res = subprocess.run(["airflow", "db", "migrate"], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return env


@pytest.fixture
def make_pipeline(airflow_env, kafka_broker, test_state, request):
    """Factory of pipelines under test, each with its own topic, SQLite ledger and table."""
    import re

    from harness import Pipeline

    made = []

    def make(suffix: str = "", ledger_url: str | None = None, **overrides):
        base = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
        name = f"{base}{suffix}"
        root = test_state / "pipelines" / name
        shutil.rmtree(root, ignore_errors=True)
        p = Pipeline(name=name, topic=f"t-{name}".replace("_", "-"), env=airflow_env, root=root,
                     bootstrap=kafka_broker.bootstrap, ledger_url=ledger_url or f"sqlite:///{root}/ledger.db",
                     overrides=overrides)
        made.append(p)
        return p

    yield make
    for p in made:
        p.ledger.dispose()
        p.dag_file.unlink(missing_ok=True)  # every later DAG parse (scheduler, CLI) would read it again


@pytest.fixture(scope="module")
def airflow_services(airflow_env, test_state):
    """A real Airflow scheduler (LocalExecutor) and API server on loopback, for what only they do:
    ``airflow backfill create`` and triggered runs. Ready when the API server reports a healthy
    scheduler heartbeat. Per module: left running, their loops would take CPU from every later test."""
    from harness import AirflowServices

    services = AirflowServices(airflow_env, test_state / "airflow-services", port=worker_port(18080))
    services.start()
    yield services
    services.stop()


TEST_KAFKA_SECURE_PORT = worker_port(19192)  # its controller listener takes the next port


@pytest.fixture(scope="session")
def secure_kafka_broker(test_state):
    """A SASL_SSL (SCRAM-SHA-512) broker with ACLs on (issue 16): users ``admin`` (super user) and
    ``pipeline`` (only what ``grant_pipeline`` gives it), a local CA in ``broker.ca_file``. One
    broker serves the authentication and the authorization tests."""
    broker = KafkaBroker(port=TEST_KAFKA_SECURE_PORT, home=test_state / "kafka-secure", security="sasl_ssl", acl=True)
    broker.wipe()
    broker.start()
    yield broker
    broker.stop()
