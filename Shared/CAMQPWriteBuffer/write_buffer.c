// See include/amqp_write_buffer.h for what this is, who owns it and which
// thread may call it.

#include "amqp_write_buffer.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <time.h>

// rabbitmq-c 0.11's socket interface (librabbitmq/amqp_socket.h and
// amqp_private.h, which Debian does not install). Every socket starts with a
// pointer to this table; the library calls through it. The layout is the
// same from 0.8 to today's releases; `install` refuses any other version.
// Debian 12 ships 0.11.
struct socket_class {
    ssize_t (*send)(void *, const void *, size_t, int);
    ssize_t (*recv)(void *, void *, size_t, int);
    int (*open)(void *, const char *, int, struct timeval *);
    int (*close)(void *, int);
    int (*get_sockfd)(void *);
    void (*delete)(void *);
};
struct socket_base {
    const struct socket_class *klass;
};
enum {
    PRIVATE_STATUS_SOCKET_NEEDREAD = -0x1301,
    PRIVATE_STATUS_SOCKET_NEEDWRITE = -0x1302,
};

// The buffer sits in the socket itself: the socket's table pointer is
// redirected to `table`, a copy of its own table with `send`, `close` and
// `delete` replaced, which is the buffer's first member. So each function
// finds its buffer from the socket the library passes it, without a lookup
// (amqp_set_socket, which could put a wrapper in the socket's place, is not
// exported by the library).
struct crabbitmq_write_buffer {
    struct socket_class table;  // first: a socket's `klass` points here
    const struct socket_class *original;
    struct socket_base *socket;
    int holding;
    unsigned char *data;
    size_t length, capacity;
    unsigned long flushes, held_sends, writes;
};

// Kept between flushes; a larger buffer (a big batch) is given back.
#define KEEP_CAPACITY (256 * 1024)

static struct crabbitmq_write_buffer *buffer_of(void *socket) {
    return (struct crabbitmq_write_buffer *)((struct socket_base *)socket)->klass;
}

static ssize_t buffer_send(void *socket, const void *bytes, size_t length, int flags) {
    struct crabbitmq_write_buffer *b = buffer_of(socket);
    if (b->holding) {
        if (b->length + length > b->capacity) {
            size_t capacity = b->capacity ? b->capacity : 16 * 1024;
            while (capacity < b->length + length) capacity *= 2;
            unsigned char *grown = realloc(b->data, capacity);
            if (!grown) return AMQP_STATUS_NO_MEMORY;
            b->data = grown;
            b->capacity = capacity;
        }
        memcpy(b->data + b->length, bytes, length);
        b->length += length;
        b->held_sends += 1;
        return (ssize_t)length;
    }
    // Not holding means the buffer is empty: holding ends only in a flush
    // or a close, and both empty it. So nothing held can be overtaken.
    return b->original->send(socket, bytes, length, flags);
}

static int buffer_close(void *socket, int force) {
    struct crabbitmq_write_buffer *b = buffer_of(socket);
    b->length = 0;  // the connection is going: held frames go nowhere
    b->holding = 0;
    return b->original->close(socket, force);
}

static void buffer_delete(void *socket) {
    struct crabbitmq_write_buffer *b = buffer_of(socket);
    b->socket->klass = b->original;
    free(b->data);
    const struct socket_class *original = b->original;
    free(b);
    original->delete(socket);
}

crabbitmq_write_buffer *crabbitmq_write_buffer_install(amqp_socket_t *socket) {
    // Only on a library whose socket table is known to have this layout
    // (0.8 to 0.15); elsewhere frames are written as the library does.
    uint32_t version = amqp_version_number();
    uint32_t major = version >> 24, minor = (version >> 16) & 0xff;
    if (major != 0 || minor < 8 || minor > 15) return NULL;
    struct crabbitmq_write_buffer *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->socket = (struct socket_base *)socket;
    b->original = b->socket->klass;
    b->table = *b->original;
    b->table.send = buffer_send;
    b->table.close = buffer_close;
    b->table.delete = buffer_delete;
    b->socket->klass = &b->table;
    return b;
}

void crabbitmq_write_buffer_hold(crabbitmq_write_buffer *b) { b->holding = 1; }

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Bytes received and not yet read by the library: growing means the broker
// is alive (heartbeats, deliveries) even while it reads nothing from us.
static int unread_bytes(int fd) {
    int n = 0;
    return ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
}

int crabbitmq_write_buffer_flush(crabbitmq_write_buffer *b, int timeout_ms) {
    b->holding = 0;
    if (!b->length) return AMQP_STATUS_OK;
    b->flushes += 1;
    int fd = b->original->get_sockfd(b->socket);
    long long alive_at = now_ms();
    int unread = -2;
    size_t sent = 0;
    int status = AMQP_STATUS_OK;
    while (sent < b->length) {
        ssize_t n = b->original->send(b->socket, b->data + sent, b->length - sent, 0);
        if (n > 0) {
            b->writes += 1;
            sent += (size_t)n;
            alive_at = now_ms();
            continue;
        }
        if (n != PRIVATE_STATUS_SOCKET_NEEDWRITE && n != PRIVATE_STATUS_SOCKET_NEEDREAD) {
            status = n < 0 ? (int)n : AMQP_STATUS_SOCKET_ERROR;
            break;
        }
        // The socket is full (the broker reads slower, or has blocked this
        // connection: a memory or disk alarm), or TLS must read first. Wait
        // as long as the broker shows signs of life — it takes bytes, or
        // sends some (heartbeats) — and give up after `timeout_ms` without
        // any, as the library does when a heartbeat is missed.
        int now_unread = unread_bytes(fd);
        if (now_unread != unread) {
            if (unread != -2) alive_at = now_ms();
            unread = now_unread;
        }
        int wait = 1000;
        if (timeout_ms >= 0) {
            long long left = alive_at + timeout_ms - now_ms();
            if (left <= 0) {
                status = AMQP_STATUS_TIMEOUT;
                break;
            }
            if (left < wait) wait = (int)left;
        }
        struct pollfd p = {.fd = fd, .events = n == PRIVATE_STATUS_SOCKET_NEEDREAD ? POLLIN : POLLOUT};
        if (poll(&p, 1, wait) < 0 && errno != EINTR) {
            status = AMQP_STATUS_SOCKET_ERROR;
            break;
        }
    }
    b->length = 0;
    if (b->capacity > KEEP_CAPACITY) {
        free(b->data);
        b->data = NULL;
        b->capacity = 0;
    }
    return status;
}

size_t crabbitmq_write_buffer_pending(const crabbitmq_write_buffer *b) { return b->length; }
unsigned long crabbitmq_write_buffer_flushes(const crabbitmq_write_buffer *b) { return b->flushes; }
unsigned long crabbitmq_write_buffer_held_sends(const crabbitmq_write_buffer *b) { return b->held_sends; }
unsigned long crabbitmq_write_buffer_writes(const crabbitmq_write_buffer *b) { return b->writes; }
