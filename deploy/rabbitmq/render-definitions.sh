#!/usr/bin/env bash
# Renders RabbitMQ definitions: copies TEMPLATE to OUTPUT, replacing every
# "@HASH:VAR@" with RabbitMQ's salted SHA-256 hash of the password in the
# environment variable VAR (rabbit_password_hashing_sha256:
# base64(salt ++ sha256(salt ++ password)), 4 random salt bytes).
# Fails, naming the variable, when one is unset or empty, so a broker never
# starts with a user nobody knows the password of.
#
# Usage: render-definitions.sh TEMPLATE OUTPUT
# Needs bash and coreutils only (runs in the broker image and on the host).
set -euo pipefail

die() { printf 'render-definitions: %s\n' "$*" >&2; exit 1; }
(($# == 2)) || die "usage: render-definitions.sh TEMPLATE OUTPUT"
template=$1 output=$2
[[ -r $template ]] || die "cannot read $template"

hex_to_bytes() { # the bytes of a hex string, on stdout
  local hex=$1 i
  for ((i = 0; i < ${#hex}; i += 2)); do
    # shellcheck disable=SC2059 # the format is the escape we build
    printf "\\x${hex:i:2}"
  done
}

password_hash() { # password_hash PASSWORD
  local salt digest
  salt=$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
  digest=$({ hex_to_bytes "$salt"; printf '%s' "$1"; } | sha256sum | cut -c1-64)
  { hex_to_bytes "$salt"; hex_to_bytes "$digest"; } | base64 -w0
}

text=$(<"$template")
vars=$(grep -o '@HASH:[A-Z0-9_]*@' <<<"$text" | sort -u | sed 's/^@HASH:\(.*\)@$/\1/') || true
for var in $vars; do
  value=${!var:-}
  [[ -n $value ]] || die "$var is not set (the password of a broker user in $template)"
  text=${text//"@HASH:$var@"/$(password_hash "$value")}
done
umask 077
tmp=$(mktemp "$output.XXXXXX")
printf '%s\n' "$text" >"$tmp"
mv -f "$tmp" "$output"
