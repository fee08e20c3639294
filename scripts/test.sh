#!/usr/bin/env bash
# The project's test command: install dependencies, start a private RabbitMQ,
# build, run the Swift tests.
#
# Usage: scripts/test.sh [SWIFT-TEST-ARGS...]
#   e.g. scripts/test.sh --filter AMQPIntegrationTests
#
# Works from any directory. Steps:
#   1. scripts/install-deps.sh (fast no-op when everything is installed)
#   2. unless AMQP_URL is already set: start a broker with scripts/rabbitmq.sh
#      in a fresh /tmp/room-booking-rabbitmq.XXXXXX directory; it is stopped
#      and the directory removed when this script exits (also on failure,
#      Ctrl-C or TERM). If the tests fail, the broker's logs are first copied
#      to test-artifacts/rabbitmq-logs/.
#   3. swift build --build-tests, then swift test --skip-build "$@" (what
#      was just built: `swift test` building again re-ran plugins and
#      relinked the executables, about 50 s on a clean clone);
#   4. on a full run (no arguments, SCALE_BENCHMARK not 0): the scale
#      benchmark at 20,000 bookings with the debug build (test-artifacts/
#      scale-small.json); then the fuzz targets. Exits non-zero when any
#      step failed.
#
# The tests see:
#   AMQP_URL              amqp://guest:guest@127.0.0.1:PORT/%2f
#   RABBITMQ_TEST_SCRIPT  absolute path of scripts/rabbitmq.sh (tests may start
#                         their own nodes, or run `ctl --dir ...`)
#   RABBITMQ_CLUSTER_DIR  a three-node cluster (scripts/rabbitmq-cluster.sh),
#                         started once per run unless given
#   POSTGRES_TEST_DIR     a private PostgreSQL (scripts/postgres.sh; its
#                         DATABASE_URL in DIR/env), started once per run
#                         unless given; tests keep apart by schema
#   RABBITMQ_TEST_DIR     the broker's --dir for rabbitmq.sh (e.g. to
#                         `ctl --dir "$RABBITMQ_TEST_DIR" stop_app`); empty when
#                         AMQP_URL came from the caller
#
# Environment: SWIFT_BIN (default: swift) is the swift driver to run;
# KEEP_BROKER=1 leaves the broker running and its directory in place.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
SWIFT_BIN=${SWIFT_BIN:-swift}
RABBITMQ_SH=$ROOT/scripts/rabbitmq.sh

section() { printf '\n==> %s\n' "$*"; }

section "installing dependencies"
"$ROOT/scripts/install-deps.sh"

export RABBITMQ_TEST_SCRIPT=$RABBITMQ_SH
BROKER_DIR=""
CLUSTER_DIR=""
PG_DIR=""

# shellcheck disable=SC2317 # invoked via trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $BROKER_DIR ]]; then
    if [[ ${KEEP_BROKER:-} == 1 ]]; then
      section "leaving RabbitMQ running (KEEP_BROKER=1): $RABBITMQ_SH stop --dir $BROKER_DIR"
    else
      if ((rc != 0)) && [[ -d $BROKER_DIR/log ]]; then
        rm -rf "$ROOT/test-artifacts/rabbitmq-logs"
        mkdir -p "$ROOT/test-artifacts"
        cp -r "$BROKER_DIR/log" "$ROOT/test-artifacts/rabbitmq-logs" 2>/dev/null || true
        echo "broker logs copied to test-artifacts/rabbitmq-logs/"
      fi
      section "stopping RabbitMQ"
      "$RABBITMQ_SH" stop --dir "$BROKER_DIR" || true
      rm -rf "$BROKER_DIR"
    fi
  fi
  if [[ -n $PG_DIR ]]; then
    section "stopping PostgreSQL"
    "$ROOT/scripts/postgres.sh" stop --dir "$PG_DIR" || true
    rm -rf "$PG_DIR"
  fi
  if [[ -n $CLUSTER_DIR ]]; then
    section "stopping the RabbitMQ cluster"
    "$ROOT/scripts/rabbitmq-cluster.sh" stop --dir "$CLUSTER_DIR" || true
    rm -rf "$CLUSTER_DIR"
  fi
  exit "$rc"
}

if [[ -n ${AMQP_URL:-} ]]; then
  section "using RabbitMQ at AMQP_URL from the environment"
  export RABBITMQ_TEST_DIR=${RABBITMQ_TEST_DIR:-}
