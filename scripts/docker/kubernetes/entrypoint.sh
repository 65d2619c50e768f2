#!/bin/bash
# /entrypoint of the Kubernetes image (scripts/docker/kubernetes/Dockerfile), under dumb-init. Two
# callers start containers of this image with arguments of their own:
#
# * the official Airflow Helm chart, written for the apache/airflow image: its containers pass
#   `bash -c "exec airflow scheduler"`, `airflow db check-migrations ...`, and its liveness probes run
#   `/entrypoint airflow jobs check ...` and `/entrypoint python -m celery ... inspect ping`. The
#   apache/airflow image's entrypoint runs `bash ...` and `python ...` as given, drops a leading
#   `airflow`, and runs anything else as `airflow <arguments>`; this does the same (without that
#   image's database and broker waits: the chart's wait-for-airflow-migrations containers wait);
# * Spark on Kubernetes, which starts every executor pod with the single argument `executor` and
#   SPARK_* variables, and expects the executor's JVM from Spark's own image entrypoint. pyspark's
#   jars are Spark's; SPARK_CLASSPATH holds spark.executor.extraClassPath (the connector jars).
#
# Not tested: nothing in this project runs Kubernetes (docs/architecture.md, "On Kubernetes").
set -euo pipefail

case "${1:-}" in
  executor)
    shift
    SPARK_HOME="$(python -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent)')"
    export SPARK_HOME
    # spark.executor.extraJavaOptions and Spark's own (Java 17's --add-opens), in their order.
    java_opts=()
    while IFS= read -r opt; do
      java_opts+=("$opt")
    done < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/^[^=]*=//')
    exec java "${java_opts[@]}" -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
      -cp "${SPARK_CLASSPATH:+${SPARK_CLASSPATH}:}${SPARK_HOME}/jars/*" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "${SPARK_DRIVER_URL}" --executor-id "${SPARK_EXECUTOR_ID}" --cores "${SPARK_EXECUTOR_CORES}" \
      --app-id "${SPARK_APPLICATION_ID}" --hostname "${SPARK_EXECUTOR_POD_IP}" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID}" --podName "${SPARK_EXECUTOR_POD_NAME}" "$@"
    ;;
  bash)
    shift
    exec /bin/bash "$@"
    ;;
  python)
    shift
    exec python "$@"
    ;;
  airflow)
    shift
    exec airflow "$@"
    ;;
  *)
    exec airflow "$@"
    ;;
esac
