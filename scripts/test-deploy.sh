#!/usr/bin/env bash
# The container deployment test (tests/deploy): builds the images and starts docker-compose.yaml's
# whole stack with scripts/deploy.sh, as the README's "Deploying" section does. Needs root, or sudo,
# the first time (Debian's docker.io, debootstrap). One process: the stack takes the machine.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
pytest -p no:xdist -p no:cacheprovider --durations=5 tests/deploy "$@"
rc=$?
echo "test-deploy: $(( $(date +%s) - start )) s; timeline in tests/artifacts/deploy-timeline.json"
[ -f tests/artifacts/deploy-timeline.json ] && cat tests/artifacts/deploy-timeline.json
exit "$rc"
