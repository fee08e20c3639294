#ifndef CRABBITMQ_SHIM_H
#define CRABBITMQ_SHIM_H

// Debian's rabbitmq-c 0.11 headers. Everything Swift needs from the C
// library goes through this one header so the module stays a thin,
// auditable surface.
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <amqp_ssl_socket.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/time.h>

// amqp_login is variadic (the SASL method decides the trailing arguments),
// and Swift cannot call C variadic functions. Each wrapper fixes the argument
// list of one mechanism.
static inline amqp_rpc_reply_t crabbitmq_login_plain(
    amqp_connection_state_t state, const char *vhost, int channel_max,
    int frame_max, int heartbeat, const char *user, const char *password) {
  return amqp_login(state, vhost, channel_max, frame_max, heartbeat,
                    AMQP_SASL_METHOD_PLAIN, user, password);
}

// Same, with client properties (connection_name shows in the management UI).
static inline amqp_rpc_reply_t crabbitmq_login_plain_with_properties(
    amqp_connection_state_t state, const char *vhost, int channel_max,
    int frame_max, int heartbeat, const amqp_table_t *properties,
    const char *user, const char *password) {
  return amqp_login_with_properties(state, vhost, channel_max, frame_max,
                                    heartbeat, properties,
                                    AMQP_SASL_METHOD_PLAIN, user, password);
}

// SASL EXTERNAL: the broker takes the user from the client certificate
// (rabbitmq_auth_mechanism_ssl); `identity` is sent as the response and
// RabbitMQ ignores it.
static inline amqp_rpc_reply_t crabbitmq_login_external_with_properties(
    amqp_connection_state_t state, const char *vhost, int channel_max,
    int frame_max, int heartbeat, const amqp_table_t *properties,
    const char *identity) {
  return amqp_login_with_properties(state, vhost, channel_max, frame_max,
                                    heartbeat, properties,
                                    AMQP_SASL_METHOD_EXTERNAL, identity);
}

// Swift imports AMQP_EMPTY_BYTES/AMQP_EMPTY_TABLE poorly (they are
// extern const structs); expose plain constructors instead.
static inline amqp_bytes_t crabbitmq_bytes(const void *bytes, size_t len) {
  amqp_bytes_t b;
  b.len = len;
  b.bytes = (void *)bytes;
  return b;
}

static inline amqp_table_t crabbitmq_empty_table(void) {
  amqp_table_t t;
  t.num_entries = 0;
  t.entries = NULL;
  return t;
}

// The frame payload is a union; these accessors keep Swift code from
// reaching into anonymous union members whose import shape differs
// between compiler versions.
static inline amqp_method_number_t crabbitmq_frame_method_id(const amqp_frame_t *f) {
  return f->payload.method.id;
}
static inline void *crabbitmq_frame_method_decoded(const amqp_frame_t *f) {
  return f->payload.method.decoded;
}

#endif
