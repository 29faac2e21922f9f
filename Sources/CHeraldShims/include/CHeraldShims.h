#ifndef CHERALD_SHIMS_H
#define CHERALD_SHIMS_H

#include <openssl/ssl.h>
#include <stddef.h>
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <sys/signalfd.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

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

/// Starts `file` (searched in PATH) with `argv` and `envp`: standard input from /dev/null,
/// output and errors to `log_path`, no blocked signals, and SIGTERM when the thread that called
/// this exits (PR_SET_PDEATHSIG), so a parent killed outright leaves no orphans. Returns 0 and
/// sets `*pid`, or the errno of what failed (fork, opening the log, exec) in the child or here.
int herald_spawn_tied(const char *file, char *const argv[], char *const envp[], const char *log_path, pid_t *pid);
/// Starts `path` (an absolute path) with `argv` and `envp` through posix_spawn, for short-lived
/// helpers and test fixtures: standard input, output and error are `stdin_fd`, `stdout_fd` and
/// `stderr_fd` (each may be the same descriptor as its target), every other descriptor is closed
/// in the child, no signals are blocked and all have their default action, and `cwd` (if not
/// NULL) is its working directory. Unlike `herald_spawn_tied`, the child outlives this process.
/// Returns 0 and sets `*pid`, or the errno of what failed.
int herald_spawn(const char *path, char *const argv[], char *const envp[], const char *cwd,
                 int stdin_fd, int stdout_fd, int stderr_fd, pid_t *pid);
/// Whether the calling thread is the process's main thread (the one whose exit ends the process).
int herald_on_main_thread(void);

/// A size-class free-list allocator for one nghttp2 session (pool.c).
///
/// nghttp2 allocates and frees several small blocks per stream (the stream, its outbound
/// items, the copied header list, HPACK entries). A session lives on one event loop, so its
/// blocks can be recycled through plain free lists: no lock, no trip through malloc's bins.
/// Blocks up to 2048 bytes are pooled in 16-byte classes; larger ones go to malloc. The lists
/// keep at most `herald_pool_max_held_bytes` bytes; the rest is returned to malloc.
typedef struct herald_pool herald_pool;
herald_pool *herald_pool_new(void);
/// Frees every block the pool holds. Call only after the session using it was deleted.
void herald_pool_delete(herald_pool *pool);
/// Fills `mem` (an `nghttp2_mem *`; nghttp2.h stays out of this module) so that
/// nghttp2_session_*_new3 allocates from `pool`.
void herald_pool_nghttp2_mem(herald_pool *pool, void *mem);
/// Bytes currently parked in the free lists.
size_t herald_pool_held_bytes(const herald_pool *pool);
/// Blocks handed out and not yet returned.
size_t herald_pool_live_blocks(const herald_pool *pool);
extern const size_t herald_pool_max_held_bytes;

/// Asks the CPU to bring the cache line at `address` in for writing, without waiting for it: a
/// hint with no effect on what the program computes, so any address is safe.
static inline void herald_prefetch_for_write(const void *address) { __builtin_prefetch(address, 1, 3); }
/// Starts loading the cache line at `address` for reading (a hint; never faults).
static inline void herald_prefetch_for_read(const void *address) { __builtin_prefetch(address, 0, 3); }

/// The bytes malloc set aside for the block at `address` (which malloc returned): for tests that
/// check the sizes the worker's prefetch hints assume.
static inline size_t herald_allocation_size(const void *address) { return malloc_usable_size((void *)address); }

#endif
