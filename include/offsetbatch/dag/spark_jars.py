"""Spark's Kafka connector jars, and Hadoop's S3A for a sink on an S3 API, as the runtime needs
them: handed to ``spark-submit --jars``.

They are resolved once from Maven Central into the cache folder: by ``make setup``
(``offsetbatch-stack fetch``) in a checkout, by the Dockerfile's Maven stage in the image. At run
time nothing is downloaded, and a missing cache is a clear error.
"""

from __future__ import annotations

from pathlib import Path

from offsetbatch.errors import ArtifactError
from offsetbatch.paths import cache_dir


def spark_connector_dir() -> Path:
    return cache_dir() / "spark-kafka" / "jars"


def spark_connector_jars() -> list[str]:
    """Absolute paths of the cached connector jars, for ``spark.jars`` / ``spark-submit --jars``."""
    return _cached(spark_connector_dir(), "Spark's Kafka connector", "")


def spark_s3a_dir() -> Path:
    return cache_dir() / "spark-s3a" / "jars"


def spark_s3a_jars() -> list[str]:
    """hadoop-aws and the AWS SDK bundle (about 700 MB): only for pipelines whose sink is on S3."""
    return _cached(spark_s3a_dir(), "Hadoop's S3A connector (hadoop-aws)", ", and this pipeline's sink is on S3")


def _cached(out: Path, what: str, why: str) -> list[str]:
    if not (out / ".complete").exists():
        raise ArtifactError(f"{what} is not cached in {out}{why}. Run 'make setup' (needs Maven Central once).")
    return sorted(str(p) for p in out.glob("*.jar"))


def job_jars(sink_path: str) -> list[str]:
    """Every jar the job of a pipeline whose sink is at ``sink_path`` needs."""
    from offsetbatch import storage

    return spark_connector_jars() + (spark_s3a_jars() if storage.is_s3(sink_path) else [])
