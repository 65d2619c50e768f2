#!/usr/bin/env bash
# README command (a), after `make setup`: the sample pipeline end to end (offsetbatch_dev.demo).
# DEMO_SINK=iceberg (make demo SINK=iceberg) and DEMO_FORMAT=avro or protobuf (make demo FORMAT=avro) pick its variants.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
exec python -m offsetbatch_dev.demo
