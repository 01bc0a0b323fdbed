/* Sending one request's answer on a non-blocking TCP socket: the frame (corked before a payload),
 * then the payload from where the engine left it (server/engine.h: a cache file by sendfile, a
 * pipe by splice, a buffer or a held block by sendmsg). No queueing and no closing here: the
 * connection does both. */
#ifndef SHOAL_SERVER_ANSWER_H
#define SHOAL_SERVER_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct shoal_req;

/* The result of shoal_answer_send when the connection must close (logged): a cache file was
 * truncated under the answer, the requester would wait for bytes that never come. */
#define SHOAL_ANSWER_BROKEN (-2)

/* Whether all of R's frame (header and body, then its payload on success) has gone. */
bool shoal_answer_sent(const struct shoal_req *r);
/* Sends the next part of R on FD (PEER for logs). Returns bytes sent, -1 with errno (EAGAIN:
 * wait for EPOLLOUT), or SHOAL_ANSWER_BROKEN. */
ssize_t shoal_answer_send(int fd, const char *peer, struct shoal_req *r);
/* N bytes of R went: the header's first, then the payload's. */
void shoal_answer_advance(struct shoal_req *r, size_t n);

#endif
