/* Weighted rendezvous placement [G2]: balance, weights, drain, consumers, minimal movement on
 * join and leave, determinism. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/util.h"
#include "group/group.h"
#include "group/group_internal.h"

#define PIN_EMPTY  0x0a40050544bc1a65ULL
#define PIN_SHOAL  0x32c3fd30ca11d70dULL
#define PIN_OWNERS "2220101221021222"

#define NBLOCKS 30000

static struct shoal_block_id *blocks;

static int setup(void **state)
{
        blocks = calloc(NBLOCKS, sizeof(*blocks));
        if (!blocks)
                return -1;
        for (size_t i = 0; i < NBLOCKS; i++)
                assert_int_equal(shoal_random_bytes(blocks[i].b, sizeof(blocks[i].b)), 0);
        return 0;
}

static int teardown(void **state)
{
        free(blocks);
        return 0;
}

static void set_member(struct shoal_member *m, const char *id, uint32_t weight,
                       enum shoal_member_role role)
{
        memset(m, 0, sizeof(*m));
        shoal_strlcpy(m->id, id, sizeof(m->id));
        m->weight = weight;
        m->role = role;
        m->alive = true;
}

static void random_id(char out[SHOAL_MEMBER_ID_LEN + 1])
{
        unsigned char rnd[SHOAL_MEMBER_ID_LEN / 2];
        assert_int_equal(shoal_random_bytes(rnd, sizeof(rnd)), 0);
        shoal_hex(rnd, sizeof(rnd), out);
}

/* Owner ids of every block (index into a copy of member ids, -1 for none). */
static void owners(const struct shoal_group_view *v, int *out)
{
        for (size_t i = 0; i < NBLOCKS; i++)
                out[i] = shoal_group_owner(v, &blocks[i]);
}

static void count(const struct shoal_group_view *v, size_t *counts)
{
        memset(counts, 0, v->n * sizeof(*counts));
        for (size_t i = 0; i < NBLOCKS; i++) {
                int o = shoal_group_owner(v, &blocks[i]);
                assert_true(o >= 0 && (size_t)o < v->n);
                counts[o]++;
        }
}

static void test_equal_weights_balance(void **state)
{
        struct shoal_member m[3];
        struct shoal_group_view v = {.n = 3, .members = m};
        size_t c[3];
        char id[SHOAL_MEMBER_ID_LEN + 1];

        for (int i = 0; i < 3; i++) {
                random_id(id);
                set_member(&m[i], id, 100, SHOAL_ROLE_PROVIDER);
        }
        count(&v, c);
        for (int i = 0; i < 3; i++) {
                double share = (double)c[i] / NBLOCKS;
                assert_true(share > 1.0 / 3 - 0.03 && share < 1.0 / 3 + 0.03);
        }
}

static void test_weighted_shares(void **state)
{
        struct shoal_member m[2];
        struct shoal_group_view v = {.n = 2, .members = m};
        size_t c[2];

        set_member(&m[0], "aaaa0001", 100, SHOAL_ROLE_PROVIDER);
        set_member(&m[1], "bbbb0002", 200, SHOAL_ROLE_PROVIDER);
        count(&v, c);
        double share = (double)c[1] / NBLOCKS;
        assert_true(share > 2.0 / 3 - 0.03 && share < 2.0 / 3 + 0.03);
}

static void test_drain_and_consumers_own_nothing(void **state)
{
        struct shoal_member m[4];
        struct shoal_group_view v = {.n = 4, .members = m};
        size_t c[4];

        set_member(&m[0], "m0", 100, SHOAL_ROLE_PROVIDER);
        set_member(&m[1], "m1", 0, SHOAL_ROLE_PROVIDER);
        set_member(&m[2], "m2", 100, SHOAL_ROLE_CONSUMER);
        set_member(&m[3], "m3", 100, SHOAL_ROLE_PROVIDER);
        count(&v, c);
        assert_int_equal(c[1], 0);
        assert_int_equal(c[2], 0);
        assert_int_equal(c[0] + c[3], NBLOCKS);
        assert_true(shoal_placement_score("m1", 0, &blocks[0]) == 0.0);

        /* No eligible owner at all. */
        struct shoal_group_view none = {.n = 2, .members = &m[1]};
        assert_int_equal(shoal_group_owner(&none, &blocks[0]), -1);
        struct shoal_group_view empty = {.n = 0, .members = NULL};
        assert_int_equal(shoal_group_owner(&empty, &blocks[0]), -1);
}

