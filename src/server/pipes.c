/* The pipe pool (server/pipes.h): a free list under one mutex. */
#include "server/pipes.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

struct shoal_pipes {
        pthread_mutex_t mu;
        struct shoal_pipe *free;
        unsigned n, max; /* pipes that exist (free or in use), the bound */
        size_t cap;
        size_t got; /* the capacity the kernel gave the last new pipe */
};

struct shoal_pipes *shoal_pipes_create(unsigned max, size_t cap)
{
        struct shoal_pipes *ps = calloc(1, sizeof(*ps));
        if (!ps)
                return NULL;
        pthread_mutex_init(&ps->mu, NULL);
        ps->max = max;
        ps->cap = cap;
        ps->got = cap;
        return ps;
}

static void pipe_close(struct shoal_pipe *p)
{
        close(p->rd);
        close(p->wr);
        free(p);
}

void shoal_pipes_destroy(struct shoal_pipes *ps)
{
        if (!ps)
                return;
        while (ps->free) {
                struct shoal_pipe *p = ps->free;
                ps->free = p->next;
                pipe_close(p);
        }
        pthread_mutex_destroy(&ps->mu);
        free(ps);
}

/* A new pipe sized to the pool's capacity, or NULL. */
static struct shoal_pipe *pipe_new(struct shoal_pipes *ps)
{
        struct shoal_pipe *p = calloc(1, sizeof(*p));
        int fd[2];
        if (!p)
                return NULL;
        if (pipe2(fd, O_NONBLOCK | O_CLOEXEC)) {
                free(p);
                return NULL;
        }
        p->rd = fd[0];
        p->wr = fd[1];
        /* Above fs.pipe-max-size only a privileged process may go: halve until it fits. */
        int got = -1;
        for (size_t c = ps->cap; got < 0 && c >= 65536; c /= 2)
                got = fcntl(p->wr, F_SETPIPE_SZ, (int)c);
        if (got < 0)
                got = fcntl(p->wr, F_GETPIPE_SZ);
        p->cap = got > 0 ? (size_t)got : 0;
        return p;
}

struct shoal_pipe *shoal_pipes_get(struct shoal_pipes *ps, size_t want)
{
        pthread_mutex_lock(&ps->mu);
        struct shoal_pipe *p = ps->free;
        if (p) {
                ps->free = p->next;
        } else if (ps->n < ps->max && ps->got >= want) {
                ps->n++;
                pthread_mutex_unlock(&ps->mu);
                p = pipe_new(ps);
                pthread_mutex_lock(&ps->mu);
                if (p)
                        ps->got = p->cap;
                else
                        ps->n--;
        }
        pthread_mutex_unlock(&ps->mu);
        if (p && p->cap < want) { /* the kernel gave less (pipe-user-pages): not for this */
                shoal_pipes_put(ps, p);
                return NULL;
        }
        if (p)
                p->next = NULL;
        return p;
}

void shoal_pipes_put(struct shoal_pipes *ps, struct shoal_pipe *p)
{
        if (!p)
                return;
        pthread_mutex_lock(&ps->mu);
        if (p->bytes) {
                ps->n--;
                pthread_mutex_unlock(&ps->mu);
                pipe_close(p);
                return;
        }
        p->next = ps->free;
        ps->free = p;
        pthread_mutex_unlock(&ps->mu);
}
