#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "metrics/stats_format.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void expect(double v, enum shoal_stats_unit unit, const char *want)
{
        char out[SHOAL_STATS_CELL + 1];
        memset(out, 'x', sizeof(out));
        shoal_stats_format(v, unit, out);
        if (strcmp(out, want))
                fail_msg("format(%.17g, unit %d) = \"%s\", want \"%s\"", v, unit, out, want);
}

static void test_zero_and_garbage(void **state)
{
        (void)state;
        char out[SHOAL_STATS_CELL + 1];
        for (int u = SHOAL_STATS_BYTES; u <= SHOAL_STATS_SECONDS; u++) {
                expect(0, u, "   0 ");
                expect(-5, u, "   0 ");
                expect(NAN, u, "   0 ");
                expect(-INFINITY, u, "   0 ");
        }
        expect(0, SHOAL_STATS_PERCENT, " 0.0%");
        expect(NAN, SHOAL_STATS_PERCENT, " 0.0%");
        assert_int_equal(shoal_stats_format(0, SHOAL_STATS_BYTES, out), SHOAL_STATS_TONE_ZERO);
        assert_int_equal(shoal_stats_format(1, SHOAL_STATS_BYTES, out), SHOAL_STATS_TONE_LOW);
}

static void test_bytes(void **state)
{
        (void)state;
        expect(1, SHOAL_STATS_BYTES, "   1B");
        expect(0.5, SHOAL_STATS_BYTES, " 0.5B");
        expect(512, SHOAL_STATS_BYTES, " 512B");
        expect(999, SHOAL_STATS_BYTES, " 999B");
        expect(1000, SHOAL_STATS_BYTES, " 1.0K");
        expect(9999, SHOAL_STATS_BYTES, " 9.8K");
        expect(10240, SHOAL_STATS_BYTES, "  10K");
        expect(1.2 * 1024 * 1024 * 1024, SHOAL_STATS_BYTES, " 1.2G");
        expect(120.0 * 1024 * 1024, SHOAL_STATS_BYTES, " 120M");
        expect(999.0 * 1024, SHOAL_STATS_BYTES, " 999K");
        expect(999.6 * 1024, SHOAL_STATS_BYTES, " 1.0M");
        /* 9.96 rounds to 10.0 with one decimal: shown without decimals. */
        expect(9.96 * 1024, SHOAL_STATS_BYTES, "  10K");
        expect(1024.0 * 1024 * 1024 * 1024, SHOAL_STATS_BYTES, " 1.0T");
        /* Past the largest unit: clamped, never wider. */
        expect(1e30, SHOAL_STATS_BYTES, "9999P");
        expect(INFINITY, SHOAL_STATS_BYTES, "9999P");
}

static void test_counts(void **state)
{
        (void)state;
        expect(120, SHOAL_STATS_COUNT, " 120 ");
        expect(0.5, SHOAL_STATS_COUNT, " 0.5 ");
        expect(999, SHOAL_STATS_COUNT, " 999 ");
        expect(9999, SHOAL_STATS_COUNT, "  10K");
        expect(12000, SHOAL_STATS_COUNT, "  12K");
        expect(1500000, SHOAL_STATS_COUNT, " 1.5M");
}

static void test_seconds(void **state)
{
        (void)state;
        expect(85e-6, SHOAL_STATS_SECONDS, "  85u");
        expect(1e-9, SHOAL_STATS_SECONDS, "   1u");
        expect(1.25e-3, SHOAL_STATS_SECONDS, "1.25m");
        expect(12.5e-3, SHOAL_STATS_SECONDS, "12.5m");
        expect(0.25, SHOAL_STATS_SECONDS, " 250m");
        expect(1.5, SHOAL_STATS_SECONDS, " 1.5s");
        expect(12, SHOAL_STATS_SECONDS, "  12s");
        expect(999.6e-6, SHOAL_STATS_SECONDS, "1.00m");
        expect(1e9, SHOAL_STATS_SECONDS, "9999s");
}

static void test_percent(void **state)
{
        (void)state;
        expect(0.125, SHOAL_STATS_PERCENT, "12.5%");
        expect(0.001, SHOAL_STATS_PERCENT, " 0.1%");
        expect(2.5, SHOAL_STATS_PERCENT, " 250%");
        expect(1e9, SHOAL_STATS_PERCENT, "9999%");
}

/* Every value of every unit is exactly one cell wide. */
static void test_width_sweep(void **state)
{
        (void)state;
        char out[SHOAL_STATS_CELL + 1];
        for (int u = SHOAL_STATS_BYTES; u <= SHOAL_STATS_PERCENT; u++) {
                for (double v = 1e-10; v < 1e22; v *= 1.0137) {
                        shoal_stats_format(v, u, out);
                        if (strlen(out) != SHOAL_STATS_CELL)
                                fail_msg("format(%.17g, unit %d) = \"%s\" (%zu wide)", v, u, out,
                                         strlen(out));
                }
        }
}

static void test_section_title(void **state)
{
        (void)state;
        char out[64];
        shoal_stats_section_title("usage", 17, out);
        assert_string_equal(out, "------usage------");
        shoal_stats_section_title("fuse", 11, out);
        assert_string_equal(out, "---fuse----");
        shoal_stats_section_title("remotecache", 5, out);
        assert_string_equal(out, "remot");
        shoal_stats_section_title("meta", 4, out);
        assert_string_equal(out, "meta");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_zero_and_garbage), cmocka_unit_test(test_bytes),
                cmocka_unit_test(test_counts),           cmocka_unit_test(test_seconds),
                cmocka_unit_test(test_percent),          cmocka_unit_test(test_width_sweep),
                cmocka_unit_test(test_section_title),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
