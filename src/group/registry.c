/* Registry front end: URL dispatch, the lock around every backend operation, and the record
 * codec that every backend stores.
 *
 * A record is one line of text, fields separated by '|':
 *
 *   m1|id|host|tcp_addr|iorpc_addr|n_rdma|rdma0|rdma1|rdma2|rdma3|weight|role|volume_url|
 *   block_size|cache_bytes|cache_capacity|beat|updated_ms|started_ms|metrics_addr|leaving|
 *   grace_ms
 *
 * Weights set by `shoal group --set-weight` are kept beside the records (one decimal per member
 * id), not in them: a member rewrites its record with every heartbeat. A listing gives each
 * record the weight set for it; the member adopts it into its own record as well, so that older
 * readers, which do not read the overrides, see it too.
 *
 * Numbers are decimal (updated_ms and started_ms may be negative). In strings, '%', '|' and the
 * ASCII control characters are written as %XX, so any C string round-trips. All four RDMA slots
 * are stored whatever n_rdma says, so a record reads back byte for byte. Fields appended after
 * started_ms by later versions are ignored, so a newer member stays visible to an older one
 * during a rolling upgrade; a different tag than "m1" is a format this code cannot read. */
#include "group/group_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"

#define RECORD_TAG        "m1"
#define RECORD_FIELDS     19 /* a record has at least these ... */
#define RECORD_FIELDS_MAX 22 /* ... and these are read (later fields: a later version's) */
#define LIST_INITIAL_N    16

bool shoal_member_id_valid(const char *id, size_t len)
{
        if (len == 0 || len > SHOAL_MEMBER_ID_LEN)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = id[i];
                bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                          (c >= 'A' && c <= 'Z') || c == '.' || c == '_' || c == '-';
                if (!ok)
                        return false;
        }
        return true;
}

const char *shoal_group_printable(const char *s, size_t len, char *out, size_t outlen)
{
        size_t o = 0;

        for (size_t i = 0; i < len && s[i] && o + 1 < outlen; i++) {
                unsigned char c = (unsigned char)s[i];
                out[o++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
        }
        if (outlen)
                out[o] = '\0';
        return out;
}

static bool group_name_valid(const char *g)
{
        size_t len = strlen(g);
        if (len == 0 || len > SHOAL_GROUP_NAME_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)g[i];
                if (c < 0x20 || c == 0x7f)
                        return false;
        }
        return true;
}

/* Opens the backend of URL for GROUP (already checked) and fills the common head. */
static int registry_open_raw(const char *url, const char *group, struct shoal_registry **out,
                             char *err, size_t errlen)
{
        struct shoal_registry *r = NULL;
        int ret;

        if (!strncmp(url, "sqlite3://", 10)) {
                ret = shoal_registry_sqlite_open(url + 10, group, &r, err, errlen);
        } else if (!strncmp(url, "redis://", 8)) {
                ret = shoal_registry_redis_open(url + 8, group, &r, err, errlen);
        } else if (!strncmp(url, "etcd://", 7)) {
                ret = shoal_registry_etcd_open(url + 7, group, &r, err, errlen);
        } else {
                snprintf(err, errlen,
                         "registry: unsupported meta URL \"%.200s\" (use sqlite3:///path/meta.db, "
                         "redis://[:password@]host:port[/db] or etcd://host:port[,host:port])",
                         url);
                return -EINVAL;
        }
        if (ret)
                return ret;
        pthread_mutex_init(&r->lock, NULL);
        shoal_strlcpy(r->group, group, sizeof(r->group));
        r->timeout_ns = shoal_config_env()->group_timeout_ns ? shoal_config_env()->group_timeout_ns
                                                             : SHOAL_GROUP_TIMEOUT_DEFAULT;
        r->client_ttl_ns = shoal_config_env()->group_client_ttl_ns
                                   ? shoal_config_env()->group_client_ttl_ns
                                   : SHOAL_GROUP_CLIENT_TTL_DEFAULT;
        r->url = strdup(url);
        if (!r->url) {
                shoal_registry_close(r);
                snprintf(err, errlen, "registry: out of memory");
                return -ENOMEM;
        }
        *out = r;
        return 0;
}

int shoal_registry_open(const char *url, const char *group, struct shoal_registry **out, char *err,
                        size_t errlen)
{
        *out = NULL;
        if (!url || !*url) {
                snprintf(err, errlen, "registry: empty meta URL");
                return -EINVAL;
        }
        if (!group || !group_name_valid(group)) {
                snprintf(err, errlen,
                         "registry: invalid group name (1..%d characters, no control characters)",
                         SHOAL_GROUP_NAME_MAX);
                return -EINVAL;
        }
        return registry_open_raw(url, group, out, err, errlen);
}

