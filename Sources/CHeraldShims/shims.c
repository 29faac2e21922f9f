#define _GNU_SOURCE
#include "CHeraldShims.h"

int herald_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}
int herald_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}
long herald_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}
int herald_SSL_CTX_set_ecdh_auto(SSL_CTX *ctx) {
    (void)ctx;
    return 1; /* automatic in OpenSSL 1.1+ */
}
int herald_TLS1_2_VERSION(void) { return TLS1_2_VERSION; }
int herald_SSL_TLSEXT_ERR_OK(void) { return SSL_TLSEXT_ERR_OK; }
int herald_SSL_TLSEXT_ERR_NOACK(void) { return SSL_TLSEXT_ERR_NOACK; }

int herald_accept4(int fd) {
    return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}
