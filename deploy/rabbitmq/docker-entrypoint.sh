#!/usr/bin/env bash
# Renders the broker's definitions from the environment, then runs the
# command (the node). See Dockerfile.
#
# Refuses to start (exit 78) when the ports are published beyond loopback
# (BIND_ADDRESS, passed in by docker-compose.yml) while any broker password
# is empty or still one of the local defaults of docker-compose.yml
# (`<user>-local`): those are in git, so anybody who can reach the port
# could log in as any service. The services wait for a healthy broker, so
# nothing of the set starts either.
set -euo pipefail
template=${RABBITMQ_DEFINITIONS_TEMPLATE:-/etc/rabbitmq/definitions.json}

is_loopback() { # is_loopback ADDRESS
  case $1 in
  127.* | localhost | ::1 | "[::1]" | 0:0:0:0:0:0:0:1) return 0 ;;
  *) return 1 ;;
  esac
}

bind_address=${BIND_ADDRESS:-127.0.0.1}
if ! is_loopback "$bind_address"; then
  weak=()
  # Every password variable of the definitions (@HASH:VAR@), e.g.
  # BOOKING_HANDLER_PASSWORD, whose compose default is booking-handler-local.
  for var in $(grep -o '@HASH:[A-Z0-9_]*@' "$template" | sort -u | sed 's/^@HASH:\(.*\)@$/\1/'); do
    value=${!var:-}
    user=${var%_PASSWORD}
    user=${user,,}
    user=${user//_/-}
    if [[ -z $value || $value == "$user-local" ]]; then weak+=("$var"); fi
  done
  if ((${#weak[@]} > 0)); then
    {
      echo "rabbitmq: refusing to start: BIND_ADDRESS=$bind_address publishes the broker beyond loopback,"
      echo "rabbitmq: but these passwords are empty or the local defaults from docker-compose.yml:"
      printf 'rabbitmq:   %s\n' "${weak[@]}"
      echo "rabbitmq: set them (e.g. in .env next to docker-compose.yml) to secrets of your own,"
      echo "rabbitmq: or leave BIND_ADDRESS unset (127.0.0.1) for a local run."
    } >&2
    exit 78
  fi
fi

render-definitions.sh "$template" /run/rabbitmq/definitions.json
exec "$@"
