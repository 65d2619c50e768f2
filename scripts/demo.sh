#!/usr/bin/env bash
# README command (a), after `make setup`: the sample pipeline end to end (offsetbatch.dev.demo).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
exec python -m offsetbatch.dev.demo
