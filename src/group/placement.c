/* Weighted rendezvous hashing [G2].
 *
 * Each live provider with weight w > 0 scores a block -w / ln(u), u in (0,1) uniform per
 * (member, block); the highest score owns the block. This is the weighted form of highest-random-
 * weight hashing: a member's share is w / sum(w), and because a member's score does not depend on
 * the others, a join takes exactly the blocks the newcomer wins and a leave moves exactly the
 * leaver's blocks, about 1/N each time.
 *
 * u comes from a fast 64-bit hash rather than a cryptographic one: owner lookup is on the read
 * path and costs one score per member. The block id is already a cryptographic hash, so nobody
 * can aim blocks at a member; what is needed is independence between members' scores, which the
 * 128-bit multiply-fold of (block hash, member hash) followed by a full-avalanche finaliser gives.
 * A view the agent publishes carries an index (shoal_group_view_index): its providers with weight
 * > 0 and their member hashes, computed once, so that a lookup neither hashes ids nor steps over
 * consumers. When every weight is equal, -w / ln(u) orders members as u does, so the index
 * compares the 52-bit u itself and skips the logarithm; the owner is the same member either way
 * (ties, equal u, go to the smaller id in both). A view built by hand, without an index, is
 * placed the same way from its members. */
#include "group/group_internal.h"
#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define P0 0xa0761d6478bd642fULL
#define P1 0xe7037ed1a0b428dbULL
#define P2 0x8ebc6af09c88c6e3ULL
#define P3 0x589965cc75374cc3ULL

#define SEED_MEMBER 0x6d656d6265722d31ULL /* "member-1" */
#define SEED_BLOCK  0x626c6f636b2d2d31ULL /* "block--1" */

