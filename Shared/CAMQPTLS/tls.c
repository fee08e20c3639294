// See include/amqp_tls.h for what this is and which thread may call it.

#include "amqp_tls.h"

#include <amqp_ssl_socket.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

static _Thread_local struct {
  int failed;
  char failure[512];
  int saw_leaf;
  char names[512];
} record;

static void put(char *text, size_t length, const char *what) {
  if (!text || !length) return;
  snprintf(text, length, "%s", what);
}

static void time_text(const ASN1_TIME *time, char *text, size_t length) {
  text[0] = 0;
  BIO *bio = BIO_new(BIO_s_mem());
  if (!bio) return;
  if (ASN1_TIME_print(bio, time) == 1) {
    int n = BIO_read(bio, text, (int)length - 1);
    text[n > 0 ? n : 0] = 0;
  }
  BIO_free(bio);
}

static void subject_text(X509 *cert, char *text, size_t length) {
  text[0] = 0;
  BIO *bio = BIO_new(BIO_s_mem());
  if (!bio) return;
  if (X509_NAME_print_ex(bio, X509_get_subject_name(cert), 0, XN_FLAG_ONELINE) >= 0) {
    int n = BIO_read(bio, text, (int)length - 1);
    text[n > 0 ? n : 0] = 0;
  }
  BIO_free(bio);
}

// "DNS:a, IP:1.2.3.4", or "CN=x" when the certificate has no subjectAltName.
static void names_text(X509 *cert, char *text, size_t length) {
  text[0] = 0;
  size_t used = 0;
  GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
  if (names) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names); i++) {
      const GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
      char one[128] = {0};
      if (name->type == GEN_DNS) {
        snprintf(one, sizeof one, "DNS:%.*s", ASN1_STRING_length(name->d.dNSName),
                 (const char *)ASN1_STRING_get0_data(name->d.dNSName));
      } else if (name->type == GEN_IPADD) {
        const unsigned char *ip = ASN1_STRING_get0_data(name->d.iPAddress);
        int n = ASN1_STRING_length(name->d.iPAddress);
        if (n == 4) {
          snprintf(one, sizeof one, "IP:%u.%u.%u.%u", ip[0], ip[1], ip[2], ip[3]);
        } else if (n == 16) {
          char address[INET6_ADDRSTRLEN] = "";
          inet_ntop(AF_INET6, ip, address, sizeof address);
          snprintf(one, sizeof one, "IP:%s", address);
        }
      } else {
        continue;
      }
      used += (size_t)snprintf(text + used, used < length ? length - used : 0, "%s%s", used ? ", " : "", one);
      if (used >= length) break;
    }
    GENERAL_NAMES_free(names);
  }
  if (!text[0]) {
    char cn[256] = {0};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    snprintf(text, length, "CN=%s (no subjectAltName)", cn);
  }
}

static int verify_callback(int ok, X509_STORE_CTX *store) {
  int depth = X509_STORE_CTX_get_error_depth(store);
  X509 *cert = X509_STORE_CTX_get_current_cert(store);
  if (cert && depth == 0 && !record.saw_leaf) {
    record.saw_leaf = 1;
    names_text(cert, record.names, sizeof record.names);
  }
  if (!ok && !record.failed) {
    record.failed = 1;
    int error = X509_STORE_CTX_get_error(store);
    char subject[256] = "", dates[128] = "";
    if (cert) {
      subject_text(cert, subject, sizeof subject);
      char when[64];
      if (error == X509_V_ERR_CERT_HAS_EXPIRED) {
        time_text(X509_get0_notAfter(cert), when, sizeof when);
        snprintf(dates, sizeof dates, " (not after %s)", when);
      } else if (error == X509_V_ERR_CERT_NOT_YET_VALID) {
        time_text(X509_get0_notBefore(cert), when, sizeof when);
        snprintf(dates, sizeof dates, " (not before %s)", when);
      }
    }
    const char *hint = "";
    switch (error) {
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
        hint = "; the CA that signed it is not in the CA file";
        break;
      default:
        break;
    }
    snprintf(record.failure, sizeof record.failure, "%s%s for %s, depth %d%s",
             X509_verify_cert_error_string(error), dates, subject[0] ? subject : "(no certificate)", depth, hint);
  }
  // What OpenSSL decided: the library's verification mode (none; it
  // checks the result after the handshake) and its result stay the same.
  return ok;
}

int crabbitmq_tls_watch(amqp_socket_t *socket) {
  memset(&record, 0, sizeof record);
  SSL_CTX *context = amqp_ssl_socket_get_context(socket);
  if (!context) return -1;
  SSL_CTX_set_verify(context, SSL_CTX_get_verify_mode(context), verify_callback);
  return 0;
}

int crabbitmq_tls_verification_failure(char *text, size_t length) {
  if (!record.failed) return 0;
  put(text, length, record.failure);
  return 1;
}

int crabbitmq_tls_peer_names(char *text, size_t length) {
  if (!record.saw_leaf) return 0;
  put(text, length, record.names);
  return 1;
}

int crabbitmq_tls_last_error(char *text, size_t length) {
  unsigned long error = ERR_peek_last_error();
  if (!error) return 0;
  const char *reason = ERR_reason_error_string(error);
  if (reason) {
    put(text, length, reason);
  } else {
    ERR_error_string_n(error, text, length);
  }
  return 1;
}

// Opens `path` for reading, or writes why not.
static FILE *open_file(const char *path, char *text, size_t length) {
  FILE *file = fopen(path, "r");
  if (!file) {
    snprintf(text, length, "cannot read it: %s", strerror(errno));
    return NULL;
  }
  return file;
}

