/* The registry at scale (issue 33), driven by bench/registry.sh against a real redis-server:
 *
 *   bench_registry load URL GROUP HOST:PORT MEMBERS CLIENTS
 *       writes MEMBERS fake members and CLIENTS fake clients through the registry's own code
 *       (leases of an hour, so they stay alive without beating), and the same records in the
 *       layout before issue 33 (one hash of every member and client) beside them
 *   bench_registry cost URL GROUP HOST:PORT MEMBERS CLIENTS SECONDS
 *       runs MEMBERS member agents and CLIENTS client agents (each its own connection and
 *       thread, default heartbeat) for SECONDS and prints the server's CPU time, commands'
 *       time and bytes in and out per agent per second (from INFO of the server at HOST:PORT),
 *       and whether every agent's view holds every member
 *   bench_registry crowd URL GROUP HOST:PORT N
 *       starts N client agents at once and prints how long until each had joined (its view
 *       holds the members), the slowest, and how many failed to start
 *   bench_registry kill URL MEMBER_URL GROUP READERS
 *       READERS client agents on URL; a member in a child process joins through MEMBER_URL and
 *       is killed with -9; prints how long until it had left every reader's view
 *   bench_registry etcd-load URL GROUP MEMBERS CLIENTS
 *       as load, on etcd: fake members and clients through the registry's own code and key
 *       layout, under leases of an hour
 *   bench_registry etcd-cost URL GROUP ETCD_PID COUNTS MEMBERS CLIENTS SECONDS
 *       as cost, on etcd (URL through a counting proxy that keeps its byte totals, "in out",
 *       in the file COUNTS): etcd's CPU time from /proc/ETCD_PID/stat and the bytes through
 *       the proxy per agent per second, whether every view holds every member, and what one
 *       heartbeat cost before (a put of the record and a range of every record) */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "group/group_internal.h"

static void fake(struct shoal_member *m, const char *kind, size_t i, enum shoal_member_role role)
{
        memset(m, 0, sizeof(*m));
        snprintf(m->id, sizeof(m->id), "%s%08zu", kind, i);
        snprintf(m->host, sizeof(m->host), "fake-%zu.example", i);
        if (role == SHOAL_ROLE_PROVIDER) {
                snprintf(m->tcp_addr, sizeof(m->tcp_addr), "10.%zu.%zu.%zu:7000", i >> 16,
                         (i >> 8) & 255, i & 255);
                snprintf(m->iorpc_addr, sizeof(m->iorpc_addr), "10.%zu.%zu.%zu:7001", i >> 16,
                         (i >> 8) & 255, i & 255);
        }
        m->weight = role == SHOAL_ROLE_PROVIDER ? 100 : 0;
        m->role = role;
        snprintf(m->volume_url, sizeof(m->volume_url), "file:///bench/store");
        m->block_size = 4194304;
        m->cache_capacity = UINT64_MAX;
        m->beat = 1;
        m->updated_ms = m->started_ms = (int64_t)(shoal_wall_ns() / SHOAL_NS_PER_MS);
        m->grace_ms = 60000;
}

static redisContext *direct(const char *hostport);

