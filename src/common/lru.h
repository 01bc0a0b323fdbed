/* A least-recently-used order: a list (list.h) of the elements that embed a struct shoal_list,
 * the most recently used at the front, the coldest at the back, with its count. The one LRU of the
 * house: the cache index (one per cache folder), the size cache and the reader's held blocks.
 *
 * A node is in one LRU or in none (set up by shoal_list_init, or taken out): shoal_lru_del and
 * shoal_lru_touch of a node in another LRU would corrupt both counts. Not thread-safe: the owner's
 * lock guards it. */
#ifndef SHOAL_COMMON_LRU_H
#define SHOAL_COMMON_LRU_H

#include <stddef.h>

#include "common/list.h"

struct shoal_lru {
        struct shoal_list head; /* next: most recently used; prev: the coldest */
        size_t n;
};

static inline void shoal_lru_init(struct shoal_lru *l)
{
        shoal_list_init(&l->head);
        l->n = 0;
}

static inline size_t shoal_lru_count(const struct shoal_lru *l)
{
        return l->n;
}

/* N (in no LRU) as the most recently used. */
static inline void shoal_lru_add(struct shoal_lru *l, struct shoal_list *n)
{
        shoal_list_push_front(&l->head, n);
        l->n++;
}

/* N (in no LRU) as the coldest, to be reused first: an element that holds nothing worth keeping. */
static inline void shoal_lru_add_cold(struct shoal_lru *l, struct shoal_list *n)
{
        shoal_list_push_back(&l->head, n);
        l->n++;
}

/* N (in L) was just used. */
static inline void shoal_lru_touch(struct shoal_lru *l, struct shoal_list *n)
{
        shoal_list_move_front(&l->head, n);
}

/* Takes N out of L; a no-op for a node in no LRU. */
static inline void shoal_lru_del(struct shoal_lru *l, struct shoal_list *n)
{
        if (!shoal_list_linked(n))
                return;
        shoal_list_del(n);
        l->n--;
}

/* The least recently used node, or NULL when L is empty. */
static inline struct shoal_list *shoal_lru_coldest(const struct shoal_lru *l)
{
        return shoal_list_last(&l->head);
}

/* Evicts the coldest nodes while L holds more than MAX: each is taken out of L first, then
 * handed to EVICT (which may free its element). */
static inline void shoal_lru_trim(struct shoal_lru *l, size_t max,
                                  void (*evict)(struct shoal_list *n, void *arg), void *arg)
{
        while (l->n > max) {
                struct shoal_list *n = shoal_lru_coldest(l);
                shoal_lru_del(l, n);
                evict(n, arg);
        }
}

#endif
