/* The member's request engine: one path for every request, whichever transport brought it (the
 * TCP pool, IORPC over TCP, IORPC over RDMA).
 *
 * A transport decodes a frame into a request (shoal_engine_req_read), fills in who it is for
 * (VIA, PEER, GONE, DONE, OWNER) and submits it (shoal_engine_submit). The engine admits it under
 * the server-wide processing cap or queues it in a FIFO [R4], answers a hit from the cache file by
 * the transport's mode (sendfile, O_DIRECT, page cache, splice into a pipe), and fills a miss
 * through the reader's single flight from the object store. When the request is finished the
 * engine calls DONE exactly once; the transport then sends the answer (R->out, then the payload
 * by R->src) and frees the request (shoal_engine_req_free), which gives its buffers, files and
 * processing slot back.
 *
 * Room for load-aware answers (issue 29): an answer's STATUS may be SHOAL_ST_BUSY (the engine
 * already answers so when it cannot take a buffer or a fill is refused); a transport passes it on
 * like any ERROR, so a member that answers "over my bound" needs no new transport code. */
#ifndef SHOAL_SERVER_ENGINE_H
#define SHOAL_SERVER_ENGINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "client/reader.h"
#include "common/block.h"
#include "common/list.h"
#include "event/loop.h"
#include "wire/wire.h"

struct shoal_engine;
struct shoal_group;
struct shoal_put_srv;
struct shoal_pipe;
struct shoal_bufpool;

/* The transport a request came over: decides how a hit is read and which series count it. */
enum shoal_req_via {
        SHOAL_VIA_POOL,  /* TCP pool: one request per connection, sendfile (or --cache-try-dio) */
        SHOAL_VIA_IORPC, /* IORPC over TCP: by --iorpc-mode */
        SHOAL_VIA_RDMA,  /* IORPC over RDMA: the payload must lie in a registered buffer */
};

/* Where an OK answer's payload is. */
enum shoal_req_src {
        SHOAL_SRC_NONE,
        SHOAL_SRC_FILE, /* sendfile from the open cache block R->cb */
        SHOAL_SRC_BUF,  /* from the dio buffer R->buf (dio / pagecache read) */
        SHOAL_SRC_HELD, /* from the block R->hb held in the reader (miss fill) */
        SHOAL_SRC_PIPE, /* from the pipe R->pipe (splice), then the rest from R->cb */
};

struct shoal_req {
        struct shoal_work work;      /* first: the workers' handle */
        struct shoal_loop_task task; /* the transport's, to post DONE to its loop */
        struct shoal_list link;      /* the engine's wait queue, then the transport's send queue */
        struct shoal_engine *e;
        /* set by the transport before submitting */
        enum shoal_req_via via;
        const char *peer;         /* for logs; must outlive R */
        const _Atomic bool *gone; /* the requester's connection closed (NULL: never) */
        void (*done)(struct shoal_req *r);
        void *owner; /* the transport's (its connection) */
        /* the request */
        uint64_t id;
        uint8_t type; /* SHOAL_MSG_READ, _CORRUPT, _PUT_BLOCK, or a control frame's type */
        uint16_t flags;
        struct shoal_object obj;
        uint32_t index, off, len;
        uint64_t view_version; /* READ: the requester's group view version (0: none) */
        uint64_t t_start;
        /* result */
        uint32_t status; /* SHOAL_ST_OK, an ERROR status, or SHOAL_ST__MAX: no payload */
        char reason[128];
        enum shoal_req_src src;
        struct shoal_cache_block cb;
        bool cb_open;
        char *buf;
        struct shoal_held_block hb;
        struct shoal_put_rx *put; /* PUT_BLOCK: the pushed block (server/server_put.h) */
        /* answer */
        uint8_t out[SHOAL_WIRE_HDR_LEN + 4 * SHOAL_MAX_CHUNKS + 64];
        size_t out_len, out_sent;
        uint64_t pay_sent;
        struct shoal_pipe *pipe; /* SHOAL_SRC_PIPE: the payload, or its first part */
        uint64_t pay_piped;      /* SHOAL_SRC_PIPE: bytes moved from the file into the pipe */
        uint64_t t_write;
        bool counted;      /* holds a server-wide processing slot */
        bool corrupt_slot; /* counted in the engine's CORRUPT checks */
        bool done_inline;  /* DONE ran inside shoal_engine_submit, on the submitter's thread */
};

