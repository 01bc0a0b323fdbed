/* fork() with libshoal, the way PyTorch DataLoader workers use it: a process that has read
 * through a client (threads, pooled connections and buffers exist) forks while one of its
 * threads keeps reading; every child reads every object byte-exact from several threads through
 * the inherited client and through a file opened before the fork; one child forks a grandchild
 * that does the same; the parent reads on. A child that hangs (a lock inherited held) is killed
 * and counted as a failure after a deadline. Built against the installed library by
 * tests/integration/test_lib.sh.
 *
 * usage: fork_reads STORAGE REFDIR [-c CHILDREN] [-r ROUNDS] [-f FORKS] [-o NAME=VALUE]...
 *
 * -f adds a storm of FORKS quick forks (each child reads one object and leaves) while the
 * background thread reads and the group agent beats: with a short heartbeat the registry's
 * SQLite is busy most of the time, so a fork that copied one of its global locks held would
 * leave a child hanging on its first call.
 *
 * Children end with _exit(): memory that only the parent's other threads referenced is
 * unreachable in a child by nature, so a leak check there would report fork, not shoal. The
 * parent ends with exit() and its leak check covers the library. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shoal/shoal.h>

#define CHILD_DEADLINE_S 120
#define QUICK_DEADLINE_S 30
#define READERS          4

struct obj {
        char *key;
        char *ref;
        uint64_t size;
};

static struct shoal_client *client;
static struct obj *objs;
static size_t nobjs;
static atomic_int failures;
static atomic_bool stop_bg;
static atomic_ullong bg_reads;

static void fail(const char *what, const char *key)
{
        fprintf(stderr, "fork_reads[%d]: %s: %s: %s\n", (int)getpid(), what, key, shoal_errmsg());
        atomic_fetch_add(&failures, 1);
}

/* Reads O whole through F (or a file opened here when F is NULL) in steps of STEP. */
static void read_obj(const struct obj *o, struct shoal_file *f, size_t step, char *buf)
{
        struct shoal_file *own = NULL;
        if (!f) {
                f = own = shoal_open(client, o->key, SHOAL_RDONLY);
                if (!f) {
                        fail("open", o->key);
                        return;
                }
        }
        for (uint64_t off = 0; off < o->size;) {
                ssize_t n = shoal_pread(f, buf, step, off);
                if (n <= 0) {
                        fail(n < 0 ? "pread" : "pread returned 0", o->key);
                        break;
                }
                if (memcmp(buf, o->ref + off, (size_t)n)) {
                        fprintf(stderr, "fork_reads[%d]: %s: bytes at %llu differ\n", (int)getpid(),
                                o->key, (unsigned long long)off);
                        atomic_fetch_add(&failures, 1);
                        break;
                }
                off += (uint64_t)n;
        }
        shoal_close(own);
}

static void *reader(void *arg)
{
        size_t first = (size_t)(uintptr_t)arg;
        char *buf = malloc(1 << 20);
        for (size_t i = 0; buf && i < nobjs; i++)
                read_obj(&objs[(first + i) % nobjs], NULL, (1 << 20) - 4096 * first, buf);
        free(buf);
        return NULL;
}

/* The parent's thread that keeps reading while the main thread forks. */
static void *background(void *arg)
{
        char *buf = malloc(256 << 10);
        unsigned seed = 1;
        while (buf && !atomic_load(&stop_bg)) {
                read_obj(&objs[rand_r(&seed) % nobjs], NULL, 256 << 10, buf);
                atomic_fetch_add(&bg_reads, 1);
        }
        free(buf);
        return arg;
}

static int read_everything(void)
{
        pthread_t th[READERS];
        for (uintptr_t i = 0; i < READERS; i++)
                if (pthread_create(&th[i], NULL, reader, (void *)i))
                        return -1;
        for (int i = 0; i < READERS; i++)
                pthread_join(th[i], NULL);
        return 0;
}

