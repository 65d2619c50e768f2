# The image of every docker-compose service that runs tasks or Spark: Airflow's api-server,
# scheduler, dag-processor and triggerer, the Spark master, worker and Spark Connect server.
#
#   docker build -t offsetbatch:0.1.0 .          # what scripts/deploy.sh build runs
#
# Debian 12 "bookworm" with Debian's own Python 3.11 and Java 17, and in one virtualenv
# (/opt/venv, first on PATH):
#   * the offsetbatch wheel, built from this checkout in the `wheel` stage: its Spark application,
#     its UI plugin (the `airflow.plugins` entry point) and the CLI come with it;
#   * the pinned runtime tree (the runtime part of requirements.txt with constraints.txt), pyspark
#     installed last as `make setup` does, so the Airflow worker (the Spark driver), the executors
#     and the Spark daemons share one Python and one pyspark;
#   * Spark's Kafka connector jars, resolved from Maven Central in the `jars` stage (nothing is
#     downloaded at run time), found through OFFSETBATCH_SPARK_JARS;
#   * the sample pipelines (/opt/offsetbatch/pipelines) and the two-line DAG file (/opt/offsetbatch/dags).
#
# Base image: `debian:bookworm-slim`, the one a user pulls. The deployment test
# (tests/deploy/test_compose_stack.py) runs where no registry is reachable, so scripts/deploy.sh
# builds an image of that name from Debian's packages (debootstrap --variant=minbase bookworm +
# docker import) when none is present: the only layer that differs from a user's build. BASE_IMAGE
# picks another Debian 12 base (a mirror of your registry).
#
# Behind a TLS-intercepting proxy, put its CA certificates in scripts/docker/ca-certificates/ (see
# the README there). No secret is copied: passwords and connections come from the environment at
# run time (.dockerignore keeps .local/, .cache/, .venv/, .git/, tests/ and scripts/dev/ out).
#
# Apt pins: `=17.0.*` holds the Java feature release Spark 4.3 runs on while taking Debian's
# security updates (an exact Debian revision leaves the archive when superseded).
ARG BASE_IMAGE=debian:bookworm-slim

# --- Debian, its Python and Java: shared by every stage ---------------------------------------------
FROM ${BASE_IMAGE} AS os
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
COPY scripts/docker/ca-certificates/ /usr/local/share/ca-certificates/offsetbatch-build/
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && update-ca-certificates \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv "openjdk-17-jre-headless=17.0.*" \
      dumb-init procps \
 && apt-get clean && rm -rf /var/lib/apt/lists/*

# --- Spark's Kafka connector jars: Maven, from Maven Central only (scripts/maven/settings.xml) ------
FROM os AS jars
RUN apt-get update && apt-get install -y --no-install-recommends "maven=3.8.7-*" && rm -rf /var/lib/apt/lists/*
COPY scripts/maven /build/maven
RUN mvn -B -q -s /build/maven/settings.xml -f /build/maven/spark-kafka-connector.pom.xml \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory=/build/jars

# --- the wheel, as `pip wheel .` builds it ------------------------------------------------------------
FROM os AS wheel
COPY pyproject.toml README.md /src/
COPY include/offsetbatch /src/include/offsetbatch
RUN python3.11 -m venv /build/venv \
 && /build/venv/bin/pip wheel --no-cache-dir --no-deps -w /build/dist /src

# --- the runtime image ------------------------------------------------------------------------------
FROM os
# Airflow's own image conventions: user airflow (uid 50000, group 0), AIRFLOW_HOME /opt/airflow.
RUN useradd --uid 50000 --gid 0 --home-dir /opt/airflow --create-home --shell /bin/bash airflow \
 && mkdir -p /opt/venv /opt/offsetbatch/state && chown -R airflow:0 /opt/venv /opt/offsetbatch
USER airflow
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH AIRFLOW_HOME=/opt/airflow

# The runtime part of requirements.txt (everything above its "development only" line).
COPY --chown=airflow:0 requirements.txt constraints.txt /opt/offsetbatch/
# pyspark comes as an sdist (456 MB): one pip cache for both installs, so it is downloaded and built once.
RUN sed '/^# ---- development only below/,$d' /opt/offsetbatch/requirements.txt > /opt/offsetbatch/runtime.txt \
 && python3.11 -m venv /opt/venv \
 && export PIP_CACHE_DIR=/tmp/pip-cache \
 && pip install -r /opt/offsetbatch/runtime.txt -c /opt/offsetbatch/constraints.txt \
 && pip install --force-reinstall --no-deps "$(grep -E '^pyspark==' /opt/offsetbatch/runtime.txt)" \
 && rm -rf /tmp/pip-cache

COPY --from=wheel /build/dist/ /tmp/dist/
RUN pip install --no-cache-dir --no-deps /tmp/dist/offsetbatch-*.whl

COPY --from=jars --chown=airflow:0 /build/jars /opt/offsetbatch/jars
COPY --chown=airflow:0 include/pipelines /opt/offsetbatch/pipelines
COPY --chown=airflow:0 dags/offsetbatch_pipelines.py dags/offsetbatch_pipeline_errors.py /opt/offsetbatch/dags/

# PYSPARK_PYTHON: the virtualenv's python, in the driver (Airflow worker) and in the executors the
# Spark worker starts from this same image.
ENV OFFSETBATCH_HOME=/opt/offsetbatch/state \
    OFFSETBATCH_PIPELINES=/opt/offsetbatch/pipelines \
    OFFSETBATCH_SPARK_JARS=/opt/offsetbatch/jars \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/offsetbatch/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=false \
    PYSPARK_PYTHON=/opt/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/venv/bin/python

# /opt/airflow/auth: the mount point of compose's airflow-auth volume (the admin's password file),
# made here so that the volume is the airflow user's. Drop the connector jars pyspark already ships (two copies of a jar on one classpath): a jar goes
# when pyspark/jars has one of the same artifact id, as `make setup` does. Then prove the image: the
# packaged Spark application, pyspark (not pyspark-client) and the runtime's own jar lookup.
RUN shipped="$(python -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')" \
 && for jar in /opt/offsetbatch/jars/*.jar; do \
      id="$(basename "$jar" | sed -E 's/-[0-9][A-Za-z0-9_.-]*\.jar$//')"; \
      if ls "$shipped/$id"-[0-9]*.jar >/dev/null 2>&1; then rm "$jar"; fi; \
    done \
 && mkdir -p /opt/airflow/auth \
 && python -c "from offsetbatch.dag.spark_jars import spark_connector_jars; print(*spark_connector_jars(), sep='\n')" \
 && python -c "import pyspark, airflow, offsetbatch.paths as p; assert pyspark.__version__ == '4.3.0' and p.CHECKOUT is None and p.SPARK_APP.is_file(); print('pyspark', pyspark.__version__, 'airflow', airflow.__version__)" \
 && java -version

WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/dumb-init", "--", "airflow"]
CMD ["version"]
