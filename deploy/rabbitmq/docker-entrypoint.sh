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
#
# Clustering (docker-compose.ha.yml), off unless RABBITMQ_CLUSTER_NODES is
# set (ERLANG_COOKIE is then required):
#   RABBITMQ_CLUSTER_NODES  comma-separated node names (rabbit@rabbitmq-1,…):
#                           the node starts from rabbitmq.conf plus classic
#                           peer discovery of these nodes
#                           (cluster_formation.classic_config.nodes.N) and
#                           cluster_partition_handling = pause_minority
#   ERLANG_COOKIE           the Erlang cookie every node (and rabbitmqctl in
#                           the containers) shares; written to
#                           $HOME/.erlang.cookie
# A node that joined a cluster adds itself to every quorum queue declared
# before it joined (`rabbitmq-queues grow`: the node that forms the cluster
# imports the definitions while alone, so their queues start with one
# member), then touches
# /run/rabbitmq/cluster-ready (the healthcheck of docker-compose.ha.yml
# waits for it).
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
  # The cluster's Erlang cookie is as good as an administrator's password.
  if [[ -n ${RABBITMQ_CLUSTER_NODES:-} && (-z ${ERLANG_COOKIE:-} || ${ERLANG_COOKIE:-} == room-booking-local-cookie) ]]; then
    weak+=(ERLANG_COOKIE)
  fi
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
tls-certificates.sh prepare

rm -f /run/rabbitmq/cluster-ready
if [[ -n ${RABBITMQ_CLUSTER_NODES:-} ]]; then
  [[ -n ${ERLANG_COOKIE:-} ]] || { echo "rabbitmq: RABBITMQ_CLUSTER_NODES is set but ERLANG_COOKIE is not" >&2; exit 78; }
  cookie=$HOME/.erlang.cookie
  (umask 077; printf '%s' "$ERLANG_COOKIE" >"$cookie.new")
  chmod 400 "$cookie.new"
  mv -f "$cookie.new" "$cookie"
  unset ERLANG_COOKIE
  conf=/run/rabbitmq/rabbitmq.conf
  {
    cat "${RABBITMQ_CONFIG_FILE:-/etc/rabbitmq/rabbitmq.conf}"
    echo
    echo "# added by docker-entrypoint.sh from RABBITMQ_CLUSTER_NODES"
    echo "cluster_formation.peer_discovery_backend = classic_config"
    i=0
    IFS=, read -ra nodes <<<"$RABBITMQ_CLUSTER_NODES"
    for node in "${nodes[@]}"; do
      i=$((i + 1))
      echo "cluster_formation.classic_config.nodes.$i = $node"
    done
    echo "cluster_partition_handling = pause_minority"
  } >"$conf"
  export RABBITMQ_CONFIG_FILE=$conf
  # In the background, once this node runs: become a member of every quorum
  # queue that lacks it (idempotent; nothing to do on the first node).
  (
    until rabbitmq-diagnostics -q check_running >/dev/null 2>&1; do sleep 2; done
    until rabbitmq-queues -q grow "$RABBITMQ_NODENAME" all >/dev/null; do sleep 2; done
    echo "rabbitmq: $RABBITMQ_NODENAME is a member of every quorum queue" >&2
    touch /run/rabbitmq/cluster-ready
  ) &
fi
exec "$@"
