#include "cli/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int ready_fd = -1;

int shoal_daemon_start(void)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC))
                return -errno;
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid > 0) {
                /* Parent: wait for the child's verdict, then exit with it. */
                close(p[1]);
                char buf[1024];
                ssize_t n, total = 0;
                while ((n = read(p[0], buf + total, sizeof(buf) - 1 - (size_t)total)) > 0)
                        total += n;
                buf[total > 0 ? total : 0] = '\0';
                if (total > 0 && buf[0] == 'R')
                        _exit(0);
                if (total > 1)
                        fprintf(stderr, "%s\n", buf + 1);
                int st = 0;
                waitpid(pid, &st, 0);
                _exit(total > 0 && buf[0] == '2' ? 2 : 1);
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
        ssize_t n = write(ready_fd, "R", 1);
        (void)n;
        close(ready_fd);
        ready_fd = -1;
        int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
                dup2(fd, STDIN_FILENO);
                dup2(fd, STDOUT_FILENO);
                /* stderr stays where logs go unless --log-file moved them */
                close(fd);
        }
}

void shoal_daemon_fail(int code, const char *msg)
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

bool shoal_daemon_active(void)
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

int shoal_daemon_report(const char *cmd, const char *err, int code)
{
        char line[1200];
        snprintf(line, sizeof(line), "shoal %s: %s", cmd, err);
        if (shoal_daemon_active())
                shoal_daemon_fail(code, line);
        else
                fprintf(stderr, "%s\n", line);
        return code;
}
