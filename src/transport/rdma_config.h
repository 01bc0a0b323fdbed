/* The RDMA requester's configuration (transport/rdma_client.h), apart so that the client's
 * internal header (transport/rdma_client_int.h) needs nothing else of its interface. */
#ifndef SHOAL_TRANSPORT_RDMA_CONFIG_H
#define SHOAL_TRANSPORT_RDMA_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/secret.h"

struct shoal_rdma_client_config {
        const char *provider;
        char (*ifaces)[32];
        unsigned n_if;
        struct shoal_secret secret; /* group secret (len 0: none); only its key is kept */
        size_t bounce_size;         /* largest request (the volume's block size) */
        uint64_t retry_ns;          /* RDMA retried this long after a failure (0:
                                       IORPC_RDMA_RETRY_DURATION, else 5 min) [M4] */
};

#endif
