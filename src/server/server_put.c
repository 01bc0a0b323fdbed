/* The owner's side of write-through [W3] (server/server_put.h): checks a pushed block and caches
 * it.
 *
 * What a PUT_BLOCK can and cannot do to a member: the block id is the member's own derivation
 * from (volume, key, version, index), the length is the one the store's size for that version
 * gives, and the CRCs must match the bytes under that id — so a put can only ever place a block
 * under the id of an object version the store holds, with the length that version has. What the
 * member cannot check without reading the object back is that the bytes are the object's: a
 * holder of the group secret can plant wrong bytes for an id (docs/operations.md, "What the
 * server trusts"). */
#include "server/server_put.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "store/sizes.h"

#define BUDGET_DEFAULT (64ULL << 20)

struct shoal_put_srv {
        struct shoal_put_srv_config cfg;
        uint64_t held; /* atomic: payload bytes reserved by rx's */
};

struct shoal_put_srv *shoal_put_srv_create(const struct shoal_put_srv_config *cfg)
{
        struct shoal_put_srv *ps = calloc(1, sizeof(*ps));
        if (!ps)
                return NULL;
        ps->cfg = *cfg;
        if (!ps->cfg.budget_bytes)
                ps->cfg.budget_bytes =
                        SHOAL_MAX(BUDGET_DEFAULT, 4ULL * (cfg->vol->block_size + 4096));
        return ps;
}

void shoal_put_srv_destroy(struct shoal_put_srv *ps)
{
        free(ps);
}