static void test_join_moves_only_to_newcomer(void **state)
{
        struct shoal_member m[4];
        struct shoal_group_view v3 = {.n = 3, .members = m};
        struct shoal_group_view v4 = {.n = 4, .members = m};
        int *before = calloc(NBLOCKS, sizeof(int)), *after = calloc(NBLOCKS, sizeof(int));
        char id[SHOAL_MEMBER_ID_LEN + 1];
        size_t moved = 0;

        assert_non_null(before);
        assert_non_null(after);
        for (int i = 0; i < 4; i++) {
                random_id(id);
                set_member(&m[i], id, 100, SHOAL_ROLE_PROVIDER);
        }
        owners(&v3, before);
        owners(&v4, after);
        for (size_t i = 0; i < NBLOCKS; i++) {
                if (before[i] != after[i]) {
                        assert_int_equal(after[i], 3);
                        moved++;
                }
        }
        double share = (double)moved / NBLOCKS;
        assert_true(share > 0.20 && share < 0.30);
        free(before);
        free(after);
}

static int cmp_id(const void *a, const void *b)
{
        return strcmp(((const struct shoal_member *)a)->id, ((const struct shoal_member *)b)->id);
}

/* [issue 26] After a join, a block the newcomer owns has its previous owner (the one that owned
 * it before the join, still live); a block that did not move has none. After a drain, the
 * drained member is the previous owner of every block it owned. One that said goodbye counts
 * while it still beats. */
static void test_prev_owner(void **state)
{
        struct shoal_member m[4], prev[3], away[1];
        char id[SHOAL_MEMBER_ID_LEN + 1];
        for (int i = 0; i < 4; i++) {
                random_id(id);
                set_member(&m[i], id, 100, SHOAL_ROLE_PROVIDER);
        }
        qsort(m, 4, sizeof(m[0]), cmp_id);
        /* m[3] joined (the highest id, so indexes agree between the sorted arrays) */
        memcpy(prev, m, sizeof(prev));
        struct shoal_group_view before = {.n = 3, .members = prev};
        struct shoal_group_view v = {.n = 4, .members = m, .n_prev = 3, .prev = prev};
        size_t moved = 0;
        for (size_t i = 0; i < NBLOCKS; i++) {
                const struct shoal_member *p;
                int o = shoal_group_owner(&v, &blocks[i]);
                int was = shoal_group_owner(&before, &blocks[i]);
                int k = shoal_group_prev_owner(&v, &blocks[i], &p);
                if (o == was) {
                        assert_int_equal(k, -1);
                        assert_null(p);
                        continue;
                }
                assert_int_equal(o, 3);
                assert_int_equal(k, was);
                assert_string_equal(p->id, prev[was].id);
                moved++;
        }
        assert_true(moved > NBLOCKS / 5);

        /* m[0] drained: it is asked for each block it owned. */
        struct shoal_member now[4];
        memcpy(now, m, sizeof(now));
        now[0].weight = 0;
        struct shoal_group_view full = {.n = 4, .members = m};
        struct shoal_group_view dv = {.n = 4, .members = now, .n_prev = 4, .prev = m};
        for (size_t i = 0; i < NBLOCKS; i++) {
                const struct shoal_member *p;
                int k = shoal_group_prev_owner(&dv, &blocks[i], &p);
                assert_int_equal(k, shoal_group_owner(&full, &blocks[i]) == 0 ? 0 : -1);
        }

        /* m[0] said goodbye instead: asked while it beats, not once it is silent. */
        away[0] = m[0];
        away[0].leaving = true;
        struct shoal_group_view gv = {
                .n = 3, .members = m + 1, .n_away = 1, .away = away, .n_prev = 4, .prev = m};
        size_t asked = 0;
        for (size_t i = 0; i < NBLOCKS; i++) {
                const struct shoal_member *p;
                if (shoal_group_owner(&full, &blocks[i]) != 0)
                        continue;
                assert_int_equal(shoal_group_prev_owner(&gv, &blocks[i], &p), 3);
                assert_string_equal(p->id, m[0].id);
                asked++;
        }
        assert_true(asked > 0);
        away[0].alive = false;
        for (size_t i = 0; i < 100; i++) {
                const struct shoal_member *p;
                assert_int_equal(shoal_group_prev_owner(&gv, &blocks[i], &p), -1);
        }
}

