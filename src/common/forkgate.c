#include "common/forkgate.h"

#include <pthread.h>

/* A mutex and a count rather than a pthread rwlock: the child must reset the gate, and glibc's
 * rwlock remembers its writer by kernel thread id, which the forking thread changes in the
 * child. Writer-preferring: once a fork is pending, new entries wait, so a stream of reads cannot
 * starve it. */
static struct {
        pthread_mutex_t mu;
        pthread_cond_t cond;
        unsigned inside;
        bool closing;
        bool installed;
        unsigned bg_inside; /* background threads (shoal_fork_gate_bg_enter) */
        bool bg_closing;
} gate = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

void shoal_fork_gate_install(void)
{
        __atomic_store_n(&gate.installed, true, __ATOMIC_RELEASE);
}

bool shoal_fork_gate_enter(void)
{
        if (!__atomic_load_n(&gate.installed, __ATOMIC_ACQUIRE))
                return false;
        pthread_mutex_lock(&gate.mu);
        while (gate.closing)
                pthread_cond_wait(&gate.cond, &gate.mu);
        gate.inside++;
        pthread_mutex_unlock(&gate.mu);
        return true;
}

bool shoal_fork_gate_tryenter(bool *taken)
{
        *taken = false;
        if (!__atomic_load_n(&gate.installed, __ATOMIC_ACQUIRE))
                return true;
        pthread_mutex_lock(&gate.mu);
        if (!gate.closing) {
                gate.inside++;
                *taken = true;
        }
        pthread_mutex_unlock(&gate.mu);
        return *taken;
}

void shoal_fork_gate_exit(bool taken)
{
        if (!taken)
                return;
        pthread_mutex_lock(&gate.mu);
        if (--gate.inside == 0 && gate.closing)
                pthread_cond_broadcast(&gate.cond);
        pthread_mutex_unlock(&gate.mu);
}

void shoal_fork_gate_close(void)
{
        pthread_mutex_lock(&gate.mu);
        while (gate.closing) /* another thread's fork */
                pthread_cond_wait(&gate.cond, &gate.mu);
        gate.closing = true;
        while (gate.inside)
                pthread_cond_wait(&gate.cond, &gate.mu);
        /* Only now: the callers that just left may have waited for these threads. */
        gate.bg_closing = true;
        while (gate.bg_inside)
                pthread_cond_wait(&gate.cond, &gate.mu);
        pthread_mutex_unlock(&gate.mu);
}

void shoal_fork_gate_open(void)
{
        pthread_mutex_lock(&gate.mu);
        gate.closing = false;
        gate.bg_closing = false;
        pthread_cond_broadcast(&gate.cond);
        pthread_mutex_unlock(&gate.mu);
}

void shoal_fork_gate_reset_child(void)
{
        /* Threads that waited here in the parent do not exist in the child: fresh state. */
        pthread_mutex_init(&gate.mu, NULL);
        pthread_cond_init(&gate.cond, NULL);
        gate.inside = 0;
        gate.closing = false;
        gate.bg_inside = 0;
        gate.bg_closing = false;
}

bool shoal_fork_gate_bg_enter(void)
{
        if (!__atomic_load_n(&gate.installed, __ATOMIC_ACQUIRE))
                return false;
        pthread_mutex_lock(&gate.mu);
        while (gate.bg_closing)
                pthread_cond_wait(&gate.cond, &gate.mu);
        gate.bg_inside++;
        pthread_mutex_unlock(&gate.mu);
        return true;
}

void shoal_fork_gate_bg_exit(bool taken)
{
        if (!taken)
                return;
        pthread_mutex_lock(&gate.mu);
        if (--gate.bg_inside == 0 && gate.bg_closing)
                pthread_cond_broadcast(&gate.cond);
        pthread_mutex_unlock(&gate.mu);
}
