#!/usr/bin/env bash
# Creates the database cluster in $PGDATA on first start (see Dockerfile),
# then runs the command (the server, listening on every address).
#
#   POSTGRES_PASSWORD  the password of POSTGRES_USER (required)
#   POSTGRES_USER      the role the services log in as (default booking)
#   POSTGRES_DB        its database (default booking)
set -euo pipefail
: "${PGDATA:=/var/lib/postgresql/data}"
user=${POSTGRES_USER:-booking}
db=${POSTGRES_DB:-booking}

if [[ ! -s $PGDATA/PG_VERSION ]]; then
  [[ -n ${POSTGRES_PASSWORD:-} ]] || { echo "postgres: POSTGRES_PASSWORD is not set" >&2; exit 78; }
  [[ $user =~ ^[a-z_][a-z0-9_]*$ && $db =~ ^[a-z_][a-z0-9_]*$ ]] ||
    { echo "postgres: POSTGRES_USER and POSTGRES_DB must be lower-case identifiers" >&2; exit 78; }
  echo "postgres: creating the cluster in $PGDATA (role $user, database $db)" >&2
  initdb -D "$PGDATA" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  {
    echo "local all postgres peer"
    echo "host all all 0.0.0.0/0 scram-sha-256"
    echo "host all all ::/0 scram-sha-256"
  } >"$PGDATA/pg_hba.conf"
  # Only the local socket while the role and database are created.
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  password=${POSTGRES_PASSWORD//\'/\'\'}
  psql -q -v ON_ERROR_STOP=1 -U postgres -d postgres <<SQL
CREATE ROLE "$user" LOGIN PASSWORD '$password';
CREATE DATABASE "$db" OWNER "$user";
SQL
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
unset POSTGRES_PASSWORD

if [[ $1 == postgres ]]; then
  shift
  exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
