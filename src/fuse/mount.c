/* Session set-up, the multi-threaded loop, signals and unmount. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/node.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "fuse/fuse_internal.h"

/* Undoes mountinfo's octal escapes (" " is "\040") in place. */
static void unescape(char *s)
{
        char *w = s;
        for (char *r = s; *r; r++) {
                if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
                    r[3] >= '0' && r[3] <= '7') {
                        *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
                        r += 3;
                } else {
                        *w++ = *r;
                }
        }
        *w = '\0';
}

int shoal_fuse_mount_info(const char *mountpoint, char *fstype, size_t fstype_len, unsigned *major,
                          unsigned *minor)
{
        FILE *fp = fopen("/proc/self/mountinfo", "re");
        if (!fp)
                return -errno;
        char *line = NULL;
        size_t cap = 0;
        int rc = -ENOENT;
        while (getline(&line, &cap, fp) > 0) {
                /* id parent major:minor root mountpoint options [tags...] - fstype source ... */
                unsigned ma, mi;
                char mp[4096], *sep = strstr(line, " - ");
                if (!sep || sscanf(line, "%*u %*u %u:%u %*s %4095s", &ma, &mi, mp) != 3)
                        continue;
                unescape(mp);
                if (strcmp(mp, mountpoint))
                        continue;
                char type[256];
                if (sscanf(sep + 3, "%255s", type) != 1)
                        continue;
                shoal_strlcpy(fstype, type, fstype_len);
                *major = ma;
                *minor = mi;
                rc = 0; /* keep going: the last mount on a path is the visible one */
        }
        free(line);
        fclose(fp);
        return rc;
}

struct shoal_fuse *shoal_fuse_mount(const struct shoal_fuse_config *cfg, char *err, size_t errlen)
{
        struct shoal_fuse *f = calloc(1, sizeof(*f));
        if (!f) {
                snprintf(err, errlen, "out of memory");
                return NULL;
        }
        f->cfg = *cfg;
        shoal_strlcpy(f->mountpoint, cfg->mountpoint, sizeof(f->mountpoint));
        f->cfg.mountpoint = f->mountpoint;
        f->node = cfg->node;
        f->ttl_s = (double)cfg->attr_ttl_ns / (double)SHOAL_NS_PER_SEC;
        f->block_size = cfg->node->vol.block_size;
        f->start_ns = (int64_t)shoal_wall_ns();
        f->uid = getuid();
        f->gid = getgid();
        pthread_mutex_init(&f->stats_mu, NULL);
        pthread_mutex_init(&f->dirs_mu, NULL);
        pthread_mutex_init(&f->writes_mu, NULL);
        pthread_mutex_init(&f->handles_mu, NULL);
        shoal_list_init(&f->writes);
        shoal_list_init(&f->handles);
        f->it = shoal_itable_create(cfg->attr_ttl_ns);
        if (!f->it || pthread_key_create(&f->buf_key, shoal_fuse_buf_free)) {
                snprintf(err, errlen, "out of memory");
                goto out_free;
        }
        f->buf_key_ok = true;
        if (shoal_fuse_vcache_init(f)) {
                snprintf(err, errlen, "out of memory");
                goto out_free;
        }

        char opts[256];
        snprintf(opts, sizeof(opts), "fsname=shoal,subtype=shoal,default_permissions,max_read=%u%s",
                 cfg->max_read, cfg->allow_other ? ",allow_other" : "");
        char *argv[] = {"shoal", "-o", opts, NULL};
        struct fuse_args args = FUSE_ARGS_INIT(3, argv);
        f->se = fuse_session_new(&args, &shoal_fuse_ops, sizeof(shoal_fuse_ops), f);
        fuse_opt_free_args(&args);
        if (!f->se) {
                snprintf(err, errlen, "cannot create a FUSE session (options %s)", opts);
                goto out_free;
        }
        if (fuse_session_mount(f->se, f->mountpoint)) {
                snprintf(err, errlen,
                         "cannot mount at %s: is /dev/fuse there and fuse3 installed, and may "
                         "this user mount?",
                         f->mountpoint);
                goto out_free;
        }
        f->mounted = true;
        return f;

out_free:
        shoal_fuse_destroy(f);
        return NULL;
}

void shoal_fuse_tune_readahead(struct shoal_fuse *f)
{
        /* The kernel offers FUSE only its default readahead (128 KiB) at INIT; a root mount
         * raises the bdi's window so that buffered readers get 1 MiB requests, many in flight. */
        if (geteuid() != 0)
                return;
        char type[64], path[128];
        unsigned ma, mi;
        if (shoal_fuse_mount_info(f->mountpoint, type, sizeof(type), &ma, &mi))
                return;
        snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", ma, mi);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0) {
                log_debug("fuse", "cannot open %s: %s", path, strerror(errno));
                return;
        }
        char val[32];
        int n = snprintf(val, sizeof(val), "%u", SHOAL_FUSE_READAHEAD_KB);
        if (write(fd, val, (size_t)n) != n)
                log_debug("fuse", "cannot set %s: %s", path, strerror(errno));
        else
                log_debug("fuse", "readahead of %s set to %u KiB", f->mountpoint,
                          SHOAL_FUSE_READAHEAD_KB);
        close(fd);
}

