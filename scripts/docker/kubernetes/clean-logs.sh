#!/bin/bash
# /clean-logs of the Kubernetes image: the official Airflow Helm chart's log-groomer sidecars run
# `bash /clean-logs`, a script of the apache/airflow image, next to the scheduler, the triggerer, the
# dag-processor and the Celery workers. It deletes task and component logs older than the chart's
# retention (AIRFLOW__LOG_RETENTION_DAYS, or AIRFLOW__LOG_RETENTION_MINUTES when above 0) every
# AIRFLOW__LOG_CLEANUP_FREQUENCY_MINUTES, and the folders that leaves empty.
#
# Not tested: nothing in this project runs Kubernetes (docs/architecture.md, "On Kubernetes").
set -euo pipefail

logs="${AIRFLOW_HOME:-/opt/airflow}/logs"
days="${AIRFLOW__LOG_RETENTION_DAYS:-15}"
minutes="${AIRFLOW__LOG_RETENTION_MINUTES:-0}"
every="${AIRFLOW__LOG_CLEANUP_FREQUENCY_MINUTES:-15}"
if [[ "${minutes}" -gt 0 ]]; then
  age=(-mmin "+${minutes}")
else
  age=(-mmin "+$((days * 1440))")
fi

while true; do
  echo "clean-logs: deleting logs under ${logs} older than ${age[1]#+} minutes"
  find "${logs}" -type f -name '*.log*' "${age[@]}" -delete 2>/dev/null || true
  find "${logs}" -mindepth 1 -type d -empty -delete 2>/dev/null || true
  sleep "$((every * 60))"
done