struct shoal_engine_config {
        const struct shoal_volume *vol;
        struct shoal_reader *reader; /* miss fill (single flight) */
        struct shoal_cache *cache;   /* hits; NULL: none */
        bool cache_try_dio;          /* the pool reads hits by O_DIRECT */
        int iorpc_mode;              /* effective enum shoal_iorpc_mode (not DISABLE) */
        unsigned max_inflight;       /* requests processed at once, both services [R4] */
        unsigned npipes;             /* the pipe pool's bound */
};

/* Creates the engine (its disk and fill workers, dio buffers, pipes, object sizes, put server).
 * NULL on failure. */
struct shoal_engine *shoal_engine_create(const struct shoal_engine_config *cfg);
/* No more work: requests still waiting for a slot get DONE with SHOAL_ST_BUSY (without a slot),
 * then the workers finish what they hold and stop. Requests finished afterwards still need
 * shoal_engine_req_free. Idempotent; NULL is a no-op. */
void shoal_engine_stop(struct shoal_engine *e);
/* Frees the engine (stopping it first); every request must have been freed. NULL is a no-op. */
void shoal_engine_destroy(struct shoal_engine *e);
/* Tells the engine the group (ownership checks for fills and puts). Any thread. */
void shoal_engine_set_group(struct shoal_engine *e, struct shoal_group *g);
/* From now on an RDMA answer may be written from the reader's held block itself. */
void shoal_engine_held_direct(struct shoal_engine *e);

struct shoal_bufpool *shoal_engine_dio(struct shoal_engine *e);
struct shoal_put_srv *shoal_engine_put(struct shoal_engine *e);

/* A zeroed request of SIZE bytes (at least sizeof(struct shoal_req): a transport may embed the
 * request first in a struct of its own) for VIA, started now. NULL without memory. */
struct shoal_req *shoal_engine_req_new(struct shoal_engine *e, enum shoal_req_via via, size_t size);
/* Decodes and checks the body of a READ or CORRUPT into a new request (as shoal_engine_req_new).
 * RDMA_TARGET requests are refused unless VIA is SHOAL_VIA_RDMA. NULL with the ERROR status and
 * reason in *STATUS and WHY (SHOAL_ST_BUSY: no memory). */
struct shoal_req *shoal_engine_req_read(struct shoal_engine *e, enum shoal_req_via via, size_t size,
                                        uint8_t type, uint64_t id, uint16_t flags,
                                        const uint8_t *body, size_t body_len, uint32_t *status,
                                        char *why, size_t whylen);
/* A CORRUPT notice takes one of the server's few check slots; false (logged) when all are taken:
 * drop the notice. */
bool shoal_engine_corrupt_slot(struct shoal_engine *e, struct shoal_req *r);
/* Runs R: a READ or CORRUPT under the processing cap, a PUT_BLOCK (R->put received) on a fill
 * worker. DONE follows exactly once, on a worker thread, or before this returns with
 * R->done_inline set (a hit answered on the submitter's thread). */
void shoal_engine_submit(struct shoal_engine *e, struct shoal_req *r);
/* Builds R's answer frame into R->out (READ_RESP with its CRCs, PUT_RESP, or ERROR). */
void shoal_engine_answer_build(struct shoal_req *r);
/* RDMA: moves an OK answer's payload into a registered buffer (a dio buffer, or the held block
 * itself after shoal_engine_held_direct) and builds the answer. Returns the payload (R->len
 * bytes), or NULL when R is not OK (R->status says why). Worker thread. */
const char *shoal_engine_answer_registered(struct shoal_req *r);
/* Counts R's processing time (the answer is built). */
void shoal_engine_req_processed(struct shoal_req *r);
/* Counts R's answer as sent (NOW), for READs. */
void shoal_engine_req_sent(struct shoal_req *r, uint64_t now);
/* Closes R's cache file, gives its buffers and slots back, frees it. Any thread. */
void shoal_engine_req_free(struct shoal_req *r);

#endif
