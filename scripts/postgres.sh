#!/usr/bin/env bash
# A private PostgreSQL server for tests and local runs: Debian's postgresql
# (initdb + pg_ctl), listening on 127.0.0.1 only on a free port, all its
# state inside DIR, run as the `postgres` system user when started as root.
#
# Usage:
#   scripts/postgres.sh start --dir DIR [--port PORT]
#       Create the cluster in DIR/data when missing (database `booking`,
#       owner `booking`, password authentication on loopback), start it and
#       wait until it accepts connections. Writes DIR/env (DATABASE_URL=,
#       POSTGRES_PORT=, POSTGRES_DIR=) and prints the DATABASE_URL=... line
#       last. Already running: prints that line again.
#   scripts/postgres.sh stop --dir DIR
#       Stop the server (fast shutdown). Leaves DIR in place.
#   scripts/postgres.sh psql --dir DIR [PSQL-ARGS...]
#       psql as `booking` on the server of DIR.
# Installs Debian's postgresql on first use when it is missing (as root).
set -euo pipefail

PROG=${0##*/}
say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
  say "$*"
  exit 1
}
usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit 2
}

(($# > 0)) || usage
CMD=$1
shift
DIR="" PORT=""
ARGS=()
while (($# > 0)); do
  case $1 in
  --dir) (($# > 1)) || usage; DIR=$2; shift 2 ;;
  --port) (($# > 1)) || usage; PORT=$2; shift 2 ;;
  -h | --help) usage ;;
  *) ARGS+=("$1"); shift ;;
  esac
done
[[ -n $DIR ]] || die "$CMD: --dir DIR is required"

find_bin() {
  BIN=""
  local v
  for v in 17 16 15 14 13; do
    [[ -x /usr/lib/postgresql/$v/bin/pg_ctl ]] && { BIN=/usr/lib/postgresql/$v/bin; return 0; }
  done
  return 1
}
if ! find_bin; then
  # Installed on first use, like everything the project's scripts need.
  [[ $(id -u) -eq 0 ]] || die "PostgreSQL is not installed; as root: apt-get install -y postgresql"
  say "installing Debian's postgresql"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >/dev/null; } ||
    die "could not install postgresql"
  find_bin || die "postgresql installed but no pg_ctl found"
fi

RUN_AS=()
if [[ $(id -u) -eq 0 ]]; then
  id postgres >/dev/null 2>&1 || die "no postgres system user (install the postgresql package)"
  RUN_AS=(setpriv --reuid=postgres --regid=postgres --init-groups)
fi

# Any socket on the port counts (not only listeners), and picked ports stay
# below the kernel's ephemeral range (32768-60999), where an outgoing
# connection could take one between our check and PostgreSQL's bind.
port_free() { ! ss -Htan exclude time-wait "( sport = :$1 )" 2>/dev/null | grep -q .; }
pick_port() {
  local p n
  for ((n = 0; n < 200; n++)); do
    p=$((30000 + RANDOM % 2700))
    port_free "$p" && { echo "$p"; return 0; }
  done
  return 1
}
pg() { "${RUN_AS[@]}" env -i PATH=/usr/bin:/bin LANG=C.UTF-8 "$@"; }
running() { [[ -f $DIR/data/postmaster.pid ]] && pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1; }

cmd_start() {
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd -P)
  if running; then
    say "already running"
    grep '^DATABASE_URL=' "$DIR/env"
    return 0
  fi
  if [[ -z $PORT ]]; then
    PORT=$(sed -n 's/^POSTGRES_PORT=//p' "$DIR/env" 2>/dev/null || true)
    [[ -n $PORT ]] && port_free "$PORT" || PORT=$(pick_port) || die "no free port"
  fi
  mkdir -p "$DIR/run" "$DIR/log"
  local password
  if [[ ! -f $DIR/data/PG_VERSION ]]; then
    password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    printf '%s\n' "$password" >"$DIR/password"
    chmod 600 "$DIR/password"
    [[ ${#RUN_AS[@]} -gt 0 ]] && chown -R postgres:postgres "$DIR"
    pg "$BIN/initdb" -D "$DIR/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 \
      >"$DIR/log/initdb.log" 2>&1 || { cat "$DIR/log/initdb.log" >&2; die "initdb failed"; }
  fi
  password=$(cat "$DIR/password")
  [[ ${#RUN_AS[@]} -gt 0 ]] && chown -R postgres:postgres "$DIR"
  # The server must not inherit descriptors beyond 0-2: a caller that
  # waits for them to close (Foundation's Process watches a socket it gives
  # every child) would wait as long as the server runs.
  (
    for fd in $(ls /proc/$BASHPID/fd); do ((fd > 2)) && eval "exec $fd>&-" 2>/dev/null; done
    pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR/run -c fsync=on" start </dev/null >/dev/null
  ) || { tail -20 "$DIR/log/server.log" >&2; die "PostgreSQL did not start"; }
  # The application's role and database (idempotent).
  pg "$BIN/psql" -h "$DIR/run" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -q >/dev/null <<SQL
SELECT 'CREATE ROLE booking LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'booking')\gexec
ALTER ROLE booking PASSWORD '$password';
SELECT 'CREATE DATABASE booking OWNER booking' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'booking')\gexec
SQL
  {
    printf 'DATABASE_URL=postgres://booking:%s@127.0.0.1:%s/booking\n' "$password" "$PORT"
    printf 'POSTGRES_PORT=%s\n' "$PORT"
    printf 'POSTGRES_DIR=%s\n' "$DIR"
  } >"$DIR/env"
  say "PostgreSQL on 127.0.0.1:$PORT ($DIR)"
  grep '^DATABASE_URL=' "$DIR/env"
}

cmd_stop() {
  [[ -d $DIR/data ]] || { say "nothing in $DIR"; return 0; }
  DIR=$(cd "$DIR" && pwd -P)
  running || { say "not running"; return 0; }
  pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null
  say "stopped"
}

cmd_psql() {
  DIR=$(cd "$DIR" && pwd -P)
  local port
  port=$(sed -n 's/^POSTGRES_PORT=//p' "$DIR/env")
  PGPASSWORD=$(cat "$DIR/password") psql -h 127.0.0.1 -p "$port" -U booking -d booking "${ARGS[@]}"
}

case $CMD in start | stop | psql) "cmd_$CMD" ;; *) die "unknown command: $CMD" ;; esac
