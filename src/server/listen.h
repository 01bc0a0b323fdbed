/* The server's listening sockets. */
#ifndef SHOAL_SERVER_LISTEN_H
#define SHOAL_SERVER_LISTEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A non-blocking TCP listener on IP:*PORT with SO_REUSEPORT, so that each loop has its own
 * (*PORT 0: chosen by the system; set to the bound port). FIRST: the first listener of its port,
 * which must find a fixed port free of anyone else's listeners. Returns the fd, or -1 with one
 * line in ERR. */
int shoal_listen_bind(const char *ip, uint16_t *port, bool first, char *err, size_t errlen);

#endif