/* Writes every thread's stack of PID to stderr (gdb, bounded to 120 s), so that a hung child
 * says which lock it waits for before it is killed. */
static void dump_stacks(pid_t pid)
{
        char p[16];
        snprintf(p, sizeof(p), "%d", (int)pid);
        fprintf(stderr, "=== stacks of pid %d:\n", (int)pid);
        fflush(stderr);
        pid_t g = fork();
        if (g == 0) {
                dup2(2, 1);
                execlp("timeout", "timeout", "120", "gdb", "-p", p, "-batch", "-nx", "-ex",
                       "set pagination off", "-ex", "thread apply all bt", (char *)NULL);
                _exit(127);
        }
        int st;
        if (g > 0)
                waitpid(g, &st, 0);
        fprintf(stderr, "=== end of stacks of pid %d\n", (int)pid);
}

/* Waits up to DEADLINE seconds for PID; past that, dumps its stacks and kills it (a failure).
 * Returns its exit status. */
static int wait_child(pid_t pid, int deadline)
{
        time_t end = time(NULL) + deadline;
        for (;;) {
                int st;
                pid_t r = waitpid(pid, &st, WNOHANG);
                if (r == pid)
                        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                if (r < 0)
                        return 255;
                if (time(NULL) > end) {
                        fprintf(stderr, "fork_reads: child %d hung for %d s: killed\n", (int)pid,
                                deadline);
                        dump_stacks(pid);
                        kill(pid, SIGKILL);
                        waitpid(pid, &st, 0);
                        return 254;
                }
                usleep(20000);
        }
}

static void child_main(struct shoal_file *shared, int index, int depth) __attribute__((noreturn));
static void child_main(struct shoal_file *shared, int index, int depth)
{
        char *buf = malloc(1 << 20);
        read_obj(&objs[0], shared, 1 << 20, buf); /* a file opened before the fork */
        if (read_everything())
                atomic_fetch_add(&failures, 1);
        if (depth == 0 && index == 0) {
                /* Fork again, after this child's own threads and connections exist. */
                pid_t g = fork();
                if (g == 0)
                        child_main(shared, 1, depth + 1);
                int rc = g < 0 ? 255 : wait_child(g, CHILD_DEADLINE_S);
                if (rc) {
                        fprintf(stderr, "fork_reads: grandchild exited %d\n", rc);
                        atomic_fetch_add(&failures, 1);
                }
        }
        free(buf);
        if (index % 2 == 0) {
                /* The tidy way out: close what the parent opened, and the client. */
                if (shoal_close(shared) || shoal_client_close(client))
                        fail("close in child", objs[0].key);
        }
        fflush(stderr);
        _exit(atomic_load(&failures) ? 1 : 0);
}

static char *load(const char *dir, const char *key, uint64_t size)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, key);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        char *buf = malloc(size + 1);
        ssize_t n = fd >= 0 && buf ? pread(fd, buf, size, 0) : -1;
        if (fd >= 0)
                close(fd);
        if (n != (ssize_t)size) {
                fprintf(stderr, "fork_reads: cannot read reference %s\n", path);
                exit(1);
        }
        return buf;
}

