#ifndef CHERALD_SHIMS_H
#define CHERALD_SHIMS_H

#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <sys/signalfd.h>
#include <signal.h>

/// Wrappers for OpenSSL function-like macros, which Swift cannot import.
int herald_SSL_set_tlsext_host_name(SSL *ssl, const char *name);
int herald_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);
long herald_SSL_CTX_set_mode(SSL_CTX *ctx, long mode);
int herald_SSL_CTX_set_ecdh_auto(SSL_CTX *ctx);
/// TLS1_2_VERSION as a value.
int herald_TLS1_2_VERSION(void);
/// SSL_TLSEXT_ERR_OK / SSL_TLSEXT_ERR_ALERT_FATAL / NOACK as values.
int herald_SSL_TLSEXT_ERR_OK(void);
int herald_SSL_TLSEXT_ERR_NOACK(void);

/// accept4(2) with SOCK_NONBLOCK and SOCK_CLOEXEC (needs _GNU_SOURCE).
int herald_accept4(int fd);

#endif
