# shellcheck shell=bash
# The HA stage of scripts/container-test.sh (sourced by it, after the
# single-node set is down; uses its dockerd, images, helpers and
# passwords): docker-compose.ha.yml up — PostgreSQL, three clustered
# RabbitMQ nodes, two of each service — checks the cluster and the quorum
# queues' members, books as external-publisher and sees the pass delivered
# exactly once and both projector replicas change; stops the broker node
# leading booking-handler.commands and one booking handler, books again
# (timing the recovery) and checks the same; then down -v.
# Skipped with CONTAINER_TEST_SKIP=ha.

HA_T0=$SECONDS
HA_FAILED_BEFORE=$FAILED
HA_PROJECT=$PROJECT-ha
# Test-only override: this dockerd's containers reach no upstream DNS
# server, so looking up a name Docker's resolver does not know — that of a
# stopped container — takes 20 s instead of failing at once as on a
# normal network; every client (rabbitmq-c, Erlang's distribution) asking
# for the stopped node's name would wait that long. One second, one try.
HA_OVERRIDE=$WORK/docker-compose.ha-test.yml
{
  echo 'version: "3.8"'
  echo 'services:'
  for s in postgres rabbitmq-1 rabbitmq-2 rabbitmq-3 booking-handler-1 booking-handler-2 \
    pass-sender-1 pass-sender-2 availability-projector-a availability-projector-b; do
    printf '  %s:\n    dns_opt: ["timeout:1", "attempts:1"]\n' "$s"
  done
} >"$HA_OVERRIDE"
HA_ARGS=(-p "$HA_PROJECT" -f "$ROOT/docker-compose.ha.yml" -f "$HA_OVERRIDE")
MAIN_COMPOSE_ARGS=("${COMPOSE_ARGS[@]}")
# compose(), wait_healthy and diagnostics act on the HA project from here on.
COMPOSE_ARGS=("${HA_ARGS[@]}")
SERVICES=(postgres rabbitmq-1 rabbitmq-2 rabbitmq-3 booking-handler-1 booking-handler-2
  pass-sender-1 pass-sender-2 availability-projector-a availability-projector-b)
PASS_SENDERS=(pass-sender-1 pass-sender-2)

ERLANG_COOKIE=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
POSTGRES_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
AMQP_PORT_1=$(free_port) AMQP_PORT_2=$(free_port) AMQP_PORT_3=$(free_port)
MANAGEMENT_PORT=$(free_port) PROMETHEUS_PORT=$(free_port) PROJECTOR_PORT=$(free_port) PROJECTOR_B_PORT=$(free_port)
export ERLANG_COOKIE POSTGRES_PASSWORD AMQP_PORT_1 AMQP_PORT_2 AMQP_PORT_3 MANAGEMENT_PORT PROMETHEUS_PORT \
  PROJECTOR_PORT PROJECTOR_B_PORT
declare -A HA_NODE_PORT=([rabbitmq-1]=$AMQP_PORT_1 [rabbitmq-2]=$AMQP_PORT_2 [rabbitmq-3]=$AMQP_PORT_3)
ha_urls() { # ha_urls USER PASSWORD [SKIPPED-NODE]: the running nodes' AMQP URLs, comma-separated
  local n urls=""
  for n in rabbitmq-1 rabbitmq-2 rabbitmq-3; do
    [[ $n == "${3:-}" ]] && continue
    urls+=${urls:+,}amqp://$1:$2@127.0.0.1:${HA_NODE_PORT[$n]}/%2f
  done
  echo "$urls"
}
HA_EXT_URL=$(ha_urls external-publisher "$EXTERNAL_PUBLISHER_PASSWORD")
HA_OPS_URL=$(ha_urls bookingctl "$BOOKINGCTL_PASSWORD")
HA_CTL_NODE=rabbitmq-1 # where rabbitmqctl runs (moves if that node is stopped)
ha_ctl() { compose exec -T "$HA_CTL_NODE" rabbitmqctl -q "$@"; }

ha_up() {
  section "HA: docker-compose -f docker-compose.ha.yml up -d (AMQP :$AMQP_PORT_1 :$AMQP_PORT_2 :$AMQP_PORT_3, projectors :$PROJECTOR_PORT :$PROJECTOR_B_PORT)"
  compose up -d --no-build || { diagnostics; fail "HA: docker-compose -f docker-compose.ha.yml up"; return 1; }
  wait_healthy "HA: compose up (postgres, 3 broker nodes, 2 handlers, 2 pass senders, 2 projector replicas)"
}

ha_cluster_nodes() { # ha_cluster_nodes N: N nodes running in one cluster
  local out
  out=$(ha_ctl cluster_status --formatter json) || return 1
  "$PYTHON" -c '
import json, sys
s = json.loads(sys.argv[1]); running = sorted(s.get("running_nodes", []))
print("running nodes:", " ".join(running))
sys.exit(0 if len(running) == int(sys.argv[2]) else "expected %s" % sys.argv[2])' "$out" "$1"
}

