"""Spark's Kafka connector jars, as the runtime needs them: handed to ``spark-submit --jars``.

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
    out = spark_connector_dir()
    if not (out / ".complete").exists():
        raise ArtifactError(
            f"Spark's Kafka connector is not cached in {out}. Run 'make setup' (needs Maven Central once)."
        )
    return sorted(str(p) for p in out.glob("*.jar"))
