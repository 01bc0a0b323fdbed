/* Shared by the fuzz targets: a failed invariant aborts (libFuzzer keeps the input), and a fuzz
 * input is read as a stream of fields. Every field read past the end of the input is zero, so
 * every input is a valid layout and the fuzzer never wastes runs on framing.
 *
 * The seed generator (gen_corpus.py) writes inputs in the same layouts; each target's header
 * comment gives its layout. */
#ifndef SHOAL_TESTS_FUZZ_INPUT_H
#define SHOAL_TESTS_FUZZ_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CHECK(x)                                                                               \
        do {                                                                                      \
                if (!(x)) {                                                                       \
                        fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #x); \
                        abort();                                                                  \
                }                                                                                 \
        } while (0)

struct fz {
        const uint8_t *p;
        size_t n;
};

/* An unsigned little-endian integer of BYTES (1..8) bytes. */
static inline uint64_t fz_u(struct fz *s, int bytes)
{
        uint64_t v = 0;
        for (int i = 0; i < bytes && s->n; i++, s->p++, s->n--)
                v |= (uint64_t)s->p[0] << (8 * i);
        return v;
}

static inline void fz_skip(struct fz *s, size_t n)
{
        n = n < s->n ? n : s->n;
        s->p += n;
        s->n -= n;
}

static inline uint8_t fz_u8(struct fz *s)
{
        return (uint8_t)fz_u(s, 1);
}

/* A string field: one length byte (taken modulo CAP, so that it fits with its NUL), then that
 * many bytes (fewer at the end of the input). OUT is NUL-terminated; returns the length, which
 * counts bytes after an embedded NUL too. */
static inline size_t fz_str(struct fz *s, char *out, size_t cap)
{
        size_t want = fz_u8(s) % cap;
        size_t n = want < s->n ? want : s->n;
        memcpy(out, s->p, n);
        out[n] = '\0';
        s->p += n;
        s->n -= n;
        return n;
}

/* What is left of the input, copied into a fresh NUL-terminated heap buffer (so that ASan sees
 * any read past its end). *LEN receives the length. */
static inline char *fz_rest_str(struct fz *s, size_t *len)
{
        char *b = malloc(s->n + 1);
        if (!b)
                abort();
        memcpy(b, s->p, s->n);
        b[s->n] = '\0';
        if (len)
                *len = s->n;
        s->p += s->n;
        s->n = 0;
        return b;
}

/* A small deterministic generator for bulk bytes (payloads, block data) the input only seeds. */
static inline uint64_t fz_prng(uint64_t *state)
{
        uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ull;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        return x;
}

static inline void fz_fill(void *buf, size_t len, uint64_t seed)
{
        uint8_t *p = buf;
        uint64_t st = seed * 0x9e3779b97f4a7c15ull + 1;
        for (size_t i = 0; i < len; i += 8) {
                uint64_t v = fz_prng(&st);
                size_t k = len - i < 8 ? len - i : 8;
                memcpy(p + i, &v, k);
        }
}

#endif
