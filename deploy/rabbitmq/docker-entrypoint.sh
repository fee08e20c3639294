#!/usr/bin/env bash
# Renders the broker's definitions from the environment, then runs the
# command (the node). See Dockerfile.
set -euo pipefail
render-definitions.sh "${RABBITMQ_DEFINITIONS_TEMPLATE:-/etc/rabbitmq/definitions.json}" \
  /run/rabbitmq/definitions.json
exec "$@"
