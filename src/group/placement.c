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
 * The member hash is a few nanoseconds over a 32-byte id, cheap enough to compute per lookup, so
 * views need no hidden per-member state and a view built by hand works as well. */
#include "group/group_internal.h"

#include <math.h>
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

/* Stafford's variant 13 of the MurmurHash3 finaliser: every input bit affects every output bit. */
static inline uint64_t fmix(uint64_t x)
{
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ULL;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebULL;
        x ^= x >> 31;
        return x;
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
        uint64_t h = seed ^ fmix(len + P0);
        unsigned char tail[16] = {0};

        for (; len >= 16; p += 16, len -= 16)
                h = mum(read64(p) ^ P1, read64(p + 8) ^ h);
        memcpy(tail, p, len);
        h = mum(read64(tail) ^ P2, read64(tail + 8) ^ h ^ P3);
        return fmix(h ^ P0);
}

static inline uint64_t block_hash(const struct shoal_block_id *id)
{
        return shoal_group_hash64(id->b, sizeof(id->b), SEED_BLOCK);
}

static inline uint64_t member_hash(const char *member_id)
{
        return shoal_group_hash64(member_id, strlen(member_id), SEED_MEMBER);
}

static double score(uint64_t mh, uint32_t weight, uint64_t bh)
{
        if (weight == 0)
                return 0.0;
        uint64_t x = fmix(mum(bh ^ P1, mh ^ P2));
        /* 52 bits centred in their interval, exact in a double: u is never 0 or 1, so ln(u) is
         * finite and negative. */
        double u = ((double)(x >> 12) + 0.5) * 0x1.0p-52;
        return -(double)weight / log(u);
}

double shoal_placement_score(const char *member_id, uint32_t weight,
                             const struct shoal_block_id *id)
{
        return score(member_hash(member_id), weight, block_hash(id));
}

int shoal_group_owner(const struct shoal_group_view *v, const struct shoal_block_id *id)
{
        uint64_t bh = block_hash(id);
        double best = 0.0;
        int owner = -1;

        for (size_t i = 0; i < v->n; i++) {
                const struct shoal_member *m = &v->members[i];
                if (m->role != SHOAL_ROLE_PROVIDER || m->weight == 0)
                        continue;
                double s = score(member_hash(m->id), m->weight, bh);
                if (owner < 0 || s > best ||
                    (s == best && strcmp(m->id, v->members[owner].id) < 0)) {
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