static int load(const char *url, const char *group, const char *hostport, size_t members,
                size_t clients)
{
        struct shoal_registry *r;
        char err[512];
        if (shoal_registry_open(url, group, &r, err, sizeof(err))) {
                fprintf(stderr, "%s\n", err);
                return 1;
        }
        r->timeout_ns = 3600 * SHOAL_NS_PER_SEC;
        struct shoal_member m;
        for (size_t i = 0; i < members; i++) {
                fake(&m, "fakemember", i, SHOAL_ROLE_PROVIDER);
                if (shoal_registry_put(r, &m))
                        return 1;
        }
        for (size_t i = 0; i < clients; i++) {
                fake(&m, "fakeclient", i, SHOAL_ROLE_CONSUMER);
                if (shoal_registry_put_client(r, &m))
                        return 1;
                r->put_id[0] = '\0'; /* each its own record */
        }
        shoal_registry_close(r);
        /* The layout before issue 33 beside it, for the same run to measure what a process's
         * heartbeat cost then: every member and client a record in one hash. */
        redisContext *c = direct(hostport);
        if (!c)
                return 1;
        char key[300];
        snprintf(key, sizeof(key), "shoal:%s-before:members", group);
        for (size_t i = 0; i < members + clients; i++) {
                char rec[SHOAL_RECORD_MAX];
                fake(&m, i < members ? "fakemember" : "fakeclient", i,
                     i < members ? SHOAL_ROLE_PROVIDER : SHOAL_ROLE_CONSUMER);
                if (shoal_member_encode(&m, rec, sizeof(rec)) < 0)
                        return 1;
                redisAppendCommand(c, "HSET %s %s %s", key, m.id, rec);
        }
        for (size_t i = 0; i < members + clients; i++) {
                redisReply *rep;
                if (redisGetReply(c, (void **)&rep) != REDIS_OK)
                        return 1;
                freeReplyObject(rep);
        }
        redisFree(c);
        printf("loaded %zu fake members and %zu fake clients (and the same in the layout before)\n",
               members, clients);
        return 0;
}

static struct shoal_group *agent(const char *url, const char *group, enum shoal_member_role role,
                                 unsigned i)
{
        struct shoal_group_config cfg;
        struct shoal_group *g;
        char err[512];
        memset(&cfg, 0, sizeof(cfg));
        cfg.meta_url = url;
        cfg.group = group;
        fake(&cfg.self, "", 0, role);
        cfg.self.id[0] = '\0';
        if (role == SHOAL_ROLE_PROVIDER)
                snprintf(cfg.self.tcp_addr, sizeof(cfg.self.tcp_addr), "127.0.0.1:%u", 20000 + i);
        if (shoal_group_start(&cfg, &g, err, sizeof(err))) {
                fprintf(stderr, "start: %s\n", err);
                return NULL;
        }
        return g;
}

static size_t view_n(struct shoal_group *g)
{
        struct shoal_group_view *v = shoal_group_view_get(g);
        size_t n = v->n;
        shoal_group_view_put(v);
        return n;
}

static bool view_has(struct shoal_group *g, const char *id)
{
        struct shoal_group_view *v = shoal_group_view_get(g);
        bool found = false;
        for (size_t i = 0; i < v->n && !found; i++)
                found = !strcmp(v->members[i].id, id);
        shoal_group_view_put(v);
        return found;
}

/* INFO of the server, kept for field() (one call: each answer is bytes out too). */
static char info_text[65536];
static size_t info_len;

static void info_get(redisContext *c)
{
        redisReply *rep = redisCommand(c, "INFO all");
        info_text[0] = '\0';
        info_len = 0;
        if (rep && rep->type == REDIS_REPLY_STRING) {
                shoal_strlcpy(info_text, rep->str, sizeof(info_text));
                info_len = (size_t)rep->len;
        }
        if (rep)
                freeReplyObject(rep);
}

static double field(const char *name)
{
        char key[128];
        snprintf(key, sizeof(key), "\n%s", name);
        const char *p = strstr(info_text, key);
        return p ? strtod(p + strlen(key), NULL) : -1;
}

static redisContext *direct(const char *hostport)
{
        char host[256];
        shoal_strlcpy(host, hostport, sizeof(host));
        char *colon = strrchr(host, ':');
        if (!colon)
                return NULL;
        *colon = '\0';
        redisContext *c = redisConnect(host, atoi(colon + 1));
        return c && !c->err ? c : NULL;
}

