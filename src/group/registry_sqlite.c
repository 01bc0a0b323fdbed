/* SQLite registry backend: sqlite3:///path/meta.db, shared by the member processes of one host.
 *
 * One table, keyed by (group, member id); the record column holds the text of
 * shoal_member_encode, so both backends store the same bytes and share one validated decoder:
 *
 *   CREATE TABLE shoal_members (grp TEXT, id TEXT, record TEXT, PRIMARY KEY (grp, id))
 *   CREATE TABLE shoal_weights (grp TEXT, id TEXT, weight TEXT, PRIMARY KEY (grp, id))
 *
 * WAL lets readers run beside the one writer, and every operation is a single autocommit
 * statement, so a writer never has to upgrade a read transaction (the case where SQLite returns
 * SQLITE_BUSY without waiting); contention is absorbed by the busy timeout. */
#include "group/group_internal.h"

#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/util.h"

#define SQLITE_BUSY_MS 5000

struct sqlite_registry {
        struct shoal_registry base;
        sqlite3 *db;
        sqlite3_stmt *put, *del, *list, *wput, *wdel, *wlist;
        char path[PATH_MAX];
};

static int sqlite_errno(int rc)
{
        switch (rc & 0xff) {
        case SQLITE_OK:
        case SQLITE_DONE:
        case SQLITE_ROW:
                return 0;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_NOMEM:
                return -ENOMEM;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_READONLY:
                return -EROFS;
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EACCES;
        case SQLITE_CANTOPEN:
                return -ENOENT;
        default:
                return -EIO;
        }
}

