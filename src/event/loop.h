/* A small epoll event loop: one per thread, owning its file descriptors. Other threads talk to a
 * loop only through shoal_loop_post (an eventfd wakes it). A periodic tick serves deadlines.
 * Callers embed the registration and task structs in their own objects, so registering and
 * posting allocate nothing. */
#ifndef SHOAL_EVENT_LOOP_H
#define SHOAL_EVENT_LOOP_H

#include <stdbool.h>
#include <stdint.h>

struct shoal_loop;

/* Called on the loop thread with the epoll events that fired. */
typedef void (*shoal_io_fn)(void *arg, uint32_t events);

struct shoal_loop_io {
        int fd;
        shoal_io_fn fn;
        void *arg;
        uint32_t events; /* currently registered */
};

struct shoal_loop_task {
        void (*fn)(void *arg);
        void *arg;
        struct shoal_loop_task *next;
};

struct shoal_loop *shoal_loop_create(void);
/* Frees the loop; it must not be running. Tasks still posted are dropped. */
void shoal_loop_destroy(struct shoal_loop *l);

/* Registers IO (fd, fn, arg set by the caller) for EVENTS (EPOLLIN, EPOLLOUT, ...). Loop thread
 * only, or before the loop runs. Returns 0 or -errno. */
int shoal_loop_add(struct shoal_loop *l, struct shoal_loop_io *io, uint32_t events);
int shoal_loop_mod(struct shoal_loop *l, struct shoal_loop_io *io, uint32_t events);
void shoal_loop_del(struct shoal_loop *l, struct shoal_loop_io *io);

/* Runs T->fn(T->arg) on the loop thread soon. Thread-safe; T must stay valid until it ran. */
void shoal_loop_post(struct shoal_loop *l, struct shoal_loop_task *t);

/* Calls FN(ARG) on the loop thread about every PERIOD_NS. */
void shoal_loop_set_tick(struct shoal_loop *l, uint64_t period_ns, void (*fn)(void *), void *arg);

/* Runs until shoal_loop_stop. */
void shoal_loop_run(struct shoal_loop *l);
/* Thread-safe. */
void shoal_loop_stop(struct shoal_loop *l);
/* Runs the tasks posted so far (on a loop that no longer runs, before destroying it). */
void shoal_loop_run_pending(struct shoal_loop *l);

/* A fixed pool of worker threads for blocking work (disk reads, store downloads). */
struct shoal_workers;
struct shoal_work {
        void (*fn)(struct shoal_work *w);
        struct shoal_work *next;
};
struct shoal_workers *shoal_workers_create(unsigned threads, const char *name);
/* Queues W; FN runs on a worker thread. Thread-safe. */
void shoal_workers_submit(struct shoal_workers *ws, struct shoal_work *w);
/* Finishes queued work, then joins the threads. */
void shoal_workers_destroy(struct shoal_workers *ws);

#endif
