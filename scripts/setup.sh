#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine, idempotently (a second run takes seconds):
#   1. Debian packages: PostgreSQL server (production ledger option), docker-compose (schema check
#      of docker-compose.yaml; no engine needed), Chromium (UI browser test), Maven if missing.
#   2. .venv with the pinned Python tree (requirements.txt + constraints.txt), pyspark last.
#   3. Kafka broker, Spark Kafka connector, Hadoop S3A (tables on S3) and S3Proxy (the tests' S3 API)
#      jars from Maven Central, cached in .cache/.
#   4. Airflow metadata database (SQLite) in the project's Airflow home ($OFFSETBATCH_HOME/airflow, or
#      AIRFLOW_HOME), and a one-slot pool per installed pipeline there: run it again after changing
#      OFFSETBATCH_HOME or AIRFLOW_HOME, or after adding a pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '%s setup: %s\n' "$(date +%H:%M:%S)" "$*"; }

need_pkgs=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_pkgs+=(postgresql)
command -v docker-compose >/dev/null || need_pkgs+=(docker-compose)
command -v mvn >/dev/null || need_pkgs+=(maven)
command -v java >/dev/null || need_pkgs+=(openjdk-17-jre-headless)
[ -x /usr/bin/chromium ] || need_pkgs+=(chromium)  # the UI plugin's browser test (headless)
if ((${#need_pkgs[@]})); then
  log "installing Debian packages: ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), f"Python 3.11 is required, found {sys.version}"'
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ requirements.txt -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/dev/pyproject.toml -nt "$stamp" ]; then
  log "creating .venv and installing pinned Python packages (requirements.txt, constraints.txt)"
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt -c constraints.txt
  # The Spark provider pulls pyspark-client, which overwrites pyspark's files: reinstall pyspark last.
  pyspark_pin=$(grep -E '^pyspark==' requirements.txt)
  .venv/bin/pip install -q --force-reinstall --no-deps "$pyspark_pin"
  .venv/bin/pip install -q --no-deps -e .
  .venv/bin/pip install -q --no-deps -e scripts/dev  # development tooling (offsetbatch-stack), not in the runtime wheel
  touch "$stamp"
fi

# shellcheck source=scripts/env.sh
. scripts/env.sh
log "resolving Java artifacts (cached in .cache/)"
offsetbatch-stack fetch

if [ ! -f "$AIRFLOW_HOME/.migrated" ]; then
  log "migrating the Airflow metadata database in $AIRFLOW_HOME"
  mkdir -p "$AIRFLOW_HOME"
  airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 || { tail -30 "$AIRFLOW_HOME/db-migrate.log"; exit 1; }
  touch "$AIRFLOW_HOME/.migrated"
fi
# One-slot pool per pipeline (docs/architecture.md, Invariants: serialization): backfill runs bypass max_active_runs, the pool does not.
# Every installed pipeline (offsetbatch.config.installed: OFFSETBATCH_PIPELINES, as the DAGs, the UI and the CLI read it); a config that does not load gets no pool (warned).
offsetbatch pools > "$AIRFLOW_HOME/pools.json"
if ! cmp -s "$AIRFLOW_HOME/pools.json" "$AIRFLOW_HOME/pools.imported" 2>/dev/null; then
  airflow pools import "$AIRFLOW_HOME/pools.json" >/dev/null && cp "$AIRFLOW_HOME/pools.json" "$AIRFLOW_HOME/pools.imported"
  log "airflow pools: $(tr -d '\n' < "$AIRFLOW_HOME/pools.json" | cut -c1-120)"
fi
log "ready ($ROOT)"
