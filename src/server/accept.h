/* Accepting TCP connections on a loop's listeners: admission first (server/admission.h), then
 * the connection (server/conn.h). Out of file descriptors, a loop stops accepting for a moment
 * instead of spinning on a listener that stays readable. */
#ifndef SHOAL_SERVER_ACCEPT_H
#define SHOAL_SERVER_ACCEPT_H

#include <stdint.h>

struct srv_loop;

/* The listeners' event handler (ARG: the struct srv_listener). */
void shoal_accept_event(void *arg, uint32_t events);
/* Loop tick: listens again once a pause is over. */
void shoal_accept_resume(struct srv_loop *lp, uint64_t now);

#endif