static inline uint64_t mum(uint64_t a, uint64_t b)
{
        __uint128_t r = (__uint128_t)a * b;
        return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t read64(const unsigned char *p)
{
        uint64_t v;
        memcpy(&v, p, sizeof(v));
        return v;
}

uint64_t shoal_group_hash64(const void *data, size_t len, uint64_t seed)
{
        const unsigned char *p = data;
        uint64_t h = seed ^ shoal_mix64(len + P0);
        unsigned char tail[16] = {0};

        for (; len >= 16; p += 16, len -= 16)
                h = mum(read64(p) ^ P1, read64(p + 8) ^ h);
        memcpy(tail, p, len);
        h = mum(read64(tail) ^ P2, read64(tail + 8) ^ h ^ P3);
        return shoal_mix64(h ^ P0);
}

static inline uint64_t block_hash(const struct shoal_block_id *id)
{
        return shoal_group_hash64(id->b, sizeof(id->b), SEED_BLOCK);
}

static inline uint64_t member_hash(const char *member_id)
{
        return shoal_group_hash64(member_id, strlen(member_id), SEED_MEMBER);
}

/* The 52 bits of u for (member, block). */
static inline uint64_t u_bits(uint64_t mh, uint64_t bh)
{
        return shoal_mix64(mum(bh ^ P1, mh ^ P2)) >> 12;
}

static double score(uint64_t mh, uint32_t weight, uint64_t bh)
{
        if (weight == 0)
                return 0.0;
        /* 52 bits centred in their interval, exact in a double: u is never 0 or 1, so ln(u) is
         * finite and negative. */
        double u = ((double)u_bits(mh, bh) + 0.5) * 0x1.0p-52;
        return -(double)weight / log(u);
}

double shoal_placement_score(const char *member_id, uint32_t weight,
                             const struct shoal_block_id *id)
{
        return score(member_hash(member_id), weight, block_hash(id));
}

struct shoal_placement_entry {
        uint64_t mh;     /* member hash */
        uint32_t weight; /* > 0 */
        uint32_t index;  /* into the view's members */
};

struct shoal_placement {
        size_t n;
        bool equal; /* every weight the same: compare u, no logarithm */
        struct shoal_placement_entry e[];
};

void shoal_group_view_index(struct shoal_group_view *v)
{
        size_t n = 0;
        for (size_t i = 0; i < v->n; i++)
                n += v->members[i].role == SHOAL_ROLE_PROVIDER && v->members[i].weight > 0;
        struct shoal_placement *p = malloc(sizeof(*p) + n * sizeof(p->e[0]));
        if (!p)
                return; /* placed from the members, only slower */
        p->n = 0;
        p->equal = true;
        for (size_t i = 0; i < v->n && i <= UINT32_MAX; i++) {
                const struct shoal_member *m = &v->members[i];
                if (m->role != SHOAL_ROLE_PROVIDER || m->weight == 0)
                        continue;
                p->e[p->n] =
                        (struct shoal_placement_entry){member_hash(m->id), m->weight, (uint32_t)i};
                p->equal = p->equal && m->weight == p->e[0].weight;
                p->n++;
        }
        free(v->place);
        v->place = p;
}

void shoal_group_view_unindex(struct shoal_group_view *v)
{
        free(v->place);
        v->place = NULL;
}

/* Whether member I beats the current owner O at equal score (the smaller id wins). */
static inline bool wins_tie(const struct shoal_group_view *v, size_t i, int o)
{
        return strcmp(v->members[i].id, v->members[o].id) < 0;
}

static int owner_indexed(const struct shoal_group_view *v, const struct shoal_placement *p,
                         uint64_t bh)
{
        int owner = -1;

        if (p->equal) {
                uint64_t best = 0;
                for (size_t k = 0; k < p->n; k++) {
                        uint64_t u = u_bits(p->e[k].mh, bh);
                        int i = (int)p->e[k].index;
                        if (owner < 0 || u > best || (u == best && wins_tie(v, (size_t)i, owner))) {
                                best = u;
                                owner = i;
                        }
                }
                return owner;
        }
        double best = 0.0;
        for (size_t k = 0; k < p->n; k++) {
                /* ln(u) <= u - 1, so the score w / -ln(u) is at most w / (1 - u): a member that
                 * cannot reach the best even so needs no logarithm. The margin keeps every
                 * member that might tie (rounding) for the full comparison. */
                uint64_t ub = u_bits(p->e[k].mh, bh);
                double u = ((double)ub + 0.5) * 0x1.0p-52;
                if (owner >= 0 && (double)p->e[k].weight / (1.0 - u) * (1.0 + 0x1.0p-30) < best)
                        continue;
                double s = -(double)p->e[k].weight / log(u);
                int i = (int)p->e[k].index;
                if (owner < 0 || s > best || (s == best && wins_tie(v, (size_t)i, owner))) {
                        best = s;
                        owner = i;
                }
        }
        return owner;
}

int shoal_group_owner(const struct shoal_group_view *v, const struct shoal_block_id *id)
{
        uint64_t bh = block_hash(id);
        double best = 0.0;
        int owner = -1;

        if (v->place)
                return owner_indexed(v, v->place, bh);
        for (size_t i = 0; i < v->n; i++) {
                const struct shoal_member *m = &v->members[i];
                if (m->role != SHOAL_ROLE_PROVIDER || m->weight == 0)
                        continue;
                double s = score(member_hash(m->id), m->weight, bh);
                if (owner < 0 || s > best || (s == best && wins_tie(v, i, owner))) {
                        best = s;
                        owner = (int)i;
                }
        }
        return owner;
}

unsigned shoal_group_owners(const struct shoal_group_view *v, const struct shoal_block_id *id,
                            int *out, unsigned k)
{
        uint64_t bh = block_hash(id);
        double best[SHOAL_GROUP_RANK_MAX];
        unsigned n = 0;

        if (k > SHOAL_GROUP_RANK_MAX)
                k = SHOAL_GROUP_RANK_MAX;
        for (size_t i = 0; i < v->n && k; i++) {
                const struct shoal_member *m = &v->members[i];
                if (m->role != SHOAL_ROLE_PROVIDER || m->weight == 0)
                        continue;
                double s = score(member_hash(m->id), m->weight, bh);
                /* insertion into the K best, ties broken by id as shoal_group_owner does */
                unsigned j = n < k ? n++ : k;
                while (j > 0 &&
                       (s > best[j - 1] ||
                        (s == best[j - 1] && strcmp(m->id, v->members[out[j - 1]].id) < 0))) {
                        if (j < k) {
                                best[j] = best[j - 1];
                                out[j] = out[j - 1];
                        }
                        j--;
                }
                if (j < k) {
                        best[j] = s;
                        out[j] = (int)i;
                }
        }
        return n;
}

int shoal_group_rank(const struct shoal_group_view *v, const struct shoal_block_id *id,
                     const char *member_id)
{
        int top[2];
        unsigned n = shoal_group_owners(v, id, top, 2);
        for (unsigned i = 0; i < n; i++)
                if (!strcmp(v->members[top[i]].id, member_id))
                        return (int)i;
        return -1;
}
