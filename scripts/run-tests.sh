#!/usr/bin/env bash
# The whole suite. pytest exits 5 when it collected nothing: that is a failure here, not a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests; failing" >&2
  exit 1
fi
exit "$rc"