int main(int argc, char **argv)
{
        int children = 4, rounds = 3, forks = 0, c;
        struct shoal_options *o = shoal_options_new();
        while ((c = getopt(argc, argv, "c:r:f:o:")) != -1) {
                if (c == 'c') {
                        children = atoi(optarg);
                } else if (c == 'f') {
                        forks = atoi(optarg);
                } else if (c == 'r') {
                        rounds = atoi(optarg);
                } else if (c == 'o') {
                        char *eq = strchr(optarg, '=');
                        if (!eq)
                                return 2;
                        *eq = '\0';
                        if (shoal_options_set(o, optarg, eq + 1)) {
                                fprintf(stderr, "fork_reads: %s\n", shoal_errmsg());
                                shoal_options_free(o);
                                return 2;
                        }
                } else {
                        return 2;
                }
        }
        if (argc - optind != 2 || children < 1 || children > 32) {
                fprintf(stderr, "usage: fork_reads STORAGE REFDIR [-c N] [-r N] [-o K=V]...\n");
                return 2;
        }
        client = shoal_client_open(argv[optind], o);
        shoal_options_free(o);
        if (!client) {
                fprintf(stderr, "fork_reads: open: %s\n", shoal_errmsg());
                return 1;
        }
        struct shoal_list *l = shoal_list_open(client, "", SHOAL_LIST_RECURSIVE);
        const struct shoal_entry *e;
        size_t cap = 0;
        while (l && (e = shoal_list_next(l))) {
                if (nobjs == cap) {
                        cap = cap ? 2 * cap : 64;
                        objs = realloc(objs, cap * sizeof(*objs));
                }
                objs[nobjs].key = strdup(e->key);
                objs[nobjs].size = e->size;
                objs[nobjs].ref = load(argv[optind + 1], e->key, e->size);
                nobjs++;
        }
        shoal_list_close(l);
        if (!nobjs) {
                fprintf(stderr, "fork_reads: no objects listed: %s\n", shoal_errmsg());
                return 1;
        }

        /* Warm: threads, pooled connections and buffers exist before the first fork. */
        if (read_everything())
                return 1;
        struct shoal_file *shared = shoal_open(client, objs[0].key, SHOAL_RDONLY);
        if (!shared) {
                fail("open", objs[0].key);
                return 1;
        }
        pthread_t bg;
        if (pthread_create(&bg, NULL, background, NULL))
                return 1;
        int bad_children = 0;
        for (int r = 0; r < rounds; r++) {
                pid_t pids[32];
                for (int i = 0; i < children; i++) {
                        pids[i] = fork();
                        if (pids[i] == 0)
                                child_main(shared, i, 0);
                        if (pids[i] < 0) {
                                perror("fork");
                                return 1;
                        }
                }
                char *buf = malloc(1 << 20);
                read_obj(&objs[0], shared, 1 << 20, buf); /* the parent reads on */
                free(buf);
                for (int i = 0; i < children; i++) {
                        int rc = wait_child(pids[i], CHILD_DEADLINE_S);
                        if (rc) {
                                fprintf(stderr, "fork_reads: child %d exited %d\n", (int)pids[i],
                                        rc);
                                bad_children++;
                        }
                }
        }
        for (int i = 0; i < forks; i++) {
                pid_t pid = fork();
                if (pid == 0) {
                        char *buf = malloc(1 << 20);
                        read_obj(&objs[(size_t)i % nobjs], NULL, 1 << 20, buf);
                        free(buf);
                        _exit(atomic_load(&failures) ? 1 : 0);
                }
                int rc = pid < 0 ? 255 : wait_child(pid, QUICK_DEADLINE_S);
                if (rc) {
                        fprintf(stderr, "fork_reads: quick child %d exited %d\n", (int)pid, rc);
                        bad_children++;
                }
        }
        atomic_store(&stop_bg, true);
        pthread_join(bg, NULL);
        if (read_everything())
                return 1;
        shoal_close(shared);
        if (shoal_client_close(client)) {
                fail("client close", "");
                return 1;
        }
        printf("children %d\nrounds %d\nquick_forks %d\nbackground_reads %llu\n", children, rounds,
               forks, (unsigned long long)atomic_load(&bg_reads));
        for (size_t i = 0; i < nobjs; i++) {
                free(objs[i].key);
                free(objs[i].ref);
        }
        free(objs);
        if (bad_children || atomic_load(&failures)) {
                fprintf(stderr, "fork_reads: %d children failed, %d failures in the parent\n",
                        bad_children, atomic_load(&failures));
                return 1;
        }
        return 0;
}