static int cost(const char *url, const char *group, const char *hostport, unsigned members,
                unsigned clients, unsigned seconds)
{
        unsigned n = members + clients;
        struct shoal_group **g = calloc(n, sizeof(*g));
        redisContext *c = direct(hostport);
        if (!g || !c)
                return 1;
        for (unsigned i = 0; i < n; i++)
                if (!(g[i] = agent(url, group,
                                   i < members ? SHOAL_ROLE_PROVIDER : SHOAL_ROLE_CONSUMER, i)))
                        return 1;
        shoal_sleep_ns(3 * SHOAL_NS_PER_SEC); /* every join seen */
        redisReply *rep = redisCommand(c, "CONFIG RESETSTAT");
        freeReplyObject(rep);
        info_get(c);
        double cpu0 = field("used_cpu_sys:") + field("used_cpu_user:");
        double in0 = field("total_net_input_bytes:"), out0 = field("total_net_output_bytes:");
        uint64_t t0 = shoal_now_ns();
        shoal_sleep_ns(seconds * SHOAL_NS_PER_SEC);
        double dt = (double)(shoal_now_ns() - t0) / 1e9;
        size_t first_len = info_len; /* that answer's bytes were counted out after in0 */
        info_get(c);
        double cpu = field("used_cpu_sys:") + field("used_cpu_user:") - cpu0;
        double in = field("total_net_input_bytes:") - in0 - 16;
        double out = field("total_net_output_bytes:") - out0 - (double)first_len - 16;
        double usec = -1;
        rep = redisCommand(c, "INFO commandstats");
        if (rep && rep->type == REDIS_REPLY_STRING) {
                const char *p = strstr(rep->str, "cmdstat_evalsha:");
                p = p ? strstr(p, "usec=") : NULL;
                if (p)
                        usec = strtod(p + 5, NULL);
        }
        if (rep && rep->type == REDIS_REPLY_STRING)
                fprintf(stderr, "%s", rep->str); /* the commands, for a closer look */
        if (rep)
                freeReplyObject(rep);
        /* The same server, the same moment: what one process's heartbeat cost before (its
         * record written, every record of the group read). */
        rep = redisCommand(c, "CONFIG RESETSTAT");
        freeReplyObject(rep);
        info_get(c);
        double bin0 = field("total_net_output_bytes:");
        size_t blen = info_len;
        char key[300];
        snprintf(key, sizeof(key), "shoal:%s-before:members", group);
        const unsigned ticks = 20;
        for (unsigned i = 0; i < ticks; i++) {
                rep = redisCommand(c, "HSET %s fakemember00000000 %s", key, "m1|x");
                freeReplyObject(rep);
                rep = redisCommand(c, "HGETALL %s", key);
                freeReplyObject(rep);
        }
        info_get(c);
        double bout = (field("total_net_output_bytes:") - bin0 - (double)blen) / ticks;
        double busec = -1;
        rep = redisCommand(c, "INFO commandstats");
        if (rep && rep->type == REDIS_REPLY_STRING) {
                const char *p = strstr(rep->str, "cmdstat_hgetall:");
                p = p ? strstr(p, "usec_per_call=") : NULL;
                if (p)
                        busec = strtod(p + 14, NULL);
        }
        if (rep)
                freeReplyObject(rep);
        printf("before (one hash of every record): %.0f us and %.0f B out per process per "
               "second (HGETALL)\n",
               busec, bout);
        /* Each kind of call back to back through the registry's own code, for its server time
         * per call with less of the scheduler in it (the window above counts a script's wall
         * time on a server that other processes preempt). */
        double per_call[3];
        struct shoal_registry *r;
        char err[512];
        if (shoal_registry_open(url, group, &r, err, sizeof(err)))
                return 1;
        struct shoal_member self, *l = NULL;
        size_t nl = 0;
        fake(&self, "benchself", 0, SHOAL_ROLE_PROVIDER);
        uint64_t gen = 0;
        shoal_registry_put(r, &self);
        shoal_registry_list_since(r, &gen, &l, &nl);
        free(l);
        for (int k = 0; k < 3; k++) {
                rep = redisCommand(c, "CONFIG RESETSTAT");
                freeReplyObject(rep);
                for (int i = 0; i < 2000; i++) {
                        self.updated_ms = (int64_t)(shoal_wall_ns() / SHOAL_NS_PER_MS);
                        if (k == 0 && shoal_registry_list_since(r, &gen, &l, &nl) == 0)
                                free(l);
                        if (k == 1)
                                shoal_registry_put(r, &self);
                        if (k == 2)
                                shoal_registry_put_client(r, &self);
                }
                info_get(c);
                rep = redisCommand(c, "INFO commandstats");
                const char *p = rep && rep->type == REDIS_REPLY_STRING
                                        ? strstr(rep->str, "cmdstat_evalsha:")
                                        : NULL;
                p = p ? strstr(p, "usec_per_call=") : NULL;
                per_call[k] = p ? strtod(p + 14, NULL) : -1;
                if (rep)
                        freeReplyObject(rep);
        }
        /* A client polls every second and renews its presence every half client TTL. */
        double renew_s = (double)shoal_registry_client_renew_ns(r) / 1e9;
        shoal_registry_delete(r, self.id);
        shoal_registry_delete_client(r, self.id);
        shoal_registry_close(r);
        printf("back to back: a poll %.1f us, a member's heartbeat %.1f us, a client's presence "
               "%.1f us (every %.0f s); so a member %.1f us and a client %.1f us of server time "
               "per second\n",
               per_call[0], per_call[1], per_call[2], renew_s, per_call[0] + per_call[1],
               per_call[0] + per_call[2] / renew_s);
        /* A member's view: every member; a client's: every member and itself. (Two heartbeats
         * first: the delete of benchself above reaches each agent with its next poll, and an
         * agent judged before that would count one member more than one judged after.) */
        shoal_sleep_ns(2 * SHOAL_NS_PER_SEC);
        size_t want = view_n(g[0]), bad = 0;
        for (unsigned i = 0; i < n; i++)
                bad += view_n(g[i]) != want + (i >= members);
        printf("agents %u (%u members, %u clients), %.1f s: server CPU %.1f us, scripts %.1f us, "
               "in %.0f B, out %.0f B per agent per second; views %zu members, %zu agents off\n",
               n, members, clients, dt, cpu * 1e6 / n / dt, usec / n / dt, in / n / dt,
               out / n / dt, want, bad);
        for (unsigned i = 0; i < n; i++)
                shoal_group_stop(g[i]);
        redisFree(c);
        free(g);
        return bad ? 1 : 0;
}

