/* Redis registry backend: redis://[[user]:password@]host[:port][/db], for groups spanning hosts.
 *
 * One hash per group, "shoal:<group>:members", field = member id, value = the text of
 * shoal_member_encode; weights set by `shoal group --set-weight` in "shoal:<group>:weights",
 * field = member id, value = the weight in decimal. Every value read back goes through the
 * validating decoder: the server is shared and anyone may have written there.
 *
 * hiredis is used synchronously with connect and command timeouts, so a dead server costs the
 * agent thread at most a few seconds per call, never a hang. A connection that breaks is dropped
 * and opened again by the next call; a call on a connection that had been idle retries once on a
 * fresh one (every command here is idempotent), so a server restart or an idle-timeout close
 * costs no heartbeat. */
#include "group/group_internal.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>

#include "common/log.h"
#include "common/util.h"

#define REDIS_TIMEOUT_MS   2000
#define REDIS_DEFAULT_PORT 6379
#define REDIS_DB_MAX       100000

struct redis_registry {
        struct shoal_registry base;
        redisContext *c;
        struct shoal_redis_url u;
        char key[SHOAL_GROUP_NAME_MAX + 32];
        char wkey[SHOAL_GROUP_NAME_MAX + 32];
        char where[300]; /* host:port/db, for messages (never the password) */
};

static int pct_decode(const char *s, size_t len, char *out, size_t size)
{
        size_t o = 0;

        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (c == '%') {
                        /* Exactly two hex digits (sscanf's %2x took "%4t", a sign or a space). */
                        int hi = len - i < 3 ? -1 : shoal_hexval((unsigned char)s[i + 1]);
                        int lo = hi < 0 ? -1 : shoal_hexval((unsigned char)s[i + 2]);
                        if (lo < 0 || (hi | lo) == 0)
                                return -EINVAL;
                        c = (char)(hi << 4 | lo);
                        i += 2;
                }
                if (o + 1 >= size)
                        return -EINVAL;
                out[o++] = c;
        }
        out[o] = '\0';
        return 0;
}

int shoal_registry_redis_url_parse(const char *rest, struct shoal_redis_url *u, char *err,
                                   size_t errlen)
{
        const char *at = strrchr(rest, '@');
        const char *hp = at ? at + 1 : rest;
        const char *slash = strchr(hp, '/');
        size_t hplen = slash ? (size_t)(slash - hp) : strlen(hp);
        const char *portp = NULL;
        uint64_t v;

        memset(u, 0, sizeof(*u));
        if (strchr(rest, '?')) {
                snprintf(err, errlen, "registry: redis URL options (?...) are not supported");
                return -EINVAL;
        }
        if (at) {
                const char *colon = memchr(rest, ':', (size_t)(at - rest));
                if (!colon) {
                        snprintf(err, errlen,
                                 "registry: redis URL: write the password as "
                                 "redis://:PASSWORD@host:port");
                        return -EINVAL;
                }
                if (pct_decode(rest, (size_t)(colon - rest), u->user, sizeof(u->user)) < 0 ||
                    pct_decode(colon + 1, (size_t)(at - colon - 1), u->pass, sizeof(u->pass)) < 0) {
                        snprintf(err, errlen, "registry: redis URL: bad user or password");
                        return -EINVAL;
                }
                u->has_pass = true;
        }
        if (hplen > 0 && hp[0] == '[') {
                const char *close = memchr(hp, ']', hplen);
                if (!close || close == hp + 1 || (size_t)(close - hp - 1) >= sizeof(u->host))
                        goto bad_host;
                memcpy(u->host, hp + 1, (size_t)(close - hp - 1));
                u->host[close - hp - 1] = '\0';
                if (close + 1 < hp + hplen) {
                        if (close[1] != ':')
                                goto bad_host;
                        portp = close + 2;
                }
        } else {
                const char *colon = memchr(hp, ':', hplen);
                size_t hl = colon ? (size_t)(colon - hp) : hplen;
                if (hl == 0 || hl >= sizeof(u->host))
                        goto bad_host;
                memcpy(u->host, hp, hl);
                u->host[hl] = '\0';
                if (colon)
                        portp = colon + 1;
        }
        u->port = REDIS_DEFAULT_PORT;
        if (portp) {
                char port[8];
                size_t pl = (size_t)(hp + hplen - portp);
                if (pl == 0 || pl >= sizeof(port))
                        goto bad_port;
                memcpy(port, portp, pl);
                port[pl] = '\0';
                if (shoal_parse_u64(port, 65535, &v) < 0 || v == 0)
                        goto bad_port;
                u->port = (int)v;
        }
        u->db = 0;
        if (slash && slash[1]) {
                if (shoal_parse_u64(slash + 1, REDIS_DB_MAX, &v) < 0) {
                        snprintf(err, errlen, "registry: redis URL: bad database number \"%.32s\"",
                                 slash + 1);
                        return -EINVAL;
                }
                u->db = (unsigned)v;
        }
        return 0;

bad_host:
        snprintf(err, errlen, "registry: redis URL: bad host in \"%.*s\"",
                 (int)SHOAL_MIN(hplen, 200), hp);
        return -EINVAL;
bad_port:
        snprintf(err, errlen, "registry: redis URL: bad port in \"%.*s\"",
                 (int)SHOAL_MIN(hplen, 200), hp);
        return -EINVAL;
}

