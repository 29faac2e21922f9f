#include "CHeraldShims.h"
#include <nghttp2/nghttp2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Each block starts with a 16-byte header holding its capacity, so the user pointer keeps
 * malloc's 16-byte alignment. A capacity up to HERALD_POOL_LARGEST marks a pooled block (its
 * class is capacity / 16); above it, a block that came straight from malloc. */
#define HERALD_POOL_GRANULE 16
#define HERALD_POOL_CLASSES 128
#define HERALD_POOL_LARGEST (HERALD_POOL_GRANULE * HERALD_POOL_CLASSES)
#define HERALD_POOL_HEADER 16

const size_t herald_pool_max_held_bytes = 2 * 1024 * 1024;

typedef struct herald_pool_node {
    struct herald_pool_node *next;
} herald_pool_node;

struct herald_pool {
    herald_pool_node *free[HERALD_POOL_CLASSES + 1];
    size_t held;
    size_t live;
};

herald_pool *herald_pool_new(void) {
    return calloc(1, sizeof(herald_pool));
}

void herald_pool_delete(herald_pool *pool) {
    if (!pool) return;
    for (size_t index = 0; index <= HERALD_POOL_CLASSES; index++) {
        herald_pool_node *node = pool->free[index];
        while (node) {
            herald_pool_node *next = node->next;
            free((char *)node - HERALD_POOL_HEADER);
            node = next;
        }
    }
    free(pool);
}

static inline size_t *header_of(void *pointer) {
    return (size_t *)((char *)pointer - HERALD_POOL_HEADER);
}

static void *pool_malloc(size_t size, void *user) {
    herald_pool *pool = user;
    if (size == 0) size = 1;
    size_t capacity;
    if (size <= HERALD_POOL_LARGEST) {
        size_t index = (size + HERALD_POOL_GRANULE - 1) / HERALD_POOL_GRANULE;
        capacity = index * HERALD_POOL_GRANULE;
        herald_pool_node *node = pool->free[index];
        if (node) {
            herald_pool_node *next = node->next;
            pool->free[index] = next;
            /* The next block of this class was freed a while ago and has usually left the
             * caches: its first line (its link) is requested now, so the next allocation of
             * this size does not wait for it. */
            if (next) __builtin_prefetch(next, 1);
            pool->held -= capacity;
            pool->live++;
            return node;
        }
    } else {
        capacity = size;
    }
    char *block = malloc(HERALD_POOL_HEADER + capacity);
    if (!block) return NULL;
    *(size_t *)block = capacity;
    pool->live++;
    return block + HERALD_POOL_HEADER;
}

static void pool_free(void *pointer, void *user) {
    herald_pool *pool = user;
    if (!pointer) return;
    size_t capacity = *header_of(pointer);
    pool->live--;
    if (capacity > HERALD_POOL_LARGEST || pool->held + capacity > herald_pool_max_held_bytes) {
        free(header_of(pointer));
        return;
    }
    herald_pool_node *node = pointer;
    size_t index = capacity / HERALD_POOL_GRANULE;
    node->next = pool->free[index];
    pool->free[index] = node;
    pool->held += capacity;
}

static void *pool_calloc(size_t count, size_t size, void *user) {
    if (size != 0 && count > SIZE_MAX / size) return NULL;
    void *pointer = pool_malloc(count * size, user);
    if (pointer) memset(pointer, 0, count * size);
    return pointer;
}

static void *pool_realloc(void *pointer, size_t size, void *user) {
    if (!pointer) return pool_malloc(size, user);
    if (size == 0) {
        pool_free(pointer, user);
        return NULL;
    }
    size_t capacity = *header_of(pointer);
    if (size <= capacity) return pointer;
    void *moved = pool_malloc(size, user);
    if (!moved) return NULL;
    memcpy(moved, pointer, capacity);
    pool_free(pointer, user);
    return moved;
}

void herald_pool_nghttp2_mem(herald_pool *pool, void *target) {
    nghttp2_mem *mem = target;
    mem->mem_user_data = pool;
    mem->malloc = pool_malloc;
    mem->free = pool_free;
    mem->calloc = pool_calloc;
    mem->realloc = pool_realloc;
}

size_t herald_pool_held_bytes(const herald_pool *pool) { return pool->held; }
size_t herald_pool_live_blocks(const herald_pool *pool) { return pool->live; }
