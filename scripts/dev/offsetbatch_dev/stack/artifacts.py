"""Resolve Java artifacts from Maven Central once, into the ignored ``.cache/`` folder.

The Kafka broker and Spark's Kafka connector are plain Maven dependency trees; Maven
(``mvn dependency:copy-dependencies``) is the ordinary client that resolves them. After this has
run once, neither the broker nor Spark needs the network.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from offsetbatch.dag.spark_jars import spark_connector_dir, spark_s3a_dir
from offsetbatch.errors import ArtifactError
from offsetbatch.paths import cache_dir

from offsetbatch_dev import PROJECT_ROOT

log = logging.getLogger(__name__)

MAVEN_DIR = PROJECT_ROOT / "scripts" / "maven"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
KAFKA_VERSION = re.search(
    r"<kafka.version>([^<]+)<", (MAVEN_DIR / "kafka-broker.pom.xml").read_text()
).group(1)


def kafka_libs_dir() -> Path:
    return cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"


def _ensure_maven() -> str:
    mvn = shutil.which("mvn")
    if mvn:
        return mvn
    if os.geteuid() != 0:
        raise ArtifactError("Maven ('mvn') is not installed; install Debian's 'maven' package and retry.")
    log.info("installing Debian package 'maven'")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "maven"], check=True)
    return shutil.which("mvn") or "mvn"


def _resolve(pom: str, out: Path) -> None:
    """Copy ``pom``'s runtime dependencies into ``out`` once; again when the pom changed since (the
    marker holds the pom's digest, so a checkout that pulls a new dependency gets it at 'make setup')."""
    marker = out / ".complete"
    digest = hashlib.sha256((MAVEN_DIR / pom).read_bytes()).hexdigest()
    if marker.exists() and marker.read_text().strip() == digest:
        return
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = [
        _ensure_maven(), "-B", "-q",
        "-s", str(MAVEN_DIR / "settings.xml"),
        "-f", str(MAVEN_DIR / pom),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out}",
    ]
    log.info("resolving %s from Maven Central into %s", pom, out)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ArtifactError(
            f"Maven could not resolve {pom} (exit {result.returncode}). Check that Maven Central is "
            f"reachable, then run 'make setup' again.\n{result.stdout[-3000:]}{result.stderr[-2000:]}"
        )
    marker.write_text(digest + "\n")


def _pyspark_jar_names() -> set[str]:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {_artifact_id(p.name) for p in jars.glob("*.jar")}


def _artifact_id(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.\-]*\.jar$", "", jar_name)


def fetch_kafka() -> Path:
    """The broker's jar folder, resolved if missing."""
    _resolve("kafka-broker.pom.xml", kafka_libs_dir())
    return kafka_libs_dir()


def _fetch_spark_jars(pom: str, out: Path) -> Path:
    """Resolve ``pom`` into ``out``, minus the jars PySpark already ships (two copies of a jar on
    one classpath is how NoSuchMethodErrors are born)."""
    _resolve(pom, out)
    shipped = _pyspark_jar_names()
    for jar in out.glob("*.jar"):
        if _artifact_id(jar.name) in shipped:
            jar.unlink()
    return out


def fetch_spark_connector() -> Path:
    """Spark's Kafka source jars."""
    return _fetch_spark_jars("spark-kafka-connector.pom.xml", spark_connector_dir())


def fetch_spark_s3a() -> Path:
    """hadoop-aws, the AWS SDK bundle it declares, and spark-hadoop-cloud (the magic committer)."""
    return _fetch_spark_jars("spark-s3a-connector.pom.xml", spark_s3a_dir())


def s3proxy_jar() -> Path:
    return cache_dir() / "s3proxy" / "s3proxy-2.6.0-jar-with-dependencies.jar"


def fetch_s3proxy() -> Path:
    """S3Proxy's self-contained jar (the S3 server of the tests and the local stack)."""
    _resolve("s3proxy.pom.xml", s3proxy_jar().parent)
    return s3proxy_jar()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    print(f"kafka broker jars: {fetch_kafka()}")
    print(f"spark connector jars: {fetch_spark_connector()}")
    print(f"spark s3a jars: {fetch_spark_s3a()}")
    print(f"s3proxy: {fetch_s3proxy()}")
