/* Network interfaces by name. */
#ifndef SHOAL_NET_IFACE_H
#define SHOAL_NET_IFACE_H

#include <stddef.h>

/* Writes the first IPv4 address of interface NAME into OUT ("a.b.c.d"). Returns 0, -ENODEV when
 * there is no such interface, or -EADDRNOTAVAIL when it has no IPv4 address. */
int shoal_iface_ipv4(const char *name, char *out, size_t outlen);

#endif
