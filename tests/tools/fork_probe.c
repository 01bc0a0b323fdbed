/* Forks right after starting threads, ROUNDS times, and counts the children that hang (issue 24,
 * docs/reliability.md "The suite with both cores busy"). Each round starts 4 threads (which wait
 * until the fork is made, so that only their start-up can be caught), forks at once, and the child
 * starts one thread of its own and exits; a child that has not exited within 3 s hung and is
 * killed. Built with AddressSanitizer (GCC 12's has no fork handler for its allocator), a plain
 * pthread_create lets the fork catch a new thread inside the runtime's start-up with an allocator
 * lock held, and some children hang on a busy machine; with -s the threads start through
 * shoal_thread_create, which returns only once they run.
 *
 * usage: fork_probe [-s] [ROUNDS]   prints "hung N of ROUNDS"; exit 1 when any hung. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/thread.h"
#include "common/util.h"

#define THREADS 4

static bool released; /* atomic: the parent's threads may end (after its fork) */

/* Waits for the fork to be made: a thread that ends meanwhile (its runtime giving its caches
 * back, with locks) would be another way to catch one. */
static void *nap(void *arg)
{
        while (!__atomic_load_n(&released, __ATOMIC_ACQUIRE))
                shoal_sleep_ns(100 * SHOAL_NS_PER_US);
        return arg;
}

static int start(bool shoal, pthread_t *t)
{
        return shoal ? shoal_thread_create(t, nap, NULL) : pthread_create(t, NULL, nap, NULL);
}

/* Whether child P exited within 3 s (else it is killed and reaped). */
static bool exited(pid_t p)
{
        int st;
        for (int ms = 0; ms < 3000; ms++) {
                if (waitpid(p, &st, WNOHANG) == p)
                        return true;
                shoal_sleep_ns(SHOAL_NS_PER_MS);
        }
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
        return false;
}

int main(int argc, char **argv)
{
        bool shoal = argc > 1 && !strcmp(argv[1], "-s");
        int rounds = argc > 1 + shoal ? atoi(argv[1 + shoal]) : 3000;
        if (rounds <= 0) {
                fprintf(stderr, "usage: fork_probe [-s] [ROUNDS]\n");
                return 2;
        }
        int hung = 0;
        for (int i = 0; i < rounds; i++) {
                pthread_t t[THREADS];
                __atomic_store_n(&released, false, __ATOMIC_RELEASE);
                for (int k = 0; k < THREADS; k++)
                        if (start(shoal, &t[k]))
                                return 1;
                pid_t p = fork();
                if (p == 0) {
                        __atomic_store_n(&released, true, __ATOMIC_RELEASE);
                        pthread_t c;
                        if (!pthread_create(&c, NULL, nap, NULL))
                                pthread_join(c, NULL);
                        _exit(0);
                }
                __atomic_store_n(&released, true, __ATOMIC_RELEASE);
                for (int k = 0; k < THREADS; k++)
                        pthread_join(t[k], NULL);
                if (p > 0 && !exited(p))
                        hung++;
        }
        printf("hung %d of %d\n", hung, rounds);
        return hung ? 1 : 0;
}
