#!/usr/bin/env bash
# Fuzz the decoders that hostile input reaches, with libFuzzer.
#
# Usage: scripts/fuzz.sh [--seconds N] [--runs N] [TARGET...]
#   TARGET: command-decoder, header-decoder (default: both)
#
# Each target is compiled with `swiftc -sanitize=fuzzer,address` straight
# from the sources it needs (not through SwiftPM: Tests/Fuzz is no SwiftPM
# target), then run from its committed seed corpus (Tests/Fuzz/corpus/<target>/,
# read-only: new inputs go to a scratch directory) for at most N seconds
# (default 25) or the given number of runs, inputs up to 4 KiB.
#   command-decoder: Command.decode(type:body:) for every command type and
#                    AvailabilityQuery.decode(body:) (Shared/BookingContracts)
#   header-decoder:  rabbitmq-c's amqp_decode_properties, then
#                    CDecode.properties (Shared/AMQPClient/Internal/CDecode.swift)
# A crash, trap, leak or timeout fails the script (exit status 1) and leaves
# the input in test-artifacts/fuzz/<target>/; replay it with
#   .build-fuzz/<target> test-artifacts/fuzz/<target>/crash-…
# Ends with a line `fuzz: N passed, N failed`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
cd "$ROOT"
SWIFTC=${SWIFTC:-swiftc}
SECONDS_EACH=25
RUNS=-1
TARGETS=()
while (($#)); do
  case $1 in
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    command-decoder|header-decoder) TARGETS+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
((${#TARGETS[@]})) || TARGETS=(command-decoder header-decoder)

BUILD=$ROOT/.build-fuzz
ARTIFACTS=$ROOT/test-artifacts/fuzz
mkdir -p "$BUILD"

build() {
  local target=$1 out=$BUILD/$1
  local -a sources flags=(-sanitize=fuzzer,address -parse-as-library -O -g -module-name "Fuzz_${target//-/_}")
  case $target in
    command-decoder)
      sources=(Shared/BookingContracts/*.swift Tests/Fuzz/CommandDecoderFuzz.swift) ;;
    header-decoder)
      sources=(Shared/AMQPClient/Internal/CArena.swift Shared/AMQPClient/Internal/CDecode.swift Shared/AMQPClient/AMQPFieldValue.swift
               Shared/AMQPClient/AMQPProperties.swift Tests/Fuzz/HeaderDecoderFuzz.swift)
      flags+=(-I Shared/CRabbitMQ -lrabbitmq) ;;
  esac
  echo "==> building $target"
  # gold warns once per ASan helper symbol; nothing to act on.
  "$SWIFTC" "${flags[@]}" "${sources[@]}" -o "$out" 2> >(grep -v 'Cannot export local symbol' >&2)
}

passed=0 failed=0
for target in "${TARGETS[@]}"; do
  build "$target"
  scratch=$(mktemp -d "/tmp/room-booking-fuzz-$target.XXXXXX")
  rm -rf "${ARTIFACTS:?}/$target"
  mkdir -p "$ARTIFACTS/$target"
  echo "==> fuzzing $target for at most ${SECONDS_EACH}s"
  rc=0
  "$BUILD/$target" "$scratch" "Tests/Fuzz/corpus/$target" \
    -max_len=4096 -max_total_time="$SECONDS_EACH" -runs="$RUNS" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$target/" 2>"$scratch.log" || rc=$?
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::average_exec_per_sec|==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)' \
    "$scratch.log" || true
  if ((rc == 0)); then
    passed=$((passed + 1))
    rmdir "$ARTIFACTS/$target" 2>/dev/null || true
  else
    failed=$((failed + 1))
    cp "$scratch.log" "$ARTIFACTS/$target/libfuzzer.log"
    echo "fuzz: $target FAILED (exit $rc); input and log in test-artifacts/fuzz/$target/"
  fi
  rm -rf "$scratch" "$scratch.log"
done
echo
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
