"""What an offsetbatch installed from the wheel (no checkout) finds on its own: where its state and
caches go, where its pipelines come from, and the Spark jars a user provides through
OFFSETBATCH_SPARK_JARS, with errors that name the folder and the missing jar."""

from __future__ import annotations

import pytest
from fake_jars import fake_jar

from offsetbatch import paths
from offsetbatch.config import installed
from offsetbatch.dag import spark_jars
from offsetbatch.errors import ArtifactError

CONNECTOR = ["spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
             "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"]


@pytest.fixture
def wheel_install(monkeypatch, tmp_path):
    """The module state of an installed package: no checkout, no OFFSETBATCH_* settings."""
    monkeypatch.setattr(paths, "CHECKOUT", None)
    monkeypatch.setattr(installed, "PIPELINES_DIR", None)
    for name in ("OFFSETBATCH_HOME", "OFFSETBATCH_CACHE", "OFFSETBATCH_PIPELINES", "OFFSETBATCH_SPARK_JARS",
                 "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def test_the_checkout_is_found_and_its_spark_app_is_the_packaged_one():
    assert paths.CHECKOUT is not None and (paths.CHECKOUT / "jobs" / "offsetbatch_job.py").resolve() == paths.SPARK_APP
    assert paths.SPARK_APP.parent.parent == paths.PACKAGE_DIR / "job"
    assert sorted(p.name for p in paths.SPARK_APP.parent.iterdir() if p.suffix == ".py") == ["offsetbatch_job.py"]


def test_an_installed_package_keeps_state_under_airflow_home_and_caches_under_xdg(wheel_install):
    assert paths.local_dir() == wheel_install / "airflow" / "offsetbatch"
    assert paths.cache_dir() == wheel_install / "home" / ".cache" / "offsetbatch"
    assert paths.bundled_pipelines_dir() is None


def test_an_installed_package_without_offsetbatch_pipelines_says_what_to_set(wheel_install, monkeypatch):
    found = installed.read()
    assert found.configs == {} and found.missing == (installed.UNSET,)
    assert "set OFFSETBATCH_PIPELINES" in installed.UNSET
    folder = wheel_install / "pipelines"
    folder.mkdir()
    monkeypatch.setenv("OFFSETBATCH_PIPELINES", str(folder))
    assert installed.read().missing == ()


def test_offsetbatch_spark_jars_hands_every_jar_of_the_folder_to_spark(wheel_install, monkeypatch):
    folder = wheel_install / "jars"
    folder.mkdir()
    for name in [*CONNECTOR, "extra-udfs-1.0.jar"]:
        fake_jar(folder / name)
    monkeypatch.setenv("OFFSETBATCH_SPARK_JARS", str(folder))
    assert spark_jars.job_jars("/data/table") == sorted(str(folder / n) for n in [*CONNECTOR, "extra-udfs-1.0.jar"])
    with pytest.raises(ArtifactError, match=r"OFFSETBATCH_SPARK_JARS=.*/jars has no jar of bundle, hadoop-aws "
                                            r"\(Hadoop's S3A connector \(hadoop-aws\), and this pipeline's sink is on S3\)"):
        spark_jars.job_jars("s3a://bucket/table")
    for name in ("hadoop-aws-3.5.0.jar", "bundle-2.35.4.jar"):
        fake_jar(folder / name)
    assert len(spark_jars.job_jars("s3a://bucket/table")) == 7


@pytest.mark.parametrize("present, missing", [
    (CONNECTOR[1:], "spark-sql-kafka-0-10_2.13"),
    (CONNECTOR[:2], "commons-pool2, kafka-clients"),
])
def test_a_jar_folder_without_the_connector_names_what_is_missing(wheel_install, monkeypatch, present, missing):
    folder = wheel_install / "jars"
    folder.mkdir()
    for name in present:
        fake_jar(folder / name)
    monkeypatch.setenv("OFFSETBATCH_SPARK_JARS", str(folder))
    with pytest.raises(ArtifactError, match=f"has no jar of {missing} \\(Spark's Kafka connector\\)"):
        spark_jars.spark_connector_jars()


def test_no_jar_folder_and_no_cache_is_an_error_that_says_how_to_provide_them(wheel_install, monkeypatch):
    monkeypatch.setenv("OFFSETBATCH_SPARK_JARS", str(wheel_install / "nowhere"))
    with pytest.raises(ArtifactError, match="OFFSETBATCH_SPARK_JARS=.*/nowhere is not a folder"):
        spark_jars.spark_connector_jars()
    monkeypatch.delenv("OFFSETBATCH_SPARK_JARS")
    with pytest.raises(ArtifactError, match=r"is not cached in .*/\.cache/offsetbatch/spark-kafka/jars\. "
                                            r"Set OFFSETBATCH_SPARK_JARS to a folder"):
        spark_jars.spark_connector_jars()
