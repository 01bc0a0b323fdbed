/* The fork gate (common/forkgate.h): off until installed; closing waits for every thread inside
 * and holds new entries off (blocking ones wait, trying ones are refused); a child's reset leaves
 * an open, empty gate; a real fork through libshoal-style handlers neither deadlocks nor copies
 * the gate closed; threads started by shoal_thread_create are running when it returns. The order of
 * the tests matters: the first runs before the gate is installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/bufpool.h"
#include "common/forkgate.h"
#include "common/thread.h"
#include "common/util.h"

#ifdef SHOAL_ASAN
#include <sanitizer/asan_interface.h>
#endif

static void test_off_until_installed(void **state)
{
        bool taken = true;
        assert_false(shoal_fork_gate_enter());
        assert_true(shoal_fork_gate_tryenter(&taken));
        assert_false(taken);
        shoal_fork_gate_exit(false);
}

struct closer {
        pthread_t th;
        bool closed; /* atomic */
};

static void *close_main(void *arg)
{
        struct closer *c = arg;
        shoal_fork_gate_close();
        __atomic_store_n(&c->closed, true, __ATOMIC_RELEASE);
        return NULL;
}

/* Whether the closer has closed the gate within NS nanoseconds (polled). */
static bool closed_within(struct closer *c, uint64_t ns)
{
        uint64_t end = shoal_now_ns() + ns;
        while (!__atomic_load_n(&c->closed, __ATOMIC_ACQUIRE)) {
                if (shoal_now_ns() > end)
                        return false;
                shoal_sleep_ns(1000000);
        }
        return true;
}

static void test_close_waits_for_those_inside(void **state)
{
        shoal_fork_gate_install();
        assert_true(shoal_fork_gate_enter());
        bool taken;
        assert_true(shoal_fork_gate_tryenter(&taken));
        assert_true(taken);

        struct closer c = {0};
        assert_int_equal(pthread_create(&c.th, NULL, close_main, &c), 0);
        /* Two are inside: the close must not finish. */
        assert_false(closed_within(&c, 200000000ULL));
        shoal_fork_gate_exit(true);
        assert_false(closed_within(&c, 100000000ULL));
        /* Pending: a try is refused even before the last one leaves. */
        bool t2 = true;
        assert_false(shoal_fork_gate_tryenter(&t2));
        assert_false(t2);
        shoal_fork_gate_exit(true);
        assert_true(closed_within(&c, 5000000000ULL));
        pthread_join(c.th, NULL);

        /* Closed: tries are refused until it opens again. */
        assert_false(shoal_fork_gate_tryenter(&t2));
        shoal_fork_gate_open();
        assert_true(shoal_fork_gate_tryenter(&t2));
        assert_true(t2);
        shoal_fork_gate_exit(t2);
}

static void *enter_main(void *arg)
{
        bool *entered = arg;
        bool t = shoal_fork_gate_enter();
        __atomic_store_n(entered, true, __ATOMIC_RELEASE);
        shoal_fork_gate_exit(t);
        return NULL;
}

static void test_entries_wait_while_closed(void **state)
{
        shoal_fork_gate_close();
        bool entered = false;
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, enter_main, &entered), 0);
        shoal_sleep_ns(200000000ULL);
        assert_false(__atomic_load_n(&entered, __ATOMIC_ACQUIRE));
        shoal_fork_gate_open();
        pthread_join(th, NULL);
        assert_true(entered);
}

static void *bg_enter_main(void *arg)
{
        bool *entered = arg;
        bool t = shoal_fork_gate_bg_enter();
        __atomic_store_n(entered, true, __ATOMIC_RELEASE);
        shoal_fork_gate_bg_exit(t);
        return NULL;
}

/* Issue 32: the background door (the RDMA threads) stays open while a pending fork waits for the
 * callers inside (they may wait for those threads), is shut once they left, waits for a turn in
 * progress, and holds background threads off until the gate opens again. */
static void test_background_door(void **state)
{
        assert_true(shoal_fork_gate_enter()); /* a caller inside, waiting for an RDMA answer */
        struct closer c = {0};
        assert_int_equal(pthread_create(&c.th, NULL, close_main, &c), 0);
        shoal_sleep_ns(100000000ULL);
        assert_false(__atomic_load_n(&c.closed, __ATOMIC_ACQUIRE));
        bool bg = shoal_fork_gate_bg_enter(); /* the answer's turn: not held off */
        assert_true(bg);
        shoal_fork_gate_exit(true);                    /* the caller leaves ... */
        assert_false(closed_within(&c, 200000000ULL)); /* ... the turn is still going */
        shoal_fork_gate_bg_exit(bg);
        assert_true(closed_within(&c, 5000000000ULL));
        pthread_join(c.th, NULL);
        bool entered = false;
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, bg_enter_main, &entered), 0);
        shoal_sleep_ns(200000000ULL);
        assert_false(__atomic_load_n(&entered, __ATOMIC_ACQUIRE)); /* the fork is being made */
        shoal_fork_gate_open();
        pthread_join(th, NULL);
        assert_true(entered);
}

