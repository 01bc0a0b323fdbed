#include "common/bufpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "common/util.h"

struct shoal_bufpool {
        pthread_mutex_t mu;
        pthread_cond_t cond;
        char *base;
        size_t map_len;
        size_t size;
        unsigned count;
        unsigned nfree;
        unsigned *free_idx; /* stack of free buffer indexes */
};

struct shoal_bufpool *shoal_bufpool_create(size_t size, unsigned count)
{
        if (!count || !size)
                return NULL;
        struct shoal_bufpool *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->size = (size + 4095) & ~(size_t)4095;
        p->count = count;
        p->map_len = p->size * count;
        p->base =
                mmap(NULL, p->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p->base == MAP_FAILED)
                goto out_free;
        shoal_mapped_fresh(p->base, p->map_len);
        /* Huge pages make the first touch of a buffer ~25x cheaper (DESIGN.md). */
        madvise(p->base, p->map_len, MADV_HUGEPAGE);
        p->free_idx = malloc(sizeof(unsigned) * count);
        if (!p->free_idx)
                goto out_unmap;
        /* Hand out low buffers first, so a lightly used pool touches little memory. */
        for (unsigned i = 0; i < count; i++)
                p->free_idx[i] = count - 1 - i;
        p->nfree = count;
        pthread_mutex_init(&p->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&p->cond, &ca);
        pthread_condattr_destroy(&ca);
        return p;

out_unmap:
        munmap(p->base, p->map_len);
out_free:
        free(p);
        return NULL;
}

void shoal_bufpool_destroy(struct shoal_bufpool *p)
{
        if (!p)
                return;
        munmap(p->base, p->map_len);
        free(p->free_idx);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cond);
        free(p);
}

void *shoal_bufpool_get(struct shoal_bufpool *p, uint64_t timeout_ns)
{
        pthread_mutex_lock(&p->mu);
        if (!p->nfree && timeout_ns) {
                /* the condition waits on CLOCK_MONOTONIC, shoal_now_ns's clock */
                struct timespec ts = shoal_ns_timespec(shoal_now_ns() + timeout_ns);
                while (!p->nfree) {
                        if (pthread_cond_timedwait(&p->cond, &p->mu, &ts) == ETIMEDOUT)
                                break;
                }
        }
        void *buf = NULL;
        if (p->nfree)
                buf = p->base + (size_t)p->free_idx[--p->nfree] * p->size;
        pthread_mutex_unlock(&p->mu);
        return buf;
}

void shoal_bufpool_put(struct shoal_bufpool *p, void *buf)
{
        size_t idx = (size_t)((char *)buf - p->base) / p->size;
        pthread_mutex_lock(&p->mu);
        p->free_idx[p->nfree++] = (unsigned)idx;
        pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->mu);
}

size_t shoal_bufpool_bufsize(const struct shoal_bufpool *p)
{
        return p->size;
}

void *shoal_bufpool_base(const struct shoal_bufpool *p, size_t *len)
{
        if (len)
                *len = p->map_len;
        return p->base;
}