/* hiredis writes with write(2): a server that closed the connection would raise SIGPIPE and kill
 * a process that did not ignore it. Block it around our calls and swallow one we caused. */
struct sigpipe_guard {
        sigset_t old;
        bool was_pending;
};

static void sigpipe_block(struct sigpipe_guard *g)
{
        sigset_t set, pending;

        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        pthread_sigmask(SIG_BLOCK, &set, &g->old);
        sigpending(&pending);
        g->was_pending = sigismember(&pending, SIGPIPE) == 1;
}

static void sigpipe_restore(struct sigpipe_guard *g)
{
        sigset_t set, pending;

        sigemptyset(&set);
        sigaddset(&set, SIGPIPE);
        sigpending(&pending);
        if (!g->was_pending && sigismember(&pending, SIGPIPE) == 1) {
                struct timespec zero = {0, 0};
                while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR)
                        ;
        }
        pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

static void drop_conn(struct redis_registry *r)
{
        if (r->c) {
                redisFree(r->c);
                r->c = NULL;
        }
}

/* Runs a command on a fresh connection during its set-up; fills ERR on failure. */
static int setup_cmd(struct redis_registry *r, char *err, size_t errlen, const char *what,
                     const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        redisReply *rep = redisvCommand(r->c, fmt, ap);
        va_end(ap);
        if (!rep) {
                snprintf(err, errlen, "%s: %s: %s", r->where, what,
                         r->c->errstr[0] ? r->c->errstr : "connection lost");
                return -EIO;
        }
        int ret = 0;
        if (rep->type == REDIS_REPLY_ERROR) {
                snprintf(err, errlen, "%s: %s: %.*s", r->where, what, (int)SHOAL_MIN(rep->len, 200),
                         rep->str ? rep->str : "");
                ret = strstr(rep->str ? rep->str : "", "WRONGPASS") ||
                                      strstr(rep->str ? rep->str : "", "invalid password")
                              ? -EACCES
                              : -EIO;
        }
        freeReplyObject(rep);
        return ret;
}