static void test_leave_moves_only_leavers_blocks(void **state)
{
        struct shoal_member m[4], rest[3];
        struct shoal_group_view v4 = {.n = 4, .members = m};
        struct shoal_group_view v3 = {.n = 3, .members = rest};
        char id[SHOAL_MEMBER_ID_LEN + 1];
        size_t orphaned = 0;

        for (int i = 0; i < 4; i++) {
                random_id(id);
                set_member(&m[i], id, 100 + 50 * (uint32_t)i, SHOAL_ROLE_PROVIDER);
        }
        /* Member 1 leaves; the others keep their order minus it. */
        rest[0] = m[0];
        rest[1] = m[2];
        rest[2] = m[3];
        for (size_t i = 0; i < NBLOCKS; i++) {
                int b = shoal_group_owner(&v4, &blocks[i]);
                int a = shoal_group_owner(&v3, &blocks[i]);
                assert_true(a >= 0 && b >= 0);
                if (b == 1) {
                        orphaned++;
                        continue;
                }
                assert_string_equal(m[b].id, rest[a].id);
        }
        assert_true(orphaned > 0);
}

static void test_deterministic(void **state)
{
        struct shoal_member m[5], rev[5];
        struct shoal_group_view v = {.n = 5, .members = m};
        struct shoal_group_view r = {.n = 5, .members = rev};
        char id[SHOAL_MEMBER_ID_LEN + 1];

        for (int i = 0; i < 5; i++) {
                random_id(id);
                set_member(&m[i], id, 100, SHOAL_ROLE_PROVIDER);
        }
        for (int i = 0; i < 5; i++)
                rev[i] = m[4 - i];
        for (size_t i = 0; i < NBLOCKS; i += 7) {
                int a = shoal_group_owner(&v, &blocks[i]);
                int b = shoal_group_owner(&v, &blocks[i]);
                int c = shoal_group_owner(&r, &blocks[i]);
                assert_int_equal(a, b);
                assert_string_equal(m[a].id, rev[c].id);
        }
        double s1 = shoal_placement_score("member-x", 100, &blocks[0]);
        double s2 = shoal_placement_score("member-x", 100, &blocks[0]);
        assert_true(s1 == s2 && s1 > 0);
        /* Doubling the weight doubles the score. */
        double s3 = shoal_placement_score("member-x", 200, &blocks[0]);
        assert_true(s3 > 1.999 * s1 && s3 < 2.001 * s1);
}

/* Members of different releases must agree on every owner: the hash is pinned. */
static void test_pinned_hash(void **state)
{
        struct shoal_member m[3];
        struct shoal_group_view v = {.n = 3, .members = m};
        struct shoal_block_id id;
        char got[64] = "";

        assert_true(shoal_group_hash64("", 0, 0) == PIN_EMPTY);
        assert_true(shoal_group_hash64("shoal", 5, 1) == PIN_SHOAL);
        set_member(&m[0], "alpha", 100, SHOAL_ROLE_PROVIDER);
        set_member(&m[1], "beta", 100, SHOAL_ROLE_PROVIDER);
        set_member(&m[2], "gamma", 100, SHOAL_ROLE_PROVIDER);
        for (int i = 0; i < 16; i++) {
                for (int j = 0; j < SHOAL_BLOCK_ID_LEN; j++)
                        id.b[j] = (uint8_t)(i * 16 + j);
                got[i] = (char)('0' + shoal_group_owner(&v, &id));
        }
        assert_string_equal(got, PIN_OWNERS);
        /* The index of a published view gives the same owners. */
        shoal_group_view_index(&v);
        for (int i = 0; i < 16; i++) {
                for (int j = 0; j < SHOAL_BLOCK_ID_LEN; j++)
                        id.b[j] = (uint8_t)(i * 16 + j);
                got[i] = (char)('0' + shoal_group_owner(&v, &id));
        }
        shoal_group_view_unindex(&v);
        assert_string_equal(got, PIN_OWNERS);
}