struct crowd_arg {
        const char *url, *group;
        unsigned i;
        pthread_barrier_t *go;
        struct shoal_group *g;
        uint64_t t0, joined_ns; /* 0: not joined when its start returned */
};

static void *crowd_one(void *p)
{
        struct crowd_arg *a = p;
        pthread_barrier_wait(a->go);
        a->g = agent(a->url, a->group, SHOAL_ROLE_CONSUMER, a->i);
        if (a->g && view_n(a->g) > 1)
                a->joined_ns = shoal_now_ns();
        return NULL;
}

static int crowd(const char *url, const char *group, const char *hostport, unsigned n)
{
        redisContext *c = direct(hostport);
        if (!c)
                return 1;
        info_get(c);
        double cpu0 = field("used_cpu_sys:") + field("used_cpu_user:");
        struct crowd_arg *a = calloc(n, sizeof(*a));
        pthread_t *t = calloc(n, sizeof(*t));
        double *joined = calloc(n, sizeof(*joined));
        pthread_barrier_t go;
        if (!a || !t || !joined)
                return 1;
        pthread_barrier_init(&go, NULL, n + 1);
        for (unsigned i = 0; i < n; i++) {
                a[i] = (struct crowd_arg){.url = url, .group = group, .i = i, .go = &go};
                if (pthread_create(&t[i], NULL, crowd_one, &a[i]))
                        return 1;
        }
        uint64_t t0 = shoal_now_ns();
        pthread_barrier_wait(&go);
        unsigned failed = 0, done = 0, background = 0;
        for (unsigned i = 0; i < n; i++) {
                pthread_join(t[i], NULL);
                failed += !a[i].g;
                if (a[i].joined_ns) {
                        joined[i] = (double)(a[i].joined_ns - t0) / 1e9;
                        done++;
                } else if (a[i].g) {
                        background++;
                }
        }
        /* Joined: the view holds more than this process (every background join ends there). */
        while (done + failed < n && shoal_now_ns() - t0 < 60 * SHOAL_NS_PER_SEC) {
                for (unsigned i = 0; i < n; i++)
                        if (a[i].g && !joined[i] && view_n(a[i].g) > 1) {
                                joined[i] = (double)(shoal_now_ns() - t0) / 1e9;
                                done++;
                        }
                shoal_sleep_ns(10 * SHOAL_NS_PER_MS);
        }
        double worst = 0, sum = 0;
        for (unsigned i = 0; i < n; i++) {
                worst = joined[i] > worst ? joined[i] : worst;
                sum += joined[i];
        }
        info_get(c);
        double cpu = field("used_cpu_sys:") + field("used_cpu_user:") - cpu0;
        redisFree(c);
        printf("crowd of %u clients: %u joined (%u in the background), %u failed to start, mean "
               "%.2f s, slowest %.2f s; the server's CPU meanwhile %.2f s\n",
               n, done, background, failed, done ? sum / done : 0, worst, cpu);
        for (unsigned i = 0; i < n; i++)
                shoal_group_stop(a[i].g);
        free(a);
        free(t);
        free(joined);
        return done == n ? 0 : 1;
}

