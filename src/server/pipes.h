/* A pool of pipes for zero-copy answers: a member moves a cache file's range into a pipe (with
 * O_DIRECT straight from the disk into the pipe's own pages, server/engine.c on a disk worker) and
 * from the pipe into the socket (on the loop), so the payload never crosses user space. Pipes
 * are made on demand up to a bound and reused: an emptied pipe holds no pages (those went to the
 * socket's buffers by reference), only its ring. Thread-safe. */
#ifndef SHOAL_RPC_PIPES_H
#define SHOAL_RPC_PIPES_H

#include <stddef.h>

struct shoal_pipe {
        int rd, wr;   /* both O_NONBLOCK */
        size_t cap;   /* bytes the pipe holds (F_SETPIPE_SZ) */
        size_t bytes; /* bytes in it now: its user keeps this true */
        struct shoal_pipe *next;
};

struct shoal_pipes;

/* A pool of at most MAX pipes of CAP bytes each (CAP rounded by the kernel; at most
 * fs.pipe-max-size unless the process may exceed it). NULL on failure. */
struct shoal_pipes *shoal_pipes_create(unsigned max, size_t cap);
/* Closes every pipe; none may be in use. */
void shoal_pipes_destroy(struct shoal_pipes *ps);

/* An empty pipe of at least WANT bytes, or NULL (MAX in use, no fds, or the kernel gives pipes
 * smaller than WANT to this process: its pipe-user-pages limit). Never waits. */
struct shoal_pipe *shoal_pipes_get(struct shoal_pipes *ps, size_t want);
/* Gives P back; a pipe that still holds bytes (an answer cut short) is closed instead. */
void shoal_pipes_put(struct shoal_pipes *ps, struct shoal_pipe *p);

#endif