static int connect_redis(struct redis_registry *r, char *err, size_t errlen)
{
        struct timeval tv = {.tv_sec = REDIS_TIMEOUT_MS / 1000,
                             .tv_usec = (REDIS_TIMEOUT_MS % 1000) * 1000};
        int ret;

        drop_conn(r);
        r->c = redisConnectWithTimeout(r->u.host, r->u.port, tv);
        if (!r->c) {
                snprintf(err, errlen, "%s: cannot allocate a connection", r->where);
                return -ENOMEM;
        }
        if (r->c->err) {
                snprintf(err, errlen, "%s: %s", r->where, r->c->errstr);
                ret = strstr(r->c->errstr, "timed out") ? -ETIMEDOUT : -ECONNREFUSED;
                goto out_drop;
        }
        if (redisSetTimeout(r->c, tv) != REDIS_OK) {
                snprintf(err, errlen, "%s: cannot set the command timeout", r->where);
                ret = -EIO;
                goto out_drop;
        }
        /* A peer host that vanishes without a FIN is noticed by keepalive, not only by the next
         * command's timeout. */
        redisEnableKeepAlive(r->c);
        if (r->u.has_pass) {
                if (r->u.user[0])
                        ret = setup_cmd(r, err, errlen, "AUTH", "AUTH %s %s", r->u.user, r->u.pass);
                else
                        ret = setup_cmd(r, err, errlen, "AUTH", "AUTH %s", r->u.pass);
                if (ret < 0)
                        goto out_drop;
        }
        if (r->u.db) {
                ret = setup_cmd(r, err, errlen, "SELECT", "SELECT %u", r->u.db);
                if (ret < 0)
                        goto out_drop;
        }
        return 0;

out_drop:
        drop_conn(r);
        return ret;
}

/* Runs one command, (re)connecting as needed. Returns the reply (never an error reply: those
 * are logged and turned into NULL with *RET set) or NULL with *RET < 0. */
static redisReply *command(struct redis_registry *r, int *ret, const char *fmt, ...)
{
        char err[512];
        redisReply *rep = NULL;

        for (int attempt = 0; attempt < 2; attempt++) {
                bool fresh = false;
                if (!r->c) {
                        *ret = connect_redis(r, err, sizeof(err));
                        if (*ret < 0) {
                                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s", err);
                                return NULL;
                        }
                        fresh = true;
                }
                va_list ap;
                va_start(ap, fmt);
                rep = redisvCommand(r->c, fmt, ap);
                int saved_errno = errno;
                va_end(ap);
                if (rep)
                        break;
                /* The context is unusable after an I/O error or timeout. A timeout means a
                 * server that is up but stuck: trying again would only double the wait. */
                bool timed_out = r->c->err == REDIS_ERR_IO &&
                                 (saved_errno == EAGAIN || saved_errno == ETIMEDOUT);
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: %s", r->where,
                                timed_out         ? "timed out"
                                : r->c->errstr[0] ? r->c->errstr
                                                  : "connection lost");
                *ret = timed_out ? -ETIMEDOUT : -EIO;
                drop_conn(r);
                if (fresh || timed_out)
                        return NULL;
        }
        if (!rep)
                return NULL;
        if (rep->type == REDIS_REPLY_ERROR) {
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: %.*s", r->where,
                                (int)SHOAL_MIN(rep->len, 200), rep->str ? rep->str : "");
                freeReplyObject(rep);
                *ret = -EIO;
                return NULL;
        }
        *ret = 0;
        return rep;
}

static int redis_put(struct shoal_registry *base, const char *id, const char *record)
{
        struct redis_registry *r = (struct redis_registry *)base;
        struct sigpipe_guard g;
        int ret;

        sigpipe_block(&g);
        redisReply *rep = command(r, &ret, "HSET %s %s %s", r->key, id, record);
        if (rep)
                freeReplyObject(rep);
        sigpipe_restore(&g);
        return ret;
}

static int redis_del(struct shoal_registry *base, const char *id)
{
        struct redis_registry *r = (struct redis_registry *)base;
        struct sigpipe_guard g;
        int ret;

        sigpipe_block(&g);
        redisReply *rep = command(r, &ret, "HDEL %s %s", r->key, id);
        if (rep)
                freeReplyObject(rep);
        sigpipe_restore(&g);
        return ret;
}

