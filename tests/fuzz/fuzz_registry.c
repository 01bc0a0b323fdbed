/* libFuzzer target: registry records as a member reads them back (src/group/registry*.c). Anyone
 * with access to the registry may have written anything there.
 *
 *   byte 0   mode % 5:
 *     0  the rest is one record: shoal_member_decode
 *     1  the rest fills a member's fields (any bytes in its strings): encode, then decode
 *     2  the rest is (id, record) pairs, each a fz_str id and a u16-length record, listed through
 *        the registry front end (shoal_registry_list) by a backend that returns them as stored
 *     3  the rest is a Redis reply (RESP) as hiredis parses it off the socket, walked by
 *        shoal_registry_redis_visit as redis_list does
 *     4  the rest is rows of a real SQLite registry (a file under /dev/shm, or TMPDIR): per row a
 *        byte (bit 0: another group; bits 1-3, 4-6: the SQL type of id and record), then fz_str
 *        id and a u16-length record; listed by the sqlite3:// backend itself
 *
 * Invariants: a record that decodes re-encodes, decodes to the same member and re-encodes to the
 * same bytes (one canonical form); any member encodes and comes back equal; a listing returns
 * exactly the stored records that decode and carry the id they are filed under, in order, and
 * never one of another group. */
#include <errno.h>
#include <glob.h>
#include <signal.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <sqlite3.h>
#include <unistd.h>

#include "common/log.h"
#include "fuzz_input.h"
#include "group/group_internal.h"

#define GROUP     "fuzz"
#define MAX_PAIRS 256

static bool member_eq(const struct shoal_member *a, const struct shoal_member *b)
{
        bool eq = !strcmp(a->id, b->id) && !strcmp(a->host, b->host) &&
                  !strcmp(a->tcp_addr, b->tcp_addr) && !strcmp(a->iorpc_addr, b->iorpc_addr) &&
                  a->n_rdma == b->n_rdma && a->weight == b->weight && a->role == b->role &&
                  !strcmp(a->volume_url, b->volume_url) && a->block_size == b->block_size &&
                  a->cache_bytes == b->cache_bytes && a->cache_capacity == b->cache_capacity &&
                  a->beat == b->beat && a->updated_ms == b->updated_ms &&
                  a->started_ms == b->started_ms;
        for (int i = 0; i < SHOAL_RDMA_ADDRS; i++)
                eq = eq && !strcmp(a->rdma_addr[i], b->rdma_addr[i]);
        return eq;
}

static void same_member(const struct shoal_member *a, const struct shoal_member *b)
{
        FZ_CHECK(member_eq(a, b));
}

/* A decoded member must survive encode/decode unchanged, in one canonical encoding. */
static void round_trip(const struct shoal_member *m)
{
        static char enc[SHOAL_RECORD_MAX], enc2[SHOAL_RECORD_MAX];
        static struct shoal_member m2;
        FZ_CHECK(shoal_member_id_valid(m->id, strlen(m->id)));
        FZ_CHECK(m->n_rdma <= SHOAL_RDMA_ADDRS);
        FZ_CHECK(m->role == SHOAL_ROLE_PROVIDER || m->role == SHOAL_ROLE_CONSUMER);
        int n = shoal_member_encode(m, enc, sizeof(enc));
        FZ_CHECK(n > 0 && (size_t)n < sizeof(enc));
        FZ_CHECK(shoal_member_decode(enc, (size_t)n, &m2) == 0);
        same_member(m, &m2);
        int n2 = shoal_member_encode(&m2, enc2, sizeof(enc2));
        FZ_CHECK(n2 == n && !memcmp(enc, enc2, (size_t)n));
}

static void fuzz_decode(struct fz *in)
{
        static struct shoal_member m;
        if (shoal_member_decode((const char *)in->p, in->n, &m))
                return;
        FZ_CHECK(!m.alive && !m.age_ms);
        round_trip(&m);
}