int shoal_registry_url_check(const char *url, char *err, size_t errlen)
{
        if (!strncmp(url, "sqlite3://", 10)) {
                if (url[10])
                        return 0;
                snprintf(err, errlen,
                         "sqlite3:// needs a path, as in "
                         "sqlite3:///var/lib/shoal/meta.db");
                return -EINVAL;
        }
        if (!strncmp(url, "redis://", 8)) {
                struct shoal_redis_url u;
                char why[256];
                int rc = shoal_registry_redis_url_parse(url + 8, &u, why, sizeof(why));
                explicit_bzero(&u, sizeof(u)); /* the password */
                if (rc) {
                        const char *w = !strncmp(why, "registry: ", 10) ? why + 10 : why;
                        snprintf(err, errlen, "%s", w);
                }
                return rc;
        }
        if (!strncmp(url, "etcd://", 7)) {
                struct shoal_etcd_url u;
                char why[256];
                int rc = shoal_etcd_url_parse(url + 7, &u, why, sizeof(why));
                if (rc) {
                        const char *w = !strncmp(why, "registry: ", 10) ? why + 10 : why;
                        snprintf(err, errlen, "%s", w);
                }
                return rc;
        }
        snprintf(err, errlen,
                 "unsupported scheme (use sqlite3:///path/meta.db, "
                 "redis://[:password@]host:port[/db] or etcd://host:port[,host:port])");
        return -EINVAL;
}

void shoal_registry_close(struct shoal_registry *r)
{
        if (!r)
                return;
        shoal_registry_close(r->clients);
        if (r->url) {
                explicit_bzero(r->url, strlen(r->url)); /* it may hold a password */
                free(r->url);
        }
        pthread_mutex_destroy(&r->lock);
        r->ops->close(r);
}

bool shoal_registry_has_leases(const struct shoal_registry *r)
{
        return r->ops->sync != NULL;
}

uint64_t shoal_registry_client_ttl_ns(const struct shoal_registry *r)
{
        return SHOAL_MAX(r->client_ttl_ns, r->timeout_ns);
}

uint64_t shoal_registry_client_renew_ns(const struct shoal_registry *r)
{
        return (r->ops->put_client ? shoal_registry_client_ttl_ns(r) : r->timeout_ns) / 2;
}

/* What readers of the view depend on in a record (not its heartbeat, age or cache use). */
static uint64_t view_fields_hash(const struct shoal_member *m)
{
        uint64_t nums[5] = {m->n_rdma, m->weight, (uint64_t)m->role, m->block_size,
                            (uint64_t)m->leaving << 63 | m->grace_ms};
        uint64_t h = shoal_group_hash64(nums, sizeof(nums), 0x7669657766696c64ULL);
        const char *strs[] = {m->id,         m->tcp_addr,     m->iorpc_addr,
                              m->volume_url, m->metrics_addr, m->host};
        size_t lens[] = {sizeof(m->id),         sizeof(m->tcp_addr),     sizeof(m->iorpc_addr),
                         sizeof(m->volume_url), sizeof(m->metrics_addr), sizeof(m->host)};
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(strs); i++)
                h = shoal_group_hash64(strs[i], strnlen(strs[i], lens[i]), h);
        for (unsigned i = 0; i < SHOAL_RDMA_ADDRS; i++)
                h = shoal_group_hash64(m->rdma_addr[i], strnlen(m->rdma_addr[i], SHOAL_ADDR_LEN),
                                       h);
        return h;
}

/* The lease of a put: what is left of R's timeout since M's updated_ms (the writer's own
 * clock, so no clock of another host is compared), and when the record is deleted. */
static void lease_of(struct shoal_registry *r, const struct shoal_member *m,
                     struct shoal_lease_put *p)
{
        int64_t now = (int64_t)(shoal_wall_ns() / SHOAL_NS_PER_MS);
        int64_t age = m->updated_ms < now ? now - m->updated_ms : 0;
        int64_t grace = (int64_t)SHOAL_MIN(m->grace_ms, SHOAL_GROUP_GRACE_MAX_MS);
        int64_t timeout = (int64_t)(r->timeout_ns / SHOAL_NS_PER_MS);
        p->ttl_ms = timeout - age;
        /* As readers without leases delete: silent for 10 timeouts, or its grace and one,
         * counted from this put at the least. */
        p->keep_ms = SHOAL_MAX(SHOAL_STALE_FACTOR * timeout, p->ttl_ms + grace);
        uint64_t h = view_fields_hash(m);
        p->changed = h != r->put_hash || strcmp(r->put_id, m->id) != 0;
        r->put_hash = h;
        shoal_strlcpy(r->put_id, m->id, sizeof(r->put_id));
}