static void refuse(struct shoal_put_rx *rx, uint32_t status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void refuse(struct shoal_put_rx *rx, uint32_t status, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(rx->why, sizeof(rx->why), fmt, ap);
        va_end(ap);
        rx->status = status;
}

struct shoal_put_rx *shoal_put_begin(struct shoal_put_srv *ps, const struct shoal_wire_hdr *h,
                                     const uint8_t *body, const char *peer)
{
        (void)peer;
        struct shoal_put_rx *rx = calloc(1, sizeof(*rx));
        if (!rx)
                return NULL;
        rx->len = h->payload_len; /* <= SHOAL_WIRE_PUT_PAYLOAD_MAX: the header decoder saw to it */
        struct shoal_wire_put m;
        if (shoal_wire_put_decode(body, h->body_len, &m)) {
                refuse(rx, SHOAL_ST_BAD_REQUEST, "malformed put");
                return rx;
        }
        if (m.block_size != ps->cfg.vol->block_size) {
                refuse(rx, SHOAL_ST_VOLUME, "block size %u, this member has %u", m.block_size,
                       ps->cfg.vol->block_size);
                return rx;
        }
        /* The decoder checked index * block_size < obj_size, so the block is 1..block_size
         * bytes and its payload length cannot overflow. */
        uint32_t want = shoal_wire_put_payload_len(&m);
        if (h->payload_len != want) {
                refuse(rx, SHOAL_ST_BAD_REQUEST, "put of %.*s block %u carries %u bytes, not %u",
                       (int)SHOAL_MIN(m.key_len, 60), m.key, m.block_index, h->payload_len, want);
                return rx;
        }
        if (!ps->cfg.cache || !shoal_cache_enabled(ps->cfg.cache)) {
                refuse(rx, SHOAL_ST_INTERNAL, "this member has no disk cache");
                return rx;
        }
        uint64_t held = __atomic_add_fetch(&ps->held, want, __ATOMIC_RELAXED);
        if (held > ps->cfg.budget_bytes) {
                __atomic_sub_fetch(&ps->held, want, __ATOMIC_RELAXED);
                refuse(rx, SHOAL_ST_BUSY, "%llu bytes of puts in process",
                       (unsigned long long)(held - want));
                return rx;
        }
        rx->buf = malloc(want);
        if (!rx->buf) {
                __atomic_sub_fetch(&ps->held, want, __ATOMIC_RELAXED);
                refuse(rx, SHOAL_ST_BUSY, "out of memory");
                return rx;
        }
        memcpy(rx->obj.key, m.key, m.key_len);
        rx->obj.key[m.key_len] = '\0';
        memcpy(rx->obj.version, m.version, m.version_len);
        rx->obj.version[m.version_len] = '\0';
        rx->obj.size = m.obj_size;
        rx->index = m.block_index;
        rx->block_len = shoal_block_len(m.obj_size, m.block_size, m.block_index);
        return rx;
}

static void release_buf(struct shoal_put_srv *ps, struct shoal_put_rx *rx)
{
        if (!rx->buf)
                return;
        free(rx->buf);
        rx->buf = NULL;
        __atomic_sub_fetch(&ps->held, rx->len, __ATOMIC_RELAXED);
}

void shoal_put_free(struct shoal_put_srv *ps, struct shoal_put_rx *rx)
{
        if (!rx)
                return;
        release_buf(ps, rx);
        free(rx);
}

void shoal_put_refused(struct shoal_put_srv *ps, const struct shoal_put_rx *rx, const char *peer)
{
        (void)ps;
        shoal_metric_inc(SHOAL_M_remotecache_put_refused);
        log_ratelimited(SHOAL_LOG_WARN, "server", "refused a block put from %s: %s (%s)", peer,
                        rx->why, shoal_status_str(rx->status));
}

static uint32_t get32le(const uint8_t *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The chunk CRCs of the payload against its bytes, under the id this member derived. Returns the
 * first chunk that fails, or -1. */
static long bad_chunk(const struct shoal_put_rx *rx, const struct shoal_block_id *id)
{
        uint32_t n = shoal_chunk_count(rx->block_len);
        const uint8_t *data = rx->buf + 4 * (size_t)n;
        for (uint32_t i = 0; i < n; i++) {
                uint32_t off = i * SHOAL_CHUNK_SIZE;
                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, rx->block_len - off);
                if (shoal_chunk_crc(id, i, data + off, clen) != get32le(rx->buf + 4 * (size_t)i))
                        return i;
        }
        return -1;
}

/* A push for a block that is cached already: the same bytes (its chunk CRCs equal those of the
 * cached block's verified header) are nothing new. Other bytes under one id mean two writes
 * that the store's version did not tell apart (or a writer that lies): neither copy can be
 * trusted, so the cached one is dropped too, readers go to the store, and the conflict is
 * counted. Returns 0 (the same), 1 (a conflict, dropped), or -ENOENT (no longer cached). */
static int same_as_cached(struct shoal_put_srv *ps, const struct shoal_put_rx *rx,
                          const struct shoal_block_id *id)
{
        struct shoal_cache_block b;
        int rc = shoal_cache_open_block_again(ps->cfg.cache, id, 0, &b);
        if (rc == -ENOENT || rc == -EBADMSG)
                return -ENOENT; /* gone, or corrupt and removed: the push may fill it */
        bool same = false;
        if (!rc) {
                uint32_t n = shoal_chunk_count(rx->block_len);
                same = b.len == rx->block_len;
                for (uint32_t i = 0; same && i < n; i++)
                        same = b.crcs[i] == get32le(rx->buf + 4 * (size_t)i);
                shoal_cache_block_close(ps->cfg.cache, &b);
        }
        if (same)
                return 0;
        /* (-ERANGE, another length, and -EIO are conflicts too: keep nothing under this id) */
        shoal_cache_remove(ps->cfg.cache, id);
        shoal_metric_inc(SHOAL_M_remotecache_put_conflicts);
        log_warn("server",
                 "block %u of %s version %s pushed with other bytes than the cached copy: both "
                 "dropped (two writes under one version?)",
                 rx->index, rx->obj.key, rx->obj.version);
        return 1;
}

static uint32_t check_and_insert(struct shoal_put_srv *ps, struct shoal_put_rx *rx)
{
        const struct shoal_object *o = &rx->obj;
        struct shoal_block_id id;
        shoal_block_id_derive(ps->cfg.vol, o->key, o->version, rx->index, &id);
        if (ps->cfg.is_owner && !ps->cfg.is_owner(ps->cfg.owner_arg, &id)) {
                refuse(rx, SHOAL_ST_NOT_OWNER, "block %u of %.60s is not this member's", rx->index,
                       o->key);
                return rx->status;
        }
        long bad = bad_chunk(rx, &id);
        if (bad >= 0) {
                refuse(rx, SHOAL_ST_BAD_REQUEST,
                       "chunk %ld of block %u of %.60s fails its checksum", bad, rx->index, o->key);
                return rx->status;
        }
        /* The id binds the version, the length the size: both must be the store's. Checked
         * after the CRCs, so that garbage costs no store request. */
        uint64_t size;
        int rc = shoal_store_sizes_get(ps->cfg.sizes, o->key, o->version, &size);
        if (rc) {
                refuse(rx,
                       rc == -ENOENT   ? SHOAL_ST_NOT_FOUND
                       : rc == -ESTALE ? SHOAL_ST_STALE
                                       : SHOAL_ST_STORE_ERROR,
                       "%.60s version %.40s: %s", o->key, o->version,
                       rc == -ESTALE ? "the store holds another version" : strerror(-rc));
                return rx->status;
        }
        if (size != o->size) {
                refuse(rx, SHOAL_ST_BAD_REQUEST, "%.60s is %llu bytes, not %llu", o->key,
                       (unsigned long long)size, (unsigned long long)o->size);
                return rx->status;
        }
        if (shoal_cache_contains(ps->cfg.cache, &id)) {
                rc = same_as_cached(ps, rx, &id);
                if (rc != -ENOENT) {
                        if (rc)
                                refuse(rx, SHOAL_ST_STALE,
                                       "block %u of %.60s is cached with other bytes: both "
                                       "dropped",
                                       rx->index, o->key);
                        return rx->status;
                }
        }
        rc = shoal_cache_insert(ps->cfg.cache, &id,
                                rx->buf + 4 * (size_t)shoal_chunk_count(rx->block_len),
                                rx->block_len);
        if (rc) {
                refuse(rx, SHOAL_ST_INTERNAL, "caching block %u of %.60s: %s", rx->index, o->key,
                       strerror(-rc));
                return rx->status;
        }
        return SHOAL_ST_OK;
}

uint32_t shoal_put_apply(struct shoal_put_srv *ps, struct shoal_put_rx *rx, const char *peer)
{
        uint32_t st = check_and_insert(ps, rx);
        release_buf(ps, rx);
        if (st == SHOAL_ST_OK) {
                shoal_metric_inc(SHOAL_M_remotecache_put_serve_blocks);
                shoal_metric_add(SHOAL_M_remotecache_put_serve_bytes, rx->block_len);
                log_debug("server", "cached block %u of %s (%u bytes) pushed by %s", rx->index,
                          rx->obj.key, rx->block_len, peer);
        } else {
                shoal_put_refused(ps, rx, peer);
        }
        return st;
}