static struct fuse_session *signalled_se;
static volatile sig_atomic_t got_signal;
static int kick_fds[2] = {-1, -1}; /* the handler wakes the kicker */
static int loop_done;              /* atomic */

static void on_signal(int sig)
{
        int saved = errno;
        got_signal = sig;
        if (signalled_se)
                fuse_session_exit(signalled_se);
        if (kick_fds[1] >= 0 && write(kick_fds[1], "", 1) < 0) {
                /* full (already woken) or closed: nothing to do */
        }
        errno = saved;
}

/* libfuse 3.14's loop waits in sem_wait until a worker ends, and sees an exit only when a
 * signal interrupts that wait: a signal that lands between its check of the exit flag and the
 * wait is lost, and the mount serves on until the next request or an unmount (libfuse issue
 * 997, fixed upstream in 2025, after the version Debian 12 ships). So once the handler has run,
 * this thread sends the signal to the loop's thread again every 50 ms until the loop returns.
 * It has the signals blocked, as every thread but the loop's. */
static void *kicker(void *arg)
{
        pthread_t loop_thread = *(pthread_t *)arg;
        char c;
        while (read(kick_fds[0], &c, 1) < 0 && errno == EINTR)
                ;
        while (!__atomic_load_n(&loop_done, __ATOMIC_ACQUIRE)) {
                if (got_signal)
                        pthread_kill(loop_thread, got_signal);
                shoal_sleep_ns(50 * 1000000ULL);
        }
        return NULL;
}

int shoal_fuse_loop(struct shoal_fuse *f)
{
        /* Our own handlers, not fuse_set_signal_handlers: that one stands aside when a library
         * has installed a handler first (one here exits the process without unmounting). No
         * SA_RESTART, so that the wait of the loop's main thread returns to see the exit. */
        /* Not SIGHUP: that one reopens the log (logrotate), on the caller's thread for it. */
        static const int sigs[] = {SIGINT, SIGTERM};
        struct sigaction sa, old_sa[2];
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        signalled_se = f->se;
        sigset_t set, old;
        sigemptyset(&set);
        for (int i = 0; i < 2; i++) {
                sigaction(sigs[i], &sa, &old_sa[i]);
                sigaddset(&set, sigs[i]);
        }
        pthread_t self = pthread_self(), kick_th;
        bool kicking = false;
        __atomic_store_n(&loop_done, 0, __ATOMIC_RELEASE);
        if (!pipe2(kick_fds, O_CLOEXEC | O_NONBLOCK)) {
                fcntl(kick_fds[0], F_SETFL, 0); /* the kicker blocks; the handler must not */
                kicking = !shoal_thread_create(&kick_th, kicker, &self);
        }
        if (!kicking)
                log_warn("fuse", "no kicker thread: a signal at the loop's start may be missed");
        /* Only this thread takes the signals: the handler ends the loop that it waits in. */
        pthread_sigmask(SIG_UNBLOCK, &set, &old);
        int rc = -ENOMEM;
        struct fuse_loop_config *lc = fuse_loop_cfg_create();
        if (lc) {
                fuse_loop_cfg_set_clone_fd(lc, 1);
                fuse_loop_cfg_set_max_threads(lc, f->cfg.max_threads);
                rc = fuse_session_loop_mt(f->se, lc);
                fuse_loop_cfg_destroy(lc);
        }
        /* No more kicks (a late one stays pending: the signals are blocked again below, and the
         * handler is still ours until then). */
        __atomic_store_n(&loop_done, 1, __ATOMIC_RELEASE);
        if (kicking) {
                if (write(kick_fds[1], "", 1) < 0) {
                        /* full: the kicker is awake already */
                }
                pthread_join(kick_th, NULL);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        for (int i = 0; i < 2; i++) {
                if (kick_fds[i] >= 0)
                        close(kick_fds[i]);
                kick_fds[i] = -1;
        }
        for (int i = 0; i < 2; i++)
                sigaction(sigs[i], &old_sa[i], NULL);
        signalled_se = NULL;
        if (rc < 0 && got_signal) {
                /* Asked to stop: a worker interrupted on its way out is not a failure. */
                log_info("fuse", "loop ended by signal %d (libfuse said %s)", (int)got_signal,
                         strerror(-rc));
                rc = 0;
        }
        return rc < 0 ? rc : 0;
}

void shoal_fuse_destroy(struct shoal_fuse *f)
{
        if (!f)
                return;
        if (f->se) {
                if (f->mounted)
                        fuse_session_unmount(f->se);
                fuse_session_destroy(f->se);
        }
        shoal_fuse_writes_abandon(f);
        pthread_mutex_destroy(&f->writes_mu);
        shoal_fuse_handles_free(f);
        shoal_fuse_vcache_destroy(f);
        pthread_mutex_destroy(&f->handles_mu);
        if (f->buf_key_ok)
                pthread_key_delete(f->buf_key);
        shoal_itable_destroy(f->it);
        if (f->have_prev)
                shoal_metrics_snap_free(&f->stats_prev);
        pthread_mutex_destroy(&f->stats_mu);
        shoal_fuse_local_dirs_free(f);
        pthread_mutex_destroy(&f->dirs_mu);
        free(f);
}