/* Creates the folders above PATH (mkdir -p of its dirname). */
static int make_parents(const char *path)
{
        char buf[PATH_MAX];

        if (shoal_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
                return -ENAMETOOLONG;
        char *slash = strrchr(buf, '/');
        if (!slash || slash == buf)
                return 0;
        *slash = '\0';
        for (char *p = buf + 1;; p++) {
                bool end = *p == '\0';
                if (*p == '/' || end) {
                        char saved = *p;
                        *p = '\0';
                        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        *p = saved;
                }
                if (end)
                        break;
        }
        struct stat st;
        if (stat(buf, &st) < 0)
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* Runs SQL (no result rows wanted except for the journal mode check), retrying while another
 * process holds the locks that schema and journal changes need; those paths do not always wait
 * in the busy handler. */
static int exec_retry(sqlite3 *db, const char *sql, char *mode, size_t modelen)
{
        uint64_t deadline = shoal_now_ns() + (uint64_t)SQLITE_BUSY_MS * SHOAL_NS_PER_MS;

        for (;;) {
                sqlite3_stmt *st = NULL;
                int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
                if (rc == SQLITE_OK) {
                        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
                                if (mode && sqlite3_column_text(st, 0))
                                        shoal_strlcpy(mode,
                                                      (const char *)sqlite3_column_text(st, 0),
                                                      modelen);
                        if (rc == SQLITE_DONE)
                                rc = SQLITE_OK;
                }
                sqlite3_finalize(st);
                int base = rc & 0xff;
                if ((base != SQLITE_BUSY && base != SQLITE_LOCKED) || shoal_now_ns() > deadline)
                        return rc;
                shoal_sleep_ns(10 * SHOAL_NS_PER_MS);
        }
}

static int sqlite_put(struct shoal_registry *r, const char *id, const char *record)
{
        struct sqlite_registry *s = (struct sqlite_registry *)r;
        sqlite3_stmt *st = s->put;
        int rc;

        sqlite3_bind_text(st, 1, r->group, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, record, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        if (rc != SQLITE_DONE) {
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: put: %s", s->path,
                                sqlite3_errstr(rc));
                return sqlite_errno(rc) ? sqlite_errno(rc) : -EIO;
        }
        return 0;
}

static int sqlite_del(struct shoal_registry *r, const char *id)
{
        struct sqlite_registry *s = (struct sqlite_registry *)r;
        sqlite3_stmt *st = s->del;
        int rc;

        sqlite3_bind_text(st, 1, r->group, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        if (rc != SQLITE_DONE) {
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: delete: %s", s->path,
                                sqlite3_errstr(rc));
                return sqlite_errno(rc) ? sqlite_errno(rc) : -EIO;
        }
        return 0;
}

static int sqlite_set_weight(struct shoal_registry *r, const char *id, const char *weight)
{
        struct sqlite_registry *s = (struct sqlite_registry *)r;
        sqlite3_stmt *st = weight ? s->wput : s->wdel;
        int rc;

        sqlite3_bind_text(st, 1, r->group, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
        if (weight)
                sqlite3_bind_text(st, 3, weight, -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        if (rc != SQLITE_DONE) {
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: set weight: %s", s->path,
                                sqlite3_errstr(rc));
                return sqlite_errno(rc) ? sqlite_errno(rc) : -EIO;
        }
        return 0;
}

/* Rows of STMT (two text columns, bound to the group) through VISIT. */
static int visit_rows(struct sqlite_registry *s, sqlite3_stmt *st, shoal_registry_visit_fn visit,
                      void *arg)
{
        int rc, ret = 0;

        sqlite3_bind_text(st, 1, s->base.group, -1, SQLITE_STATIC);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                /* Anything may sit in a column of another type; a NULL becomes an empty text,
                 * which the decoder refuses. */
                const char *id = (const char *)sqlite3_column_text(st, 0);
                int idlen = sqlite3_column_bytes(st, 0);
                const char *rec = (const char *)sqlite3_column_text(st, 1);
                int reclen = sqlite3_column_bytes(st, 1);
                ret = visit(arg, id ? id : "", id ? (size_t)idlen : 0, rec ? rec : "",
                            rec ? (size_t)reclen : 0);
                if (ret)
                        break;
        }
        if (!ret && rc != SQLITE_DONE) {
                log_ratelimited(SHOAL_LOG_WARN, "group", "registry %s: list: %s", s->path,
                                sqlite3_errstr(rc));
                ret = sqlite_errno(rc) ? sqlite_errno(rc) : -EIO;
        }
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        return ret;
}

static int sqlite_list(struct shoal_registry *r, shoal_registry_visit_fn visit, void *arg)
{
        struct sqlite_registry *s = (struct sqlite_registry *)r;
        return visit_rows(s, s->list, visit, arg);
}

static int sqlite_list_weights(struct shoal_registry *r, shoal_registry_visit_fn visit, void *arg)
{
        struct sqlite_registry *s = (struct sqlite_registry *)r;
        return visit_rows(s, s->wlist, visit, arg);
}

static void sqlite_close(struct shoal_registry *r)
{
        struct sqlite_registry *s = (struct sqlite_registry *)r;

        sqlite3_finalize(s->put);
        sqlite3_finalize(s->del);
        sqlite3_finalize(s->list);
        sqlite3_finalize(s->wput);
        sqlite3_finalize(s->wdel);
        sqlite3_finalize(s->wlist);
        sqlite3_close(s->db);
        free(s);
}

static const struct shoal_registry_ops sqlite_ops = {
        .scheme = "sqlite3",
        .put = sqlite_put,
        .del = sqlite_del,
        .list = sqlite_list,
        .set_weight = sqlite_set_weight,
        .list_weights = sqlite_list_weights,
        .close = sqlite_close,
};

/* The statements every operation runs, prepared once. Returns SQLite's code. */
static int prepare_all(struct sqlite_registry *s)
{
        static const struct {
                const char *sql;
                size_t off;
        } st[] = {
                {"INSERT OR REPLACE INTO shoal_members (grp, id, record) VALUES (?1, ?2, ?3)",
                 offsetof(struct sqlite_registry, put)},
                {"DELETE FROM shoal_members WHERE grp = ?1 AND id = ?2",
                 offsetof(struct sqlite_registry, del)},
                {"SELECT id, record FROM shoal_members WHERE grp = ?1",
                 offsetof(struct sqlite_registry, list)},
                {"INSERT OR REPLACE INTO shoal_weights (grp, id, weight) VALUES (?1, ?2, ?3)",
                 offsetof(struct sqlite_registry, wput)},
                {"DELETE FROM shoal_weights WHERE grp = ?1 AND id = ?2",
                 offsetof(struct sqlite_registry, wdel)},
                {"SELECT id, weight FROM shoal_weights WHERE grp = ?1",
                 offsetof(struct sqlite_registry, wlist)},
        };
        int rc = SQLITE_OK;
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(st) && rc == SQLITE_OK; i++)
                rc = sqlite3_prepare_v3(s->db, st[i].sql, -1, SQLITE_PREPARE_PERSISTENT,
                                        (sqlite3_stmt **)((char *)s + st[i].off), NULL);
        return rc;
}

/* WAL, the durability and the schema of a fresh connection. Returns 0 or -EIO with ERR. */
static int setup_db(struct sqlite_registry *s, char *err, size_t errlen)
{
        static const char *const schema =
                "CREATE TABLE IF NOT EXISTS shoal_members ("
                "grp TEXT NOT NULL, id TEXT NOT NULL, record TEXT NOT NULL, "
                "PRIMARY KEY (grp, id)) WITHOUT ROWID";
        static const char *const weights_schema =
                "CREATE TABLE IF NOT EXISTS shoal_weights ("
                "grp TEXT NOT NULL, id TEXT NOT NULL, weight TEXT NOT NULL, "
                "PRIMARY KEY (grp, id)) WITHOUT ROWID";
        char mode[16] = "";

        sqlite3_busy_timeout(s->db, SQLITE_BUSY_MS);
        int rc = exec_retry(s->db, "PRAGMA journal_mode=WAL", mode, sizeof(mode));
        if (rc != SQLITE_OK) {
                snprintf(err, errlen, "registry: %s: cannot set WAL mode: %s", s->path,
                         sqlite3_errmsg(s->db));
                return -EIO;
        }
        /* Some filesystems (network mounts) cannot do WAL; the rollback journal with the busy
         * timeout is slower but still correct. */
        if (strcmp(mode, "wal") != 0)
                log_warn("group", "registry %s: journal mode is \"%s\", not WAL", s->path, mode);
        /* Records are soft state rewritten every heartbeat: losing the last ones in a power cut
         * is harmless, an fsync per heartbeat is not free. */
        rc = exec_retry(s->db, "PRAGMA synchronous=NORMAL", NULL, 0);
        if (rc == SQLITE_OK)
                rc = exec_retry(s->db, schema, NULL, 0);
        if (rc == SQLITE_OK)
                rc = exec_retry(s->db, weights_schema, NULL, 0);
        if (rc != SQLITE_OK) {
                snprintf(err, errlen, "registry: %s: cannot create the schema: %s", s->path,
                         sqlite3_errmsg(s->db));
                return -EIO;
        }
        return 0;
}

int shoal_registry_sqlite_open(const char *rest, const char *group, struct shoal_registry **out,
                               char *err, size_t errlen)
{
        struct sqlite_registry *s;
        int rc, ret;

        *out = NULL;
        if (!*rest) {
                snprintf(err, errlen,
                         "registry: sqlite3:// needs a path, as in "
                         "sqlite3:///var/lib/shoal/meta.db");
                return -EINVAL;
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                snprintf(err, errlen, "registry: out of memory");
                return -ENOMEM;
        }
        s->base.ops = &sqlite_ops;
        if (shoal_strlcpy(s->path, rest, sizeof(s->path)) >= sizeof(s->path)) {
                snprintf(err, errlen, "registry: sqlite path too long");
                ret = -EINVAL;
                goto out_free;
        }
        ret = make_parents(s->path);
        if (ret < 0) {
                snprintf(err, errlen, "registry: cannot create the folder of %s: %s", s->path,
                         strerror(-ret));
                if (ret == -EINVAL)
                        ret = -EIO; /* a failure at run time, never a bad URL */
                goto out_free;
        }
        ret = -EIO; /* from here on, SQLite's failures */
        rc = sqlite3_open_v2(s->path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                             NULL);
        if (rc != SQLITE_OK) {
                snprintf(err, errlen, "registry: cannot open %s: %s", s->path,
                         s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
                goto out_close;
        }
        if (setup_db(s, err, errlen) < 0)
                goto out_close;
        if (prepare_all(s) != SQLITE_OK) {
                snprintf(err, errlen, "registry: %s: %s", s->path, sqlite3_errmsg(s->db));
                goto out_finalize;
        }
        (void)group;
        *out = &s->base;
        return 0;

out_finalize:
        sqlite3_finalize(s->put);
        sqlite3_finalize(s->del);
        sqlite3_finalize(s->list);
        sqlite3_finalize(s->wput);
        sqlite3_finalize(s->wdel);
        sqlite3_finalize(s->wlist);
out_close:
        sqlite3_close(s->db);
out_free:
        free(s);
        return ret;
}
