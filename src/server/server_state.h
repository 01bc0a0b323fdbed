/* The member's server state, shared by its files: the server (server.c starts and stops it), its
 * event-loop threads and their listeners (accept.c), whose connections conn.c owns. Each loop
 * thread owns its listening sockets (SO_REUSEPORT spreads accepts), its connections and their
 * socket I/O; the request engine (engine.h) does the rest. */
#ifndef SHOAL_SERVER_STATE_H
#define SHOAL_SERVER_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/block.h"
#include "common/list.h"
#include "event/loop.h"
#include "server/admission.h"
#include "server/engine.h"
#include "wire/handshake.h"

#define SHOAL_SERVER_LOOPS_MAX 8
#define SHOAL_SERVER_RDMA_MAX  4 /* RDMA addresses INFO_RESP lists */

struct srv_loop;

struct srv_listener {
        struct shoal_loop_io io; /* fd -1: none */
        struct srv_loop *lp;
        int service; /* SHOAL_SERVICE_POOL or SHOAL_SERVICE_IORPC */
};

struct srv_loop {
        struct shoal_server *s;
        struct shoal_loop *loop;
        pthread_t thread;
        bool running;               /* THREAD was started */
        struct srv_listener lis[2]; /* pool, iorpc */
        bool accept_paused;
        uint64_t accept_resume;
        struct shoal_list conns; /* conn.c's connections */
        struct shoal_adm adm;    /* unauthenticated connections [S2] */
};

struct shoal_server {
        struct shoal_engine *engine;
        const struct shoal_volume *vol;
        struct shoal_reader *reader;
        struct shoal_hs_key key; /* from the config's secret, which is not kept */
        char member_id[SHOAL_WIRE_MEMBER_ID_MAX + 1];
        struct srv_loop loops[SHOAL_SERVER_LOOPS_MAX];
        unsigned nloops; /* loops created */
        char tcp_addr[64], iorpc_addr[64];
        pthread_mutex_t info_mu; /* the RDMA addresses, set after the loops started */
        char rdma_addr[SHOAL_SERVER_RDMA_MAX][64];
        unsigned n_rdma;
        unsigned nconns; /* atomic: connections, all loops */
        struct shoal_server_limits lim;
        bool iorpc_on;
        int iorpc_mode; /* effective mode (splice may have fallen back to dio) */
        long pipe_max;  /* fs.pipe-max-size */
};

#endif
