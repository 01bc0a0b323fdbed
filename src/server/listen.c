/* The server's listening sockets (server/listen.h). */
#include "server/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BACKLOG 1024

/* SO_REUSEPORT lets another process of the same user bind a port we listen on and take half of
 * its connections: before the first listener on a fixed port (--group-port), a probe without it
 * must be able to bind there. */
static int port_free(const struct sockaddr_in *sa)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1, rc = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)))
                rc = -errno;
        close(fd);
        return rc;
}

int shoal_listen_bind(const char *ip, uint16_t *port, bool first, char *err, size_t errlen)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                snprintf(err, errlen, "socket: %s", strerror(errno));
                return -1;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(*port)};
        if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
                snprintf(err, errlen, "invalid listen address %s", ip);
                close(fd);
                return -1;
        }
        int rc = first && *port ? port_free(&sa) : 0;
        if (rc || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, BACKLOG)) {
                snprintf(err, errlen, "cannot listen on %s:%u: %s", ip, *port,
                         strerror(rc ? -rc : errno));
                close(fd);
                return -1;
        }
        socklen_t sl = sizeof(sa);
        getsockname(fd, (struct sockaddr *)&sa, &sl);
        *port = ntohs(sa.sin_port);
        return fd;
}
