#include "net/iface.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>

int shoal_iface_ipv4(const char *name, char *out, size_t outlen)
{
        if (!if_nametoindex(name))
                return -ENODEV;
        struct ifaddrs *ifa;
        if (getifaddrs(&ifa))
                return -errno;
        int rc = -EADDRNOTAVAIL;
        for (struct ifaddrs *p = ifa; p; p = p->ifa_next) {
                if (!p->ifa_addr || p->ifa_addr->sa_family != AF_INET || strcmp(p->ifa_name, name))
                        continue;
                const struct sockaddr_in *sa = (const struct sockaddr_in *)p->ifa_addr;
                if (inet_ntop(AF_INET, &sa->sin_addr, out, (socklen_t)outlen))
                        rc = 0;
                break;
        }
        freeifaddrs(ifa);
        return rc;
}
