/* -d: run in the background once ready, detached from the caller. The parent stays until the
 * child reports that it is serving (exit 0) or that it failed (its one-line error, and its exit
 * code); the child runs in a new session and, once ready, has stdin and stdout on /dev/null and
 * stderr on its log file, so that nothing of the caller's (a terminal, a pipe a script reads)
 * stays open in it. */
#ifndef SHOAL_CLI_DAEMON_H
#define SHOAL_CLI_DAEMON_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

/* The log file of a background process: FLAG (--log-file) when given, else /var/log/shoal.log
 * as root and ~/.shoal/shoal.log otherwise (creating ~/.shoal). Writes it into OUT. Returns 0 or
 * -errno (the folder cannot be made, the path is too long). */
int shoal_daemon_log_path(const char *flag, char *out, size_t outlen);

/* Forks; returns 0 in the child, or -errno when fork fails. The parent waits for the child's
 * verdict and exits with it: once the child is ready, "shoal CMD: running in the background,
 * logging to LOG_PATH" on stderr and 0; else the child's error line and code, or 1 when the
 * child died without one. Call before any thread starts. */
int shoal_daemon_start(const char *cmd, const char *log_path);
/* The child is ready: the parent exits 0, and the child lets go of the caller's stdio (see
 * above). A no-op in the foreground. */
void shoal_daemon_ready(void);

/* Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and writes that set into SET
 * (unless NULL). Call
 * before any thread starts, so that every thread inherits the mask and the caller alone takes
 * those signals (sigwait, signalfd). */
void shoal_daemon_block_signals(sigset_t *set);
/* SIGHUP reopens the log file (logrotate): a thread takes it with sigwait, so SIGHUP must be
 * blocked in every thread (shoal_daemon_block_signals before any thread starts) and taken by no
 * other. Returns 0 or -errno. stop ends that thread; a SIGHUP after it stays pending. */
int shoal_daemon_hup_start(const char *cmd);
void shoal_daemon_hup_stop(void);

/* Reports the failure "shoal CMD: ERR": to the waiting parent when running in the background
 * (which prints it and exits CODE), else on stderr. Returns CODE. */
int shoal_daemon_report(const char *cmd, const char *err, int code);

#endif
