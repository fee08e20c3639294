#!/usr/bin/env bash
# Certificates for the broker's TLS listeners (AMQPS 5671, management HTTPS
# 15671), run by docker-entrypoint.sh at every start of the container:
#
#   tls-certificates.sh prepare
#       Puts ca.pem, server.pem and server.key into /run/rabbitmq/tls (what
#       rabbitmq.conf names). The operator's, when /etc/rabbitmq/tls (the
#       compose file mounts deploy/tls/ there) holds all three; otherwise
#       the project's own, made on first start in /var/lib/rabbitmq/tls (the
#       data volume, so outside systems keep trusting the same CA): a private
#       CA (ca.pem, ca.key) and a server certificate naming TLS_SERVER_NAMES
#       (comma-separated host names and IP addresses outside systems and the
#       services connect by; default localhost,127.0.0.1,rabbitmq). A made
#       server certificate is made again, by the same CA, when the names
#       change or it is within 30 days of expiring.
#
#   tls-certificates.sh client NAME
#       Prints a new private key and a client certificate for broker user
#       NAME (its common name; EXTERNAL logs that user in), signed by the
#       made CA, valid for a year (PEM, key first). For the operator's own
#       CA, sign client certificates with it instead.
set -euo pipefail

provided=/etc/rabbitmq/tls
made=/var/lib/rabbitmq/tls
active=/run/rabbitmq/tls
names=${TLS_SERVER_NAMES:-localhost,127.0.0.1,rabbitmq}

say() { printf 'rabbitmq: %s\n' "$*" >&2; }

# subjectAltName entries for a comma-separated list of names.
subject_alt_names() {
  local IFS=, n out=""
  for n in $1; do
    n=${n// /}
    [[ -n $n ]] || continue
    if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then out+=${out:+,}IP:$n; else out+=${out:+,}DNS:$n; fi
  done
  printf '%s' "$out"
}

make_ca() {
  say "making a private CA in $made (first start; outside systems need $made/ca.pem)"
  openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=room-booking broker CA" \
    -keyout "$made/ca.key" -out "$made/ca.pem" 2>/dev/null
  chmod 600 "$made/ca.key"
}

make_server() {
  local san first
  san=$(subject_alt_names "$names")
  [[ -n $san ]] || { say "TLS_SERVER_NAMES names no host"; exit 78; }
  first=${names%%,*}
  say "making the server certificate for $san"
  openssl req -newkey rsa:3072 -nodes -subj "/CN=${first// /}" -keyout "$made/server.key" -out "$made/server.csr" 2>/dev/null
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$san" >"$made/server.ext"
  openssl x509 -req -in "$made/server.csr" -CA "$made/ca.pem" -CAkey "$made/ca.key" -CAcreateserial \
    -days 825 -extfile "$made/server.ext" -out "$made/server.pem" 2>/dev/null
  chmod 600 "$made/server.key"
  printf '%s\n' "$names" >"$made/server.names"
  rm -f "$made/server.csr"
}

cmd_prepare() {
  mkdir -p "$active"
  chmod 700 "$active"
  if [[ -s $provided/ca.pem && -s $provided/server.pem && -s $provided/server.key ]]; then
    local f
    for f in ca.pem server.pem server.key; do
      cp "$provided/$f" "$active/$f" || { say "cannot read $provided/$f (the broker runs as uid $(id -u): make it readable)"; exit 78; }
    done
    say "TLS: the operator's certificates from deploy/tls/ ($(openssl x509 -in "$active/server.pem" -noout -ext subjectAltName 2>/dev/null | tail -n +2 | tr -d ' '))"
  else
    if [[ -e $provided/server.pem || -e $provided/server.key || -e $provided/ca.pem ]]; then
      say "deploy/tls/ needs all of ca.pem, server.pem and server.key; using the made certificates instead"
    fi
    mkdir -p "$made"
    chmod 700 "$made"
    [[ -s $made/ca.pem && -s $made/ca.key ]] || make_ca
    if [[ ! -s $made/server.pem || $(cat "$made/server.names" 2>/dev/null) != "$names" ]] ||
      ! openssl x509 -in "$made/server.pem" -noout -checkend $((30 * 86400)) >/dev/null; then
      make_server
    fi
    cp "$made/ca.pem" "$made/server.pem" "$made/server.key" "$active/"
    say "TLS: certificates made by this project for $names; CA fingerprint $(openssl x509 -in "$made/ca.pem" -noout -fingerprint -sha256 | cut -d= -f2)"
  fi
  chmod 600 "$active/server.key"
}

cmd_client() {
  local name=${1:?usage: tls-certificates.sh client NAME} dir
  [[ -s $made/ca.key ]] || { say "no CA made by this project in $made (operator's CA: sign with it instead)"; exit 1; }
  dir=$(mktemp -d)
  openssl req -newkey rsa:3072 -nodes -subj "/CN=$name" -keyout "$dir/key.pem" -out "$dir/req.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >"$dir/ext"
  openssl x509 -req -in "$dir/req.csr" -CA "$made/ca.pem" -CAkey "$made/ca.key" -CAcreateserial -days 365 \
    -extfile "$dir/ext" -out "$dir/cert.pem" 2>/dev/null
  cat "$dir/key.pem" "$dir/cert.pem"
  rm -rf "$dir"
}

case ${1:-} in
prepare) cmd_prepare ;;
client) shift; cmd_client "$@" ;;
*) echo "usage: tls-certificates.sh prepare | client NAME" >&2; exit 2 ;;
esac
