#!/usr/bin/env bash
# The whole suite. pytest exits 5 when it collected nothing: that is a failure here, not a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
# Two workers (pytest-xdist), each with its own broker, PostgreSQL, Airflow DB and ports (tests/harness.py,
# worker_port); a test file stays on one worker, a test class too (--dist loadscope: the crash tests' two
# classes, local[2] and the cluster, run side by side), handed out heaviest first (tests/conftest.py,
# HEAVIEST_FIRST; xdist's own reordering is off). OFFSETBATCH_TEST_WORKERS=0 runs in one process. The 30 slowest tests
# are listed at the end, to keep the suite's time in view. The container deployment test (tests/deploy) runs
# after this, alone: scripts/test-deploy.sh.
workers="${OFFSETBATCH_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  pytest --durations=30 --ignore=tests/deploy "$@"
else
  pytest -n "$workers" --dist loadscope --no-loadscope-reorder --durations=30 --ignore=tests/deploy "$@"
fi
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$rc"
