#!/usr/bin/env bash
# A private RabbitMQ cluster on loopback for tests and local runs: N nodes
# (default 3) started with scripts/rabbitmq.sh in DIR/node1 … DIR/nodeN —
# each with its own node name, AMQP, distribution, TLS and management ports —
# sharing one Erlang cookie, nodes 2…N joined to node 1 with
# `rabbitmqctl join_cluster`.
#
# Usage:
#   scripts/rabbitmq-cluster.sh start --dir DIR [--nodes N]
#       Start (or, when already running, just report) the cluster and wait
#       until every node runs in it. Writes DIR/env: AMQP_URLS= (comma-
#       separated, node 1 first), RABBITMQ_CLUSTER_NODES= (node names),
#       RABBITMQ_CLUSTER_DIRS= (the nodes' --dir for scripts/rabbitmq.sh),
#       RABBITMQ_CLUSTER_DIR=; prints the AMQP_URLS=... line last.
#   scripts/rabbitmq-cluster.sh stop --dir DIR
#       Stop every node (last joined first).
#   scripts/rabbitmq-cluster.sh status --dir DIR
#       rabbitmqctl cluster_status of node 1.
#
# Stop one node of a running cluster with
#   scripts/rabbitmq.sh ctl --dir DIR/node2 stop_app   (and start_app)
# Needs the packages from scripts/install-deps.sh.
set -euo pipefail

PROG=${0##*/}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
RABBITMQ_SH=$HERE/rabbitmq.sh

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
DIR="" NODES=3
while (($# > 0)); do
  case $1 in
  --dir) (($# > 1)) || usage; DIR=$2; shift 2 ;;
  --nodes) (($# > 1)) || usage; NODES=$2; shift 2 ;;
  -h | --help) usage ;;
  *) die "unknown argument: $1" ;;
  esac
done
[[ -n $DIR ]] || die "$CMD: --dir DIR is required"
[[ $NODES =~ ^[0-9]+$ ]] && ((NODES >= 2 && NODES <= 7)) || die "--nodes must be 2 to 7"

node_value() { # node_value I KEY: KEY= from DIR/nodeI/env
  sed -n "s/^$2=//p" "$DIR/node$1/env"
}

cmd_start() {
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd -P)
  local cookie i first
  # One cookie for all: nodes of a cluster must share it. rabbitmq.sh keeps
  # an existing one (and hands it to the rabbitmq user when run as root).
  cookie=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
  [[ -s $DIR/node1/home/.erlang.cookie ]] && cookie=$(cat "$DIR/node1/home/.erlang.cookie")
  for ((i = 1; i <= NODES; i++)); do
    mkdir -p "$DIR/node$i/home"
    if [[ ! -s $DIR/node$i/home/.erlang.cookie ]]; then
      (umask 077; printf '%s' "$cookie" >"$DIR/node$i/home/.erlang.cookie")
      chmod 400 "$DIR/node$i/home/.erlang.cookie"
    fi
  done
  for ((i = 1; i <= NODES; i++)); do
    "$RABBITMQ_SH" start --dir "$DIR/node$i" >/dev/null
  done
  first=$(node_value 1 RABBITMQ_NODENAME)
  for ((i = 2; i <= NODES; i++)); do
    local name
    name=$(node_value "$i" RABBITMQ_NODENAME)
    if "$RABBITMQ_SH" ctl --dir "$DIR/node1" -- -q cluster_status --formatter json 2>/dev/null | grep -q "\"$name\""; then
      continue # joined before (a restart keeps membership)
    fi
    say "joining $name to $first"
    "$RABBITMQ_SH" ctl --dir "$DIR/node$i" -- -q stop_app
    "$RABBITMQ_SH" ctl --dir "$DIR/node$i" -- -q join_cluster "$first"
    "$RABBITMQ_SH" ctl --dir "$DIR/node$i" -- -q start_app
  done
  # Every node running in one cluster, seen from node 1.
  local running n
  for ((n = 0; n < 300; n++)); do
    running=$("$RABBITMQ_SH" ctl --dir "$DIR/node1" -- -q cluster_status --formatter json 2>/dev/null |
      python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("running_nodes", [])))' 2>/dev/null || echo 0)
    ((running == NODES)) && break
    sleep 0.2
  done
  ((running == NODES)) || die "only $running of $NODES nodes run in the cluster"
  local urls="" nodes="" dirs=""
  for ((i = 1; i <= NODES; i++)); do
    urls+=${urls:+,}$(node_value "$i" AMQP_URL)
    nodes+=${nodes:+,}$(node_value "$i" RABBITMQ_NODENAME)
    dirs+=${dirs:+,}$DIR/node$i
  done
  {
    printf 'AMQP_URLS=%s\n' "$urls"
    printf 'RABBITMQ_CLUSTER_NODES=%s\n' "$nodes"
    printf 'RABBITMQ_CLUSTER_DIRS=%s\n' "$dirs"
    printf 'RABBITMQ_CLUSTER_DIR=%s\n' "$DIR"
  } >"$DIR/env"
  say "cluster of $NODES nodes running: $nodes"
  grep '^AMQP_URLS=' "$DIR/env"
}

cmd_stop() {
  [[ -d $DIR ]] || { say "$DIR does not exist: nothing to stop"; return 0; }
  local i
  for ((i = 7; i >= 1; i--)); do
    [[ -d $DIR/node$i ]] && "$RABBITMQ_SH" stop --dir "$DIR/node$i" || true
  done
}

cmd_status() {
  "$RABBITMQ_SH" ctl --dir "$DIR/node1" -- cluster_status
}

case $CMD in start | stop | status) "cmd_$CMD" ;; *) die "unknown command: $CMD" ;; esac
