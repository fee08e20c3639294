#!/usr/bin/env bash
# Run private RabbitMQ nodes for tests and local runs: one node per directory,
# listening on 127.0.0.1 only, with all its state (data, logs, config, Erlang
# cookie) inside that directory. Several nodes can run at once.
#
# Usage:
#   scripts/rabbitmq.sh start --dir DIR [--port PORT] [--timeout SECS]
#       Start a node in DIR (created if needed) and wait until it accepts AMQP
#       connections (default timeout 60 s, or $RABBITMQ_START_TIMEOUT).
#       Without --port a free loopback port is picked (the previous one of
#       DIR when it is free again, so a restarted node keeps its data).
#       Writes DIR/env (AMQP_URL=, RABBITMQ_NODENAME=, RABBITMQ_PORT=,
#       RABBITMQ_DIST_PORT=, RABBITMQ_DIR=, AMQPS_URL=, AMQPS_CA_FILE=,
#       AMQPS_CA_KEY_FILE=, MANAGEMENT_URL=) and prints the AMQP_URL=... line
#       as the last line on stdout; progress goes to stderr. If the node of
#       DIR is already running, just prints that line again.
#   scripts/rabbitmq.sh stop --dir DIR
#       Stop the node gracefully (rabbitmqctl stop), then kill its beam.smp if
#       it still runs. Fine when it is not running. Leaves DIR in place, and
#       leaves epmd running (it is shared by all Erlang nodes on the machine).
#   scripts/rabbitmq.sh ctl --dir DIR [--] RABBITMQCTL-ARGS...
#       Run rabbitmqctl against the node, e.g. `ctl --dir D list_queues`,
#       `ctl --dir D stop_app`, `ctl --dir D close_all_connections why`.
#       `start_app` also waits until the node accepts AMQP connections again.
#       rabbitmqctl runs with DIR as its working directory: pass absolute
#       paths in ARGS.
#   scripts/rabbitmq.sh url --dir DIR
#       Print the node's AMQP URL (amqp://guest:guest@127.0.0.1:PORT/%2f).
#   scripts/rabbitmq.sh status --dir DIR
#       Print "running" (exit 0) or "stopped" (exit 1).
#
# As root the node (and rabbitmqctl) run as the `rabbitmq` user, so DIR's
# parent directories must be searchable by that user (/tmp/... is fine);
# otherwise as the invoking user. The distribution's wrappers in /usr/sbin
# are not used: they reset HOME to /var/lib/rabbitmq (su) and would make all
# nodes share one Erlang cookie and /etc/rabbitmq's settings.
# Needs the packages from scripts/install-deps.sh.
set -euo pipefail

PROG=${0##*/}
RMQ_BIN=${RABBITMQ_BIN_DIR:-/usr/lib/rabbitmq/bin}
STATE=rabbitmq.sh.state # in DIR: what stop/ctl/url need

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() {
  say "$*"
  exit 1
}

usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit 2
}

# ---- arguments -------------------------------------------------------------

