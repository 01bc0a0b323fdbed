/* Owner lookups per second on one core at N members (default 3,000), equal and mixed weights,
 * a view built by hand (every lookup hashes every member id: the placement before views carried
 * an index) against a published view's index. Run from a Release build:
 *   build/bench_placement [MEMBERS] [LOOKUPS]
 * Prints one line per case with lookups/s and the ratio; checks that both give the same owners. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "group/group.h"

static double run(const struct shoal_group_view *v, const struct shoal_block_id *ids, size_t n,
                  long *sum)
{
        uint64_t t0 = shoal_now_ns();
        for (size_t i = 0; i < n; i++)
                *sum += shoal_group_owner(v, &ids[i]);
        return (double)n / ((double)(shoal_now_ns() - t0) / 1e9);
}

int main(int argc, char **argv)
{
        size_t members = argc > 1 ? strtoul(argv[1], NULL, 10) : 3000;
        size_t lookups = argc > 2 ? strtoul(argv[2], NULL, 10) : 20000;
        struct shoal_member *m = calloc(members, sizeof(*m));
        struct shoal_block_id *ids = calloc(lookups, sizeof(*ids));
        if (!m || !ids || !members || !lookups)
                return 2;
        for (size_t i = 0; i < lookups; i++)
                shoal_random_bytes(ids[i].b, sizeof(ids[i].b));
        for (int mixed = 0; mixed < 2; mixed++) {
                for (size_t i = 0; i < members; i++) {
                        unsigned char rnd[SHOAL_MEMBER_ID_LEN / 2];
                        shoal_random_bytes(rnd, sizeof(rnd));
                        shoal_hex(rnd, sizeof(rnd), m[i].id);
                        m[i].role = SHOAL_ROLE_PROVIDER;
                        m[i].weight = mixed ? 1 + (uint32_t)(i % 300) : 100;
                }
                struct shoal_group_view plain = {.n = members, .members = m};
                struct shoal_group_view indexed = plain;
                shoal_group_view_index(&indexed);
                long a = 0, b = 0;
                double slow = run(&plain, ids, lookups, &a);
                double fast = run(&indexed, ids, lookups, &b);
                printf("%zu members, %s weights: unindexed %.0f lookups/s, indexed %.0f "
                       "lookups/s, %.2fx%s\n",
                       members, mixed ? "mixed" : "equal", slow, fast, fast / slow,
                       a == b ? "" : " (OWNERS DIFFER)");
                shoal_group_view_unindex(&indexed);
                if (a != b)
                        return 1;
        }
        free(m);
        free(ids);
        return 0;
}