int shoal_registry_put(struct shoal_registry *r, const struct shoal_member *m)
{
        char rec[SHOAL_RECORD_MAX];
        int len = shoal_member_encode(m, rec, sizeof(rec));
        if (len < 0)
                return len;
        pthread_mutex_lock(&r->lock);
        int ret;
        if (r->ops->put_lease) {
                struct shoal_lease_put p;
                lease_of(r, m, &p);
                ret = r->ops->put_lease(r, m->id, rec, &p);
                if (ret < 0)
                        r->put_id[0] = '\0'; /* say it again with the next put */
        } else {
                ret = r->ops->put(r, m->id, rec);
        }
        pthread_mutex_unlock(&r->lock);
        return ret;
}

/* The companion group of R's clients (on a backend without presence of its own): the group's
 * name and a control character, which no group name given by a user holds. Under R's lock. */
static int clients_reg(struct shoal_registry *r, struct shoal_registry **out)
{
        if (!r->clients) {
                char name[sizeof(r->group) + 4], err[512];
                snprintf(name, sizeof(name), "%s\x01c", r->group);
                int ret = registry_open_raw(r->url, name, &r->clients, err, sizeof(err));
                if (ret) {
                        log_ratelimited(SHOAL_LOG_WARN, "group", "%s", err);
                        return ret;
                }
                r->clients->lease_ns = r->lease_ns;
        }
        *out = r->clients;
        return 0;
}

int shoal_registry_put_client(struct shoal_registry *r, const struct shoal_member *m)
{
        char rec[SHOAL_RECORD_MAX];
        int len = shoal_member_encode(m, rec, sizeof(rec));
        if (len < 0)
                return len;
        struct shoal_registry *c;
        pthread_mutex_lock(&r->lock);
        int ret;
        if (r->ops->put_client) {
                /* The record once (and when it changes), then only the lease. */
                uint64_t h = view_fields_hash(m);
                bool changed = h != r->put_hash || strcmp(r->put_id, m->id) != 0;
                ret = r->ops->put_client(r, m->id, changed ? rec : NULL);
                r->put_hash = ret < 0 ? 0 : h;
                shoal_strlcpy(r->put_id, ret < 0 ? "" : m->id, sizeof(r->put_id));
        } else if (!(ret = clients_reg(r, &c))) {
                pthread_mutex_lock(&c->lock);
                ret = c->ops->put(c, m->id, rec);
                pthread_mutex_unlock(&c->lock);
        }
        pthread_mutex_unlock(&r->lock);
        return ret;
}

int shoal_registry_delete_client(struct shoal_registry *r, const char *id)
{
        if (!id || !shoal_member_id_valid(id, strlen(id)))
                return -EINVAL;
        struct shoal_registry *c;
        pthread_mutex_lock(&r->lock);
        int ret;
        if (r->ops->del_client)
                ret = r->ops->del_client(r, id);
        else if (!(ret = clients_reg(r, &c))) {
                pthread_mutex_lock(&c->lock);
                ret = c->ops->del(c, id);
                pthread_mutex_unlock(&c->lock);
        }
        r->put_id[0] = '\0';
        pthread_mutex_unlock(&r->lock);
        return ret;
}

int shoal_registry_delete(struct shoal_registry *r, const char *id)
{
        if (!id || !shoal_member_id_valid(id, strlen(id)))
                return -EINVAL;
        pthread_mutex_lock(&r->lock);
        int ret = r->ops->del(r, id);
        pthread_mutex_unlock(&r->lock);
        return ret;
}

struct list_acc {
        struct shoal_member *v;
        size_t n, cap;
        const char *group;
};