static void fuzz_encode(struct fz *in)
{
        static const char idchars[] =
                "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ._-";
        static struct shoal_member m;
        memset(&m, 0, sizeof(m));
        size_t idl = 1 + fz_u8(in) % SHOAL_MEMBER_ID_LEN;
        for (size_t i = 0; i < idl; i++)
                m.id[i] = idchars[fz_u8(in) % (sizeof(idchars) - 1)];
        fz_str(in, m.host, sizeof(m.host));
        fz_str(in, m.tcp_addr, sizeof(m.tcp_addr));
        fz_str(in, m.iorpc_addr, sizeof(m.iorpc_addr));
        m.n_rdma = fz_u8(in) % (SHOAL_RDMA_ADDRS + 1);
        for (int i = 0; i < SHOAL_RDMA_ADDRS; i++)
                fz_str(in, m.rdma_addr[i], sizeof(m.rdma_addr[i]));
        m.weight = (uint32_t)fz_u(in, 4);
        m.role = fz_u8(in) & 1 ? SHOAL_ROLE_CONSUMER : SHOAL_ROLE_PROVIDER;
        m.block_size = (uint32_t)fz_u(in, 4);
        m.cache_bytes = fz_u(in, 8);
        m.cache_capacity = fz_u(in, 8);
        m.beat = fz_u(in, 8);
        m.updated_ms = (int64_t)fz_u(in, 8);
        m.started_ms = (int64_t)fz_u(in, 8);
        /* The URL last: up to its full size, from the rest. */
        size_t ul = in->n < sizeof(m.volume_url) - 1 ? in->n : sizeof(m.volume_url) - 1;
        memcpy(m.volume_url, in->p, ul);
        round_trip(&m);
}

/* ---- listing through the front end ---- */

struct pair {
        const char *id, *rec;
        size_t id_len, rec_len;
        bool other_group;
};

static struct pair pairs[MAX_PAIRS];
static size_t npairs;
static const redisReply *reply;

static int list_pairs(struct shoal_registry *r, shoal_registry_visit_fn visit, void *arg)
{
        (void)r;
        for (size_t i = 0; i < npairs; i++) {
                int rc = visit(arg, pairs[i].id, pairs[i].id_len, pairs[i].rec, pairs[i].rec_len);
                if (rc)
                        return rc;
        }
        return 0;
}

static int list_reply(struct shoal_registry *r, shoal_registry_visit_fn visit, void *arg)
{
        (void)r;
        int rc = shoal_registry_redis_visit(reply, visit, arg);
        return rc == -EPROTO ? -EIO : rc;
}

static void no_close(struct shoal_registry *r)
{
        (void)r;
}

static const struct shoal_registry_ops pairs_ops = {
        .scheme = "fuzz", .list = list_pairs, .close = no_close};
static const struct shoal_registry_ops reply_ops = {
        .scheme = "fuzz", .list = list_reply, .close = no_close};

/* Whether the record stored under ID is one a reader keeps; *M receives it. */
static bool kept(const char *id, size_t id_len, const char *rec, size_t rec_len,
                 struct shoal_member *m)
{
        return !shoal_member_decode(rec, rec_len, m) && strlen(m->id) == id_len &&
               !memcmp(m->id, id, id_len);
}

/* Lists R and checks the result against PAIRS (those of our group, in order). */
static void list_and_compare(struct shoal_registry *r, bool ordered)
{
        struct shoal_member *got = NULL;
        size_t n = 0;
        int rc = shoal_registry_list(r, &got, &n);
        if (rc) {
                FZ_CHECK(rc == -EIO || rc == -ENOMEM);
                return;
        }
        static struct shoal_member want;
        size_t k = 0;
        for (size_t i = 0; i < npairs; i++) {
                if (pairs[i].other_group ||
                    !kept(pairs[i].id, pairs[i].id_len, pairs[i].rec, pairs[i].rec_len, &want))
                        continue;
                if (ordered) {
                        FZ_CHECK(k < n);
                        same_member(&got[k], &want);
                }
                k++;
        }
        FZ_CHECK(k == n);
        for (size_t j = 0; j < n; j++) {
                round_trip(&got[j]);
                if (ordered)
                        continue;
                /* A stored record under this member's id that reads back as it. (SQLite may
                 * hold the same id twice, as TEXT and as BLOB; the agent keeps one.) */
                bool found = false;
                for (size_t i = 0; i < npairs && !found; i++) {
                        if (pairs[i].other_group || pairs[i].id_len != strlen(got[j].id) ||
                            memcmp(pairs[i].id, got[j].id, pairs[i].id_len))
                                continue;
                        found = kept(pairs[i].id, pairs[i].id_len, pairs[i].rec, pairs[i].rec_len,
                                     &want) &&
                                member_eq(&got[j], &want);
                }
                FZ_CHECK(found);
        }
        free(got);
}

static void take_pairs(struct fz *in, bool with_flags, uint8_t *flags)
{
        static char ids[MAX_PAIRS][256];
        npairs = 0;
        while (in->n && npairs < MAX_PAIRS) {
                struct pair *p = &pairs[npairs];
                uint8_t f = with_flags ? fz_u8(in) : 0;
                if (flags)
                        flags[npairs] = f;
                p->other_group = f & 1;
                p->id_len = fz_str(in, ids[npairs], sizeof(ids[npairs]));
                p->id = ids[npairs];
                size_t want = (size_t)fz_u(in, 2);
                p->rec_len = want < in->n ? want : in->n;
                p->rec = (const char *)in->p;
                fz_skip(in, p->rec_len);
                npairs++;
        }
}

