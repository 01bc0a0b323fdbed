#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server/pipes.h"

#include <fcntl.h>
#include <unistd.h>

/* Pipes come at the size asked, are reused when given back empty, closed when given back with
 * bytes in them (an answer cut short must not leak into the next one), and bounded. */
static void test_pipes(void **state)
{
        (void)state;
        struct shoal_pipes *ps = shoal_pipes_create(2, 1 << 20);
        assert_non_null(ps);
        struct shoal_pipe *a = shoal_pipes_get(ps, 1 << 20);
        struct shoal_pipe *b = shoal_pipes_get(ps, 4096);
        assert_non_null(a);
        assert_non_null(b);
        assert_true(a->cap >= (1u << 20));
        assert_int_equal(fcntl(a->wr, F_GETPIPE_SZ), (int)a->cap);
        assert_null(shoal_pipes_get(ps, 4096)); /* the bound */
        int a_rd = a->rd;
        shoal_pipes_put(ps, a);
        struct shoal_pipe *c = shoal_pipes_get(ps, 4096);
        assert_ptr_equal(c, a); /* reused */
        assert_int_equal(c->rd, a_rd);
        /* Bytes left: closed, and a fresh, empty pipe takes its place. */
        assert_int_equal(write(c->wr, "left", 4), 4);
        c->bytes = 4;
        shoal_pipes_put(ps, c);
        assert_int_equal(fcntl(a_rd, F_GETFD), -1);
        struct shoal_pipe *d = shoal_pipes_get(ps, 4096);
        assert_non_null(d);
        char x;
        assert_int_equal(read(d->rd, &x, 1), -1); /* empty, non-blocking */
        /* Larger than the pool's pipes: none. */
        shoal_pipes_put(ps, d);
        assert_null(shoal_pipes_get(ps, 2u << 20));
        shoal_pipes_put(ps, b);
        shoal_pipes_destroy(ps);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pipes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
