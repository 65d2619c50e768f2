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
from harness import CONNECT_CONN_ID, RUNNER, SPARK_TEST_CONF, worker_port

from offsetbatch_dev import PROJECT_ROOT
from offsetbatch_dev.stack.kafka_broker import KafkaBroker
from offsetbatch_dev.stack.kafka_cluster import KafkaCluster
from offsetbatch_dev.stack.postgres import PostgresCluster
from offsetbatch_dev.stack.s3_server import S3Server
from offsetbatch_dev.stack.spark_cluster import SparkCluster
from offsetbatch_dev.stack.spark_connect import SparkConnectServer

# One state folder and one set of ports per pytest-xdist worker (gw0, gw1, ...; gw0 without xdist).
TEST_STATE = PROJECT_ROOT / ".local" / "tests" / os.environ.get("PYTEST_XDIST_WORKER", "gw0")
# Every fixed test port stays below Linux's ephemeral range (32768-60999, net.ipv4.ip_local_port_range):
# a port in it can be taken at any moment by the local end of some outgoing connection, and a broker
# that cannot bind exits (CI saw a cluster node at 40193 do so).
TEST_KAFKA_PORT = worker_port(19092)
TEST_PG_PORT = worker_port(25432)
TEST_CONNECT_PORT = worker_port(15202)
# The suite's long-lived JVMs (its brokers, its Connect server, the in-process Spark) run short bursts
# of work on 2 cores: the quick (C1) compiler only and the serial collector. Measured on test_backfill
# alone: the Connect server's CPU 51.9 s -> 28.4 s with them (not production settings; the stack
# keeps the defaults).
TEST_JVM_OPTIONS = tuple(SPARK_TEST_CONF["spark.driver.extraJavaOptions"].split())

# The heaviest modules first: pytest-xdist then hands them out before the light ones, and the two
# workers finish within a minute of each other. Its own reordering (by number of tests) would leave
# the few-test, many-run modules for last. By ``make test``'s --durations on 2026-11-26 and the
# modules' own runs after the changes of 2026-11-27 (seconds of a module's slowest tests on a
# worker): cluster_runs 500, backfill about 440, lag_trigger 400 (its broker outage alone is a
# minute), object_storage 400, secure_kafka 340, pipeline_runs 290, avro_pipeline 220,
# failure_recovery 110 + 75 (its two classes, each a scope of its own), ui_plugin 150, the
# rest under 150. The two modules that start a Spark standalone cluster are kept apart in the order.
HEAVIEST_FIRST = (
    "test_backfill.py", "test_cluster_runs.py", "test_lag_trigger.py", "test_object_storage.py",
    "test_secure_kafka.py", "test_pipeline_runs.py", "test_failure_recovery.py", "test_avro_pipeline.py",
    "test_ui_plugin.py",
    "test_iceberg_sink.py", "test_change_data_capture.py", "test_postgres_sink.py", "test_kafka_sink.py",
    "test_planning_cases.py",
    "test_triggers_and_reset.py", "test_trigger_refusals.py", "test_ledger_loss.py", "test_spark_connect_runs.py",
    "test_spark_cluster.py", "test_cli.py",
)

logging.getLogger("kafka").setLevel(logging.WARNING)
logging.getLogger("py4j").setLevel(logging.WARNING)  # its __del__ logs after pytest closed the stream


def pytest_collection_modifyitems(config, items):
    def weight(item) -> int:
        name = item.path.name
        return HEAVIEST_FIRST.index(name) if name in HEAVIEST_FIRST else len(HEAVIEST_FIRST)
    items.sort(key=weight)  # stable: a module's own order is kept


@pytest.fixture(scope="session")
def test_state():
    TEST_STATE.mkdir(parents=True, exist_ok=True)
    return TEST_STATE