static void test_ties_broken_by_id(void **state)
{
        /* The same id twice scores identically: the first in id order must win, wherever it
         * sits in the array. */
        struct shoal_member m[2];
        struct shoal_group_view v = {.n = 2, .members = m};

        set_member(&m[0], "same", 100, SHOAL_ROLE_PROVIDER);
        set_member(&m[1], "same", 100, SHOAL_ROLE_PROVIDER);
        assert_int_equal(shoal_group_owner(&v, &blocks[0]), 0);
}

/* The owner by definition: the highest shoal_placement_score among providers with weight > 0,
 * ties to the smaller id. */
static int reference_owner(const struct shoal_group_view *v, const struct shoal_block_id *id)
{
        int owner = -1;
        double best = 0.0;
        for (size_t i = 0; i < v->n; i++) {
                const struct shoal_member *m = &v->members[i];
                if (m->role != SHOAL_ROLE_PROVIDER || m->weight == 0)
                        continue;
                double s = shoal_placement_score(m->id, m->weight, id);
                if (owner < 0 || s > best ||
                    (s == best && strcmp(m->id, v->members[owner].id) < 0)) {
                        best = s;
                        owner = (int)i;
                }
        }
        return owner;
}

/* The index a published view carries (3,000 members, consumers and drained ones among them)
 * places every block where the definition does, with equal weights (the path without ln) and
 * with mixed ones. */
static void index_matches(bool equal)
{
        enum {
                N = 3000,
                LOOKUPS = 4000
        };
        struct shoal_member *m = calloc(N, sizeof(*m));
        assert_non_null(m);
        for (size_t i = 0; i < N; i++) {
                char id[SHOAL_MEMBER_ID_LEN + 1];
                random_id(id);
                uint32_t w = equal ? 100 : 1 + (uint32_t)(i * 7919 % 500);
                enum shoal_member_role role =
                        i % 10 == 3 ? SHOAL_ROLE_CONSUMER : SHOAL_ROLE_PROVIDER;
                set_member(&m[i], id, i % 97 == 5 ? 0 : w, role);
        }
        struct shoal_group_view plain = {.n = N, .members = m};
        struct shoal_group_view indexed = plain;
        shoal_group_view_index(&indexed);
        assert_non_null(indexed.place);
        for (size_t b = 0; b < LOOKUPS; b++) {
                int want = reference_owner(&plain, &blocks[b]);
                assert_true(want >= 0);
                assert_int_equal(shoal_group_owner(&plain, &blocks[b]), want);
                assert_int_equal(shoal_group_owner(&indexed, &blocks[b]), want);
        }
        shoal_group_view_unindex(&indexed);
        assert_null(indexed.place);
        free(m);
}

static void test_index_equal_weights(void **state)
{
        index_matches(true);
}

static void test_index_mixed_weights(void **state)
{
        index_matches(false);
}

/* An index over no provider owns nothing, like the view itself. */
static void test_index_no_provider(void **state)
{
        struct shoal_member m[2];
        set_member(&m[0], "c", 100, SHOAL_ROLE_CONSUMER);
        set_member(&m[1], "d", 0, SHOAL_ROLE_PROVIDER);
        struct shoal_group_view v = {.n = 2, .members = m};
        shoal_group_view_index(&v);
        assert_int_equal(shoal_group_owner(&v, &blocks[0]), -1);
        shoal_group_view_unindex(&v);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_equal_weights_balance),
                cmocka_unit_test(test_weighted_shares),
                cmocka_unit_test(test_drain_and_consumers_own_nothing),
                cmocka_unit_test(test_join_moves_only_to_newcomer),
                cmocka_unit_test(test_leave_moves_only_leavers_blocks),
                cmocka_unit_test(test_prev_owner),
                cmocka_unit_test(test_deterministic),
                cmocka_unit_test(test_ties_broken_by_id),
                cmocka_unit_test(test_pinned_hash),
                cmocka_unit_test(test_index_equal_weights),
                cmocka_unit_test(test_index_mixed_weights),
                cmocka_unit_test(test_index_no_provider),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