static struct shoal_registry *fake(const struct shoal_registry_ops *ops)
{
        static struct shoal_registry r;
        static bool init;
        if (!init) {
                pthread_mutex_init(&r.lock, NULL);
                snprintf(r.group, sizeof(r.group), "%s", GROUP);
                init = true;
        }
        r.ops = ops;
        return &r;
}

static void fuzz_pairs(struct fz *in)
{
        take_pairs(in, false, NULL);
        list_and_compare(fake(&pairs_ops), true);
}

/* True when a RESP length in [P, P+N) asks for more than a reply of this size could hold.
 * hiredis 0.14 allocates an array's element pointers up front (calloc of 8 x the count, 7 GB for
 * "*922338082"): that is the library trusting the server's protocol, not shoal reading a record,
 * so such inputs are left out here (see docs/reliability.md). */
static bool resp_huge_length(const uint8_t *p, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                if (p[i] != '*' && p[i] != '$')
                        continue;
                uint64_t v = 0;
                for (size_t k = i + 1; k < n && p[k] >= '0' && p[k] <= '9' && v < (1u << 20); k++)
                        v = v * 10 + (uint64_t)(p[k] - '0');
                if (v >= (1u << 20))
                        return true;
        }
        return false;
}

static void fuzz_redis(struct fz *in)
{
        if (resp_huge_length(in->p, in->n))
                return;
        redisReader *rd = redisReaderCreate();
        FZ_CHECK(rd);
        void *rep = NULL;
        if (redisReaderFeed(rd, (const char *)in->p, in->n) == REDIS_OK &&
            redisReaderGetReply(rd, &rep) == REDIS_OK && rep) {
                reply = rep;
                /* What redis_list hands the front end, computed here for the comparison. */
                npairs = 0;
                if (reply->type == REDIS_REPLY_ARRAY && reply->elements % 2 == 0) {
                        for (size_t i = 0; i + 1 < reply->elements && npairs < MAX_PAIRS; i += 2) {
                                const redisReply *k = reply->element[i], *v = reply->element[i + 1];
                                if (!k || !v || k->type != REDIS_REPLY_STRING ||
                                    v->type != REDIS_REPLY_STRING || !k->str || !v->str)
                                        continue;
                                pairs[npairs++] =
                                        (struct pair){k->str, v->str, k->len, v->len, false};
                        }
                }
                if (npairs < MAX_PAIRS)
                        list_and_compare(fake(&reply_ops), true);
                freeReplyObject(rep);
        }
        redisReaderFree(rd);
}

/* ---- a real SQLite registry ---- */

static struct shoal_registry *sq_reg;
static sqlite3 *sq_db;
static sqlite3_stmt *sq_ins;
static char sq_path[256];

static void sq_cleanup(void)
{
        if (sq_ins)
                sqlite3_finalize(sq_ins);
        if (sq_db)
                sqlite3_close(sq_db);
        if (sq_reg)
                shoal_registry_close(sq_reg);
        const char *sfx[] = {"", "-wal", "-shm", "-journal"};
        for (int i = 0; i < 4; i++) {
                char p[300];
                snprintf(p, sizeof(p), "%s%s", sq_path, sfx[i]);
                unlink(p);
        }
}

/* Files left in DIR by runs that died (a crash skips atexit). */
static void sq_sweep(const char *dir)
{
        char pat[300];
        glob_t g;
        snprintf(pat, sizeof(pat), "%s/shoal-fuzz-registry-*.db*", dir);
        if (glob(pat, 0, NULL, &g))
                return;
        for (size_t i = 0; i < g.gl_pathc; i++) {
                int pid = atoi(strstr(g.gl_pathv[i], "registry-") + 9);
                if (pid > 0 && kill(pid, 0) && errno == ESRCH)
                        unlink(g.gl_pathv[i]);
        }
        globfree(&g);
}

