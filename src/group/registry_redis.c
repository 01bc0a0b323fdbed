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
#include <inttypes.h>
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
        /* leases and the change log (see below) */
        char keys[10][SHOAL_GROUP_NAME_MAX + 40];
        char sha[7][41];
        bool scripts_loaded;
        char epoch[64];
        int64_t version;
        bool synced;
        struct mirror_ent *ents;
        size_t n, cap;
        long long records;  /* the members hash's length when it was last read */
        int cmd_timeout_ms; /* 0: REDIS_TIMEOUT_MS */
};

struct mirror_ent {
        struct shoal_member m; /* weight override applied */
        bool leased;           /* its lease ran when it was read (a poll says when it runs out) */
        int64_t lease_ms;      /* when it runs out (the server's clock), as of that read */
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

/* The host and port of HP[0..HPLEN) ("host", "host:port", "[v6]", "[v6]:port") into U. */
static int parse_hostport(const char *hp, size_t hplen, struct shoal_redis_url *u, char *err,
                          size_t errlen)
{
        const char *portp = NULL;
        uint64_t v;

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

int shoal_registry_redis_url_parse(const char *rest, struct shoal_redis_url *u, char *err,
                                   size_t errlen)
{
        const char *at = strrchr(rest, '@');
        const char *hp = at ? at + 1 : rest;
        const char *slash = strchr(hp, '/');
        size_t hplen = slash ? (size_t)(slash - hp) : strlen(hp);
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
        int ret = parse_hostport(hp, hplen, u, err, errlen);
        if (ret)
                return ret;
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
        r->scripts_loaded = false; /* the next server may not have them */
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
        struct timeval ctv = {.tv_sec = r->cmd_timeout_ms / 1000,
                              .tv_usec = (r->cmd_timeout_ms % 1000) * 1000};
        if (redisSetTimeout(r->c, r->cmd_timeout_ms ? ctv : tv) != REDIS_OK) {
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

/* Sends one command (FMT with AP, or ARGC ARGV/LENS when FMT is NULL). */
static redisReply *send_cmd(struct redis_registry *r, const char *fmt, va_list *ap, int argc,
                            const char **argv, const size_t *lens)
{
        if (!fmt)
                return redisCommandArgv(r->c, argc, argv, lens);
        va_list cp;
        va_copy(cp, *ap);
        redisReply *rep = redisvCommand(r->c, fmt, cp);
        va_end(cp);
        return rep;
}

/* Runs one command, (re)connecting as needed. Returns the reply (an error reply only when
 * KEEP_ERRORS, else those are logged and turned into NULL with *RET set) or NULL with *RET <
 * 0. */
static redisReply *command_core(struct redis_registry *r, int *ret, bool keep_errors,
                                const char *fmt, va_list *ap, int argc, const char **argv,
                                const size_t *lens)
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
                rep = send_cmd(r, fmt, ap, argc, argv, lens);
                int saved_errno = errno;
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
        if (rep->type == REDIS_REPLY_ERROR && !keep_errors) {
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: %.*s", r->where,
                                (int)SHOAL_MIN(rep->len, 200), rep->str ? rep->str : "");
                freeReplyObject(rep);
                *ret = -EIO;
                return NULL;
        }
        *ret = 0;
        return rep;
}

static redisReply *command(struct redis_registry *r, int *ret, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        redisReply *rep = command_core(r, ret, false, fmt, &ap, 0, NULL, NULL);
        va_end(ap);
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

/* ---- leases and the versioned change log ----
 *
 * Beside the records: "shoal:<g>:leases" (sorted set: member id -> the server's clock in ms at
 * which its lease runs out), "shoal:<g>:ends" (id -> when its place ends: the lease and its
 * grace period), "shoal:<g>:version" (a counter), "shoal:<g>:log" (a list of the ids each version
 * changed, the last LOG_CAP), "shoal:<g>:epoch" (a token of the counter's life: a counter that was
 * lost and started again cannot be mistaken for the old one) and the clients' presence,
 * "shoal:<g>:clients" (id -> record) with "shoal:<g>:client-leases". Every write is one Lua
 * script, so the version, the log and the data change together. Whoever polls expires the leases
 * and places that ran out, on the server's clock, inside its poll (atomic: nobody races anybody);
 * a heartbeat renews a lease and changes no version; a join, a leave, an expiry or a weight does.
 * A reader polls with the version it holds and gets back nothing (same version), the records of
 * the ids changed since (in the log), or everything (at the start, after a gap or a new epoch). */

#define LOG_CAP     "2048"
#define POLL_HEAD   5 /* the elements of a poll's answer before the records */
#define SCAN_MS     "100"
#define SCRIPT_KEYS 10

/* KEYS: version log epoch members leases ends weights clients client-leases scanned; ARGV[1]:
 * LOG_CAP. */
#define LUA_PRELUDE                                                                                \
        "if redis.replicate_commands then redis.replicate_commands() end\n"                        \
        "local t = redis.call('TIME')\n"                                                           \
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"                  \
        "local function version_ok(s) return s == false or string.match(s, '^%d+$') ~= nil end\n"  \
        "local function bump(id)\n"                                                                \
        "  if not version_ok(redis.call('GET', KEYS[1])) then redis.call('DEL', KEYS[1]) end\n"    \
        "  local v = redis.call('INCR', KEYS[1])\n"                                                \
        "  if v == 1 or redis.call('EXISTS', KEYS[3]) == 0 then\n"                                 \
        "    redis.call('DEL', KEYS[2])\n"                                                         \
        "    redis.call('SET', KEYS[3], t[1] .. '.' .. t[2])\n"                                    \
        "  end\n"                                                                                  \
        "  if type(redis.pcall('RPUSH', KEYS[2], id)) ~= 'number' then\n"                          \
        "    redis.call('DEL', KEYS[2])\n"                                                         \
        "    redis.call('RPUSH', KEYS[2], id)\n"                                                   \
        "  end\n"                                                                                  \
        "  local cap = tonumber(ARGV[1])\n"                                                        \
        "  if redis.call('LLEN', KEYS[2]) > cap then redis.call('LTRIM', KEYS[2], -cap, -1) end\n" \
        "end\n"

enum {
        S_PUT,
        S_DEL,
        S_WEIGHT,
        S_POLL,
        S_CLIENT,
        S_CLIENT_DEL,
        S_CLIENTS,
        S_N
};

static const char *const scripts[S_N] = {
        /* S_PUT: ARGV id record changed ttl_ms keep_ms */
        [S_PUT] = LUA_PRELUDE
        "local id, ttl, keep = ARGV[2], tonumber(ARGV[5]), tonumber(ARGV[6])\n"
        "redis.call('HSET', KEYS[4], id, ARGV[3])\n"
        "local was = tonumber(redis.call('ZSCORE', KEYS[5], id) or '-1') > now\n"
        "redis.call('ZADD', KEYS[5], now + ttl, id)\n"
        "redis.call('ZADD', KEYS[6], now + keep, id)\n"
        "if ARGV[4] == '1' or was ~= (ttl > 0) then bump(id) end\n"
        "return 1\n",
        /* S_DEL: ARGV id */
        [S_DEL] = LUA_PRELUDE
        "local id = ARGV[2]\n"
        "local n = redis.call('HDEL', KEYS[4], id) + redis.call('ZREM', KEYS[5], id) +\n"
        "  redis.call('ZREM', KEYS[6], id)\n"
        "if n > 0 then bump(id) end\n"
        "return n\n",
        /* S_WEIGHT: ARGV id weight ('' clears it) */
        [S_WEIGHT] = LUA_PRELUDE "if ARGV[3] == '' then redis.call('HDEL', KEYS[7], ARGV[2])\n"
                                 "else redis.call('HSET', KEYS[7], ARGV[2], ARGV[3]) end\n"
                                 "bump(ARGV[2])\n"
                                 "return 1\n",
        /* S_POLL: ARGV epoch since -> {epoch, version, now, 'same'|'delta'|'full', records,
         * then for a delta (id, record, lease, end, weight)... and for a full read the records,
         * the leases with their scores and the weights} */
        [S_POLL] = LUA_PRELUDE
        "local st = redis.call('MGET', KEYS[1], KEYS[3], KEYS[10])\n"
        /* The leases and places that ran out: looked for at most every SCAN_MS (by whoever
         * polls first), not by every poll. */
        "local scanned = tonumber(st[3] or '')\n"
        "if scanned and scanned > now then scanned = nil end\n" /* a mark ahead: look at all */
        "if not scanned or now - scanned >= " SCAN_MS " then\n"
        "  local from = scanned and ('(' .. string.format('%d', scanned)) or '-inf'\n"
        "  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], from, "
        "now)) do\n"
        "    bump(id)\n"
        "  end\n"
        "  redis.call('SET', KEYS[10], now)\n"
        "  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 100)) "
        "do\n"
        "    redis.call('ZREM', KEYS[6], id)\n"
        "    redis.call('ZREM', KEYS[5], id)\n"
        "    redis.call('HDEL', KEYS[4], id)\n"
        "    redis.call('HDEL', KEYS[7], id)\n"
        "    bump(id)\n"
        "  end\n"
        "  st = redis.call('MGET', KEYS[1], KEYS[3])\n"
        "end\n"
        /* A version that is no counter (a stranger's): a new epoch, so everyone reads all. */
        "if not version_ok(st[1]) then\n"
        "  redis.call('DEL', KEYS[1], KEYS[3])\n"
        "  st = {false, false}\n"
        "end\n"
        "local epoch = st[2] or ''\n"
        "local v = tonumber(st[1] or '0')\n"
        "local since = tonumber(ARGV[3]) or -1\n"
        "local head = {epoch, tostring(v), tostring(now), 'same', redis.call('HLEN', KEYS[4])}\n"
        "if epoch == ARGV[2] and since == v then return head end\n"
        "local len = redis.pcall('LLEN', KEYS[2])\n"
        "if type(len) ~= 'number' then redis.call('DEL', KEYS[2]); len = 0 end\n"
        "local ids\n"
        "if epoch == ARGV[2] and since >= 0 and since < v and v - since <= len then\n"
        "  head[4] = 'delta'\n"
        "  ids = redis.call('LRANGE', KEYS[2], len - (v - since), -1)\n"
        "else\n"
        "  head[4] = 'full'\n"
        "  head[6] = redis.call('HGETALL', KEYS[4])\n"
        "  head[7] = redis.call('ZRANGE', KEYS[5], 0, -1, 'WITHSCORES')\n"
        "  head[8] = redis.call('HGETALL', KEYS[7])\n"
        "  return head\n"
        "end\n"
        "local seen = {}\n"
        "for _, id in ipairs(ids) do\n"
        "  if not seen[id] then\n"
        "    seen[id] = true\n"
        "    head[#head + 1] = id\n"
        "    head[#head + 1] = redis.call('HGET', KEYS[4], id)\n"
        "    head[#head + 1] = redis.call('ZSCORE', KEYS[5], id)\n"
        "    head[#head + 1] = redis.call('ZSCORE', KEYS[6], id)\n"
        "    head[#head + 1] = redis.call('HGET', KEYS[7], id)\n"
        "  end\n"
        "end\n"
        "return head\n",
        /* S_CLIENT: ARGV id record ('' renews only) ttl_ms */
        [S_CLIENT] = LUA_PRELUDE
        "if ARGV[3] ~= '' then redis.call('HSET', KEYS[8], ARGV[2], ARGV[3]) end\n"
        "redis.call('ZADD', KEYS[9], now + tonumber(ARGV[4]), ARGV[2])\n"
        "return 1\n",
        /* S_CLIENT_DEL: ARGV id */
        [S_CLIENT_DEL] = LUA_PRELUDE "redis.call('ZREM', KEYS[9], ARGV[2])\n"
                                     "return redis.call('HDEL', KEYS[8], ARGV[2])\n",
        /* S_CLIENTS: -> {id, record, ...} of the live clients */
        [S_CLIENTS] = LUA_PRELUDE
        "for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now)) do\n"
        "  redis.call('ZREM', KEYS[9], id)\n"
        "  redis.call('HDEL', KEYS[8], id)\n"
        "end\n"
        "local out = {}\n"
        "local all = redis.call('HGETALL', KEYS[8])\n"
        "for i = 1, #all, 2 do\n"
        "  if redis.call('ZSCORE', KEYS[9], all[i]) then\n"
        "    out[#out + 1] = all[i]\n"
        "    out[#out + 1] = all[i + 1]\n"
        "  end\n"
        "end\n"
        "return out\n",
};

/* Loads the scripts on the current connection (their SHA1s are the same on every server). */
static int load_scripts(struct redis_registry *r)
{
        for (int i = 0; i < S_N; i++) {
                int ret;
                redisReply *rep = command(r, &ret, "SCRIPT LOAD %s", scripts[i]);
                if (!rep)
                        return ret;
                if (rep->type != REDIS_REPLY_STRING || rep->len != 40) {
                        freeReplyObject(rep);
                        return -EPROTO;
                }
                memcpy(r->sha[i], rep->str, 40);
                r->sha[i][40] = '\0';
                freeReplyObject(rep);
        }
        r->scripts_loaded = true;
        return 0;
}

/* Runs script S with the group's keys and NARGS more arguments (after LOG_CAP). Returns the
 * reply, or NULL with *RET < 0. */
static redisReply *run_script(struct redis_registry *r, int s, int *ret, int nargs,
                              const char *const *args)
{
        const char *argv[3 + SCRIPT_KEYS + 8];
        size_t lens[SHOAL_ARRAY_SIZE(argv)];
        int argc = 0;

        for (int attempt = 0; attempt < 2; attempt++) {
                if (!r->scripts_loaded || !r->c) {
                        if (!r->c) {
                                /* (connects) */
                                redisReply *p = command(r, ret, "PING");
                                if (!p)
                                        return NULL;
                                freeReplyObject(p);
                        }
                        if ((*ret = load_scripts(r)) < 0)
                                return NULL;
                }
                argc = 0;
                argv[argc++] = "EVALSHA";
                argv[argc++] = r->sha[s];
                argv[argc++] = "10";
                for (int k = 0; k < SCRIPT_KEYS; k++)
                        argv[argc++] = r->keys[k];
                argv[argc++] = LOG_CAP;
                for (int i = 0; i < nargs && i < 7; i++)
                        argv[argc++] = args[i];
                for (int i = 0; i < argc; i++)
                        lens[i] = strlen(argv[i]);
                redisReply *rep = command_core(r, ret, true, NULL, NULL, argc, argv, lens);
                if (!rep)
                        return NULL;
                if (rep->type != REDIS_REPLY_ERROR)
                        return rep;
                bool noscript = rep->str && !strncmp(rep->str, "NOSCRIPT", 8);
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: %.*s", r->where,
                                (int)SHOAL_MIN(rep->len, 200), rep->str ? rep->str : "");
                freeReplyObject(rep);
                *ret = -EIO;
                if (!noscript)
                        return NULL;
                r->scripts_loaded = false; /* flushed, or another server: load them again */
        }
        return NULL;
}

static int script_simple(struct redis_registry *r, int s, int nargs, const char *const *args)
{
        struct sigpipe_guard g;
        int ret;

        sigpipe_block(&g);
        redisReply *rep = run_script(r, s, &ret, nargs, args);
        if (rep)
                freeReplyObject(rep);
        sigpipe_restore(&g);
        return ret;
}

static int redis_put_lease(struct shoal_registry *base, const char *id, const char *record,
                           const struct shoal_lease_put *p)
{
        struct redis_registry *r = (struct redis_registry *)base;
        char ttl[24], end[24];
        snprintf(ttl, sizeof(ttl), "%" PRId64, p->ttl_ms);
        snprintf(end, sizeof(end), "%" PRId64, p->keep_ms);
        const char *args[] = {id, record, p->changed ? "1" : "0", ttl, end};
        return script_simple(r, S_PUT, 5, args);
}

static int redis_del(struct shoal_registry *base, const char *id)
{
        const char *args[] = {id};
        return script_simple((struct redis_registry *)base, S_DEL, 1, args);
}

static int redis_set_weight(struct shoal_registry *base, const char *id, const char *weight)
{
        const char *args[] = {id, weight ? weight : ""};
        return script_simple((struct redis_registry *)base, S_WEIGHT, 2, args);
}

static int redis_put_client(struct shoal_registry *base, const char *id, const char *record)
{
        char ttl[24];
        snprintf(ttl, sizeof(ttl), "%" PRIu64,
                 (uint64_t)(shoal_registry_client_ttl_ns(base) / SHOAL_NS_PER_MS));
        const char *args[] = {id, record ? record : "", ttl};
        return script_simple((struct redis_registry *)base, S_CLIENT, 3, args);
}

static int redis_del_client(struct shoal_registry *base, const char *id)
{
        const char *args[] = {id};
        return script_simple((struct redis_registry *)base, S_CLIENT_DEL, 1, args);
}

static int redis_list_clients(struct shoal_registry *base, shoal_registry_visit_fn visit, void *arg)
{
        struct redis_registry *r = (struct redis_registry *)base;
        struct sigpipe_guard g;
        int ret;

        sigpipe_block(&g);
        redisReply *rep = run_script(r, S_CLIENTS, &ret, 0, NULL);
        if (rep) {
                ret = shoal_registry_redis_visit(rep, visit, arg);
                if (ret == -EPROTO)
                        ret = -EIO;
                freeReplyObject(rep);
        }
        sigpipe_restore(&g);
        return ret;
}

#define FULL_READ_TIMEOUT_MS 10000

/* The command timeout from now on (0: REDIS_TIMEOUT_MS), on the connection too. */
static void set_cmd_timeout(struct redis_registry *r, int ms)
{
        r->cmd_timeout_ms = ms;
        int t = ms ? ms : REDIS_TIMEOUT_MS;
        struct timeval tv = {.tv_sec = t / 1000, .tv_usec = (t % 1000) * 1000};
        if (r->c)
                redisSetTimeout(r->c, tv);
}

/* ---- the mirror: what this reader knows of the group, kept sorted by id ---- */

static int cmp_ent(const void *a, const void *b)
{
        return strcmp(((const struct mirror_ent *)a)->m.id, ((const struct mirror_ent *)b)->m.id);
}

static bool reply_str(const redisReply *e)
{
        return e && e->type == REDIS_REPLY_STRING && e->str;
}

static bool reply_i64(const redisReply *e, int64_t *out)
{
        char buf[32];
        if (!reply_str(e) || e->len == 0 || (size_t)e->len >= sizeof(buf))
                return false;
        memcpy(buf, e->str, (size_t)e->len);
        buf[e->len] = '\0';
        char *end;
        errno = 0;
        double d = strtod(buf, &end); /* a sorted set's score may read "1.7e+12" */
        if (*end || errno || d < -9e18 || d > 9e18)
                return false;
        *out = (int64_t)d;
        return true;
}

/* Folds one (id, record, lease, end, weight) tuple into ENT; false when the id is gone (no
 * record, or one that does not decode: skipped as list does). */
static bool ent_fill(struct redis_registry *r, struct mirror_ent *ent, redisReply **t, int64_t now)
{
        if (!reply_str(t[0]) || !reply_str(t[1]))
                return false;
        if (shoal_member_decode(t[1]->str, (size_t)t[1]->len, &ent->m) < 0 ||
            strlen(ent->m.id) != (size_t)t[0]->len || memcmp(ent->m.id, t[0]->str, t[0]->len)) {
                char key[SHOAL_MEMBER_ID_LEN + 8];
                log_ratelimited(
                        SHOAL_LOG_WARN, "group",
                        "registry: skipping a malformed record in group \"%s\" (key %s)",
                        r->base.group,
                        shoal_group_printable(t[0]->str, (size_t)t[0]->len, key, sizeof(key)));
                return false;
        }
        if (!t[2] || !reply_i64(t[2], &ent->lease_ms))
                ent->lease_ms = INT64_MIN / 2; /* written without a lease: dead */
        ent->leased = ent->lease_ms > now;
        int64_t w;
        if (ent->m.role == SHOAL_ROLE_PROVIDER && t[4] && reply_i64(t[4], &w) && w >= 0 &&
            w <= SHOAL_WEIGHT_MAX) {
                ent->m.weight = (uint32_t)w;
                ent->m.weight_set = true;
        }
        return true;
}

static int mirror_reserve(struct redis_registry *r, size_t n)
{
        if (n <= r->cap)
                return 0;
        size_t cap = SHOAL_MAX(n, r->cap * 2);
        struct mirror_ent *v = realloc(r->ents, cap * sizeof(*v));
        if (!v)
                return -ENOMEM;
        r->ents = v;
        r->cap = cap;
        return 0;
}

/* The mirror entry of the id in E, or NULL. */
static struct mirror_ent *mirror_find(struct redis_registry *r, const redisReply *e)
{
        struct mirror_ent key;
        if (!reply_str(e) || (size_t)e->len > SHOAL_MEMBER_ID_LEN || !r->n)
                return NULL;
        memcpy(key.m.id, e->str, (size_t)e->len);
        key.m.id[e->len] = '\0';
        return bsearch(&key, r->ents, r->n, sizeof(key), cmp_ent);
}

/* Builds the mirror from a full read: REP's records, leases and weights (three arrays). */
static int mirror_full(struct redis_registry *r, const redisReply *rep, int64_t now)
{
        const redisReply *recs = rep->element[POLL_HEAD], *leases = rep->element[POLL_HEAD + 1],
                         *weights = rep->element[POLL_HEAD + 2];
        if (recs->type != REDIS_REPLY_ARRAY || leases->type != REDIS_REPLY_ARRAY ||
            weights->type != REDIS_REPLY_ARRAY)
                return -EIO;
        if (mirror_reserve(r, recs->elements / 2 + 1) < 0)
                return -ENOMEM;
        r->n = 0;
        for (size_t i = 0; i + 1 < recs->elements; i += 2) {
                redisReply *t[5] = {recs->element[i], recs->element[i + 1], NULL, NULL, NULL};
                memset(&r->ents[r->n], 0, sizeof(r->ents[r->n]));
                if (ent_fill(r, &r->ents[r->n], t, now))
                        r->n++;
        }
        if (r->n)
                qsort(r->ents, r->n, sizeof(*r->ents), cmp_ent);
        for (size_t i = 0; i + 1 < leases->elements; i += 2) {
                struct mirror_ent *e = mirror_find(r, leases->element[i]);
                if (e && reply_i64(leases->element[i + 1], &e->lease_ms))
                        e->leased = e->lease_ms > now;
        }
        for (size_t i = 0; i + 1 < weights->elements; i += 2) {
                struct mirror_ent *e = mirror_find(r, weights->element[i]);
                int64_t w;
                if (e && e->m.role == SHOAL_ROLE_PROVIDER &&
                    reply_i64(weights->element[i + 1], &w) && w >= 0 && w <= SHOAL_WEIGHT_MAX) {
                        e->m.weight = (uint32_t)w;
                        e->m.weight_set = true;
                }
        }
        return 0;
}

/* Applies a poll's answer REP (its tuples from element POLL_HEAD on) to the mirror. */
static int mirror_apply(struct redis_registry *r, const redisReply *rep, bool full, int64_t now)
{
        if (full)
                return mirror_full(r, rep, now);
        size_t nt = (rep->elements - POLL_HEAD) / 5;
        if (mirror_reserve(r, (full ? 0 : r->n) + nt) < 0)
                return -ENOMEM;
        if (full)
                r->n = 0;
        for (size_t i = 0; i < nt; i++) {
                redisReply **t = rep->element + POLL_HEAD + 5 * i;
                struct mirror_ent ent = {0};
                bool present = ent_fill(r, &ent, t, now);
                struct mirror_ent *at = NULL;
                if (!full && reply_str(t[0]) && (size_t)t[0]->len <= SHOAL_MEMBER_ID_LEN) {
                        struct mirror_ent key;
                        memcpy(key.m.id, t[0]->str, (size_t)t[0]->len);
                        key.m.id[t[0]->len] = '\0';
                        at = r->n ? bsearch(&key, r->ents, r->n, sizeof(key), cmp_ent) : NULL;
                }
                if (at && present) {
                        *at = ent;
                } else if (at) {
                        size_t k = (size_t)(at - r->ents);
                        memmove(at, at + 1, (r->n - k - 1) * sizeof(*at));
                        r->n--;
                } else if (present) {
                        r->ents[r->n++] = ent;
                        if (!full)
                                qsort(r->ents, r->n, sizeof(*r->ents), cmp_ent);
                }
        }
        if (full && r->n)
                qsort(r->ents, r->n, sizeof(*r->ents), cmp_ent);
        return 0;
}

/* Whether REP reads as a poll's answer; fills *VERSION and *NOW. */
static bool poll_answer_ok(const struct redis_registry *r, const redisReply *rep, int64_t *version,
                           int64_t *now)
{
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements < POLL_HEAD ||
            rep->element[4]->type != REDIS_REPLY_INTEGER || !reply_str(rep->element[3]) ||
            !reply_str(rep->element[0]) || rep->element[0]->len >= (int)sizeof(r->epoch) ||
            !reply_i64(rep->element[1], version) || !reply_i64(rep->element[2], now))
                return false;
        if (!strcmp(rep->element[3]->str, "full"))
                return rep->elements == POLL_HEAD + 3;
        return (rep->elements - POLL_HEAD) % 5 == 0;
}

/* The mirror as a listing (malloc'd into *OUT, *N), liveness as of NOW on the server. */
static int mirror_list(const struct redis_registry *r, int64_t now, struct shoal_member **out,
                       size_t *n)
{
        struct shoal_member *v = malloc((r->n + 1) * sizeof(*v));
        int64_t timeout = (int64_t)(r->base.timeout_ns / SHOAL_NS_PER_MS);
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < r->n; i++) {
                const struct mirror_ent *e = &r->ents[i];
                v[i] = e->m;
                /* Live as read: every lease that ran out since changed the version. */
                v[i].alive = e->leased;
                int64_t last = e->leased ? now : e->lease_ms - timeout;
                int64_t end = e->lease_ms + (int64_t)e->m.grace_ms;
                v[i].age_ms = now > last ? (uint64_t)(now - last) : 0;
                v[i].grace_left_ms = !e->leased && end > now ? (uint64_t)(end - now) : 0;
        }
        *out = v;
        *n = r->n;
        return 0;
}

