/* What the RDMA requester's two files share (transport/rdma_client.c: channels, members and the
 * progress thread; transport/rdma_read.c: the read path and `shoal ping`): the client's state.
 * Internal to transport/; transport/rdma_client.h is the interface. */
#ifndef SHOAL_TRANSPORT_RDMA_CLIENT_INT_H
#define SHOAL_TRANSPORT_RDMA_CLIENT_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "common/bufpool.h"
#include "common/list.h"
#include "common/util.h"
#include "net/fabric.h"
#include "transport/rdma_chan.h"
#include "transport/rdma_config.h"
#include "wire/handshake.h"

#define NSLOTS           64 /* receives and send buffers per channel */
#define MAX_REGIONS      256
#define CONNECT_NS       (3 * SHOAL_NS_PER_SEC)
#define DRAIN_NS         (2 * SHOAL_NS_PER_SEC)
#define PARK_NS          (10 * SHOAL_NS_PER_SEC)
#define TICK_NS          (100 * SHOAL_NS_PER_MS)
#define REFUSED_PAUSE_NS (5 * SHOAL_NS_PER_MS)   /* first pause after a refused connection */
#define REFUSED_NS       (10 * SHOAL_NS_PER_SEC) /* refused connections retried this long */
#define BOUNCE_BUFS      8
#define POLL_BUDGET      1024

enum q_kind {
        Q_EVENTS, /* the eventfd: submissions, opened channels */
        Q_EQ,
        Q_CQ
};

/* What epoll reports. */
struct rc_q {
        enum q_kind kind;
        void *obj; /* struct rc_rail (EQ) or struct rc_link (CQ) */
        bool armed;
};

struct rc_rail {
        struct shoal_fab fab;
        unsigned index;
        struct fid_eq *eq; /* every channel on this interface */
        int eq_fd;
        struct rc_q q;
};

struct rc_peer;

/* One member over one interface: its own domain and CQ, and the channels' state machine. */
struct rc_link {
        struct shoal_rdma_link m;
        struct rc_peer *p;
        struct rc_rail *rail;
        struct fid_domain *dom;
        struct fid_cq *cq;
        int cq_fd;
        struct rc_q q;
        char addr[64];          /* the member's listener for this interface */
        _Atomic unsigned load;  /* requests submitted and not back, for the callers' choice */
        _Atomic unsigned ready; /* channels taking requests, as of the last tick */
};

struct rc_chan {
        struct shoal_rdma_chan m;
        struct rc_link *link;
        struct fid_ep *ep;
        struct shoal_fab_slots mem;
        struct shoal_rdma_cbuf *bufs;
        struct shoal_rdma_creq **slots;
        unsigned gen; /* the member's connect generation it was opened for */
        bool grow;    /* opened for load */
        int open_rc;  /* the connector's verdict */
        const char *open_call;
        struct sockaddr_in *dest;
        struct rc_chan *next;    /* connector queue, or opened queue */
        struct shoal_list dying; /* in the client's dying list, once shut down */
};

enum peer_state {
        P_NEW,
        P_CONNECTING,
        P_UP,
        P_DOWN
};

struct rc_peer {
        struct shoal_rdma_client *cl;
        char id[64];
        /* mu: */
        enum peer_state state;
        bool ever_up, failed, addrs_changed; /* failed: at least once, so reconnects are
                                                 waited for by no request */
        uint64_t down_until;
        char addrs[SHOAL_FAB_MAX_IFACES][64];
        unsigned naddrs;
        /* progress thread: */
        unsigned gen;
        struct rc_link *links[SHOAL_FAB_MAX_IFACES];
        unsigned nlinks;
        struct rc_peer *_Atomic next;
};

/* A caller's request. */
struct rreq {
        struct shoal_rdma_creq q;
        struct rc_link *link;
        uint8_t body[1280];
        sem_t done;
        int rc;
        struct rreq *next; /* the submission queue */
};

struct region {
        char *base;
        size_t len;
};

struct shoal_rdma_client {
        struct shoal_rdma_client_config cfg;
        char ifaces[SHOAL_FAB_MAX_IFACES][32];
        struct shoal_hs_key key;
        struct rc_rail rails[SHOAL_FAB_MAX_IFACES];
        unsigned nrails;
        struct shoal_rdma_link_config lcfg;
        pthread_mutex_t mu; /* regions, peers' shared fields and list, the queues below */
        struct region regions[MAX_REGIONS];
        _Atomic unsigned nregions;
        struct shoal_bufpool *bounce;
        struct rreq *subq, *subq_tail;
        struct rc_chan *connq, *connq_tail; /* for the connector */
        struct rc_chan *opened;             /* back from the connector */
        pthread_cond_t conn_cond;
        int epfd, evfd;
        struct rc_q ev_q;
        pthread_t thread, connector;
        bool started, connector_started;
        _Atomic bool stop;
        uint64_t next_id;
        struct rc_peer *_Atomic peers; /* appended under mu, read by the progress thread */
        struct shoal_list dying;       /* struct rc_chan, shut down; progress thread */
};

static inline void rc_wake(struct shoal_rdma_client *cl)
{
        uint64_t one = 1;
        if (write(cl->evfd, &one, sizeof(one)) < 0) {
                /* the loop also wakes on its tick */
        }
}

static inline uint64_t rc_new_id(struct shoal_rdma_client *cl)
{
        return __atomic_add_fetch(&cl->next_id, 1, __ATOMIC_RELAXED);
}

/* The member MEMBER_ID with listeners ADDRS[0..N_ADDRS) (made on first sight). cl->mu held. */
struct rc_peer *rc_peer_get_locked(struct shoal_rdma_client *cl, const char *member_id,
                                   const char (*addrs)[64], unsigned n_addrs);

#endif
