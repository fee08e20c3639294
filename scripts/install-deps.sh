#!/usr/bin/env bash
# Install what this project needs to build and test, idempotently.
#
# Usage: scripts/install-deps.sh
#
#   Debian packages (apt): rabbitmq-server librabbitmq-dev libphonenumber-dev
#     libprotobuf-dev amqp-tools iproute2 libsqlite3-dev tzdata openssl chromium curl
#   Python packages (pip): jsonschema, pyyaml, icalendar, pika
#
# Safe to run any number of times: when everything is present it only queries
# dpkg and python and exits (well under a second). apt-get update runs only
# when a package is missing. Needs root (or sudo) only when it has to install.
#
# rabbitmq-server's maintainer scripts would start the distribution's default
# node (rabbit@<host>, port 5672, /var/lib/rabbitmq); we keep that from
# happening with a temporary /usr/sbin/policy-rc.d and stop the node if it
# runs anyway. Our tests run private nodes via scripts/rabbitmq.sh instead.
set -euo pipefail

APT_PACKAGES=(
  rabbitmq-server    # the broker (scripts/rabbitmq.sh runs private nodes of it)
  librabbitmq-dev    # rabbitmq-c: the CRabbitMQ system library target
  libphonenumber-dev # CPhoneNumber target
  libprotobuf-dev    # headers included by libphonenumber's phonenumberutil.h
  amqp-tools         # amqp-publish / amqp-get / amqp-declare-queue, for checks
  iproute2           # ss, used by scripts/rabbitmq.sh to find free ports
  libsqlite3-dev     # SQLite for GRDB (the services' storage)
  tzdata             # IANA time zones for the rooms
  openssl            # test CA and TLS certificates for the broker's amqps listener
  chromium           # headless browser for the projector page test (Tests/ProjectorIntegrationTests)
  curl               # scripts/run.sh asks the projector over HTTP
  iptables           # the partition test cuts one handler off (Tests/BookingIntegrationTests/SeveralHandlersTests)
  socat              # forwards a network namespace's traffic to the loopback broker and PostgreSQL (same tests)
)
PIP_PACKAGES=(jsonschema pyyaml icalendar pika)   # pip names (icalendar: the independent parser of the pass e-mails' iCalendar parts; pika: an outside system's own client in the isolation tests)
PIP_MODULES=(jsonschema yaml icalendar pika)       # matching import names

PYTHON=${PYTHON:-python3}

log() { printf 'install-deps: %s\n' "$*" >&2; }

as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    log "need root (or sudo) to run: $*"
    exit 1
  fi
}

# ---- Debian packages -------------------------------------------------------

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ $status != "install ok installed" ]]; then
    missing+=("$pkg")
  fi
done

# A RabbitMQ server VM (`-s rabbit boot`) whose Erlang home is
# /var/lib/rabbitmq is the package's default node (ours use <dir>/home).
default_node_pids() {
  local p args i home server
  for p in /proc/[0-9]*; do
    { mapfile -d '' -t args <"$p/cmdline"; } 2>/dev/null || continue
    [[ ${#args[@]} -gt 0 && ${args[0]##*/} == beam.smp ]] || continue
    home="" server=""
    for ((i = 0; i + 1 < ${#args[@]}; i++)); do
      [[ ${args[i]} == -home && ${args[i + 1]} == /var/lib/rabbitmq ]] && home=1
      [[ ${args[i]} == -s && ${args[i + 1]} == rabbit ]] && server=1
    done
    if [[ -n $home && -n $server ]]; then printf '%s\n' "${p#/proc/}"; fi
  done
}

stop_default_node() {
  local pids
  pids=$(default_node_pids)
  [[ -n $pids ]] || return 0
  log "stopping the package's default RabbitMQ node (pids: $(echo "$pids" | tr '\n' ' '))"
  as_root timeout 60 /usr/sbin/rabbitmqctl stop >/dev/null 2>&1 || true
  sleep 1
  pids=$(default_node_pids)
  if [[ -n $pids ]]; then
    # shellcheck disable=SC2086 # one pid per word
    as_root kill $pids 2>/dev/null || true
  fi
}

if ((${#missing[@]} > 0)); then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_log=$(mktemp /tmp/install-deps-apt.XXXXXX)
  created_policy=""
  cleanup_apt() {
    if [[ -n $created_policy ]]; then as_root rm -f /usr/sbin/policy-rc.d; fi
    rm -f "$apt_log"
  }
  trap cleanup_apt EXIT
  # Keep maintainer scripts from starting services (the default RabbitMQ
  # node); Docker-style images often ship this file already.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\n# temporary, from install-deps.sh\nexit 101\n' |
      as_root tee /usr/sbin/policy-rc.d >/dev/null
    as_root chmod 755 /usr/sbin/policy-rc.d
    created_policy=1
  fi
  if ! as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$apt_log" 2>&1 ||
    ! as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
      "${missing[@]}" >>"$apt_log" 2>&1; then
    log "apt-get failed; last lines of its output:"
    tail -n 40 "$apt_log" >&2
    exit 1
  fi
  log "Debian packages installed"
  # postinst normally cannot start the node here (policy-rc.d, no systemd);
  # make sure it did not.
  stop_default_node
fi

# ---- Python packages -------------------------------------------------------

pip_missing=()
for i in "${!PIP_PACKAGES[@]}"; do
  if ! "$PYTHON" -c "import ${PIP_MODULES[i]}" >/dev/null 2>&1; then
    pip_missing+=("${PIP_PACKAGES[i]}")
  fi
done

if ((${#pip_missing[@]} > 0)); then
  log "installing Python packages: ${pip_missing[*]}"
  PIP_ROOT_USER_ACTION=ignore "$PYTHON" -m pip install --quiet \
    --disable-pip-version-check "${pip_missing[@]}"
fi