static int list_visit(void *arg, const char *id, size_t id_len, const char *rec, size_t rec_len)
{
        struct list_acc *acc = arg;
        struct shoal_member m;
        char key[SHOAL_MEMBER_ID_LEN + 8];

        /* Another writer (or a newer or broken version) may have stored anything here: skip what
         * does not decode, and records filed under another id than they carry. */
        if (shoal_member_decode(rec, rec_len, &m) < 0 || strlen(m.id) != id_len ||
            memcmp(m.id, id, id_len) != 0) {
                log_ratelimited(SHOAL_LOG_WARN, "group",
                                "registry: skipping a malformed record in group \"%s\" (key %s)",
                                acc->group, shoal_group_printable(id, id_len, key, sizeof(key)));
                return 0;
        }
        if (acc->n == acc->cap) {
                size_t cap = acc->cap ? acc->cap * 2 : LIST_INITIAL_N;
                struct shoal_member *v = realloc(acc->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                acc->v = v;
                acc->cap = cap;
        }
        acc->v[acc->n++] = m;
        return 0;
}

/* Applies one weight override to the listed record of its id (anything malformed is ignored:
 * anyone may write there). */
static int weight_visit(void *arg, const char *id, size_t id_len, const char *val, size_t val_len)
{
        struct list_acc *acc = arg;
        char num[16];
        uint64_t w;

        if (val_len == 0 || val_len >= sizeof(num))
                return 0;
        memcpy(num, val, val_len);
        num[val_len] = '\0';
        if (shoal_parse_u64(num, SHOAL_WEIGHT_MAX, &w))
                return 0;
        for (size_t i = 0; i < acc->n; i++) {
                struct shoal_member *m = &acc->v[i];
                if (m->role == SHOAL_ROLE_PROVIDER && strlen(m->id) == id_len &&
                    !memcmp(m->id, id, id_len)) {
                        m->weight = (uint32_t)w;
                        m->weight_set = true;
                }
        }
        return 0;
}

int shoal_registry_set_weight(struct shoal_registry *r, const char *id, int64_t weight)
{
        char num[24];
        if (!id || !shoal_member_id_valid(id, strlen(id)) || weight > SHOAL_WEIGHT_MAX)
                return -EINVAL;
        if (!r->ops->set_weight)
                return -EOPNOTSUPP;
        snprintf(num, sizeof(num), "%" PRId64, weight);
        pthread_mutex_lock(&r->lock);
        int ret = r->ops->set_weight(r, id, weight < 0 ? NULL : num);
        pthread_mutex_unlock(&r->lock);
        return ret;
}

int shoal_registry_list_clients(struct shoal_registry *r, struct shoal_member **out, size_t *n)
{
        struct list_acc acc = {.group = r->group};
        struct shoal_registry *c;
        int ret;

        pthread_mutex_lock(&r->lock);
        if (r->ops->list_clients) {
                ret = r->ops->list_clients(r, list_visit, &acc);
                for (size_t i = 0; i < acc.n; i++)
                        acc.v[i].alive = true; /* only live ones are listed */
        } else if (!(ret = clients_reg(r, &c))) {
                pthread_mutex_lock(&c->lock);
                ret = c->ops->list(c, list_visit, &acc);
                pthread_mutex_unlock(&c->lock);
        }
        pthread_mutex_unlock(&r->lock);
        if (ret < 0) {
                free(acc.v);
                return ret;
        }
        *out = acc.v;
        *n = acc.n;
        return 0;
}

int shoal_registry_list_since(struct shoal_registry *r, uint64_t *gen, struct shoal_member **out,
                              size_t *n)
{
        int ret;
        if (!r->ops->sync) {
                ret = shoal_registry_list(r, out, n);
        } else {
                pthread_mutex_lock(&r->lock);
                ret = r->ops->sync(r, gen, out, n);
                pthread_mutex_unlock(&r->lock);
        }
        *gen = r->generation;
        return ret;
}

int shoal_registry_list(struct shoal_registry *r, struct shoal_member **out, size_t *n)
{
        struct list_acc acc = {.group = r->group};
        int ret;

        pthread_mutex_lock(&r->lock);
        if (r->ops->sync) {
                ret = r->ops->sync(r, NULL, out, n);
                pthread_mutex_unlock(&r->lock);
                return ret;
        }
        ret = r->ops->list(r, list_visit, &acc);
        if (!ret && acc.n && r->ops->list_weights)
                ret = r->ops->list_weights(r, weight_visit, &acc);
        r->generation++;
        pthread_mutex_unlock(&r->lock);
        if (ret < 0) {
                free(acc.v);
                return ret;
        }
        *out = acc.v;
        *n = acc.n;
        return 0;
}

/* ---- record codec ---- */

struct outbuf {
        char *p;
        size_t len, cap;
        bool overflow;
};

static void out_bytes(struct outbuf *o, const char *s, size_t n)
{
        if (o->overflow || o->cap - o->len <= n) {
                o->overflow = true;
                return;
        }
        memcpy(o->p + o->len, s, n);
        o->len += n;
        o->p[o->len] = '\0';
}

static bool needs_escape(unsigned char c)
{
        return c == '%' || c == '|' || c < 0x20 || c == 0x7f;
}

/* Appends '|' and the escaped string S held in a SIZE-byte field; false when S is not
 * terminated inside its field (it could not be read back as it is). */
static bool out_str(struct outbuf *o, const char *s, size_t size)
{
        static const char hexd[] = "0123456789ABCDEF";
        const char *end = memchr(s, '\0', size);

        if (!end)
                return false;
        out_bytes(o, "|", 1);
        for (const char *p = s; p < end; p++) {
                unsigned char c = (unsigned char)*p;
                if (needs_escape(c)) {
                        char e[3] = {'%', hexd[c >> 4], hexd[c & 15]};
                        out_bytes(o, e, 3);
                } else {
                        out_bytes(o, p, 1);
                }
        }
        return true;
}

static void out_u64(struct outbuf *o, uint64_t v)
{
        char b[24];
        int n = snprintf(b, sizeof(b), "|%" PRIu64, v);
        out_bytes(o, b, (size_t)n);
}

static void out_i64(struct outbuf *o, int64_t v)
{
        char b[24];
        int n = snprintf(b, sizeof(b), "|%" PRId64, v);
        out_bytes(o, b, (size_t)n);
}

int shoal_member_encode(const struct shoal_member *m, char *out, size_t outlen)
{
        struct outbuf o = {.p = out, .cap = outlen};
        const char *idend = memchr(m->id, '\0', sizeof(m->id));

        if (outlen == 0 || !idend || !shoal_member_id_valid(m->id, (size_t)(idend - m->id)))
                return -EINVAL;
        if (m->n_rdma > SHOAL_RDMA_ADDRS ||
            (m->role != SHOAL_ROLE_PROVIDER && m->role != SHOAL_ROLE_CONSUMER))
                return -EINVAL;
        out[0] = '\0';
        out_bytes(&o, RECORD_TAG, strlen(RECORD_TAG));
        bool ok = out_str(&o, m->id, sizeof(m->id)) && out_str(&o, m->host, sizeof(m->host)) &&
                  out_str(&o, m->tcp_addr, sizeof(m->tcp_addr)) &&
                  out_str(&o, m->iorpc_addr, sizeof(m->iorpc_addr));
        if (!ok)
                return -EINVAL;
        out_u64(&o, m->n_rdma);
        for (unsigned i = 0; i < SHOAL_RDMA_ADDRS; i++)
                if (!out_str(&o, m->rdma_addr[i], sizeof(m->rdma_addr[i])))
                        return -EINVAL;
        out_u64(&o, m->weight);
        out_u64(&o, (uint64_t)m->role);
        if (!out_str(&o, m->volume_url, sizeof(m->volume_url)))
                return -EINVAL;
        out_u64(&o, m->block_size);
        out_u64(&o, m->cache_bytes);
        out_u64(&o, m->cache_capacity);
        out_u64(&o, m->beat);
        out_i64(&o, m->updated_ms);
        out_i64(&o, m->started_ms);
        if (!out_str(&o, m->metrics_addr, sizeof(m->metrics_addr)))
                return -EINVAL;
        out_u64(&o, m->leaving ? 1 : 0);
        out_u64(&o, m->grace_ms);
        if (o.overflow)
                return -EINVAL;
        return (int)o.len;
}

/* Unescapes field S[0..LEN) into OUT (SIZE bytes, terminated). Refuses a bad escape, an
 * escaped NUL, and a string that does not fit. */
static int dec_str(const char *s, size_t len, char *out, size_t size)
{
        size_t o = 0;

        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c == '%') {
                        if (len - i < 3)
                                return -EINVAL;
                        int hi = shoal_hexval((unsigned char)s[i + 1]),
                            lo = shoal_hexval((unsigned char)s[i + 2]);
                        if (hi < 0 || lo < 0)
                                return -EINVAL;
                        c = (unsigned char)(hi << 4 | lo);
                        if (c == 0)
                                return -EINVAL;
                        i += 2;
                } else if (needs_escape(c)) {
                        return -EINVAL; /* a raw control character: not written by us */
                }
                if (o + 1 >= size)
                        return -EINVAL;
                out[o++] = (char)c;
        }
        out[o] = '\0';
        return 0;
}