static void sq_setup(void)
{
        if (sq_reg)
                return;
        const char *dir = access("/dev/shm", W_OK) ? getenv("TMPDIR") : "/dev/shm";
        dir = dir ? dir : "/tmp";
        sq_sweep(dir);
        snprintf(sq_path, sizeof(sq_path), "%s/shoal-fuzz-registry-%d.db", dir, (int)getpid());
        char url[300], err[256];
        snprintf(url, sizeof(url), "sqlite3://%s", sq_path);
        if (shoal_registry_open(url, GROUP, &sq_reg, err, sizeof(err))) {
                fprintf(stderr, "fuzz_registry: %s\n", err);
                abort();
        }
        atexit(sq_cleanup);
        FZ_CHECK(sqlite3_open(sq_path, &sq_db) == SQLITE_OK);
        FZ_CHECK(sqlite3_exec(sq_db, "PRAGMA synchronous=OFF", NULL, NULL, NULL) == SQLITE_OK);
        FZ_CHECK(sqlite3_prepare_v2(sq_db,
                                    "INSERT OR REPLACE INTO shoal_members (grp, id, record) "
                                    "VALUES (?1, ?2, ?3)",
                                    -1, &sq_ins, NULL) == SQLITE_OK);
}

/* Binds BYTES as SQL type T: 0 text, 1 blob, 2 integer, 3 real, 4 null. */
static void bind_as(int col, unsigned t, const char *bytes, size_t len)
{
        switch (t % 5) {
        case 0:
                sqlite3_bind_text(sq_ins, col, bytes, (int)len, SQLITE_TRANSIENT);
                break;
        case 1:
                sqlite3_bind_blob(sq_ins, col, bytes, (int)len, SQLITE_TRANSIENT);
                break;
        case 2:
                sqlite3_bind_int64(sq_ins, col, (sqlite3_int64)len * 7919);
                break;
        case 3:
                sqlite3_bind_double(sq_ins, col, (double)len / 3.0);
                break;
        default:
                sqlite3_bind_null(sq_ins, col);
                break;
        }
}

static void fuzz_sqlite(struct fz *in)
{
        static uint8_t flags[MAX_PAIRS];
        sq_setup();
        take_pairs(in, true, flags);
        FZ_CHECK(sqlite3_exec(sq_db, "BEGIN; DELETE FROM shoal_members", NULL, NULL, NULL) ==
                 SQLITE_OK);
        for (size_t i = 0; i < npairs; i++) {
                struct pair *p = &pairs[i];
                sqlite3_bind_text(sq_ins, 1, p->other_group ? "other" : GROUP, -1, SQLITE_STATIC);
                bind_as(2, (flags[i] >> 1) & 7, p->id, p->id_len);
                bind_as(3, (flags[i] >> 4) & 7, p->rec, p->rec_len);
                int rc = sqlite3_step(sq_ins);
                FZ_CHECK(rc == SQLITE_DONE || rc == SQLITE_CONSTRAINT); /* NOT NULL columns */
                sqlite3_reset(sq_ins);
                sqlite3_clear_bindings(sq_ins);
        }
        FZ_CHECK(sqlite3_exec(sq_db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK);

        /* What the table holds now (later rows replace earlier ones with the same id; the SQL
         * types change the bytes), read back for the comparison with plain SQLite calls. */
        static char keep_id[MAX_PAIRS][256];
        static char *keep_rec[MAX_PAIRS];
        sqlite3_stmt *q;
        FZ_CHECK(sqlite3_prepare_v2(sq_db,
                                    "SELECT id, record FROM shoal_members WHERE grp = 'fuzz'", -1,
                                    &q, NULL) == SQLITE_OK);
        npairs = 0;
        while (sqlite3_step(q) == SQLITE_ROW && npairs < MAX_PAIRS) {
                const unsigned char *id = sqlite3_column_text(q, 0);
                size_t il = id ? (size_t)sqlite3_column_bytes(q, 0) : 0;
                const unsigned char *rec = sqlite3_column_text(q, 1);
                size_t rl = rec ? (size_t)sqlite3_column_bytes(q, 1) : 0;
                il = il < sizeof(keep_id[0]) ? il : sizeof(keep_id[0]) - 1;
                memcpy(keep_id[npairs], id ? (const char *)id : "", il);
                keep_rec[npairs] = malloc(rl + 1);
                FZ_CHECK(keep_rec[npairs]);
                memcpy(keep_rec[npairs], rec ? (const char *)rec : "", rl);
                pairs[npairs] = (struct pair){keep_id[npairs], keep_rec[npairs], il, rl, false};
                npairs++;
        }
        sqlite3_finalize(q);
        list_and_compare(sq_reg, false);
        for (size_t i = 0; i < npairs; i++)
                free(keep_rec[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        shoal_log_set_level(-1);
        struct fz in = {data, size};
        switch (fz_u8(&in) % 5) {
        case 0:
                fuzz_decode(&in);
                break;
        case 1:
                fuzz_encode(&in);
                break;
        case 2:
                fuzz_pairs(&in);
                break;
        case 3:
                fuzz_redis(&in);
                break;
        default:
                fuzz_sqlite(&in);
                break;
        }
        return 0;
}