static int kill_one(const char *url, const char *member_url, const char *group, unsigned readers)
{
        struct shoal_group **g = calloc(readers, sizeof(*g));
        int pipefd[2];
        if (!g || pipe(pipefd))
                return 1;
        for (unsigned i = 0; i < readers; i++)
                if (!(g[i] = agent(url, group, SHOAL_ROLE_CONSUMER, i)))
                        return 1;
        pid_t pid = fork();
        if (pid == 0) {
                struct shoal_group *m = agent(member_url, group, SHOAL_ROLE_PROVIDER, 999);
                char id[SHOAL_MEMBER_ID_LEN + 1] = "";
                if (m)
                        shoal_strlcpy(id, shoal_group_self_id(m), sizeof(id));
                if (write(pipefd[1], id, sizeof(id)) != (ssize_t)sizeof(id))
                        _exit(1);
                pause();
                _exit(0);
        }
        char id[SHOAL_MEMBER_ID_LEN + 1];
        if (read(pipefd[0], id, sizeof(id)) != (ssize_t)sizeof(id) || !id[0])
                return 1;
        for (unsigned i = 0; i < readers; i++)
                while (!view_has(g[i], id))
                        shoal_sleep_ns(20 * SHOAL_NS_PER_MS);
        /* Let it beat a few times, then kill it just after a beat would have left. */
        shoal_sleep_ns(3 * SHOAL_NS_PER_SEC);
        uint64_t t0 = shoal_now_ns();
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        double worst = 0;
        unsigned left = 0;
        while (left < readers && shoal_now_ns() - t0 < 30 * SHOAL_NS_PER_SEC) {
                left = 0;
                for (unsigned i = 0; i < readers; i++)
                        left += !view_has(g[i], id);
                worst = (double)(shoal_now_ns() - t0) / 1e9;
                shoal_sleep_ns(20 * SHOAL_NS_PER_MS);
        }
        printf("member killed -9: gone from %u of %u views after %.2f s\n", left, readers, worst);
        for (unsigned i = 0; i < readers; i++)
                shoal_group_stop(g[i]);
        free(g);
        return left == readers ? 0 : 1;
}

/* ---- etcd ---- */

static int etcd_load(const char *url, const char *group, size_t members, size_t clients)
{
        struct shoal_registry *r;
        char err[512];
        if (shoal_registry_open(url, group, &r, err, sizeof(err))) {
                fprintf(stderr, "%s\n", err);
                return 1;
        }
        r->timeout_ns = r->lease_ns = 3600 * SHOAL_NS_PER_SEC;
        struct shoal_member m;
        for (size_t i = 0; i < members + clients; i++) {
                bool member = i < members;
                fake(&m, member ? "fakemember" : "fakeclient", i,
                     member ? SHOAL_ROLE_PROVIDER : SHOAL_ROLE_CONSUMER);
                int ret = member ? shoal_registry_put(r, &m) : shoal_registry_put_client(r, &m);
                if (ret) {
                        fprintf(stderr, "put %s: %s\n", m.id, strerror(-ret));
                        return 1;
                }
                r->put_id[0] = '\0'; /* each its own record */
        }
        shoal_registry_close(r);
        printf("loaded %zu fake members and %zu fake clients into etcd\n", members, clients);
        return 0;
}

