#include "common/thread.h"

#include <stdbool.h>

struct start {
        void *(*fn)(void *);
        void *arg;
        pthread_mutex_t mu;
        pthread_cond_t cond;
        bool running;
};

static void *trampoline(void *p)
{
        struct start *s = p; /* on the creator's stack: read before saying so */
        void *(*fn)(void *) = s->fn;
        void *arg = s->arg;
        pthread_mutex_lock(&s->mu);
        s->running = true;
        pthread_cond_signal(&s->cond);
        pthread_mutex_unlock(&s->mu);
        return fn(arg);
}

int shoal_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
        struct start s = {.fn = fn, .arg = arg};
        pthread_mutex_init(&s.mu, NULL);
        pthread_cond_init(&s.cond, NULL);
        int rc = pthread_create(t, NULL, trampoline, &s);
        if (!rc) {
                pthread_mutex_lock(&s.mu);
                while (!s.running)
                        pthread_cond_wait(&s.cond, &s.mu);
                pthread_mutex_unlock(&s.mu);
        }
        pthread_cond_destroy(&s.cond);
        pthread_mutex_destroy(&s.mu);
        return rc;
}
