#include "cli/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"

static int ready_fd = -1;

int shoal_daemon_log_path(const char *flag, char *out, size_t outlen)
{
        if (flag) {
                if (shoal_strlcpy(out, flag, outlen) >= outlen)
                        return -ENAMETOOLONG;
                return 0;
        }
        if (geteuid() == 0) {
                shoal_strlcpy(out, "/var/log/shoal.log", outlen);
                return 0;
        }
        const char *home = shoal_config_env()->home;
        if (!home || !*home)
                return -ENOENT;
        if (snprintf(out, outlen, "%s/.shoal", home) >= (int)outlen)
                return -ENAMETOOLONG;
        if (mkdir(out, 0700) && errno != EEXIST)
                return -errno;
        if (snprintf(out, outlen, "%s/.shoal/shoal.log", home) >= (int)outlen)
                return -ENAMETOOLONG;
        return 0;
}

/* The parent's side: the child's verdict on the pipe R, then exit with it. */
static void __attribute__((noreturn))
parent_wait(const char *cmd, const char *log_path, pid_t pid, int r)
{
        char buf[1024];
        size_t total = 0;
        for (;;) {
                ssize_t n = read(r, buf + total, sizeof(buf) - 1 - total);
                if (n > 0)
                        total += (size_t)n;
                else if (n == 0 || errno != EINTR || total == sizeof(buf) - 1)
                        break;
        }
        buf[total] = '\0';
        if (total > 0 && buf[0] == 'R') {
                /* Said only now: a start that fails is its error line alone. */
                fprintf(stderr, "shoal %s: running in the background, logging to %s\n", cmd,
                        log_path);
                _exit(0);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        if (total > 1) {
                fprintf(stderr, "%s\n", buf + 1);
                _exit(buf[0] == '2' ? 2 : 1);
        }
        if (WIFSIGNALED(st))
                fprintf(stderr,
                        "shoal %s: the background process was killed by signal %d during "
                        "start-up (see its log)\n",
                        cmd, WTERMSIG(st));
        else
                fprintf(stderr,
                        "shoal %s: the background process exited with %d during start-up "
                        "(see its log)\n",
                        cmd, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        _exit(WIFEXITED(st) && WEXITSTATUS(st) ? WEXITSTATUS(st) : 1);
}

int shoal_daemon_start(const char *cmd, const char *log_path)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC))
                return -errno;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                close(p[0]);
                close(p[1]);
                return -e;
        }
        if (pid > 0) {
                close(p[1]);
                parent_wait(cmd, log_path, pid, p[0]);
        }
        close(p[0]);
        ready_fd = p[1];
        setsid();
        return 0;
}

void shoal_daemon_ready(void)
{
        if (ready_fd < 0)
                return;
        /* Let go of the caller's stdio first: once the parent has exited, whoever waits on its
         * output (a pipe, a CI job) must see it end. */
        int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
                dup2(fd, STDIN_FILENO);
                dup2(fd, STDOUT_FILENO);
                /* stderr (libraries, sanitizers) goes where the log goes */
                dup2(shoal_log_fd() != STDERR_FILENO ? shoal_log_fd() : fd, STDERR_FILENO);
                close(fd);
        }
        ssize_t n = write(ready_fd, "R", 1);
        (void)n;
        close(ready_fd);
        ready_fd = -1;
}

static void daemon_fail(int code, const char *msg)
{
        if (ready_fd < 0)
                return;
        char buf[1024];
        int n = snprintf(buf, sizeof(buf), "%c%s", code == 2 ? '2' : '1', msg);
        if (n > 0) {
                ssize_t w = write(ready_fd, buf, (size_t)n);
                (void)w;
        }
        close(ready_fd);
        ready_fd = -1;
}

static bool daemon_active(void)
{
        return ready_fd >= 0;
}

void shoal_daemon_block_signals(sigset_t *set)
{
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGINT);
        sigaddset(&s, SIGTERM);
        sigaddset(&s, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &s, NULL);
        if (set)
                *set = s;
}

/* SIGHUP: the thread that takes it (blocked everywhere else) reopens the log. */
static pthread_t hup_thread;
static bool hup_running;
static int hup_stop;
static const char *hup_cmd;

static void *hup_main(void *arg)
{
        (void)arg;
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGHUP);
        for (;;) {
                int sig = 0;
                if (sigwait(&s, &sig))
                        continue;
                if (__atomic_load_n(&hup_stop, __ATOMIC_ACQUIRE))
                        return NULL;
                int rc = shoal_log_reopen();
                if (rc)
                        log_error(hup_cmd,
                                  "SIGHUP: cannot reopen the log file: %s; still "
                                  "writing the old one",
                                  strerror(-rc));
                else
                        log_info(hup_cmd, "SIGHUP: log file reopened");
        }
}

int shoal_daemon_hup_start(const char *cmd)
{
        hup_cmd = cmd;
        __atomic_store_n(&hup_stop, 0, __ATOMIC_RELEASE);
        int rc = shoal_thread_create(&hup_thread, hup_main, NULL);
        hup_running = !rc;
        return -rc;
}

void shoal_daemon_hup_stop(void)
{
        if (!hup_running)
                return;
        __atomic_store_n(&hup_stop, 1, __ATOMIC_RELEASE);
        pthread_kill(hup_thread, SIGHUP); /* to that thread alone: its sigwait takes it */
        pthread_join(hup_thread, NULL);
        hup_running = false;
}

int shoal_daemon_report(const char *cmd, const char *err, int code)
{
        char line[1200];
        snprintf(line, sizeof(line), "shoal %s: %s", cmd, err);
        if (daemon_active()) {
                log_error(cmd, "%s", err); /* the log says why too */
                daemon_fail(code, line);
        } else
                fprintf(stderr, "%s\n", line);
        return code;
}
