/* The member's TCP connections (pool and IORPC alike), on their loop's thread: the handshake,
 * then frames read and handled one handler per message type, requests handed to the engine
 * (server/engine.h) and their answers sent in completion order. The TCP pool allows one request
 * in flight per connection, IORPC multiplexes up to SHOAL_CONN_IORPC_INFLIGHT. */
#ifndef SHOAL_SERVER_CONN_H
#define SHOAL_SERVER_CONN_H

#include <stdint.h>

#include "server/admission.h"

struct srv_loop;

/* Loop thread: takes the accepted socket FD (the loop's listener for SERVICE; peer WHO) as a
 * connection counted for SRC among the unauthenticated ones. Returns 0, or -errno with FD closed
 * and SRC given back (shoal_adm_unused). */
int shoal_conn_open(struct srv_loop *lp, int fd, int service, const char *who,
                    struct shoal_adm_src *src);
/* Loop tick: closes the connections whose handshake, partial frame or sending is past its
 * deadline. */
void shoal_conn_expire(struct srv_loop *lp, uint64_t now);
/* Closes every connection of LP (its thread stopped). */
void shoal_conn_close_all(struct srv_loop *lp);

/* How admission asks about and closes connections. */
extern const struct shoal_adm_ops shoal_conn_adm_ops;

#endif
