/* -d: run in the background once ready. The parent stays until the child reports that it is
 * serving (exit 0) or that it failed (its one-line error, and its exit code). */
#ifndef SHOAL_CLI_DAEMON_H
#define SHOAL_CLI_DAEMON_H

#include <signal.h>
#include <stdbool.h>

/* Forks; returns 0 in the child (the parent exits when the child reports). Call before any
 * thread starts. */
int shoal_daemon_start(void);
/* The child is ready: the parent exits 0. */
void shoal_daemon_ready(void);
/* The child failed with CODE and MSG: the parent prints MSG and exits CODE. */
void shoal_daemon_fail(int code, const char *msg);
bool shoal_daemon_active(void);

/* Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and writes that set into SET
 * (unless NULL). Call
 * before any thread starts, so that every thread inherits the mask and the caller alone takes
 * those signals (sigwait, signalfd). */
void shoal_daemon_block_signals(sigset_t *set);
/* Reports the failure "shoal CMD: ERR": to the waiting parent when running in the background
 * (which prints it and exits CODE), else on stderr. Returns CODE. */
int shoal_daemon_report(const char *cmd, const char *err, int code);

#endif
