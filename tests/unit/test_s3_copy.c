/* Copies of large objects in parts [W2]: the part size (at least S3's 5 MiB, at most 512 MiB,
 * whole MiB, never more than 10000 parts) and the header lines of a CopyObject and an
 * UploadPartCopy (the encoded source with the store's prefix, the inclusive byte range, the
 * source's version as x-amz-copy-source-if-match). The requests themselves run against a real
 * S3 server in tests/python/test_s3_copy.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "store/s3_upload.h"
#include "store/store.h"

#define MIB (1ULL << 20)
#define GIB (1ULL << 30)

static void test_part_size(void **state)
{
        (void)state;
        /* The single-copy limit is the part size, within 5 MiB..512 MiB. */
        assert_int_equal(shoal_store_copy_part_size(12 * MIB, 6 * MIB), 6 * MIB);
        assert_int_equal(shoal_store_copy_part_size(12 * MIB, 1 * MIB), 5 * MIB);
        assert_int_equal(shoal_store_copy_part_size(6 * GIB, SHOAL_STORE_COPY_MAX), 512 * MIB);
        /* 5 TiB in parts of 512 MiB would be 10240 parts: they grow to fit 10000. */
        uint64_t big = 5ULL << 40;
        uint64_t p = shoal_store_copy_part_size(big, SHOAL_STORE_COPY_MAX);
        assert_true(p > 512 * MIB);
        assert_true((big + p - 1) / p <= SHOAL_STORE_MPU_PARTS_MAX);
        assert_int_equal(p % MIB, 0);
}

static void test_part_copy_headers(void **state)
{
        (void)state;
        struct shoal_s3_copy_req *q =
                shoal_s3_copy_req_new("bkt", "pre/", "a b/c+d.bin", "abc123", 5 * MIB, 5 * MIB);
        assert_non_null(q);
        assert_string_equal(q->extra[0], "x-amz-copy-source: /bkt/pre/a%20b/c%2Bd.bin");
        assert_string_equal(q->extra[1], "x-amz-copy-source-if-match: \"abc123\"");
        assert_string_equal(q->extra[2], "x-amz-copy-source-range: bytes=5242880-10485759");
        assert_null(q->extra[3]);
        free(q);
        /* The last part: up to the last byte, inclusive. */
        q = shoal_s3_copy_req_new("bkt", "", "k", "v", 10 * MIB, 3);
        assert_non_null(q);
        assert_string_equal(q->extra[0], "x-amz-copy-source: /bkt/k");
        assert_string_equal(q->extra[2], "x-amz-copy-source-range: bytes=10485760-10485762");
        free(q);
}

static void test_whole_copy_headers(void **state)
{
        (void)state;
        struct shoal_s3_copy_req *q = shoal_s3_copy_req_new("bkt", "", "k", "v", 0, 0);
        assert_non_null(q);
        assert_string_equal(q->extra[0], "x-amz-copy-source: /bkt/k");
        assert_string_equal(q->extra[1], "x-amz-copy-source-if-match: \"v\"");
        assert_null(q->extra[2]);
        free(q);
        /* A version that would break out of its quotes, or none, is refused. */
        assert_null(shoal_s3_copy_req_new("bkt", "", "k", "v\"x", 0, 0));
        assert_null(shoal_s3_copy_req_new("bkt", "", "k", NULL, 0, 0));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_part_size),
                cmocka_unit_test(test_part_copy_headers),
                cmocka_unit_test(test_whole_copy_headers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