static void before(void)
{
        shoal_fork_gate_close();
}

static void parent(void)
{
        shoal_fork_gate_open();
}

static void child(void)
{
        shoal_fork_gate_reset_child();
}

static void test_fork_with_handlers(void **state)
{
        assert_int_equal(pthread_atfork(before, parent, child), 0);
        for (int i = 0; i < 20; i++) {
                pid_t pid = fork();
                assert_true(pid >= 0);
                if (pid == 0) {
                        /* The child's gate is open and empty: both kinds of entry work. */
                        bool t;
                        bool ok = shoal_fork_gate_tryenter(&t) && t;
                        shoal_fork_gate_exit(t);
                        bool e = shoal_fork_gate_enter();
                        shoal_fork_gate_exit(e);
                        _exit(ok && e ? 0 : 1);
                }
                int st;
                assert_int_equal(waitpid(pid, &st, 0), pid);
                assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                bool t;
                assert_true(shoal_fork_gate_tryenter(&t));
                shoal_fork_gate_exit(t);
        }
}

/* Waits until *ARG is set: a live thread, whose CPU clock can be read. */
static void *idle_main(void *arg)
{
        while (!__atomic_load_n((bool *)arg, __ATOMIC_ACQUIRE))
                shoal_sleep_ns(SHOAL_NS_PER_MS);
        return NULL;
}

/* shoal_thread_create returns only once the thread has run (common/thread.h: no fork may catch a
 * thread of ours inside its start-up): its CPU clock has counted time by then. A plain
 * pthread_create fails this at once: the creator nearly always returns before the new thread is
 * first scheduled. */
static void test_thread_create_returns_running(void **state)
{
        for (int i = 0; i < 200; i++) {
                pthread_t th;
                bool done = false;
                assert_int_equal(shoal_thread_create(&th, idle_main, &done), 0);
                clockid_t clk;
                struct timespec ts = {0, 0};
                assert_int_equal(pthread_getcpuclockid(th, &clk), 0);
                assert_int_equal(clock_gettime(clk, &ts), 0);
                assert_true(ts.tv_sec > 0 || ts.tv_nsec > 0);
                __atomic_store_n(&done, true, __ATOMIC_RELEASE);
                assert_int_equal(pthread_join(th, NULL), 0);
        }
}

#ifdef SHOAL_ASAN
/* Threads parked deep in instrumented frames (their stacks' shadow poisoned around each frame's
 * locals) while the test forks. */
static pthread_barrier_t parked;
static bool unpark;

__attribute__((noinline)) static void park_deep(int depth)
{
        volatile char local[2048];
        local[0] = (char)depth;
        if (depth > 0) {
                park_deep(depth - 1);
        } else {
                pthread_barrier_wait(&parked);
                while (!__atomic_load_n(&unpark, __ATOMIC_ACQUIRE))
                        shoal_sleep_ns(SHOAL_NS_PER_MS);
        }
        (void)local[0];
}

static void *park_main(void *arg)
{
        park_deep(64);
        return arg;
}

static void *nop_main(void *arg)
{
        return arg;
}

/* In a child forked while threads ran, buffer pools are addressable (common/util.h,
 * shoal_mapped_fresh): glibc frees the parent's thread stacks in the child once a thread of the
 * child ends, new mappings land there, and without the unpoisoning their shadow still holds the
 * poison of the parked frames (several of 64 pools, before the fix). */
static void test_child_mappings_addressable(void **state)
{
        enum {
                THREADS = 12,
                POOLS = 64
        };
        pthread_t th[THREADS];
        assert_int_equal(pthread_barrier_init(&parked, NULL, THREADS + 1), 0);
        for (int i = 0; i < THREADS; i++)
                assert_int_equal(shoal_thread_create(&th[i], park_main, NULL), 0);
        pthread_barrier_wait(&parked);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                pthread_t x;
                if (pthread_create(&x, NULL, nop_main, NULL) || pthread_join(x, NULL))
                        _exit(3);
                int bad = 0;
                for (int i = 0; i < POOLS; i++) {
                        struct shoal_bufpool *p = shoal_bufpool_create(8 * SHOAL_MiB, 1);
                        if (!p)
                                _exit(4);
                        size_t len;
                        void *base = shoal_bufpool_base(p, &len);
                        bad += __asan_region_is_poisoned(base, len) != NULL;
                        /* kept: the next pool maps elsewhere */
                }
                _exit(bad ? 1 : 0);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        __atomic_store_n(&unpark, true, __ATOMIC_RELEASE);
        for (int i = 0; i < THREADS; i++)
                assert_int_equal(pthread_join(th[i], NULL), 0);
        pthread_barrier_destroy(&parked);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
}
#endif

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_off_until_installed),
                cmocka_unit_test(test_close_waits_for_those_inside),
                cmocka_unit_test(test_entries_wait_while_closed),
                cmocka_unit_test(test_background_door),
                cmocka_unit_test(test_fork_with_handlers),
                cmocka_unit_test(test_thread_create_returns_running),
#ifdef SHOAL_ASAN
                cmocka_unit_test(test_child_mappings_addressable),
#endif
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