int crabbitmq_tls_check_ca_file(const char *path, char *text, size_t length) {
  FILE *file = open_file(path, text, length);
  if (!file) return -1;
  int count = 0;
  X509 *cert;
  while ((cert = PEM_read_X509(file, NULL, NULL, NULL)) != NULL) {
    count += 1;
    X509_free(cert);
  }
  fclose(file);
  ERR_clear_error();  // the end of the file reads as an error
  if (!count) {
    put(text, length, "holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)");
    return -1;
  }
  return 0;
}

static X509 *read_certificate(const char *path, char *text, size_t length) {
  FILE *file = open_file(path, text, length);
  if (!file) return NULL;
  X509 *cert = PEM_read_X509(file, NULL, NULL, NULL);
  fclose(file);
  ERR_clear_error();
  if (!cert) put(text, length, "holds no PEM certificate (expected -----BEGIN CERTIFICATE-----)");
  return cert;
}

int crabbitmq_tls_check_certificate_file(const char *path, char *text, size_t length) {
  X509 *cert = read_certificate(path, text, length);
  if (!cert) return -1;
  char when[64];
  int status = 0;
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    time_text(X509_get0_notAfter(cert), when, sizeof when);
    snprintf(text, length, "the certificate has expired (not after %s)", when);
    status = -1;
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    time_text(X509_get0_notBefore(cert), when, sizeof when);
    snprintf(text, length, "the certificate is not valid yet (not before %s)", when);
    status = -1;
  }
  X509_free(cert);
  return status;
}

// A pass phrase callback that refuses: a key needing one cannot be used
// (rabbitmq-c would prompt on the terminal), and this tells us it was asked.
static int refuse_pass_phrase(char *buffer, int size, int rwflag, void *asked) {
  (void)buffer;
  (void)size;
  (void)rwflag;
  *(int *)asked = 1;
  return -1;
}

int crabbitmq_tls_check_key_file(const char *path, const char *certificate_path, char *text, size_t length) {
  FILE *file = open_file(path, text, length);
  if (!file) return -1;
  int asked = 0;
  EVP_PKEY *key = PEM_read_PrivateKey(file, NULL, refuse_pass_phrase, &asked);
  fclose(file);
  ERR_clear_error();
  if (!key) {
    put(text, length, asked ? "the key is encrypted with a pass phrase; give an unencrypted key (file mode 0600)"
                            : "holds no PEM private key (expected -----BEGIN PRIVATE KEY-----)");
    return -1;
  }
  int status = 0;
  char ignored[16];
  X509 *cert = certificate_path ? read_certificate(certificate_path, ignored, sizeof ignored) : NULL;
  if (cert) {
    if (X509_check_private_key(cert, key) != 1) {
      snprintf(text, length, "is not the key of the certificate %s", certificate_path);
      status = -1;
    }
    X509_free(cert);
  }
  ERR_clear_error();
  EVP_PKEY_free(key);
  return status;
}

int crabbitmq_tls_certificate_common_name(const char *path, char *text, size_t length) {
  char ignored[16];
  X509 *cert = read_certificate(path, ignored, sizeof ignored);
  if (!cert) return 0;
  int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, text, (int)length);
  X509_free(cert);
  return n > 0;
}

// A TLS session of our own to `host`:`port` presenting `certificate_path`
// and `key_path` (NULL: none), to hear the broker's verdict on them. With
// TLS 1.3 a server checks the client's certificate after the client has
// finished its handshake, so rabbitmq-c meets the refusal only at its first
// read or write, where a reset may have replaced the broker's alert. This
// session writes nothing: it reads until the alert comes or `timeout_ms`
// passes (the broker then waits for the AMQP header: accepted).
int crabbitmq_tls_probe_client_certificate(const char *host, int port, const char *certificate_path,
                                           const char *key_path, int timeout_ms, char *text, size_t length) {
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *addresses = NULL;
  if (getaddrinfo(host, service, &hints, &addresses) != 0 || !addresses) return 0;
  int fd = -1;
  for (struct addrinfo *a = addresses; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    struct timeval timeout = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(addresses);
  if (fd < 0) return 0;

  int refused = 0;
  SSL_CTX *context = SSL_CTX_new(TLS_client_method());
  SSL *ssl = NULL;
  if (!context) goto done;
  SSL_CTX_set_verify(context, SSL_VERIFY_NONE, NULL);  // the broker's certificate is not in question here
  if (certificate_path && key_path &&
      (SSL_CTX_use_certificate_chain_file(context, certificate_path) != 1 ||
       SSL_CTX_use_PrivateKey_file(context, key_path, SSL_FILETYPE_PEM) != 1)) {
    goto done;
  }
  ssl = SSL_new(context);
  if (!ssl) goto done;
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, host);
  ERR_clear_error();
  if (SSL_connect(ssl) == 1) {
    char byte;
    ERR_clear_error();
    if (SSL_read(ssl, &byte, 1) <= 0 && ERR_peek_last_error()) refused = 1;
  } else if (ERR_peek_last_error()) {
    refused = 1;
  }
  if (refused) {
    const char *reason = ERR_reason_error_string(ERR_peek_last_error());
    put(text, length, reason ? reason : "TLS error");
  }
done:
  ERR_clear_error();
  if (ssl) SSL_free(ssl);
  if (context) SSL_CTX_free(context);
  close(fd);
  return refused;
}
