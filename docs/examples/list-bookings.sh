#!/usr/bin/env bash
# Reads bookings from another system with nothing but Debian's amqp-tools
# (contract v1.1, "Reading bookings"): publish booking.list to the
# booking.queries exchange with reply_to, read the one reply. Usage:
#   AMQP_URL=amqps://user:pass@host:5671/%2f AMQP_CA_FILE=ca.pem docs/examples/list-bookings.sh [ROOM] [FROM] [TO]
# FROM/TO are dates (local days of each room) or UTC instants; default:
# tomorrow. Page on with the reply's nextCursor as CURSOR=….
set -euo pipefail
URL=${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
# amqps:// (the shipped compose broker's published port): TLS, verifying the
# broker against AMQP_CA_FILE; AMQP_CERT_FILE/AMQP_KEY_FILE add a client
# certificate.
TLS=()
if [[ $URL == amqps://* ]]; then
  TLS=(--ssl ${AMQP_CA_FILE:+"--cacert=$AMQP_CA_FILE"} ${AMQP_CERT_FILE:+"--cert=$AMQP_CERT_FILE"} ${AMQP_KEY_FILE:+"--key=$AMQP_KEY_FILE"})
fi
ROOM=${1:-Berlin}
FROM=${2:-$(TZ=Europe/Berlin date -d tomorrow +%F)}
TO=${3:-$(TZ=Europe/Berlin date -d '2 days' +%F)}
CURSOR_FIELD=""
if [[ -n ${CURSOR:-} ]]; then CURSOR_FIELD=', "cursor": "'"$CURSOR"'"'; fi
# A server-named reply queue (amqp-publish cannot set user_id; the shipped
# compose requires it: use a client that sets it there). Without user_id,
# attendees' e-mail and phone are shown only for bookings made without one.
REPLIES=$(amqp-declare-queue "${TLS[@]}" --url="$URL" -q "")
trap 'amqp-delete-queue "${TLS[@]}" --url="$URL" -q "$REPLIES" >/dev/null 2>&1 || true' EXIT
amqp-publish "${TLS[@]}" --url="$URL" -e booking.queries -r booking.list -C application/json -t "$REPLIES" \
  -b '{"from": "'"$FROM"'", "to": "'"$TO"'", "room": "'"$ROOM"'", "limit": 100'"$CURSOR_FIELD"'}'

for _ in $(seq 1 150); do
  if reply=$(amqp-get "${TLS[@]}" --url="$URL" -q "$REPLIES" 2>/dev/null); then
    echo "$reply"
    exit 0
  fi
  sleep 0.2
done
echo "no reply within 30 s" >&2
exit 1