int shoal_registry_redis_visit(const struct redisReply *rep, shoal_registry_visit_fn visit,
                               void *arg)
{
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2)
                return -EPROTO;
        for (size_t i = 0; i + 1 < rep->elements; i += 2) {
                const redisReply *k = rep->element[i], *v = rep->element[i + 1];
                if (!k || !v || k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
                    !k->str || !v->str)
                        continue;
                int ret = visit(arg, k->str, (size_t)k->len, v->str, (size_t)v->len);
                if (ret)
                        return ret;
        }
        return 0;
}

static int redis_set_weight(struct shoal_registry *base, const char *id, const char *weight)
{
        struct redis_registry *r = (struct redis_registry *)base;
        struct sigpipe_guard g;
        int ret;

        sigpipe_block(&g);
        redisReply *rep = weight ? command(r, &ret, "HSET %s %s %s", r->wkey, id, weight)
                                 : command(r, &ret, "HDEL %s %s", r->wkey, id);
        if (rep)
                freeReplyObject(rep);
        sigpipe_restore(&g);
        return ret;
}

static int list_hash(struct redis_registry *r, const char *key, shoal_registry_visit_fn visit,
                     void *arg);

static int redis_list(struct shoal_registry *base, shoal_registry_visit_fn visit, void *arg)
{
        struct redis_registry *r = (struct redis_registry *)base;
        return list_hash(r, r->key, visit, arg);
}

static int redis_list_weights(struct shoal_registry *base, shoal_registry_visit_fn visit, void *arg)
{
        struct redis_registry *r = (struct redis_registry *)base;
        return list_hash(r, r->wkey, visit, arg);
}

static int list_hash(struct redis_registry *r, const char *key, shoal_registry_visit_fn visit,
                     void *arg)
{
        struct sigpipe_guard g;
        int ret;

        sigpipe_block(&g);
        redisReply *rep = command(r, &ret, "HGETALL %s", key);
        if (!rep)
                goto out_restore;
        ret = shoal_registry_redis_visit(rep, visit, arg);
        if (ret == -EPROTO) {
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: %s is not a hash", r->where,
                                key);
                ret = -EIO;
        }
        freeReplyObject(rep);
out_restore:
        sigpipe_restore(&g);
        return ret;
}

static void redis_close(struct shoal_registry *base)
{
        struct redis_registry *r = (struct redis_registry *)base;

        drop_conn(r);
        explicit_bzero(r->u.pass, sizeof(r->u.pass));
        free(r);
}

static const struct shoal_registry_ops redis_ops = {
        .scheme = "redis",
        .put = redis_put,
        .del = redis_del,
        .list = redis_list,
        .set_weight = redis_set_weight,
        .list_weights = redis_list_weights,
        .close = redis_close,
};

int shoal_registry_redis_open(const char *rest, const char *group, struct shoal_registry **out,
                              char *err, size_t errlen)
{
        struct redis_registry *r = calloc(1, sizeof(*r));
        char cerr[512];

        *out = NULL;
        if (!r) {
                snprintf(err, errlen, "registry: out of memory");
                return -ENOMEM;
        }
        r->base.ops = &redis_ops;
        int ret = shoal_registry_redis_url_parse(rest, &r->u, err, errlen);
        if (ret < 0)
                goto out_free;
        snprintf(r->where, sizeof(r->where), "redis://%s:%d/%u", r->u.host, r->u.port, r->u.db);
        snprintf(r->key, sizeof(r->key), "shoal:%s:members", group);
        snprintf(r->wkey, sizeof(r->wkey), "shoal:%s:weights", group);
        /* Connect now, so that a wrong address or password is reported at start, not as a
         * stream of heartbeat warnings. */
        struct sigpipe_guard g;
        sigpipe_block(&g);
        ret = connect_redis(r, cerr, sizeof(cerr));
        sigpipe_restore(&g);
        if (ret < 0) {
                snprintf(err, errlen, "registry: %s", cerr);
                if (ret == -EINVAL)
                        ret = -EIO; /* the server's answer, not a bad URL */
                goto out_free;
        }
        *out = &r->base;
        return 0;

out_free:
        explicit_bzero(r->u.pass, sizeof(r->u.pass));
        free(r);
        return ret;
}