(($# > 0)) || usage
ORIG_ARGS=("$@") # for the one retry of `start` (see cmd_start)
CMD=$1
shift
DIR="" PORT="" TIMEOUT=${RABBITMQ_START_TIMEOUT:-60}
ARGS=()
while (($# > 0)); do
  case $1 in
  --dir) (($# > 1)) || usage; DIR=$2; shift 2 ;;
  --dir=*) DIR=${1#--dir=}; shift ;;
  --port) (($# > 1)) || usage; PORT=$2; shift 2 ;;
  --port=*) PORT=${1#--port=}; shift ;;
  --timeout) (($# > 1)) || usage; TIMEOUT=$2; shift 2 ;;
  --timeout=*) TIMEOUT=${1#--timeout=}; shift ;;
  -h | --help) usage ;;
  --) shift; ARGS+=("$@"); break ;;
  *)
    [[ $CMD == ctl ]] || die "unknown argument: $1"
    ARGS+=("$@")
    break
    ;;
  esac
done
case $CMD in start | stop | ctl | url | status) ;; -h | --help | help) usage ;; *) die "unknown command: $CMD" ;; esac
[[ -n $DIR ]] || die "$CMD: --dir DIR is required"
[[ -z $PORT || $PORT =~ ^[0-9]+$ && $PORT -ge 1024 && $PORT -le 65535 ]] ||
  die "--port must be a number in 1024..65535"
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout must be a whole number of seconds"
if [[ $CMD == ctl ]] && ((${#ARGS[@]} == 0)); then die "ctl: no rabbitmqctl arguments given"; fi

# ---- who runs the node -----------------------------------------------------

RUN_AS=()
OWNER=""
if [[ $(id -u) -eq 0 ]]; then
  id -u rabbitmq >/dev/null 2>&1 || die "no 'rabbitmq' user: run scripts/install-deps.sh"
  RUN_AS=(setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups)
  OWNER=rabbitmq:rabbitmq
fi
[[ -x $RMQ_BIN/rabbitmq-server && -x $RMQ_BIN/rabbitmqctl ]] ||
  die "RabbitMQ not found in $RMQ_BIN: run scripts/install-deps.sh"

# ---- helpers ---------------------------------------------------------------

# beam.smp processes of the broker node whose HOME is $DIR/home (the server
# runs `-s rabbit boot`; rabbitmqctl's own VMs share the HOME but not that).
node_pids() {
  local p args i home="" server=""
  for p in /proc/[0-9]*; do
    { mapfile -d '' -t args <"$p/cmdline"; } 2>/dev/null || continue
    [[ ${#args[@]} -gt 0 && ${args[0]##*/} == beam.smp ]] || continue
    home="" server=""
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
      [[ ${args[i]} == -home && ${args[i + 1]} == "$DIR/home" ]] && home=1
      [[ ${args[i]} == -s && ${args[i + 1]} == rabbit ]] && server=1
    done
    if [[ -n $home && -n $server ]]; then printf '%s\n' "${p#/proc/}"; fi
  done
}

port_free() {
  local out
  out=$(ss -Htan exclude time-wait "( sport = :$1 )") || die "ss failed (iproute2 missing? run scripts/install-deps.sh)"
  [[ -z $out ]]
}

# make_test_certificates DIR: CA + server cert for localhost/127.0.0.1, unless
# DIR already holds ca.pem and server.pem (a test's own; it signs client
# certificates with ca.key, kept in DIR when this made it).
make_test_certificates() {
  local d=$1
  [[ -s $d/server.pem && -s $d/ca.pem ]] && return 0
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=room-booking test CA" \
      -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
      -extfile server.ext -out server.pem 2>/dev/null
    chmod 644 ca.pem server.pem server.key
  ) || die "could not create test certificates in $d"
}

pick_port() { # pick_port LOW SPAN -> a free port in LOW..LOW+SPAN-1
  local p tries
  for ((tries = 0; tries < 200; tries++)); do
    p=$(($1 + (RANDOM * 32768 + RANDOM) % $2))
    # 35672-35682: rabbitmqctl's own distribution ports
    if ((p >= 35672 && p <= 35682)); then continue; fi
    if port_free "$p"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# Does 127.0.0.1:PORT accept connections? RabbitMQ opens its AMQP listener
# as the last boot step and closes it on stop_app. (A bare connect is not
# logged by the broker; an aborted AMQP handshake would log a warning.)
amqp_ready() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

load_state() {
  [[ -f $DIR/$STATE ]] || return 1
  # shellcheck source=/dev/null
  source "$DIR/$STATE"
}

# rmq PROGRAM ARGS...: run a RabbitMQ script with exactly the node's env.
rmq() {
  local prog=$1
  shift
  "${RUN_AS[@]}" env -i -C "$DIR" "${NODE_ENV[@]}" "$RMQ_BIN/$prog" "$@"
}

# Wait until the app is booted and the AMQP port answers. $1: seconds;
# $2: launcher pid to watch (optional).
wait_ready() {
  local deadline=$((SECONDS + $1)) watch=${2:-} left
  while :; do
    if [[ -n $watch ]] && ! kill -0 "$watch" 2>/dev/null; then
      say "the node's process exited during startup"
      return 1
    fi
    left=$((deadline - SECONDS))
    ((left > 0)) || {
      say "timed out waiting for $NODENAME"
      return 1
    }
    # Fails at once while the node is not registered with epmd yet, then
    # blocks until boot is complete.
    if rmq rabbitmqctl -q await_startup --timeout "$left" >>"$DIR/log/ctl.out" 2>&1; then
      break
    fi
    sleep 0.5
  done
  while ! amqp_ready "$NODE_PORT"; do
    ((SECONDS < deadline)) || {
      say "timed out waiting for AMQP on 127.0.0.1:$NODE_PORT"
      return 1
    }
    sleep 0.2
  done
}

show_logs() {
  local f
  for f in "$DIR/log/server.out" "$DIR/log/$NODENAME.log" "$DIR/log/ctl.out"; do
    [[ -s $f ]] || continue
    say "---- last lines of $f"
    tail -n 25 "$f" >&2
  done
}

kill_node() { # TERM, then KILL, whatever beam of this DIR remains
  local pids sig n
  for sig in TERM KILL; do
    pids=$(node_pids)
    [[ -n $pids ]] || return 0
    # shellcheck disable=SC2086 # one pid per word
    kill -s "$sig" $pids 2>/dev/null || true
    for ((n = 0; n < 50; n++)); do
      [[ -n $(node_pids) ]] || return 0
      sleep 0.2
    done
  done
  [[ -z $(node_pids) ]]
}

# ---- commands --------------------------------------------------------------

cmd_start() {
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd -P)
  local old_port="" dist t0=$SECONDS launcher

  if load_state; then
    old_port=$NODE_PORT
    if [[ -n $(node_pids) ]]; then
      [[ -z $PORT || $PORT == "$NODE_PORT" ]] ||
        die "a node already runs in $DIR on port $NODE_PORT"
      say "$NODENAME is already running"
      wait_ready "$TIMEOUT" || die "$NODENAME is running but not ready"
      grep '^AMQP_URL=' "$DIR/env"
      return 0
    fi
  elif [[ -n $(node_pids) ]]; then
    die "a RabbitMQ node already runs with HOME=$DIR/home"
  fi

  # Ports: AMQP on PORT (20000-29999 when picked), Erlang distribution on
  # PORT-10000 when that is free, else any free port in 10000-19999.
  # Not RabbitMQ's default PORT+20000: that lands in the kernel's ephemeral
  # range (32768-60999 here), where any outgoing connection — a client
  # reconnecting to this very node during a restart test — may take it
  # between our check and the node's bind, and the node dies with
  # dist_port_already_used (seen in CI). Listening ports outside the
  # ephemeral range are only ever taken by other listeners.
  if [[ -n $PORT ]]; then
    port_free "$PORT" || die "port $PORT is in use"
  elif [[ -n $old_port ]] && port_free "$old_port"; then
    PORT=$old_port
  else
    PORT=$(pick_port 20000 10000) || die "no free port found"
  fi
  dist=$((PORT - 10000))
  if ((dist < 10000 || dist > 19999)) || ! port_free "$dist"; then
    dist=$(pick_port 10000 10000) || die "no free distribution port found"
  fi

  # TLS listener for amqps:// tests, with a throwaway CA (DIR/tls/ca.pem).
  TLS_PORT=$PORT
  while [[ $TLS_PORT == "$PORT" || $TLS_PORT == "$dist" ]]; do
    TLS_PORT=$(pick_port 20000 10000) || die "no free TLS port found"
  done
  # The management API on loopback: policies (bookingctl topology upgrade)
  # can only be set through it or rabbitmqctl.
  MGMT_PORT=$PORT
  while [[ $MGMT_PORT == "$PORT" || $MGMT_PORT == "$dist" || $MGMT_PORT == "$TLS_PORT" ]]; do
    MGMT_PORT=$(pick_port 20000 10000) || die "no free management port found"
  done

  NODENAME=rabbit-$PORT@localhost
  NODE_PORT=$PORT
  DIST_PORT=$dist
  NODE_ENV=(
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    "LANG=C.UTF-8" "LC_ALL=C.UTF-8"
    "HOME=$DIR/home" # Erlang cookie; the server and rabbitmqctl must agree
    "RABBITMQ_NODENAME=$NODENAME"
    "RABBITMQ_USE_LONGNAME=false"
    "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1"
    "RABBITMQ_NODE_PORT=$NODE_PORT"
    "RABBITMQ_DIST_PORT=$DIST_PORT"
    "RABBITMQ_MNESIA_BASE=$DIR/mnesia"
    "RABBITMQ_LOG_BASE=$DIR/log"
    "RABBITMQ_PID_FILE=$DIR/mnesia/$NODENAME.pid"
    "RABBITMQ_CONFIG_FILE=$DIR/rabbitmq.conf"
    "RABBITMQ_ADVANCED_CONFIG_FILE=$DIR/advanced.config"
    "RABBITMQ_ENABLED_PLUGINS_FILE=$DIR/enabled_plugins"
    "RABBITMQ_CONF_ENV_FILE=$DIR/rabbitmq-env.conf" # not /etc/rabbitmq's
    "ERL_CRASH_DUMP=$DIR/log/erl_crash.dump"
    "ERL_EPMD_ADDRESS=127.0.0.1" # if our node is the one that starts epmd
    # Erlang distribution (server and CLI) on loopback only.
    "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
    "RABBITMQ_CTL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}"
  )

  mkdir -p "$DIR/home" "$DIR/mnesia" "$DIR/log"
  if [[ ! -s $DIR/home/.erlang.cookie ]]; then
    # Written up front so the server and the first rabbitmqctl cannot race
    # to create different cookies.
    (
      umask 077
      od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$DIR/home/.erlang.cookie"
    )
    chmod 400 "$DIR/home/.erlang.cookie"
  fi
  cat >"$DIR/rabbitmq.conf" <<'EOF'
# Written by scripts/rabbitmq.sh (rewritten at each start): a private node
# for tests. Address and port come from RABBITMQ_NODE_IP_ADDRESS and
# RABBITMQ_NODE_PORT (127.0.0.1 only).
# guest/guest may log in from loopback only (RabbitMQ's default).
loopback_users.guest = true
# Logs go to $RABBITMQ_LOG_BASE/<node>.log only.
log.console = false
log.file.level = info
EOF
  make_test_certificates "$DIR/tls"
  cat >>"$DIR/rabbitmq.conf" <<EOF
# amqps:// on 127.0.0.1:$TLS_PORT with a test CA (clients: DIR/tls/ca.pem).
listeners.ssl.default = 127.0.0.1:$TLS_PORT
ssl_options.cacertfile = $DIR/tls/ca.pem
ssl_options.certfile = $DIR/tls/server.pem
ssl_options.keyfile = $DIR/tls/server.key
# Client certificates are asked for and checked against the test CA, but
# not required; EXTERNAL logs in the certificate's common name
# (rabbitmq_auth_mechanism_ssl). Clients without one log in with PLAIN.
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = false
ssl_options.depth = 2
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = AMQPLAIN
auth_mechanisms.3 = EXTERNAL
ssl_cert_login_from = common_name
# The management API (HTTP) on 127.0.0.1:$MGMT_PORT.
management.tcp.ip = 127.0.0.1
management.tcp.port = $MGMT_PORT
EOF
  echo '[rabbitmq_management,rabbitmq_auth_mechanism_ssl].' >"$DIR/enabled_plugins"
  : >"$DIR/rabbitmq-env.conf"
  if [[ -n $OWNER ]]; then
    chown "$OWNER" "$DIR" "$DIR/rabbitmq.conf" "$DIR/enabled_plugins" "$DIR/rabbitmq-env.conf"
    chown -R "$OWNER" "$DIR/home" "$DIR/mnesia" "$DIR/log" "$DIR/tls"
    "${RUN_AS[@]}" test -w "$DIR/mnesia" -a -r "$DIR/home/.erlang.cookie" ||
      die "user rabbitmq cannot use $DIR (are its parent directories searchable by others?)"
  fi

  {
    printf '# Written by scripts/rabbitmq.sh start; read by stop/ctl/url.\n'
    printf 'NODENAME=%q\nNODE_PORT=%q\nDIST_PORT=%q\n' "$NODENAME" "$NODE_PORT" "$DIST_PORT"
    printf 'NODE_ENV=(\n'
    printf '  %q\n' "${NODE_ENV[@]}"
    printf ')\n'
  } >"$DIR/$STATE"
  {
    printf 'AMQP_URL=amqp://guest:guest@127.0.0.1:%s/%%2f\n' "$NODE_PORT"
    printf 'RABBITMQ_NODENAME=%s\n' "$NODENAME"
    printf 'RABBITMQ_PORT=%s\n' "$NODE_PORT"
    printf 'RABBITMQ_DIST_PORT=%s\n' "$DIST_PORT"
    printf 'RABBITMQ_DIR=%s\n' "$DIR"
    printf 'AMQPS_URL=amqps://guest:guest@localhost:%s/%%2f\n' "$TLS_PORT"
    printf 'AMQPS_CA_FILE=%s\n' "$DIR/tls/ca.pem"
    printf 'AMQPS_CA_KEY_FILE=%s\n' "$DIR/tls/ca.key"
    printf 'MANAGEMENT_URL=http://127.0.0.1:%s\n' "$MGMT_PORT"
  } >"$DIR/env"

  say "starting $NODENAME (AMQP 127.0.0.1:$NODE_PORT, distribution $DIST_PORT) in $DIR"
  # Detached: own session, no terminal, output to a file, and no other file
  # descriptor inherited from our caller (so a caller reading our output
  # through a pipe, e.g. `$(rabbitmq.sh start ...)` or a test harness, gets
  # EOF when this script exits, not when the node does).
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then { exec {fd}>&-; } 2>/dev/null || true; fi
    done
    exec setsid "${RUN_AS[@]}" env -i -C "$DIR" "${NODE_ENV[@]}" "$RMQ_BIN/rabbitmq-server"
  ) </dev/null >>"$DIR/log/server.out" 2>&1 &
  launcher=$!

  local log_from
  log_from=$(($(stat -c %s "$DIR/log/server.out" 2>/dev/null || echo 0) + 1))
  if ! wait_ready "$TIMEOUT" "$launcher"; then
    show_logs
    kill_node || true
    # A listener port taken between our check and the node's bind (a race
    # we cannot close from here): start again once, picking new ports.
    if grep -q '_already_used\|eaddrinuse' <(tail -c "+$log_from" "$DIR/log/server.out" 2>/dev/null) &&
      ((${RABBITMQ_START_ATTEMPT:-1} < 3)); then
      say "a port was taken while $NODENAME started; trying again with other ports"
      RABBITMQ_START_ATTEMPT=$((${RABBITMQ_START_ATTEMPT:-1} + 1)) exec bash "$0" "${ORIG_ARGS[@]}"
    fi
    die "$NODENAME failed to start"
  fi
  say "$NODENAME is up after $((SECONDS - t0)) s"
  grep '^AMQP_URL=' "$DIR/env"
}

cmd_stop() {
  if [[ ! -d $DIR ]]; then
    say "$DIR does not exist: nothing to stop"
    return 0
  fi
  DIR=$(cd "$DIR" && pwd -P)
  if [[ -z $(node_pids) ]]; then
    say "no node running in $DIR"
    return 0
  fi
  if load_state; then
    say "stopping $NODENAME"
    if timeout 60 "${RUN_AS[@]}" env -i -C "$DIR" "${NODE_ENV[@]}" "$RMQ_BIN/rabbitmqctl" -q stop \
      >>"$DIR/log/ctl.out" 2>&1; then
      local n
      for ((n = 0; n < 150; n++)); do # beam exits shortly after `stop` returns
        [[ -n $(node_pids) ]] || break
        sleep 0.2
      done
    else
      say "rabbitmqctl stop failed (see $DIR/log/ctl.out); killing the node"
    fi
  fi
  kill_node || die "could not kill the node in $DIR (pids: $(node_pids | tr '\n' ' '))"
  say "stopped"
}

cmd_ctl() {
  DIR=$(cd "$DIR" 2>/dev/null && pwd -P) || die "no such directory: $DIR"
  load_state || die "no node was started in $DIR"
  local rc=0 a
  rmq rabbitmqctl "${ARGS[@]}" || rc=$?
  if ((rc == 0)); then
    for a in "${ARGS[@]}"; do
      if [[ $a == start_app ]]; then
        wait_ready "$TIMEOUT" || {
          show_logs
          die "$NODENAME did not come back after start_app"
        }
        break
      fi
    done
  fi
  return "$rc"
}

cmd_url() {
  [[ -f $DIR/env ]] || die "no node was started in $DIR"
  local line
  line=$(grep '^AMQP_URL=' "$DIR/env") || die "no AMQP_URL in $DIR/env"
  printf '%s\n' "${line#AMQP_URL=}"
}

cmd_status() {
  DIR=$(cd "$DIR" 2>/dev/null && pwd -P) || {
    echo stopped
    return 1
  }
  if [[ -n $(node_pids) ]]; then echo running; else
    echo stopped
    return 1
  fi
}

"cmd_$CMD"
