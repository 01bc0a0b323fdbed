/* Quiescing a process's own threads around fork().
 *
 * A process that forks after starting threads (a program using libshoal, then forking PyTorch
 * DataLoader workers) copies into the child every lock another thread held at that instant; the
 * child then deadlocks on it. Our own locks die with the parent's node (the child builds a new
 * one), but some are process-wide: SQLite's global mutexes (the group agent's heartbeat), OpenSSL
 * and libcurl state (store calls), the metrics registry. The gate keeps fork() out of those
 * sections: work that may hold such a lock runs inside the gate, and libshoal's pthread_atfork
 * prepare handler closes it (waiting for work inside to finish) until the fork is done.
 *
 * The gate is off until a library installs it (the shoal binary never does); then enter/exit are
 * a shared entry that a pending fork closes, so a stream of reads cannot starve the fork. Threads
 * that other threads may join (the group agent, readahead workers) must only try to enter: a
 * thread blocked on the gate while its joiner holds the gate would deadlock the fork. */
#ifndef SHOAL_COMMON_FORKGATE_H
#define SHOAL_COMMON_FORKGATE_H

#include <stdbool.h>

/* Turns the gate on for the rest of the process's life. Idempotent, thread-safe. */
void shoal_fork_gate_install(void);

/* Enters the gate, waiting while a fork is in progress. Returns whether the gate was taken: pass
 * that to shoal_fork_gate_exit. Not recursive: a thread inside must not enter again. */
bool shoal_fork_gate_enter(void);
/* Enters unless a fork is pending or in progress. Returns whether the work may run now (false:
 * skip it or try later); *TAKEN says whether to call shoal_fork_gate_exit(true) after it. */
bool shoal_fork_gate_tryenter(bool *taken);
/* Leaves the gate if TAKEN. */
void shoal_fork_gate_exit(bool taken);

/* Background threads that serve callers inside the gate (the RDMA client's progress and
 * connector threads: a read inside the gate waits for them) cannot be held off with the callers,
 * or the fork would wait for a caller that waits for them. They go through a second door around
 * each turn of work (libfabric calls that take process-wide locks, which a child opening its own
 * fabric needs): close shuts it only once every caller has left, and waits for the turns in
 * progress. bg_enter waits while that door is shut (a fork is being made; never while callers
 * are inside, so a caller that joins such a thread cannot deadlock with it). Returns whether it
 * was taken, for shoal_fork_gate_bg_exit. */
bool shoal_fork_gate_bg_enter(void);
void shoal_fork_gate_bg_exit(bool taken);

/* For the installer's pthread_atfork handlers: close waits for every thread inside to leave and
 * holds new ones off (prepare); open lets them in again (parent); reset_child gives the child an
 * open, empty gate (the parent's waiters are not there). */
void shoal_fork_gate_close(void);
void shoal_fork_gate_open(void);
void shoal_fork_gate_reset_child(void);

#endif
