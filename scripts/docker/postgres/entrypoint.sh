#!/bin/bash
# The image's entrypoint, as postgres:16's docker-entrypoint.sh for what docker-compose.yaml uses:
# on an empty PGDATA, initdb + the database + /docker-entrypoint-initdb.d/*; then postgres exec'd in
# the foreground (PID 1, so `docker stop` reaches it). The password is never printed nor put on a
# command line.
set -euo pipefail

# `docker run IMAGE -c shared_buffers=...` means options for postgres, as upstream.
if [[ ${1-} == -* ]]; then
  set -- postgres "$@"
fi
if [[ ${1-} != postgres ]]; then
  exec "$@"
fi

# As root: make the directories postgres needs its own, then run this script again as postgres
# (setpriv, from util-linux, execs without staying as a parent process).
if [[ $(id -u) == 0 ]]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres:postgres "$PGDATA" /var/run/postgresql
  chmod 0700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [[ ! -s $PGDATA/PG_VERSION ]]; then
  : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set to initialize the database}"
  export POSTGRES_USER=${POSTGRES_USER:-postgres}
  export POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}

  echo "===> initdb in $PGDATA (superuser $POSTGRES_USER)"
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
    --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  # TCP from any address (the compose network), with a password; the socket stays trust.
  printf '\nhost all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
  printf "\nlisten_addresses = '*'\n" >> "$PGDATA/postgresql.conf"

  # A temporary server on a private socket and no TCP: neither clients nor the pg_isready
  # healthcheck see it, so the container turns healthy only once the scripts below have run.
  export PGHOST
  PGHOST=$(mktemp -d)
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories='$PGHOST'" start >/dev/null
  psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER")
  if [[ $POSTGRES_DB != postgres ]]; then
    "${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" -q <<<'CREATE DATABASE :"db";'
  fi
  export PGUSER=$POSTGRES_USER PGDATABASE=$POSTGRES_DB
  for f in /docker-entrypoint-initdb.d/*; do
    case $f in
      *.sh)
        # Executable: run; otherwise sourced (upstream's rule).
        if [[ -x $f ]]; then echo "===> running $f"; "$f"; else echo "===> sourcing $f"; . "$f"; fi ;;
      *.sql) echo "===> running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
      *.sql.gz) echo "===> running $f"; gunzip -c "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
      */\*) ;;  # the folder is empty
      *) echo "===> ignoring $f" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  rmdir "$PGHOST"
  unset PGHOST PGUSER PGDATABASE
  echo "===> initialized; starting PostgreSQL"
fi

exec "$@"