/* One poll: the answer, or NULL with *RET < 0. */
static redisReply *poll_once(struct redis_registry *r, int *ret)
{
        struct sigpipe_guard g;
        char since[24];

        snprintf(since, sizeof(since), "%" PRId64, r->synced ? r->version : (int64_t)-1);
        const char *args[] = {r->epoch, since};
        sigpipe_block(&g);
        /* A full read may wait behind a crowd's: giving up on it would only ask again. */
        bool full = !r->synced;
        if (full)
                set_cmd_timeout(r, FULL_READ_TIMEOUT_MS);
        redisReply *rep = run_script(r, S_POLL, ret, 2, args);
        if (full)
                set_cmd_timeout(r, 0);
        sigpipe_restore(&g);
        return rep;
}

static int redis_sync(struct shoal_registry *base, const uint64_t *unless_gen,
                      struct shoal_member **out, size_t *n)
{
        struct redis_registry *r = (struct redis_registry *)base;
        int64_t version, now;
        int ret;

again:;
        redisReply *rep = poll_once(r, &ret);
        if (!rep)
                return ret;
        ret = -EIO;
        if (!poll_answer_ok(r, rep, &version, &now)) {
                log_ratelimited(SHOAL_LOG_WARN, "group",
                                "registry %s: a poll answer it cannot read", r->where);
                goto out;
        }
        const char *mode = rep->element[3]->str;
        long long records = rep->element[4]->integer;
        if (!strcmp(mode, "same") && records != r->records) {
                /* Written behind the log's back (a stranger, a lost key): read everything. */
                freeReplyObject(rep);
                r->synced = false;
                goto again;
        }
        r->records = records;
        if (strcmp(mode, "same")) {
                ret = mirror_apply(r, rep, !strcmp(mode, "full"), now);
                if (ret < 0)
                        goto out;
                r->base.generation++;
                memcpy(r->epoch, rep->element[0]->str, (size_t)rep->element[0]->len);
                r->epoch[rep->element[0]->len] = '\0';
                r->version = version;
                r->synced = true;
        }
        if (unless_gen && *unless_gen == r->base.generation) {
                *out = NULL;
                *n = 0;
                ret = 1;
        } else {
                ret = mirror_list(r, now, out, n);
        }
out:
        freeReplyObject(rep);
        if (ret < 0)
                r->synced = false; /* read everything again next time */
        return ret;
}

static void redis_close(struct shoal_registry *base)
{
        struct redis_registry *r = (struct redis_registry *)base;

        drop_conn(r);
        explicit_bzero(r->u.pass, sizeof(r->u.pass));
        free(r->ents);
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
        .put_lease = redis_put_lease,
        .sync = redis_sync,
        .put_client = redis_put_client,
        .del_client = redis_del_client,
        .list_clients = redis_list_clients,
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
        static const char *const names[SCRIPT_KEYS] = {
                "version", "log",     "epoch",   "members",       "leases",
                "ends",    "weights", "clients", "client-leases", "scanned"};
        for (int k = 0; k < SCRIPT_KEYS; k++)
                snprintf(r->keys[k], sizeof(r->keys[k]), "shoal:%s:%s", group, names[k]);
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