/* etcd's CPU time so far (s), and the proxy's byte totals. */
static double etcd_cpu(int pid)
{
        char path[64], buf[2048];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (f)
                fclose(f);
        buf[n] = '\0';
        const char *p = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        if (!p ||
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
                return -1;
        return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void proxy_bytes(const char *path, double *in, double *out)
{
        FILE *f = fopen(path, "r");
        *in = *out = -1;
        if (f && fscanf(f, "%lf %lf", in, out) != 2)
                *in = *out = -1;
        if (f)
                fclose(f);
}

static int noop_visit(void *arg, const char *id, size_t id_len, const char *rec, size_t rec_len)
{
        (void)id, (void)id_len, (void)rec, (void)rec_len;
        ++*(size_t *)arg;
        return 0;
}

/* One heartbeat before issue 33, TICKS times: the record put, every record read. */
static void etcd_before(const char *url, const char *group, int pid, const char *counts)
{
        struct shoal_registry *r;
        struct shoal_member self;
        char err[512], rec[SHOAL_RECORD_MAX];
        const unsigned ticks = 20;
        size_t seen = 0;
        if (shoal_registry_open(url, group, &r, err, sizeof(err)))
                return;
        fake(&self, "benchbefore", 0, SHOAL_ROLE_PROVIDER);
        shoal_member_encode(&self, rec, sizeof(rec));
        double in0, out0, in1, out1, c0 = etcd_cpu(pid);
        proxy_bytes(counts, &in0, &out0);
        for (unsigned i = 0; i < ticks; i++) {
                r->ops->put(r, self.id, rec);
                r->ops->list(r, noop_visit, &seen);
        }
        shoal_sleep_ns(SHOAL_NS_PER_SEC / 2); /* the proxy's totals */
        proxy_bytes(counts, &in1, &out1);
        double cpu = etcd_cpu(pid) - c0;
        r->ops->del(r, self.id);
        shoal_registry_close(r);
        printf("before (a put and a range of %zu records per heartbeat): etcd CPU %.0f us, "
               "%.0f B per process per second\n",
               seen / ticks, cpu * 1e6 / ticks, (in1 - in0 + out1 - out0) / ticks);
}

/* A member's heartbeat and a client's renewal back to back, N each: etcd's CPU per call with
 * less of the scheduler in it than a window of agents. */
static void etcd_back_to_back(const char *url, const char *group, int pid)
{
        struct shoal_registry *r;
        struct shoal_member self;
        char err[512];
        const int n = 1000;
        double per[2];
        if (shoal_registry_open(url, group, &r, err, sizeof(err)))
                return;
        r->timeout_ns = 5 * SHOAL_NS_PER_SEC;
        fake(&self, "benchself", 0, SHOAL_ROLE_PROVIDER);
        shoal_registry_put(r, &self);
        shoal_registry_put_client(r, &self);
        for (int k = 0; k < 2; k++) {
                double c0 = etcd_cpu(pid);
                for (int i = 0; i < n; i++) {
                        self.beat++;
                        self.updated_ms = (int64_t)(shoal_wall_ns() / SHOAL_NS_PER_MS);
                        if (k == 0)
                                shoal_registry_put(r, &self);
                        else
                                shoal_registry_put_client(r, &self);
                }
                per[k] = (etcd_cpu(pid) - c0) * 1e6 / n;
        }
        double hb = (double)SHOAL_GROUP_HEARTBEAT_DEFAULT / 1e9;
        double every = ceil((double)r->timeout_ns / 1e9 / 3 / hb) * hb;
        double renew_s = (double)shoal_registry_client_renew_ns(r) / 1e9;
        shoal_registry_delete(r, self.id);
        shoal_registry_delete_client(r, self.id);
        shoal_registry_close(r);
        /* A member keeps its leases alive once a third of its presence lease has passed (at
         * the heartbeat after), a client every half client TTL. Back to back, a member's
         * heartbeats find no keep-alive due; a client's renewal is one keep-alive call, as a
         * member's of its two leases is. */
        printf("back to back: a member's heartbeat with no keep-alive due %.0f us, a keep-alive "
               "(a client's renewal) %.0f us of etcd CPU (idle ticks included); so a member %.0f "
               "us/s (a keep-alive every %.0f s) and a client %.0f us/s (every %.0f s)\n",
               per[0], per[1], (per[1] + (every - 1) * per[0]) / every, every, per[1] / renew_s,
               renew_s);
}

static int etcd_cost(const char *url, const char *group, int pid, const char *counts,
                     unsigned members, unsigned clients, unsigned seconds)
{
        unsigned n = members + clients;
        struct shoal_group **g = calloc(n, sizeof(*g));
        if (!g)
                return 1;
        /* etcd's own ticks (raft, the leases of the crowd) with nobody beating, to take off. */
        double i0 = etcd_cpu(pid);
        shoal_sleep_ns(seconds * SHOAL_NS_PER_SEC);
        double idle = (etcd_cpu(pid) - i0) / seconds;
        for (unsigned i = 0; i < n; i++)
                if (!(g[i] = agent(url, group,
                                   i < members ? SHOAL_ROLE_PROVIDER : SHOAL_ROLE_CONSUMER, i)))
                        return 1;
        shoal_sleep_ns(5 * SHOAL_NS_PER_SEC); /* every join seen, every watch running */
        double in0, out0, in1, out1, c0 = etcd_cpu(pid);
        proxy_bytes(counts, &in0, &out0);
        uint64_t t0 = shoal_now_ns();
        shoal_sleep_ns(seconds * SHOAL_NS_PER_SEC);
        double dt = (double)(shoal_now_ns() - t0) / 1e9;
        double cpu = etcd_cpu(pid) - c0;
        proxy_bytes(counts, &in1, &out1);
        size_t want = view_n(g[0]), bad = 0;
        for (unsigned i = 0; i < n; i++)
                bad += view_n(g[i]) != want + (i >= members);
        printf("agents %u (%u members, %u clients), %.1f s: etcd CPU %.1f us (%.1f us with its "
               "idle %.0f us/s), in %.0f B, out %.0f B per agent per second; views %zu members, "
               "%zu agents off\n",
               n, members, clients, dt, (cpu / dt - idle) * 1e6 / n, cpu * 1e6 / n / dt, idle * 1e6,
               (in1 - in0) / n / dt, (out1 - out0) / n / dt, want, bad);
        for (unsigned i = 0; i < n; i++)
                shoal_group_stop(g[i]);
        free(g);
        etcd_back_to_back(url, group, pid);
        etcd_before(url, group, pid, counts);
        return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
        signal(SIGPIPE, SIG_IGN);
        shoal_log_set_level(SHOAL_LOG_WARN);
        if (argc == 7 && !strcmp(argv[1], "load"))
                return load(argv[2], argv[3], argv[4], strtoul(argv[5], NULL, 10),
                            strtoul(argv[6], NULL, 10));
        if (argc == 8 && !strcmp(argv[1], "cost"))
                return cost(argv[2], argv[3], argv[4], (unsigned)atoi(argv[5]),
                            (unsigned)atoi(argv[6]), (unsigned)atoi(argv[7]));
        if (argc == 6 && !strcmp(argv[1], "crowd"))
                return crowd(argv[2], argv[3], argv[4], (unsigned)atoi(argv[5]));
        if (argc == 6 && !strcmp(argv[1], "etcd-load"))
                return etcd_load(argv[2], argv[3], strtoul(argv[4], NULL, 10),
                                 strtoul(argv[5], NULL, 10));
        if (argc == 9 && !strcmp(argv[1], "etcd-cost"))
                return etcd_cost(argv[2], argv[3], atoi(argv[4]), argv[5], (unsigned)atoi(argv[6]),
                                 (unsigned)atoi(argv[7]), (unsigned)atoi(argv[8]));
        if (argc == 6 && !strcmp(argv[1], "kill"))
                return kill_one(argv[2], argv[3], argv[4], (unsigned)atoi(argv[5]));
        fprintf(stderr, "usage: see bench/registry.c\n");
        return 2;
}
