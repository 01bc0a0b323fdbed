/* Starting threads that have begun running when the call returns.
 *
 * A thread is not scheduled at once: on a busy machine a new thread may still be inside its
 * runtime's start-up (TLS, stack bounds and, under AddressSanitizer, the allocator) long after
 * pthread_create returned. A library user that forks in that window (a DataLoader forking its
 * workers right after opening a client) copies into the child a lock the starting thread held;
 * GCC 12's AddressSanitizer has no fork handler for its allocator, so the child's first thread
 * then waits forever on a region lock that nobody in the child will release (issue 24: a
 * DataLoader worker hung in torch's first pthread_create). Waiting until the thread runs its
 * own function (its start-up done) closes that window; what it does afterwards is the fork
 * gate's business (common/forkgate.h). It costs the creator one scheduling round trip. */
#ifndef SHOAL_COMMON_THREAD_H
#define SHOAL_COMMON_THREAD_H

#include <pthread.h>

/* pthread_create(T, NULL, FN, ARG), returning once the thread has entered FN (or its error,
 * as pthread_create's). */
int shoal_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
