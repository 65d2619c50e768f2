# syntax=docker/dockerfile:1
# The image of every docker-compose service that runs tasks or Spark (Airflow's, and the Spark
# master and worker): the official Airflow 3.3.2 image (Debian 12 "bookworm", Python 3.11, a
# virtualenv in /home/airflow/.local first on PATH) plus
#   * a Java runtime: spark-submit runs the Spark driver in the Airflow worker (client deploy mode,
#     the only one standalone offers Python applications), and the Spark daemons run on it;
#   * the project's pinned Python tree (requirements.txt + constraints.txt), pyspark installed last,
#     as scripts/setup.sh does, so driver, executors and daemons share one Python and one pyspark;
#   * Spark's Kafka connector jars, resolved from Maven Central at build time (nothing at run time);
#   * the project (dags, plugins, include, jobs) under /opt/offsetbatch; compose mounts the working
#     tree over it for development.
# No secret is copied: passwords and connections come from the environment at run time
# (.dockerignore keeps .local/, .cache/, .venv/ and .git/ out of the build context).
#
#   docker compose build          # or: docker build -t offsetbatch-airflow:3.3.2-spark4.3.0 .
#
# Apt pins: `=17.0.*` holds the Java feature release Spark 4.3 runs on while taking Debian's
# security updates (an exact Debian revision is removed from the archive when superseded, which
# would break every later build). The Airflow tag is pinned; pin its digest too
# (`apache/airflow:3.3.2-python3.11@sha256:...`) once you have pulled it from your registry.

# --- Spark's Kafka connector jars: Maven, from Maven Central only (scripts/maven/settings.xml) ------
FROM apache/airflow:3.3.2-python3.11 AS connector-jars
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends "openjdk-17-jre-headless=17.0.*" "maven=3.8.7-*" \
 && rm -rf /var/lib/apt/lists/*
COPY scripts/maven /build/maven
RUN mvn -B -q -s /build/maven/settings.xml -f /build/maven/spark-kafka-connector.pom.xml \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory=/build/spark-kafka/jars \
 && touch /build/spark-kafka/jars/.complete

# --- the runtime image ------------------------------------------------------------------------------
FROM apache/airflow:3.3.2-python3.11
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends "openjdk-17-jre-headless=17.0.*" \
 && apt-get autoremove -yqq --purge \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /opt/offsetbatch/state \
 && chown -R airflow:0 /opt/offsetbatch
USER airflow

COPY --chown=airflow:0 requirements.txt constraints.txt /opt/offsetbatch/
RUN pip install --no-cache-dir -r /opt/offsetbatch/requirements.txt -c /opt/offsetbatch/constraints.txt \
 && pip install --no-cache-dir --force-reinstall --no-deps "$(grep -E '^pyspark==' /opt/offsetbatch/requirements.txt)"

COPY --chown=airflow:0 include /opt/offsetbatch/include
COPY --chown=airflow:0 jobs /opt/offsetbatch/jobs
COPY --chown=airflow:0 dags /opt/offsetbatch/dags
COPY --chown=airflow:0 plugins /opt/offsetbatch/plugins
COPY --from=connector-jars --chown=airflow:0 /build/spark-kafka/jars /opt/offsetbatch/.cache/spark-kafka/jars

# PYSPARK_PYTHON: the image's virtualenv python (first on PATH), in the driver (Airflow worker) and
# in the executors the Spark worker starts from this same image.
ENV PYTHONPATH=/opt/offsetbatch/include \
    OFFSETBATCH_HOME=/opt/offsetbatch/state \
    OFFSETBATCH_CACHE=/opt/offsetbatch/.cache \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/offsetbatch/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/opt/offsetbatch/plugins \
    PYSPARK_PYTHON=python \
    PYSPARK_DRIVER_PYTHON=python

# Drop the connector jars pyspark already ships (two copies of a jar on one classpath): a jar goes
# when pyspark/jars has one of the same artifact id (the name up to its first "-<digit>"), as
# `make setup` does. Then prove the driver side imports: pyspark (not pyspark-client) won, and the
# runtime's own lookup (offsetbatch.dag.spark_jars) finds the connector complete. Nothing of the
# development tooling (scripts/dev, offsetbatch_dev) is in the build context or imported here.
RUN shipped="$(python -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')" \
 && for jar in /opt/offsetbatch/.cache/spark-kafka/jars/*.jar; do \
      id="$(basename "$jar" | sed -E 's/-[0-9][A-Za-z0-9_.-]*\.jar$//')"; \
      if ls "$shipped/$id"-[0-9]*.jar >/dev/null 2>&1; then rm "$jar"; fi; \
    done \
 && python -c "from offsetbatch.dag.spark_jars import spark_connector_jars; jars = spark_connector_jars(); assert any('spark-sql-kafka' in j for j in jars), jars; print(*jars, sep='\n')" \
 && python -c "import pyspark, airflow; assert pyspark.__version__ == '4.3.0', pyspark.__version__; print('pyspark', pyspark.__version__, 'airflow', airflow.__version__)" \
 && java -version