static int dec_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
        uint64_t v = 0;

        if (len == 0 || len > 20)
                return -EINVAL;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                uint64_t d = (uint64_t)(s[i] - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -EINVAL;
                v = v * 10 + d;
        }
        if (v > max)
                return -EINVAL;
        *out = v;
        return 0;
}

static int dec_i64(const char *s, size_t len, int64_t *out)
{
        uint64_t v;

        if (len > 0 && s[0] == '-') {
                if (dec_u64(s + 1, len - 1, (uint64_t)INT64_MAX + 1, &v) < 0)
                        return -EINVAL;
                *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
                return 0;
        }
        if (dec_u64(s, len, INT64_MAX, &v) < 0)
                return -EINVAL;
        *out = (int64_t)v;
        return 0;
}

int shoal_member_decode(const char *rec, size_t len, struct shoal_member *m)
{
        const char *f[RECORD_FIELDS_MAX];
        size_t fl[RECORD_FIELDS_MAX];
        size_t nf = 0, start = 0;
        uint64_t v;

        if (len == 0 || len > SHOAL_RECORD_MAX)
                return -EINVAL;
        for (size_t i = 0; i <= len && nf < RECORD_FIELDS_MAX; i++) {
                if (i == len || rec[i] == '|') {
                        f[nf] = rec + start;
                        fl[nf] = i - start;
                        nf++;
                        start = i + 1;
                } else if (rec[i] == '\0') {
                        return -EINVAL;
                }
        }
        if (nf < RECORD_FIELDS)
                return -EINVAL;
        if (fl[0] != strlen(RECORD_TAG) || memcmp(f[0], RECORD_TAG, fl[0]) != 0)
                return -EINVAL;

        memset(m, 0, sizeof(*m));
        if (dec_str(f[1], fl[1], m->id, sizeof(m->id)) < 0 ||
            !shoal_member_id_valid(m->id, strlen(m->id)))
                return -EINVAL;
        if (dec_str(f[2], fl[2], m->host, sizeof(m->host)) < 0 ||
            dec_str(f[3], fl[3], m->tcp_addr, sizeof(m->tcp_addr)) < 0 ||
            dec_str(f[4], fl[4], m->iorpc_addr, sizeof(m->iorpc_addr)) < 0)
                return -EINVAL;
        if (dec_u64(f[5], fl[5], SHOAL_RDMA_ADDRS, &v) < 0)
                return -EINVAL;
        m->n_rdma = (unsigned)v;
        for (unsigned i = 0; i < SHOAL_RDMA_ADDRS; i++)
                if (dec_str(f[6 + i], fl[6 + i], m->rdma_addr[i], sizeof(m->rdma_addr[i])) < 0)
                        return -EINVAL;
        if (dec_u64(f[10], fl[10], UINT32_MAX, &v) < 0)
                return -EINVAL;
        m->weight = (uint32_t)v;
        if (dec_u64(f[11], fl[11], SHOAL_ROLE_CONSUMER, &v) < 0)
                return -EINVAL;
        m->role = (enum shoal_member_role)v;
        if (dec_str(f[12], fl[12], m->volume_url, sizeof(m->volume_url)) < 0)
                return -EINVAL;
        if (dec_u64(f[13], fl[13], UINT32_MAX, &v) < 0)
                return -EINVAL;
        m->block_size = (uint32_t)v;
        if (dec_u64(f[14], fl[14], UINT64_MAX, &m->cache_bytes) < 0 ||
            dec_u64(f[15], fl[15], UINT64_MAX, &m->cache_capacity) < 0 ||
            dec_u64(f[16], fl[16], UINT64_MAX, &m->beat) < 0 ||
            dec_i64(f[17], fl[17], &m->updated_ms) < 0 ||
            dec_i64(f[18], fl[18], &m->started_ms) < 0)
                return -EINVAL;
        if (nf > 19 && dec_str(f[19], fl[19], m->metrics_addr, sizeof(m->metrics_addr)) < 0)
                return -EINVAL;
        if (nf > 20) {
                if (dec_u64(f[20], fl[20], 1, &v) < 0)
                        return -EINVAL;
                m->leaving = v == 1;
        }
        if (nf > 21 && dec_u64(f[21], fl[21], UINT64_MAX, &m->grace_ms) < 0)
                return -EINVAL;
        if (m->grace_ms > SHOAL_GROUP_GRACE_MAX_MS)
                m->grace_ms = SHOAL_GROUP_GRACE_MAX_MS;
        return 0;
}
