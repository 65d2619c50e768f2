"""Shared fixtures: a real Kafka broker and a real PostgreSQL cluster for the whole test session.

Both run on non-default loopback ports with their state under ``.local/tests/`` (PostgreSQL runs
as the ``postgres`` user, which cannot enter pytest's root-only temp folders), so the suite never
disturbs a stack started by the README's demo command.
"""

from __future__ import annotations

import logging
import shutil

import pytest

from offsetbatch.devstack.kafka_broker import KafkaBroker
from offsetbatch.devstack.postgres import PostgresCluster
from offsetbatch.paths import PROJECT_ROOT

TEST_STATE = PROJECT_ROOT / ".local" / "tests"
TEST_KAFKA_PORT = 19092
TEST_PG_PORT = 55432

logging.getLogger("kafka").setLevel(logging.WARNING)


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

    from offsetbatch.devstack.artifacts import spark_connector_jars

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
