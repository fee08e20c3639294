#!/usr/bin/env bash
# Runs the whole set on this machine: a private RabbitMQ on loopback plus the
# three services with their embedded SQLite defaults under .data/, then shows
# what they do. Ctrl-C (or SIGTERM) stops the services gracefully and then
# the broker.
#
# Usage: scripts/run.sh [--demo]
#
# Shows: a booking published with amqp-tools as another system would, the
# conflict reply for an overlapping one, the access pass the pass sender
# spooled to .data/pass-sender/outbox/, the projector's answer over HTTP
# and over AMQP (bookingctl rooms), the queues; the page is on :8080.
#   --demo   run the scripted walkthrough and exit (no waiting for Ctrl-C)
#
# Environment: AMQP_PORT (default: a free port), BUILD_CONFIG (release|debug,
# default release), KEEP_DATA=1 keeps .data/ from a previous run (default:
# kept; set FRESH=1 to start from an empty .data/).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
DEMO=0
[[ ${1:-} == --demo ]] && DEMO=1
CONFIG=${BUILD_CONFIG:-release}
DATA=$ROOT/.data
section() { printf '\n==> %s\n' "$*"; }

section "installing dependencies"
"$ROOT/scripts/install-deps.sh"

section "building ($CONFIG)"
swift build -c "$CONFIG" --product booking-handler
swift build -c "$CONFIG" --product pass-sender
swift build -c "$CONFIG" --product availability-projector
swift build -c "$CONFIG" --product bookingctl
BIN=$(swift build -c "$CONFIG" --show-bin-path)

[[ ${FRESH:-0} == 1 ]] && rm -rf "$DATA" /tmp/room-booking-run-rabbitmq
mkdir -p "$DATA"
# The broker runs as the rabbitmq user and keeps its state in /tmp (the
# project tree may not be readable by that user).
BROKER_DIR=/tmp/room-booking-run-rabbitmq
PIDS=()

# shellcheck disable=SC2317 # invoked via trap
cleanup() {
  trap - EXIT INT TERM
  section "stopping services (SIGTERM, graceful)"
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  section "stopping RabbitMQ"
  "$ROOT/scripts/rabbitmq.sh" stop --dir "$BROKER_DIR" || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

section "starting RabbitMQ"
start_args=(start --dir "$BROKER_DIR")
[[ -n ${AMQP_PORT:-} ]] && start_args+=(--port "$AMQP_PORT")
AMQP_URL=$("$ROOT/scripts/rabbitmq.sh" "${start_args[@]}" | sed -n 's/^AMQP_URL=//p' | tail -n 1)
export AMQP_URL
echo "broker: ${AMQP_URL/guest:guest@/guest:***@}"

section "starting the services (logs in .data/<service>.log)"
start_service() {
  local name=$1 port=$2
  mkdir -p "$DATA/$name"
  DATA_DIR=$DATA/$name HTTP_PORT=$port ROOMS_FILE=${ROOMS_FILE:-} "$BIN/$name" >"$DATA/$name.log" 2>&1 &
  PIDS+=($!)
  echo "$name (pid $!, DATA_DIR=.data/$name, HTTP_PORT=$port)"
}
ROOMS_FILE=$ROOT/deploy/rooms.json start_service booking-handler 8081
start_service pass-sender 8082
start_service availability-projector 8080

ctl() { "$ROOT/scripts/rabbitmq.sh" ctl --dir "$BROKER_DIR" "$@" 2>/dev/null; }

# Wait until all three are connected (each names its connection).
for _ in $(seq 1 120); do
  n=$(ctl list_connections client_properties | grep -c -E 'booking-handler|pass-sender|availability-projector' || true)
  [[ $n -ge 3 ]] && break
  sleep 0.5
done

section "connected services"
ctl list_connections name client_properties | grep -o -E '"connection_name","[^"]*"' | cut -d'"' -f4 | sort
section "booking a room as another system would (docs/examples/publish-booking.sh, amqp-tools)"
"$ROOT/docs/examples/publish-booking.sh" Berlin 09:00 10:30 | python3 -m json.tool
section "the same slot again from another system: refused with the conflicting booking"
ROOM_REPLY=$(AMQP_URL=$AMQP_URL "$ROOT/docs/examples/publish-booking.sh" Berlin 10:00 11:00)
echo "$ROOM_REPLY" | python3 -m json.tool

BOOKING_DATE=$(TZ=Europe/Berlin date -d tomorrow +%F)

section "the pass sender spooled the attendee's access pass (no PASS_GATEWAY_URL set): .data/pass-sender/outbox/"
for _ in $(seq 1 100); do
  compgen -G "$DATA/pass-sender/outbox/*.eml" >/dev/null && break
  sleep 0.2
done
ls -1 "$DATA/pass-sender/outbox/" 2>/dev/null | tail -n 4 || echo "(no pass yet: see .data/pass-sender.log)"
EML=$(ls -1t "$DATA"/pass-sender/outbox/*.eml 2>/dev/null | head -n 1 || true)
# Headers and the text part (times local to the room); the iCalendar
# invitation (text/calendar) follows it in the file.
[[ -n $EML ]] && awk '{ sub(/\r$/, ""); print } /^Show this e-mail/ { exit } NR >= 30 { exit }' "$EML"

section "the projector's answer over HTTP: GET /rooms/Berlin?date=$BOOKING_DATE (09:00-10:30 is gone)"
for _ in $(seq 1 100); do
  body=$(curl -fsS "http://127.0.0.1:8080/rooms/Berlin?date=$BOOKING_DATE" 2>/dev/null || true)
  [[ $body == *'"avail"'* && $body != *'"07:00 - 19:00"'* ]] && break
  sleep 0.2
done
echo "${body:-(no answer: see .data/availability-projector.log)}" | python3 -m json.tool || true

section "the same over AMQP, with the operators' CLI: bookingctl rooms --date $BOOKING_DATE --equipment beamer"
"$BIN/bookingctl" rooms --date "$BOOKING_DATE" --equipment beamer --amqp-url "$AMQP_URL" || true

sleep 6  # RabbitMQ refreshes quorum-queue counters every few seconds
section "the broker's queues"
ctl list_queues name type messages consumers | grep -E -v '^(Timeout|Listing)' | column -t
section "the time bars: open http://127.0.0.1:8080/?date=$BOOKING_DATE"

if ((DEMO)); then
  section "demo done"
  exit 0
fi
section "running; press Ctrl-C to stop"
wait "${PIDS[@]}"
