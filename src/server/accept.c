/* Accepting TCP connections (server/accept.h). */
#include "server/accept.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "server/admission.h"
#include "server/conn.h"
#include "server/server_state.h"

#define ACCEPT_BATCH    64                      /* accepts per listener event */
#define ACCEPT_PAUSE_NS (200 * SHOAL_NS_PER_MS) /* out of fds: no accepts for this long */

static void accept_pause(struct srv_loop *lp)
{
        log_ratelimited(SHOAL_LOG_WARN, "server", "accept: %s; pausing accepts", strerror(errno));
        for (int k = 0; k < 2; k++)
                if (lp->lis[k].io.fd >= 0)
                        shoal_loop_del(lp->loop, &lp->lis[k].io);
        lp->accept_paused = true;
        lp->accept_resume = shoal_now_ns() + ACCEPT_PAUSE_NS;
}

void shoal_accept_resume(struct srv_loop *lp, uint64_t now)
{
        if (!lp->accept_paused || now < lp->accept_resume)
                return;
        lp->accept_paused = false;
        for (int k = 0; k < 2; k++)
                if (lp->lis[k].io.fd >= 0)
                        shoal_loop_add(lp->loop, &lp->lis[k].io, EPOLLIN);
}

/* Accepts one connection on LIS. Returns false when the listener is to be left for now: empty,
 * out of fds (paused), or a connection gave way to this one. */
static bool accept_one(struct srv_listener *lis)
{
        struct srv_loop *lp = lis->lp;
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        int fd = accept4(lis->io.fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                        accept_pause(lp);
                return false;
        }
        char ip[INET_ADDRSTRLEN], who[64];
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
        snprintf(who, sizeof(who), "%s:%u", ip, ntohs(sa.sin_port));
        struct shoal_adm_src *src;
        bool evicted;
        if (!shoal_adm_admit(&lp->adm, sa.sin_addr.s_addr, who, &src, &evicted)) {
                close(fd);
                return true;
        }
        if (shoal_conn_open(lp, fd, lis->service, who, src))
                return true;
        /* The connection that gave way closes after this batch: accept no more until it has,
         * so that a flood's churn never holds more fds than the limits allow (the listener is
         * level-triggered, the next accept comes with the next wait). */
        return !evicted;
}

void shoal_accept_event(void *arg, uint32_t events)
{
        (void)events;
        for (int i = 0; i < ACCEPT_BATCH; i++)
                if (!accept_one(arg))
                        return;
}
