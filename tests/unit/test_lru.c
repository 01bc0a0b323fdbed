/* common/lru.h: the count through adds and deletes, recency (touch, add_cold), a delete of a node
 * in no LRU, and trim handing the coldest nodes to its callback in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/lru.h"

struct item {
        int v;
        struct shoal_list node;
};

static int v_of(struct shoal_list *n)
{
        return shoal_list_entry(n, struct item, node)->v;
}

static void test_count_and_order(void **state)
{
        struct shoal_lru lru;
        struct item it[4];
        shoal_lru_init(&lru);
        assert_int_equal(shoal_lru_count(&lru), 0);
        assert_null(shoal_lru_coldest(&lru));
        for (int i = 0; i < 4; i++) {
                it[i].v = i;
                shoal_list_init(&it[i].node);
                shoal_lru_add(&lru, &it[i].node);
        }
        assert_int_equal(shoal_lru_count(&lru), 4);
        assert_int_equal(v_of(shoal_lru_coldest(&lru)), 0);
        shoal_lru_touch(&lru, &it[0].node); /* 0 3 2 1 */
        assert_int_equal(v_of(shoal_lru_coldest(&lru)), 1);
        assert_int_equal(shoal_lru_count(&lru), 4);
        shoal_lru_del(&lru, &it[1].node);
        assert_int_equal(shoal_lru_count(&lru), 3);
        assert_int_equal(v_of(shoal_lru_coldest(&lru)), 2);
        /* a node in no LRU: nothing changes */
        shoal_lru_del(&lru, &it[1].node);
        assert_int_equal(shoal_lru_count(&lru), 3);
        /* worthless: reused first */
        shoal_lru_add_cold(&lru, &it[1].node);
        assert_int_equal(v_of(shoal_lru_coldest(&lru)), 1);
        assert_int_equal(shoal_lru_count(&lru), 4);
        for (int i = 0; i < 4; i++)
                shoal_lru_del(&lru, &it[i].node);
        assert_int_equal(shoal_lru_count(&lru), 0);
        assert_null(shoal_lru_coldest(&lru));
}

struct evicted {
        int v[8];
        int n;
};

static void on_evict(struct shoal_list *n, void *arg)
{
        struct evicted *ev = arg;
        assert_false(shoal_list_linked(n)); /* out of the LRU before the callback */
        ev->v[ev->n++] = v_of(n);
}

static void test_trim(void **state)
{
        struct shoal_lru lru;
        struct item it[5];
        struct evicted ev = {.n = 0};
        shoal_lru_init(&lru);
        for (int i = 0; i < 5; i++) {
                it[i].v = i;
                shoal_list_init(&it[i].node);
                shoal_lru_add(&lru, &it[i].node);
        }
        shoal_lru_touch(&lru, &it[1].node); /* 1 4 3 2 0 */
        shoal_lru_trim(&lru, 5, on_evict, &ev);
        assert_int_equal(ev.n, 0);
        shoal_lru_trim(&lru, 2, on_evict, &ev);
        assert_int_equal(ev.n, 3);
        assert_int_equal(ev.v[0], 0);
        assert_int_equal(ev.v[1], 2);
        assert_int_equal(ev.v[2], 3);
        assert_int_equal(shoal_lru_count(&lru), 2);
        assert_int_equal(v_of(shoal_lru_coldest(&lru)), 4);
        shoal_lru_trim(&lru, 0, on_evict, &ev);
        assert_int_equal(ev.n, 5);
        assert_int_equal(ev.v[4], 1);
        assert_int_equal(shoal_lru_count(&lru), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_count_and_order),
                cmocka_unit_test(test_trim),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
