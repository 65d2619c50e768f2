"""The installed Python tree is the one the project pins (docs/architecture.md, Airflow facts the code relies on)."""

from __future__ import annotations

import importlib.metadata as md
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_pinned_versions():
    assert md.version("apache-airflow") == "3.3.2"
    assert md.version("apache-airflow-providers-apache-spark").startswith("6.3.")
    assert md.version("kafka-python").startswith("3.0.")
    assert md.version("sqlalchemy").startswith("2.")
    assert md.version("pyspark") == "4.3.0"


def test_full_pyspark_wins_over_pyspark_client(spark):
    """pyspark-client (pulled by the Spark provider) ships a pyspark/ package without the JVM
    side; the full one must be what imports, with its jars, and must run a local job."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    assert pyspark.__version__ == "4.3.0"
    assert sorted(p.name for p in jars.glob("spark-core_2.13-*.jar")) == ["spark-core_2.13-4.3.0.jar"]
    assert spark.version == "4.3.0"
    assert spark.range(1000).selectExpr("sum(id) AS s").collect()[0].s == 499500
