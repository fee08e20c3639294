#!/usr/bin/env bash
# Books a room from another system with nothing but Debian's amqp-tools:
# declare a reply queue, publish booking.create with reply_to and an
# idempotency key, read the reply. Usage:
#   AMQP_URL=amqps://user:pass@host:5671/%2f AMQP_CA_FILE=ca.pem docs/examples/publish-booking.sh [ROOM] [START] [END] [EXTRA]
# EXTRA: more members of the body, e.g. '"hold": {"minutes": 10}' or
# '"ifTaken": "waitlist"' (v1.2); it is part of the idempotency key.
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
START=${2:-09:00}
END=${3:-10:30}
EXTRA=${4:-}
DATE=$(TZ=Europe/Berlin date -d tomorrow +%F)
# Where the reply goes (contract v1.1): the handler answers only into direct
# reply-to, a server-named amq.gen-* queue, or a queue named "<user>." of the
# sender's verified user_id. amqp-publish cannot set user_id, so by default
# this script asks the broker for a server-named queue and removes it after.
# (The shipped docker-compose broker requires user_id, REQUIRE_USER_ID: use
# a client that sets it there, e.g. scripts/container/amqp_client.py.)
if [[ -n ${REPLY_QUEUE:-} ]]; then
  REPLIES=$REPLY_QUEUE
  amqp-declare-queue "${TLS[@]}" --url="$URL" -q "$REPLIES" >/dev/null
else
  REPLIES=$(amqp-declare-queue "${TLS[@]}" --url="$URL" -q "")
  trap 'amqp-delete-queue "${TLS[@]}" --url="$URL" -q "$REPLIES" >/dev/null 2>&1 || true' EXIT
fi
amqp-publish "${TLS[@]}" --url="$URL" -e booking.commands -r booking.create -p -C application/json \
  -t "$REPLIES" -H "idempotency-key: my-system-$ROOM-$DATE-$START${EXTRA:+-$(printf %s "$EXTRA" | md5sum | cut -c1-8)}" \
  -b '{"room": "'"$ROOM"'", "date": "'"$DATE"'", "start": "'"$START"'", "end": "'"$END"'",
       "title": "Sprint review", "description": "Q4 demo",
       "attendees": [{"name": "Ada Lovelace", "email": "ada@example.com", "phone": "0170 1234567"}]'"${EXTRA:+, $EXTRA}"'}'

# The reply arrives on our queue; wait for it (up to 30 s).
for _ in $(seq 1 150); do
  if reply=$(amqp-get "${TLS[@]}" --url="$URL" -q "$REPLIES" 2>/dev/null); then
    echo "$reply"
    exit 0
  fi
  sleep 0.2
done
echo "no reply within 30 s" >&2
exit 1