ha_quorum_members() { # every quorum queue has a member on each of the three nodes
  local out
  out=$(ha_ctl list_queues name type members leader --formatter json) || return 1
  "$PYTHON" -c '
import json, sys
qs = [q for q in json.loads(sys.argv[1]) if q.get("type") == "quorum"]
want = {"rabbit@rabbitmq-1", "rabbit@rabbitmq-2", "rabbit@rabbitmq-3"}
bad = [(q["name"], q.get("members")) for q in qs if set(q.get("members") or []) != want]
names = {q["name"] for q in qs}
missing = {"booking-handler.commands", "pass-sender.events", "availability.queries",
           "availability-projector.events.a", "availability-projector.events.b"} - names
print("%d quorum queues, each on 3 nodes" % len(qs) if not bad else "not on all 3 nodes: %s" % bad)
sys.exit("missing %s" % sorted(missing) if missing else (1 if bad else 0))' "$out"
}

ha_leader() { # the service (rabbitmq-N) whose node leads booking-handler.commands
  ha_ctl list_queues name leader | awk '$1 == "booking-handler.commands" {sub(/^rabbit@/, "", $2); print $2}'
}

# ha_book LABEL START END DEADLINE: booking.create as external-publisher over
# the nodes of HA_EXT_URL, retried with the same message_id (the handler's
# inbox answers a repeat) until a reply or DEADLINE seconds. Sets BOOKING_ID
# and HA_BOOK_SECONDS.
ha_book() {
  local label=$1 deadline=$((SECONDS + $4)) t=$EPOCHREALTIME out rc attempts=0
  local mid
  mid=ct-ha-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
  BOOKING_ID=""
  while :; do
    attempts=$((attempts + 1)) rc=0
    out=$("${CLIENT[@]}" book "$HA_EXT_URL" --user-id external-publisher --reply queue --message-id "$mid" \
      --room Berlin --date "$DATE" --start "$2" --end "$3" --title "container test $label" --timeout 20 2>&1) || rc=$?
    BOOKING_ID=$("$PYTHON" -c 'import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print(r["booking"]["id"])' <<<"$out" 2>/dev/null || true)
    ((rc == 0)) && [[ -n $BOOKING_ID ]] && break
    ((SECONDS < deadline)) || break
    sleep 1
  done
  HA_BOOK_SECONDS=$(ha_since "$t")
  if [[ -n $BOOKING_ID ]]; then
    pass "$label: booking.create as external-publisher -> ok, booking $BOOKING_ID ($attempts attempt(s), $HA_BOOK_SECONDS s)"
  else
    fail "$label: booking.create as external-publisher (no ok reply in $4 s, $attempts attempts)"
    printf '%s\n' "$out" | tail -n 10 | sed 's/^/       /'
    return 1
  fi
}

ha_since() { # ha_since EPOCHREALTIME: seconds since then, one decimal
  awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}'
}

