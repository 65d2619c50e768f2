#!/usr/bin/env bash
# The container stack of docker-compose.yaml, from a bare Debian machine to a running Airflow:
#
#   scripts/deploy.sh engine    Docker Engine and Compose: Debian's docker.io and docker-compose when
#                               missing (as root), dockerd started when not running
#   scripts/deploy.sh base      the Debian 12 base image (debian:bookworm-slim): pulled, or, where no
#                               registry is reachable, made from Debian's packages with debootstrap
#   scripts/deploy.sh build     the offsetbatch image (Dockerfile); with OFFSETBATCH_LOCAL_UPSTREAM=1
#                               also Kafka, PostgreSQL and Redis equivalents from Debian packages and
#                               Maven Central (scripts/docker/kafka, scripts/docker/postgres,
#                               scripts/docker/redis)
#   scripts/deploy.sh up        engine + base + build, then `compose up -d`; waits for Airflow's API
#   scripts/deploy.sh down      `compose down -v`: containers, networks and volumes
#   scripts/deploy.sh compose … any compose command with the stack's project name and secrets
#   scripts/deploy.sh secrets   print the file holding the stack's generated passwords
#
# Passwords are generated once into .local/deploy/secrets.env (mode 0600) unless already set in the
# environment. Settings: OFFSETBATCH_IMAGE (offsetbatch:0.1.0), BASE_IMAGE (debian:bookworm-slim),
# AIRFLOW_PORT (8080), COMPOSE_PROJECT_NAME (offsetbatch), OFFSETBATCH_LOCAL_UPSTREAM (0).
set -euo pipefail
# Debian installs dockerd in /usr/sbin, which a non-login or cleaned PATH (env -i, cron, CI) lacks
export PATH="$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."

STATE="${OFFSETBATCH_DEPLOY_STATE:-.local/deploy}"
export OFFSETBATCH_IMAGE="${OFFSETBATCH_IMAGE:-offsetbatch:0.1.0}"
export COMPOSE_PROJECT_NAME="${COMPOSE_PROJECT_NAME:-offsetbatch}"
BASE_IMAGE="${BASE_IMAGE:-debian:bookworm-slim}"
LOCAL_KAFKA_IMAGE=offsetbatch/kafka:4.1.1-debian
LOCAL_POSTGRES_IMAGE=offsetbatch/postgres:15-debian
LOCAL_REDIS_IMAGE=offsetbatch/redis:7-debian
mkdir -p "$STATE"

