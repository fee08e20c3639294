#ifndef CAMQP_TLS_H
#define CAMQP_TLS_H

// Why a TLS connection of rabbitmq-c 0.11 failed, in words.
//
// rabbitmq-c checks the broker's certificate after its handshake and then
// reports only AMQP_STATUS_SSL_PEER_VERIFY_FAILED or
// AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED: the reason (expired, unknown
// issuer, ...) and the names the certificate carries stay inside the
// library. `crabbitmq_tls_watch` hooks OpenSSL's verification of the
// library's own SSL context, so the reason is recorded while the library
// verifies, without verifying a second time. The file checks read the CA,
// client certificate and key files as OpenSSL will, so a bad file is
// reported with its name and what is wrong with it before any connect.
//
// Threading: the record is per thread. Call `watch`, the library's open and
// `verification_failure` on the same thread, as a connection's I/O thread
// does; nothing here locks.
//
// Every function writing text writes a NUL-terminated string of at most
// `length` bytes into `text`.

#include <amqp.h>
#include <stddef.h>

// Records the verification of the next handshake made with `socket`
// (created by amqp_ssl_socket_new) on this thread. Leaves the library's
// verification mode as it is. Returns 0, or -1 when the socket has no
// OpenSSL context.
int crabbitmq_tls_watch(amqp_socket_t *socket);

// After a handshake on this thread: the first verification failure
// ("certificate has expired (not after Jan  2 00:00:00 2020 GMT) for
// CN = localhost, depth 0"), 1; or 0 when verification found nothing wrong.
int crabbitmq_tls_verification_failure(char *text, size_t length);

// The names the broker's own certificate carries ("DNS:localhost,
// IP:127.0.0.1", or "CN=..." without subjectAltName), 1; or 0 when no
// certificate was seen.
int crabbitmq_tls_peer_names(char *text, size_t length);

// The last OpenSSL error of this thread (e.g. "tlsv1 alert unknown ca",
// the broker's answer to a client certificate it does not trust), 1; or 0
// when there is none. The error queue is left as it is.
int crabbitmq_tls_last_error(char *text, size_t length);

// Whether the broker at `host`:`port` refuses the client certificate in
// `certificate_path` with `key_path` (both NULL: no certificate), found
// with a TLS session of its own that sends nothing: 1 with the broker's
// alert ("tlsv1 alert unknown ca", "tlsv13 alert certificate required"),
// or 0 when the broker accepted it within `timeout_ms` or could not be
// asked. Blocks for up to twice `timeout_ms`.
int crabbitmq_tls_probe_client_certificate(const char *host, int port, const char *certificate_path,
                                           const char *key_path, int timeout_ms, char *text, size_t length);

// CA bundle: readable and holding at least one PEM certificate. 0, or -1
// with the reason.
int crabbitmq_tls_check_ca_file(const char *path, char *text, size_t length);

// Client certificate: readable, a PEM certificate, valid now. 0, or -1
// with the reason.
int crabbitmq_tls_check_certificate_file(const char *path, char *text, size_t length);

// Client key: readable, an unencrypted PEM private key, the key of the
// certificate in `certificate_path`. 0, or -1 with the reason.
int crabbitmq_tls_check_key_file(const char *path, const char *certificate_path, char *text, size_t length);

// The common name of the certificate in `path`, 1; or 0 when it has none
// or cannot be read.
int crabbitmq_tls_certificate_common_name(const char *path, char *text, size_t length);

#endif