ha_pass_files() { # ha_pass_files BOOKING_ID EXT: its pass files (v1, any attendee) in both pass senders' outboxes
  local s n total=0
  for s in "${PASS_SENDERS[@]}"; do
    n=$(compose exec -T "$s" sh -c "find /data/outbox -type f -name '$1-v1-*.$2' 2>/dev/null | wc -l" 2>/dev/null | tr -dc 0-9)
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
ha_one_pass_file_each() { # ha_one_pass_file_each BOOKING_ID: exactly one .eml and one .sms (one attendee)
  local eml sms i
  for i in $(seq 1 30); do
    eml=$(ha_pass_files "$1" eml) sms=$(ha_pass_files "$1" sms)
    ((eml >= 1 && sms >= 1)) && break
    sleep 1
  done
  echo "$1: $eml .eml and $sms .sms across ${PASS_SENDERS[*]}"
  [[ $eml == 1 && $sms == 1 ]]
}

ha_delivered() { # ha_delivered LABEL BOOKING_ID START END
  check "$1: exactly one pass.delivered event for the booking (none more within 10 s)" \
    "${CLIENT[@]}" wait-event "$HA_OPS_URL" --queue bookingctl.container-test-ha.pass --type pass.delivered \
    --booking-id "$2" --timeout 60 --then-none-for 10
  check "$1: exactly one pass e-mail and one SMS for the attendee, across both pass senders' outboxes" \
    ha_one_pass_file_each "$2"
  check "$1: availability.changed event for Berlin without $3-$4" \
    "${CLIENT[@]}" wait-event "$HA_OPS_URL" --queue bookingctl.container-test-ha.availability \
    --type availability.changed --field room=Berlin --field date="$DATE" --booked "$3-$4" --timeout 60
  local port name
  for name in a b; do
    port=$PROJECTOR_PORT
    [[ $name == b ]] && port=$PROJECTOR_B_PORT
    check "$1: projector replica $name (GET /rooms on :$port) no longer offers $3-$4 in Berlin" \
      "$PYTHON" "$ROOT/scripts/container/check_availability.py" \
      "http://127.0.0.1:$port/rooms?date=$DATE&name=Berlin" Berlin "$3" "$4" 60
  done
}

ha_stage() {
  ha_up || return 0
  section "HA: cluster and quorum queues"
  check "HA: three nodes running in one cluster (classic peer discovery)" ha_cluster_nodes 3
  check "HA: every quorum queue has members on all three nodes (rabbitmqctl list_queues name type members)" ha_quorum_members
  check "HA: operator taps (quorum queues, so they survive a node) bound to booking.events" bash -c "
    ${CLIENT[*]@Q} watch '$HA_OPS_URL' --queue bookingctl.container-test-ha.pass --key pass.delivered --queue-type quorum &&
    ${CLIENT[*]@Q} watch '$HA_OPS_URL' --queue bookingctl.container-test-ha.availability --key availability.changed --queue-type quorum"

  section "HA: booking through the cluster"
  if ha_book "HA first" 08:00 08:30 60; then ha_delivered "HA first" "$BOOKING_ID" 08:00 08:30; fi

  # The node that leads booking-handler.commands, and a handler: the one
  # not on that node (each starts at the node its AMQP_URL names first),
  # so the surviving handler has to move to another node.
  local leader handler t_stop stop_took
  leader=$(ha_leader)
  if [[ ! $leader =~ ^rabbitmq-[123]$ ]]; then
    fail "HA: leader of booking-handler.commands (rabbitmqctl list_queues name leader) is '${leader:-unknown}'"
    leader=rabbitmq-2
  fi
  case $leader in
  rabbitmq-1) handler=booking-handler-2 ;;
  *) handler=booking-handler-1 ;;
  esac
  HA_LEADER=$leader HA_STOPPED_HANDLER=$handler
  [[ $leader == rabbitmq-1 ]] && HA_CTL_NODE=rabbitmq-2
  HA_EXT_URL=$(ha_urls external-publisher "$EXTERNAL_PUBLISHER_PASSWORD" "$leader")
  HA_OPS_URL=$(ha_urls bookingctl "$BOOKINGCTL_PASSWORD" "$leader")

  section "HA: stopping broker node $leader (leads booking-handler.commands) and $handler"
  t_stop=$EPOCHREALTIME
  check "HA: docker-compose stop $leader $handler" compose stop -t 60 "$leader" "$handler"
  stop_took=$(ha_since "$t_stop")

  # At once: the booking's time is the set's recovery (the client itself
  # goes straight to a running node).
  section "HA: booking again with $leader and $handler down"
  local booked=0
  if ha_book "HA after stop" 08:30 09:00 120; then
    booked=1
    HA_RECOVERY="booking answered $HA_BOOK_SECONDS s after the stops returned ($(ha_since "$t_stop") s after they began; the graceful stops took $stop_took s)"
  else
    HA_RECOVERY="no booking went through"
  fi
  echo "  $HA_RECOVERY"
  check "HA: two nodes still running in the cluster" ha_cluster_nodes 2
  check "HA: booking-handler.commands has a new leader on a running node" bash -c "
    for i in \$(seq 1 30); do
      l=\$('$COMPOSE' ${HA_ARGS[*]@Q} exec -T $HA_CTL_NODE rabbitmqctl -q list_queues name leader |
        awk '\$1 == \"booking-handler.commands\" {print \$2}')
      [[ -n \$l && \$l != rabbit@$leader ]] && { echo \"leader now \$l\"; exit 0; }
      sleep 1
    done
    echo \"leader still \${l:-unknown}\"; exit 1"
  if ((booked)); then ha_delivered "HA after stop" "$BOOKING_ID" 08:30 09:00; fi
  local other=booking-handler-1
  [[ $handler == booking-handler-1 ]] && other=booking-handler-2
  check "HA: the remaining handler $other is ready" bash -c "[[ \$('$DOCKER' inspect -f '{{.State.Health.Status}}' \$('$COMPOSE' ${HA_ARGS[*]@Q} ps -q $other)) == healthy ]]"
}

if skipped ha; then
  skip "HA stage: docker-compose.ha.yml (CONTAINER_TEST_SKIP=ha)"
else
  HA_LEADER="" HA_STOPPED_HANDLER="" HA_RECOVERY=""
  ha_stage
  if ((FAILED > HA_FAILED_BEFORE)); then
    section "HA: logs (a check failed)"
    compose ps || true
    compose logs --no-color --tail=40 booking-handler-1 booking-handler-2 pass-sender-1 pass-sender-2 \
      availability-projector-a availability-projector-b || true
    compose logs --no-color --tail=15 rabbitmq-1 rabbitmq-2 rabbitmq-3 || true
  fi
  if [[ ${KEEP:-} != 1 ]]; then
    section "HA: docker-compose -f docker-compose.ha.yml down -v"
    check "HA: docker-compose down -v" compose down -v --remove-orphans --timeout 20
  fi
  echo "  HA stage: $((SECONDS - HA_T0)) s; booking-handler.commands was led by ${HA_LEADER:-?}; stopped ${HA_LEADER:-?} and ${HA_STOPPED_HANDLER:-?}; ${HA_RECOVERY:-}"
  [[ ${KEEP:-} == 1 ]] || COMPOSE_ARGS=("${MAIN_COMPOSE_ARGS[@]}")
fi
