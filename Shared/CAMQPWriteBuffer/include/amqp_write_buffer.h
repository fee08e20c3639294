#ifndef CAMQP_WRITE_BUFFER_H
#define CAMQP_WRITE_BUFFER_H

// A write buffer under rabbitmq-c 0.11's socket: while it holds, every
// frame the library sends is copied into memory instead of written with a
// system call of its own, and `flush` writes them all at once.
//
// Why: rabbitmq-c 0.11 writes each frame with its own send(2) (a publish is
// three, an ack one), and has no way to batch them. TCP_CORK merged the
// segments but not the system calls (docs/performance.md, "Frames are
// written in runs, by a buffer under rabbitmq-c's socket").
//
// Ownership: `crabbitmq_write_buffer_install` attaches the buffer to a TCP
// or TLS socket of rabbitmq-c; the socket owns it from then on, and
// `amqp_destroy_connection` (which deletes the socket) frees both. Never
// free it yourself, and do not use it after the connection is destroyed.
//
// Threading: like the connection it belongs to — one thread at a time (the
// connection's I/O thread); nothing here locks.
//
// Rule for callers: hold only around writes that wait for no answer
// (publishes, acks). A synchronous call made while holding would wait for
// an answer to a request still sitting in this buffer. `flush` before any
// synchronous call and before polling the socket.

#include <amqp.h>

typedef struct crabbitmq_write_buffer crabbitmq_write_buffer;

// Attaches a buffer to `socket`, which `amqp_tcp_socket_new` or
// `amqp_ssl_socket_new` created, after its settings (the library's setters
// refuse a socket whose table is not their own). Returns NULL (and leaves
// the socket as it was) when out of memory or when the library is not a
// version whose socket layout this file knows (0.8 to 0.15).
crabbitmq_write_buffer *crabbitmq_write_buffer_install(amqp_socket_t *socket);

// From now on, sends are copied into the buffer until the next flush.
void crabbitmq_write_buffer_hold(crabbitmq_write_buffer *buffer);

// Writes what the buffer holds and stops holding. When the socket cannot
// take more it waits, for as long as the peer shows signs of life within
// every `timeout_ms` (it takes bytes, or sends some, such as heartbeats;
// negative: no limit). Returns AMQP_STATUS_OK, or an amqp_status_enum error
// (AMQP_STATUS_TIMEOUT after `timeout_ms` without a sign of life) after
// which the connection is unusable (part of a frame may have been written);
// the buffer is emptied either way.
int crabbitmq_write_buffer_flush(crabbitmq_write_buffer *buffer, int timeout_ms);

// Bytes waiting in the buffer (for tests and assertions).
size_t crabbitmq_write_buffer_pending(const crabbitmq_write_buffer *buffer);

// Counters since install (for tests): flushes that had something to write,
// the library's sends that were held, and the socket writes flushes made.
unsigned long crabbitmq_write_buffer_flushes(const crabbitmq_write_buffer *buffer);
unsigned long crabbitmq_write_buffer_held_sends(const crabbitmq_write_buffer *buffer);
unsigned long crabbitmq_write_buffer_writes(const crabbitmq_write_buffer *buffer);

#endif