say() { printf 'deploy: %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# The classic builder where BuildKit's buildx plugin is absent (Debian's docker.io has none); the
# Dockerfiles need nothing BuildKit-only.
if ! docker buildx version >/dev/null 2>&1; then export DOCKER_BUILDKIT=0; fi

compose() {
  if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}

engine() {
  # An engine that answers (any install: Docker Desktop, a remote DOCKER_HOST) is used as it is.
  if docker info >/dev/null 2>&1 && compose version >/dev/null 2>&1; then return; fi
  if ! command -v dockerd >/dev/null 2>&1 || ! { docker compose version || command -v docker-compose; } >/dev/null 2>&1; then
    say "installing Debian's docker.io and docker-compose"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io docker-compose
  fi
  if docker info >/dev/null 2>&1; then return; fi
  if [ -d /run/systemd/system ]; then
    as_root systemctl start docker
  else  # no systemd (containers, CI sandboxes): the daemon in the background, its log in $STATE
    say "starting dockerd (log: $STATE/dockerd.log)"
    as_root bash -c "nohup dockerd >'$STATE/dockerd.log' 2>&1 &"
  fi
  for _ in $(seq 120); do docker info >/dev/null 2>&1 && return; sleep 0.5; done
  say "dockerd did not answer within 60 s; see $STATE/dockerd.log"; exit 1
}

base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then return; fi
  if timeout 120 docker pull "$BASE_IMAGE" >/dev/null 2>&1; then say "pulled $BASE_IMAGE"; return; fi
  if [ "$BASE_IMAGE" != debian:bookworm-slim ]; then
    say "$BASE_IMAGE is neither present nor pullable (only debian:bookworm-slim can be made locally)"; exit 1
  fi
  say "no registry reachable: making $BASE_IMAGE from Debian's packages (debootstrap --variant=minbase bookworm)"
  command -v debootstrap >/dev/null 2>&1 || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap
  local root
  root="$(mktemp -d)"
  as_root debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$STATE/debootstrap.log" 2>&1 \
    || { say "debootstrap failed; see $STATE/debootstrap.log"; exit 1; }
  # What bookworm-slim leaves out too: package lists and caches (apt-get update fetches them).
  as_root rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  as_root tar -C "$root" -c . | docker import --change 'CMD ["bash"]' - "$BASE_IMAGE" >/dev/null
  as_root rm -rf "$root"
}

image() {  # image TAG [docker build args...]: its log in $STATE/build-<name>.log, tailed on failure
  local tag="$1" log="$STATE/build-$(basename "${1%%:*}").log" t0=$SECONDS
  shift
  say "building $tag (log: $log)"
  if ! docker build -t "$tag" --build-arg BASE_IMAGE="$BASE_IMAGE" "$@" . >"$log" 2>&1; then
    tail -40 "$log" >&2; say "building $tag failed; the whole log is $log"; exit 1
  fi
  say "built $tag in $(( SECONDS - t0 )) s"
}

build() {
  # Extra CAs of a TLS-intercepting proxy on this machine, for the builds' downloads (see the README
  # in scripts/docker/ca-certificates).
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt scripts/docker/ca-certificates/
  fi
  image "$OFFSETBATCH_IMAGE"
  if [ "${OFFSETBATCH_LOCAL_UPSTREAM:-0}" = 1 ]; then  # stand-ins for apache/kafka, postgres and redis
    image "$LOCAL_KAFKA_IMAGE" -f scripts/docker/kafka/Dockerfile
    image "$LOCAL_POSTGRES_IMAGE" -f scripts/docker/postgres/Dockerfile
    image "$LOCAL_REDIS_IMAGE" -f scripts/docker/redis/Dockerfile
  fi
}

secrets() {
  local file="$STATE/secrets.env"
  if [ ! -f "$file" ]; then
    (umask 077
     for name in AIRFLOW_JWT_SECRET AIRFLOW_ADMIN_PASSWORD KAFKA_ADMIN_PASSWORD OFFSETBATCH_KAFKA_PASSWORD; do
       printf '%s=%s\n' "$name" "$(head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32)"
     done > "$file")
  fi
  # A value already in the environment wins over the file.
  while IFS='=' read -r name value; do
    [ -n "${!name:-}" ] || export "$name=$value"
  done < "$file"
  if [ "${OFFSETBATCH_LOCAL_UPSTREAM:-0}" = 1 ]; then
    export KAFKA_IMAGE="${KAFKA_IMAGE:-$LOCAL_KAFKA_IMAGE}" POSTGRES_IMAGE="${POSTGRES_IMAGE:-$LOCAL_POSTGRES_IMAGE}" \
      REDIS_IMAGE="${REDIS_IMAGE:-$LOCAL_REDIS_IMAGE}"
  fi
}

up() {
  engine; base; build; secrets
  say "starting the stack (project $COMPOSE_PROJECT_NAME)"
  compose up -d
  local url="http://127.0.0.1:${AIRFLOW_PORT:-8080}"
  for _ in $(seq 300); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=5)" "$url/api/v2/monitor/health" 2>/dev/null; then
      say "Airflow is up on $url: user admin, password AIRFLOW_ADMIN_PASSWORD in $STATE/secrets.env"
      return
    fi
    sleep 1
  done
  say "Airflow's API did not answer on $url within 300 s: scripts/deploy.sh compose logs airflow-api-server"; exit 1
}

case "${1:-}" in
  engine) engine ;;
  base) engine; base ;;
  build) engine; base; build ;;
  up) up ;;
  down)  # nothing can be running without an engine; an installed but stopped one is started to clean up
    if docker info >/dev/null 2>&1 || command -v dockerd >/dev/null 2>&1; then engine; secrets; compose down -v --remove-orphans
    else say "no Docker Engine installed: nothing to remove"; fi ;;
  compose) shift; engine; secrets; compose "$@" ;;
  secrets) secrets; echo "$STATE/secrets.env" ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
