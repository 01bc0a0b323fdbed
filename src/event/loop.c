#include "event/loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/thread.h"
#include "common/util.h"

struct shoal_loop {
        int epfd;
        int efd;
        struct shoal_loop_io wake_io;
        pthread_mutex_t mu;
        struct shoal_loop_task *head, *tail;
        bool stop;
        uint64_t tick_ns, next_tick;
        void (*tick_fn)(void *);
        void *tick_arg;
};

static void wake_cb(void *arg, uint32_t events)
{
        struct shoal_loop *l = arg;
        uint64_t v;
        ssize_t n = read(l->efd, &v, sizeof(v));
        (void)n;
        (void)events;
}

struct shoal_loop *shoal_loop_create(void)
{
        struct shoal_loop *l = calloc(1, sizeof(*l));
        if (!l)
                return NULL;
        l->epfd = epoll_create1(EPOLL_CLOEXEC);
        l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (l->epfd < 0 || l->efd < 0)
                goto out_close;
        pthread_mutex_init(&l->mu, NULL);
        l->wake_io.fd = l->efd;
        l->wake_io.fn = wake_cb;
        l->wake_io.arg = l;
        if (shoal_loop_add(l, &l->wake_io, EPOLLIN))
                goto out_close;
        return l;
out_close:
        if (l->epfd >= 0)
                close(l->epfd);
        if (l->efd >= 0)
                close(l->efd);
        free(l);
        return NULL;
}

void shoal_loop_destroy(struct shoal_loop *l)
{
        if (!l)
                return;
        close(l->epfd);
        close(l->efd);
        pthread_mutex_destroy(&l->mu);
        free(l);
}

int shoal_loop_add(struct shoal_loop *l, struct shoal_loop_io *io, uint32_t events)
{
        struct epoll_event ev = {.events = events, .data.ptr = io};
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, io->fd, &ev))
                return -errno;
        io->events = events;
        return 0;
}

int shoal_loop_mod(struct shoal_loop *l, struct shoal_loop_io *io, uint32_t events)
{
        if (io->events == events)
                return 0;
        struct epoll_event ev = {.events = events, .data.ptr = io};
        if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, io->fd, &ev))
                return -errno;
        io->events = events;
        return 0;
}

void shoal_loop_del(struct shoal_loop *l, struct shoal_loop_io *io)
{
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, io->fd, NULL);
        io->events = 0;
}

void shoal_loop_post(struct shoal_loop *l, struct shoal_loop_task *t)
{
        t->next = NULL;
        pthread_mutex_lock(&l->mu);
        bool was_empty = !l->head;
        if (l->tail)
                l->tail->next = t;
        else
                l->head = t;
        l->tail = t;
        pthread_mutex_unlock(&l->mu);
        if (was_empty) {
                uint64_t one = 1;
                ssize_t n = write(l->efd, &one, sizeof(one));
                (void)n;
        }
}

void shoal_loop_set_tick(struct shoal_loop *l, uint64_t period_ns, void (*fn)(void *), void *arg)
{
        l->tick_ns = period_ns;
        l->tick_fn = fn;
        l->tick_arg = arg;
        l->next_tick = shoal_now_ns() + period_ns;
}

void shoal_loop_stop(struct shoal_loop *l)
{
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_mutex_unlock(&l->mu);
        uint64_t one = 1;
        ssize_t n = write(l->efd, &one, sizeof(one));
        (void)n;
}

static bool run_tasks(struct shoal_loop *l)
{
        pthread_mutex_lock(&l->mu);
        struct shoal_loop_task *t = l->head;
        l->head = l->tail = NULL;
        bool stop = l->stop;
        pthread_mutex_unlock(&l->mu);
        while (t) {
                struct shoal_loop_task *next = t->next;
                t->fn(t->arg);
                t = next;
        }
        return stop;
}

void shoal_loop_run_pending(struct shoal_loop *l)
{
        run_tasks(l);
}

void shoal_loop_run(struct shoal_loop *l)
{
        struct epoll_event evs[64];
        for (;;) {
                int timeout = -1;
                if (l->tick_fn) {
                        uint64_t now = shoal_now_ns();
                        if (now >= l->next_tick) {
                                l->tick_fn(l->tick_arg);
                                l->next_tick = now + l->tick_ns;
                        }
                        timeout = (int)((l->next_tick - now) / SHOAL_NS_PER_MS) + 1;
                }
                int n = epoll_wait(l->epfd, evs, 64, timeout);
                if (n < 0 && errno != EINTR)
                        break;
                for (int i = 0; i < n; i++) {
                        struct shoal_loop_io *io = evs[i].data.ptr;
                        io->fn(io->arg, evs[i].events);
                }
                if (run_tasks(l))
                        break;
        }
}

struct shoal_workers {
        pthread_mutex_t mu;
        pthread_cond_t cond;
        struct shoal_work *head, *tail;
        bool stop;
        unsigned n;
        pthread_t *threads;
};

static void *worker_main(void *arg)
{
        struct shoal_workers *ws = arg;
        pthread_mutex_lock(&ws->mu);
        for (;;) {
                while (!ws->head && !ws->stop)
                        pthread_cond_wait(&ws->cond, &ws->mu);
                struct shoal_work *w = ws->head;
                if (!w)
                        break;
                ws->head = w->next;
                if (!ws->head)
                        ws->tail = NULL;
                pthread_mutex_unlock(&ws->mu);
                w->fn(w);
                pthread_mutex_lock(&ws->mu);
        }
        pthread_mutex_unlock(&ws->mu);
        return NULL;
}

struct shoal_workers *shoal_workers_create(unsigned threads, const char *name)
{
        struct shoal_workers *ws = calloc(1, sizeof(*ws));
        if (!ws)
                return NULL;
        ws->threads = calloc(threads, sizeof(pthread_t));
        if (!ws->threads) {
                free(ws);
                return NULL;
        }
        pthread_mutex_init(&ws->mu, NULL);
        pthread_cond_init(&ws->cond, NULL);
        for (unsigned i = 0; i < threads; i++) {
                if (shoal_thread_create(&ws->threads[i], worker_main, ws))
                        break;
                char tn[32];
                snprintf(tn, sizeof(tn), "%.10s-%u", name, i % 1000);
                tn[15] = '\0';
                pthread_setname_np(ws->threads[i], tn);
                ws->n++;
        }
        if (!ws->n) {
                shoal_workers_destroy(ws);
                return NULL;
        }
        return ws;
}

void shoal_workers_submit(struct shoal_workers *ws, struct shoal_work *w)
{
        w->next = NULL;
        pthread_mutex_lock(&ws->mu);
        if (ws->tail)
                ws->tail->next = w;
        else
                ws->head = w;
        ws->tail = w;
        pthread_cond_signal(&ws->cond);
        pthread_mutex_unlock(&ws->mu);
}

void shoal_workers_destroy(struct shoal_workers *ws)
{
        if (!ws)
                return;
        pthread_mutex_lock(&ws->mu);
        ws->stop = true;
        pthread_cond_broadcast(&ws->cond);
        pthread_mutex_unlock(&ws->mu);
        for (unsigned i = 0; i < ws->n; i++)
                pthread_join(ws->threads[i], NULL);
        pthread_mutex_destroy(&ws->mu);
        pthread_cond_destroy(&ws->cond);
        free(ws->threads);
        free(ws);
}
