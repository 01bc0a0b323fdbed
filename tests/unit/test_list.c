/* common/list.h: order after pushes and moves, unlinking during a walk, double unlink, and the
 * LRU use (move to front on use, the last node is the coldest). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/list.h"

struct item {
        int v;
        struct shoal_list node;
};

static int order(struct shoal_list *head, int *out, int cap)
{
        struct shoal_list *pos, *next;
        int n = 0;
        list_for_each (pos, next, head) {
                if (n < cap)
                        out[n] = shoal_list_entry(pos, struct item, node)->v;
                n++;
        }
        return n;
}

static void test_push_and_order(void **state)
{
        struct shoal_list head = SHOAL_LIST_INIT(head);
        struct item it[4];
        assert_true(shoal_list_empty(&head));
        assert_null(shoal_list_first(&head));
        assert_null(shoal_list_last(&head));
        for (int i = 0; i < 4; i++) {
                it[i].v = i;
                shoal_list_init(&it[i].node);
                assert_false(shoal_list_linked(&it[i].node));
        }
        shoal_list_push_back(&head, &it[1].node);
        shoal_list_push_back(&head, &it[2].node);
        shoal_list_push_front(&head, &it[0].node);
        shoal_list_push_back(&head, &it[3].node);
        int got[8];
        assert_int_equal(order(&head, got, 8), 4);
        for (int i = 0; i < 4; i++)
                assert_int_equal(got[i], i);
        assert_ptr_equal(shoal_list_first(&head), &it[0].node);
        assert_ptr_equal(shoal_list_last(&head), &it[3].node);
}

static void test_del_in_walk(void **state)
{
        struct shoal_list head = SHOAL_LIST_INIT(head);
        struct item it[5];
        for (int i = 0; i < 5; i++) {
                it[i].v = i;
                shoal_list_push_back(&head, &it[i].node);
        }
        struct shoal_list *pos, *next;
        list_for_each (pos, next, &head) {
                if (shoal_list_entry(pos, struct item, node)->v % 2 == 0)
                        shoal_list_del(pos);
        }
        int got[8];
        assert_int_equal(order(&head, got, 8), 2);
        assert_int_equal(got[0], 1);
        assert_int_equal(got[1], 3);
        /* unlinked nodes may be unlinked again */
        shoal_list_del(&it[0].node);
        assert_false(shoal_list_linked(&it[0].node));
        assert_int_equal(order(&head, got, 8), 2);
        shoal_list_del(&it[1].node);
        shoal_list_del(&it[3].node);
        assert_true(shoal_list_empty(&head));
}

static void test_lru_use(void **state)
{
        struct shoal_list lru = SHOAL_LIST_INIT(lru);
        struct item it[3];
        for (int i = 0; i < 3; i++) {
                it[i].v = i;
                shoal_list_init(&it[i].node);
                shoal_list_move_front(&lru, &it[i].node); /* unlinked: just inserted */
        }
        /* 2 1 0: 0 is the coldest; using 0 makes 1 the coldest */
        assert_ptr_equal(shoal_list_last(&lru), &it[0].node);
        shoal_list_move_front(&lru, &it[0].node);
        assert_ptr_equal(shoal_list_last(&lru), &it[1].node);
        assert_ptr_equal(shoal_list_first(&lru), &it[0].node);
        int got[4];
        assert_int_equal(order(&lru, got, 4), 3);
        assert_int_equal(got[0], 0);
        assert_int_equal(got[1], 2);
        assert_int_equal(got[2], 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_push_and_order),
                cmocka_unit_test(test_del_in_walk),
                cmocka_unit_test(test_lru_use),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
