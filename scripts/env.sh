# shellcheck shell=bash
# Source me (`. scripts/env.sh`): the environment for Airflow, Spark, Kafka and the ledger on the
# embedded defaults. Every value can be overridden by exporting it first.
OFFSETBATCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export OFFSETBATCH_ROOT
export PATH="$OFFSETBATCH_ROOT/.venv/bin:$PATH"
export OFFSETBATCH_HOME="${OFFSETBATCH_HOME:-$OFFSETBATCH_ROOT/.local}"
export KAFKA_PORT="${KAFKA_PORT:-9092}"
export PG_PORT="${PG_PORT:-54329}"
export SPARK_CONNECT_PORT="${SPARK_CONNECT_PORT:-15002}"

# Airflow: home, DAGs and plugins of this project, SQLite metadata, no examples.
export AIRFLOW_HOME="${AIRFLOW_HOME:-$OFFSETBATCH_HOME/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$OFFSETBATCH_ROOT/dags}"
export AIRFLOW__CORE__PLUGINS_FOLDER="${AIRFLOW__CORE__PLUGINS_FOLDER:-$OFFSETBATCH_ROOT/plugins}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export AIRFLOW__CORE__EXECUTOR="${AIRFLOW__CORE__EXECUTOR:-LocalExecutor}"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite:///$AIRFLOW_HOME/airflow.db}"
export AIRFLOW__API__HOST="${AIRFLOW__API__HOST:-127.0.0.1}"
export AIRFLOW__LOGGING__LOGGING_LEVEL="${AIRFLOW__LOGGING__LOGGING_LEVEL:-INFO}"
# The OpenLineage provider is installed (the suite tests the lineage it reports) but off until you
# give it a transport: README, Observability.
export AIRFLOW__OPENLINEAGE__DISABLED="${AIRFLOW__OPENLINEAGE__DISABLED:-True}"
# Runs the lag triggers ask for are created at most this many per scheduler loop, and Airflow picks
# them in no fixed order (asset-triggered DAGs have no next run date to sort by): below the number
# of lag-triggered pipelines, the same ones are served first every loop (docs/architecture.md,
# "A fleet on one Airflow"; offsetbatch doctor checks it).
export AIRFLOW__SCHEDULER__MAX_DAGRUNS_TO_CREATE_PER_LOOP="${AIRFLOW__SCHEDULER__MAX_DAGRUNS_TO_CREATE_PER_LOOP:-1000}"

# Connections, given as JSON (docs/architecture.md, Airflow facts the code relies on: a missing spark_default means master 'yarn'). Plain
# `if` blocks: a JSON default inside ${VAR:-...} would gain a stray '}' when sourced twice.
if [ -z "${AIRFLOW_CONN_KAFKA_DEFAULT:-}" ]; then
  export AIRFLOW_CONN_KAFKA_DEFAULT='{"conn_type":"kafka","extra":{"bootstrap.servers":"127.0.0.1:'"$KAFKA_PORT"'"}}'
fi
if [ -z "${AIRFLOW_CONN_SPARK_DEFAULT:-}" ]; then
  export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[*]","extra":{"deploy-mode":"client"}}'
fi
# The Spark Connect server pipelines run their job on unless spark.runner is spark-submit
# (offsetbatch-stack spark-connect start; make stack-up and make demo start it).
if [ -z "${AIRFLOW_CONN_SPARK_CONNECT_DEFAULT:-}" ]; then
  export AIRFLOW_CONN_SPARK_CONNECT_DEFAULT='{"conn_type":"spark_connect","host":"127.0.0.1","port":'"$SPARK_CONNECT_PORT"'}'
fi
if [ -z "${AIRFLOW_CONN_OFFSETBATCH_LEDGER:-}" ]; then
  export AIRFLOW_CONN_OFFSETBATCH_LEDGER='{"conn_type":"sqlite","host":"'"$OFFSETBATCH_HOME"'/ledger.db"}'
fi

# Spark: the driver binds to loopback only, and workers use this venv's Python.
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$OFFSETBATCH_ROOT/.venv/bin/python}"
export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$OFFSETBATCH_ROOT/.venv/bin/python}"
