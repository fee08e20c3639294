#!/usr/bin/env bash
# Counts the SQL statements the booking handler sends PostgreSQL per
# booking.create: a private PostgreSQL with log_statement = all and a
# private RabbitMQ node, the release booking-handler on them, N creates one
# at a time through the release bookingctl (so each is alone in its
# transaction), then the server log's statements of those N seconds,
# grouped by their first words.
#
# Usage: scripts/count-pg-statements.sh [N]     (default 20; needs
#        swift build -c release --product booking-handler --product bookingctl)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
N=${1:-20}
BIN=${BIN:-$ROOT/.build/release}   # BIN=.build/debug counts the same statements
for tool in booking-handler bookingctl; do
  [[ -x $BIN/$tool ]] || { echo "build first: swift build -c release --product $tool" >&2; exit 2; }
done
WORK=$(mktemp -d /tmp/count-pg-statements.XXXXXX)
chmod 755 "$WORK"
HANDLER_PID=""
cleanup() {
  [[ -n $HANDLER_PID ]] && kill "$HANDLER_PID" 2>/dev/null && wait "$HANDLER_PID" 2>/dev/null || true
  "$ROOT/scripts/postgres.sh" stop --dir "$WORK/pg" >/dev/null 2>&1 || true
  "$ROOT/scripts/rabbitmq.sh" stop --dir "$WORK/mq" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/pg" "$WORK/mq" "$WORK/data"
chmod 755 "$WORK/pg"
"$ROOT/scripts/postgres.sh" start --dir "$WORK/pg" >/dev/null
"$ROOT/scripts/rabbitmq.sh" start --dir "$WORK/mq" >/dev/null
AMQP_URL=$("$ROOT/scripts/rabbitmq.sh" url --dir "$WORK/mq")
DATABASE_URL=$(sed -n 's/^DATABASE_URL=//p' "$WORK/pg/env")
PORT=$(sed -n 's/^POSTGRES_PORT=//p' "$WORK/pg/env")
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_postgres() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_postgres "$PG_BIN/psql" -h "$WORK/pg/run" -p "$PORT" -U postgres -d postgres -q \
  -c "ALTER SYSTEM SET log_statement = 'all'" -c "SELECT pg_reload_conf()" >/dev/null

AMQP_URL=$AMQP_URL DATABASE_URL="$DATABASE_URL?schema=counted" DATA_DIR=$WORK/data HTTP_PORT=0 LOG_LEVEL=warning \
  ROOMS_FILE=$ROOT/deploy/rooms.json "$BIN/booking-handler" >"$WORK/handler.log" 2>&1 &
HANDLER_PID=$!
# Ready when it answers a command (a refused one is an answer too).
for _ in $(seq 1 120); do
  AMQP_URL=$AMQP_URL "$BIN/bookingctl" book --room Berlin --date today --start 00:00 --end 00:15 --title warm-up \
    --attendee "Ada Lovelace,ada@example.com,0170 1234567" >/dev/null 2>&1 && break
  status=$?
  ((status == 1)) && break
  sleep 0.5
done
LOG=$WORK/pg/log/server.log
before=$(wc -l <"$LOG")
date=$(date -d '+40 days' +%F)
for i in $(seq 0 $((N - 1))); do
  start=$(printf '%02d:%02d' $((7 + i / 4)) $((i % 4 * 15)))
  end=$(date -d "2000-01-01 $start 15 minutes" +%H:%M)
  AMQP_URL=$AMQP_URL "$BIN/bookingctl" book --room Berlin --date "$date" --start "$start" --end "$end" --title "counted $i" \
    --attendee "Ada Lovelace,ada@example.com,0170 1234567" >/dev/null
done
sleep 2  # the relay's marks of the last events (nothing to await from outside)
tail -n +$((before + 1)) "$LOG" | grep -E 'LOG:  (statement|execute [^:]*):' |
  sed -E 's/.*LOG:  (statement|execute [^:]*): *//' | awk '{print $1, $2, $3}' | sort | uniq -c | sort -rn |
  awk -v n="$N" '{c=$1; $1=""; printf "%6d  %5.2f per create  %s\n", c, c / n, $0; t += c} END {printf "%6d  %5.2f per create  (all)\n", t, t / n}'