else
  section "starting RabbitMQ"
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  BROKER_DIR=$(mktemp -d /tmp/room-booking-rabbitmq.XXXXXX)
  "$RABBITMQ_SH" start --dir "$BROKER_DIR"
  AMQP_URL=$("$RABBITMQ_SH" url --dir "$BROKER_DIR")
  export AMQP_URL
  export RABBITMQ_TEST_DIR=$BROKER_DIR
fi

# The three-node cluster of the tests that run beyond one machine
# (Tests/AMQPIntegrationTests/ClusterTests.swift): started once per run,
# not once per test.
if [[ -z ${RABBITMQ_CLUSTER_DIR:-} ]]; then
  section "starting a three-node RabbitMQ cluster"
  trap cleanup EXIT
  CLUSTER_DIR=$(mktemp -d /tmp/room-booking-cluster.XXXXXX)
  chmod 755 "$CLUSTER_DIR"
  "$ROOT/scripts/rabbitmq-cluster.sh" start --dir "$CLUSTER_DIR"
  export RABBITMQ_CLUSTER_DIR=$CLUSTER_DIR
fi

# The PostgreSQL server of the store suite and the tests of several
# handler instances on one database: once per run, a schema per test.
if [[ -z ${POSTGRES_TEST_DIR:-} ]]; then
  section "starting PostgreSQL"
  trap cleanup EXIT
  PG_DIR=$(mktemp -d /tmp/room-booking-postgres.XXXXXX)
  chmod 755 "$PG_DIR"
  "$ROOT/scripts/postgres.sh" start --dir "$PG_DIR"
  export POSTGRES_TEST_DIR=$PG_DIR
fi

section "building (swift build --build-tests)"
"$SWIFT_BIN" build --build-tests

section "testing (swift test --skip-build${*:+ $*})"
rc=0
TEST_LOG=$(mktemp /tmp/room-booking-test-log.XXXXXX)
# Serial: the integration tests start handlers, broker nodes and rabbitmqctl
# VMs; run side by side on two cores they starve each other into timeouts.
# --skip-build once: a caller's own --skip-build is left out.
test_args=()
for arg in "$@"; do [[ $arg == --skip-build ]] || test_args+=("$arg"); done
"$SWIFT_BIN" test --skip-build --no-parallel ${test_args[@]+"${test_args[@]}"} 2>&1 | tee "$TEST_LOG" || rc=${PIPESTATUS[0]}
# The tests are Swift Testing tests; XCTest's "Executed 0 tests" lines are
# its empty half. Close with one plain summary line for whoever reads the end.
summary=$(grep -E '^. Test run with [0-9]+ tests?' "$TEST_LOG" | tail -n 1 || true)
total=$(sed -nE 's/^. Test run with ([0-9]+) tests?.*/\1/p' <<<"$summary")
failed=$(grep -E '^✘ Test .* failed after' "$TEST_LOG" | grep -vc '^✘ Test run with' || true)
passed=$(( ${total:-0} - failed ))
rm -f "$TEST_LOG"
# The scale benchmark at a small size, so that it cannot rot: the debug
# `benchmarks` executable and services `swift build --build-tests` already
# built (a release build would cost many minutes more), on the run's broker
# and PostgreSQL, both stores. Its figures are debug builds' and only
# show that every phase runs; the reference figures are release runs
# (docs/performance.md). Only on a full run (no arguments), and never
# with SCALE_BENCHMARK=0.
if (($# == 0)) && [[ ${SCALE_BENCHMARK:-1} != 0 ]]; then
  section "scale benchmark, small (benchmarks scale --bookings 20000)"
  mkdir -p "$ROOT/test-artifacts"
  scale_rc=0
  "$("$SWIFT_BIN" build --show-bin-path)/benchmarks" scale --bookings 20000 --single 50 --pipelined 200 --queries 30 --check-bulk 1000 \
    --json "$ROOT/test-artifacts/scale-small.json" || scale_rc=$?
  ((scale_rc == 0)) || { echo "scale benchmark failed (exit $scale_rc)"; ((rc != 0)) || rc=1; }
fi
# The fuzz targets (scripts/fuzz.sh): 2 x at most 10 s plus their builds;
# a crash fails this script. Its own summary line comes before ours.
section "fuzzing (scripts/fuzz.sh --seconds 10)"
fuzz_rc=0
"$ROOT/scripts/fuzz.sh" --seconds 10 || fuzz_rc=$?
((fuzz_rc == 0)) || { echo "fuzzing failed (scripts/fuzz.sh exit $fuzz_rc)"; ((rc != 0)) || rc=1; }
echo
echo "tests: $passed passed, $failed failed"
((rc == 0 && failed == 0)) || rc=${rc/#0/1}
exit "$rc"