@pytest.fixture(scope="session")
def kafka_broker(test_state):
    broker = KafkaBroker(port=TEST_KAFKA_PORT, home=test_state / "kafka", jvm_options=TEST_JVM_OPTIONS)
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

    from offsetbatch.dag.spark_jars import spark_connector_jars

    session = (
        SparkSession.builder.master("local[2]").appName("offsetbatch-tests")
        .config("spark.jars", ",".join(spark_connector_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", " ".join(TEST_JVM_OPTIONS))
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
        # The shared Connect server of the modules marked spark_connect (started when one needs it), as
        # the default runner's connection: every pipeline the harness writes names its runner, and
        # one that does not (a bundled sample) runs there as it would on the local stack's.
        f"AIRFLOW_CONN_{CONNECT_CONN_ID.upper()}": json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1",
                                                                "port": TEST_CONNECT_PORT}),
        "OFFSETBATCH_HOME": str(test_state),
    }
    env.pop("OFFSETBATCH_FAULTS", None)
    res = subprocess.run(["airflow", "db", "migrate"], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    RUNNER.serve(env)  # the DAG runs under these settings fork from one warm process (harness.DagRunner)
    return env


@pytest.fixture(scope="session")
def spark_connect_server(test_state):
    """One Spark Connect server (``local[2]``) per worker for the modules marked ``spark_connect``:
    their runs' spark_job tasks are Connect clients, without a spark-submit and a Spark start each.
    S3A is on its classpath too, for the sinks on a bucket (test_object_storage)."""
    from offsetbatch.dag.spark_jars import spark_connector_jars, spark_s3a_jars

    server = SparkConnectServer(port=TEST_CONNECT_PORT, master="local[2]", home=test_state / "spark-connect-shared",
                                jars=spark_connector_jars() + spark_s3a_jars(),
                                conf={"spark.sql.shuffle.partitions": "2",
                                      "spark.driver.extraJavaOptions": " ".join(TEST_JVM_OPTIONS)})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_pipeline(airflow_env, kafka_broker, test_state, request):
    """Factory of pipelines under test, each with its own topic, SQLite ledger and table. In a module
    marked ``spark_connect`` the pipelines' Spark jobs run on the shared Connect server."""
    import re

    from harness import Pipeline

    made = []
    on_connect = request.node.get_closest_marker("spark_connect") is not None
    if on_connect:
        request.getfixturevalue("spark_connect_server")

    def make(suffix: str = "", ledger_url: str | None = None, **overrides):
        if on_connect:  # the default connection (CONNECT_CONN_ID), named by no pipeline
            overrides = {**overrides, "spark": {"runner": "connect", **overrides.get("spark", {})}}
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


@pytest.fixture(scope="module")
def spark_standalone(test_state):
    """A Spark standalone master with one 2-core worker, for the runs on "the cluster connection"
    (issue 17); see ``harness.cluster_pipeline``. Per module, as the clusters below."""
    spark = SparkCluster(port=worker_port(27077), ui_port=worker_port(27180), workers=1, cores=2, memory="1g",
                         home=test_state / "cluster-spark")
    spark.start()
    yield spark
    spark.stop()


@pytest.fixture(scope="module")
def clusters(test_state, spark_standalone):
    """``spark_standalone`` and a three-broker Kafka (replication 3, min ISR 2). Per module: idle,
    the three KRaft nodes still take about 8% of a core each."""
    kafka = KafkaCluster(port=worker_port(23192), home=test_state / "cluster-kafka")
    kafka.wipe()
    kafka.start()
    yield kafka, spark_standalone
    kafka.wipe()


@pytest.fixture(scope="module")
def s3_server(test_state):
    """S3Proxy (a real S3 REST API, objects in its memory) on loopback: the object store of the S3
    sink tests (issue 27), each of which makes a bucket of its own; ``tables`` serves doctor's
    checks. Per module: only those modules use it."""
    server = S3Server(port=worker_port(19500), home=test_state / "s3", buckets=["tables"])
    server.start()
    yield server
    server.stop()


TEST_KAFKA_SECURE_PORT = worker_port(19192)  # its controller listener takes the next port


@pytest.fixture(scope="session")
def secure_kafka_broker(test_state):
    """A SASL_SSL (SCRAM-SHA-512) broker with ACLs on (issue 16): users ``admin`` (super user) and
    ``pipeline`` (only what ``grant_pipeline`` gives it), a local CA in ``broker.ca_file``. One
    broker serves the authentication and the authorization tests."""
    broker = KafkaBroker(port=TEST_KAFKA_SECURE_PORT, home=test_state / "kafka-secure", security="sasl_ssl", acl=True,
                         jvm_options=TEST_JVM_OPTIONS)
    broker.wipe()
    broker.start()
    yield broker
    broker.stop()
