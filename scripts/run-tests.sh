#!/usr/bin/env bash
# The whole suite. pytest exits 5 when it collected nothing: that is a failure here, not a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
# Two workers (pytest-xdist), each with its own broker, PostgreSQL, Airflow DB and ports (tests/harness.py,
# worker_port); a test file stays on one worker. OFFSETBATCH_TEST_WORKERS=0 runs in one process.
workers="${OFFSETBATCH_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  pytest "$@"
else
  pytest -n "$workers" --dist loadfile "$@"
fi
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$rc"
