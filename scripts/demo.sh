#!/usr/bin/env bash
# README command (a), after `make setup`: the sample pipeline end to end (offsetbatch_dev.demo).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
exec python -m offsetbatch_dev.demo
