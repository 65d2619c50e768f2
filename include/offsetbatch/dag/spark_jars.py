"""Spark's Kafka connector jars, Spark's Avro functions for the Avro value formats, and Hadoop's S3A
for a sink on an S3 API, as the runtime needs them: handed to ``spark-submit --jars``.

Two places, in this order:

* ``OFFSETBATCH_SPARK_JARS``: a folder of jars you provide (an installed package in an Airflow of
  your own: your image, MWAA, Composer). Every ``*.jar`` in it is handed to Spark. It must hold the
  Kafka connector (spark-sql-kafka-0-10_2.13, spark-token-provider-kafka-0-10_2.13, kafka-clients,
  commons-pool2), spark-avro_2.13 for the ``avro`` and ``confluent-avro`` value formats, and
  hadoop-aws with the AWS SDK bundle for a sink on S3.
* otherwise the cache folder, filled once from Maven Central: by ``make setup`` in a checkout, by the
  Dockerfile's Maven stage in the image.

At run time nothing is downloaded, and a missing jar is a clear error naming the folder and the jar.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from offsetbatch.errors import ArtifactError
from offsetbatch.paths import cache_dir

if TYPE_CHECKING:
    from offsetbatch.formats import ValueFormat

ENV = "OFFSETBATCH_SPARK_JARS"
# What each feature needs, by artifact id (a jar's file name up to its version).
CONNECTOR = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients", "commons-pool2")
S3A = ("hadoop-aws", "bundle")
# A value format's jars (``ValueFormat.jars``) are cached with the connector's
# (scripts/maven/spark-kafka-connector.pom.xml).
_HOW = (f"Set {ENV} to a folder holding them (README, 'Add offsetbatch to an existing Airflow', lists the Maven "
        f"coordinates), or in a checkout run 'make setup' (needs Maven Central once).")


def spark_connector_dir() -> Path:
    return cache_dir() / "spark-kafka" / "jars"


def spark_s3a_dir() -> Path:
    return cache_dir() / "spark-s3a" / "jars"


def spark_connector_jars() -> list[str]:
    """Absolute paths of the connector jars, for ``spark.jars`` / ``spark-submit --jars``."""
    if folder := _provided():
        return _require(folder, CONNECTOR, "Spark's Kafka connector", "")
    return _cached(spark_connector_dir(), "Spark's Kafka connector", "")


def spark_s3a_jars() -> list[str]:
    """hadoop-aws and the AWS SDK bundle (about 700 MB): only for pipelines whose sink is on S3."""
    why = ", and this pipeline's sink is on S3"
    if folder := _provided():
        _require(folder, S3A, "Hadoop's S3A connector (hadoop-aws)", why)
        return []  # already among the folder's jars
    return _cached(spark_s3a_dir(), "Hadoop's S3A connector (hadoop-aws)", why)


def format_jars(fmt: "type[ValueFormat]") -> list[str]:
    """Checks that the jars a value format needs (``ValueFormat.jars``, such as spark-avro_2.13 for
    the Avro formats) are there: they are cached with the connector's, or in the provided folder."""
    if not fmt.jars:
        return []
    what, why = f"the Spark jars of value format {fmt.name!r}", ", which this pipeline parses with"
    if folder := _provided():
        _require(folder, fmt.jars, what, why)
    else:
        jars = _cached(spark_connector_dir(), what, why)
        missing = sorted(set(fmt.jars) - {_artifact(Path(j)) for j in jars})
        if missing:
            raise ArtifactError(f"{', '.join(missing)} ({what}) is not in {spark_connector_dir()}{why}: the cache "
                                f"predates it. {_HOW}")
    return []  # among the connector's jars


def job_jars(sink_path: str, *formats: str) -> list[str]:
    """Every jar the job of a pipeline whose sink is at ``sink_path`` and whose values and keys are
    in ``formats`` needs."""
    from offsetbatch import storage
    from offsetbatch.formats import format_of

    return (spark_connector_jars() + [j for f in dict.fromkeys(formats) for j in format_jars(format_of(f))]
            + (spark_s3a_jars() if storage.is_s3(sink_path) else []))


def _provided() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def _artifact(jar: Path) -> str:
    """``spark-sql-kafka-0-10_2.13-4.2.0.jar`` -> ``spark-sql-kafka-0-10_2.13``: the name without its
    trailing ``-<version>``."""
    return re.sub(r"-\d[^-]*$", "", jar.stem)


def _require(folder: Path, needed: tuple[str, ...], what: str, why: str) -> list[str]:
    if not folder.is_dir():
        raise ArtifactError(f"{ENV}={folder} is not a folder; it must hold {what}'s jars{why}. {_HOW}")
    jars = sorted(folder.glob("*.jar"))
    missing = sorted(set(needed) - {_artifact(j) for j in jars})
    if missing:
        raise ArtifactError(f"{ENV}={folder} has no jar of {', '.join(missing)} ({what}{why}). {_HOW}")
    _check_archives([j for j in jars if _artifact(j) in needed], f"{ENV}={folder}", what)
    return [str(j) for j in jars]


def _check_archives(jars: list[Path], where: str, what: str) -> None:
    """A jar that is not a zip archive (an empty file, a truncated download, an HTML error page
    saved under the jar's name) passes the name check and fails in Spark as "Failed to find data
    source: kafka", retried; refused here instead, naming it."""
    broken = [f"{j.name} ({j.stat().st_size} bytes)" for j in jars if not zipfile.is_zipfile(j)]
    if broken:
        raise ArtifactError(f"{where}: {', '.join(broken)} is not a jar (not a zip archive: an empty file or a "
                            f"truncated download?), and {what} needs it. Download it again. {_HOW}")


def _cached(out: Path, what: str, why: str) -> list[str]:
    if not (out / ".complete").exists():
        raise ArtifactError(f"{what} is not cached in {out}{why}. {_HOW}")
    jars = sorted(out.glob("*.jar"))
    _check_archives(jars, str(out), what)
    return [str(p) for p in jars]
