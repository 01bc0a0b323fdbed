#include "metrics/stats_format.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void cell(char *out, const char *num4, char unit)
{
        /* NUM4 is at most 4 characters by construction of the callers' thresholds. */
        snprintf(out, SHOAL_STATS_CELL + 1, "%4.4s%c", num4, unit);
}

/* Four characters for V >= 0 that is below 9999.5 (callers keep V below 1000 except when clamping):
 * one decimal below 9.95 when V is not whole (or always, with FRAC), none above. */
static void num4(double v, bool frac, char out[8])
{
        if (v < 9.95 && (frac || v != floor(v)))
                snprintf(out, 8, "%4.1f", v);
        else
                snprintf(out, 8, "%4.0f", v);
}

static enum shoal_stats_tone scaled(double v, double base, const char *units, char zero_unit,
                                    char *out)
{
        char n[8];
        size_t nu = strlen(units);

        if (v < 999.5) {
                num4(v, false, n);
                cell(out, n, zero_unit);
                return SHOAL_STATS_TONE_LOW;
        }
        for (size_t u = 0; u < nu; u++) {
                v /= base;
                if (v < 999.5 || u == nu - 1) {
                        num4(v < 9999.5 ? v : 9999, true, n);
                        cell(out, n, units[u]);
                        return u == 0   ? SHOAL_STATS_TONE_MID
                               : u == 1 ? SHOAL_STATS_TONE_HIGH
                                        : SHOAL_STATS_TONE_TOP;
                }
        }
        return SHOAL_STATS_TONE_TOP; /* not reached: the last unit always answers */
}

static enum shoal_stats_tone seconds(double v, char *out)
{
        char n[8];
        double us = v * 1e6, ms = v * 1e3;

        if (us < 999.5) {
                snprintf(n, sizeof(n), "%4.0f", us < 1 ? 1 : us);
                cell(out, n, 'u');
                return SHOAL_STATS_TONE_LOW;
        }
        if (ms < 9.995) {
                snprintf(n, sizeof(n), "%4.2f", ms);
                cell(out, n, 'm');
                return SHOAL_STATS_TONE_LOW;
        }
        if (ms < 99.95) {
                snprintf(n, sizeof(n), "%4.1f", ms);
                cell(out, n, 'm');
                return SHOAL_STATS_TONE_MID;
        }
        if (ms < 999.5) {
                snprintf(n, sizeof(n), "%4.0f", ms);
                cell(out, n, 'm');
                return SHOAL_STATS_TONE_HIGH;
        }
        num4(v < 9999.5 ? v : 9999, true, n);
        cell(out, n, 's');
        return SHOAL_STATS_TONE_TOP;
}

static enum shoal_stats_tone percent(double v, char *out)
{
        char n[8];
        double p = v * 100;

        if (p < 99.95)
                snprintf(n, sizeof(n), "%4.1f", p);
        else
                snprintf(n, sizeof(n), "%4.0f", p < 9999.5 ? p : 9999);
        cell(out, n, '%');
        return p < 30    ? SHOAL_STATS_TONE_LOW
               : p < 100 ? SHOAL_STATS_TONE_MID
                         : SHOAL_STATS_TONE_HIGH;
}

enum shoal_stats_tone shoal_stats_format(double v, enum shoal_stats_unit unit,
                                         char out[SHOAL_STATS_CELL + 1])
{
        /* !(v > 0) also catches NaN. */
        if (!(v > 0)) {
                if (unit == SHOAL_STATS_PERCENT)
                        cell(out, " 0.0", '%');
                else
                        cell(out, "   0", ' ');
                return SHOAL_STATS_TONE_ZERO;
        }
        switch (unit) {
        case SHOAL_STATS_BYTES:
                return scaled(v, 1024, "KMGTP", 'B', out);
        case SHOAL_STATS_COUNT:
                return scaled(v, 1000, "KMGTP", ' ', out);
        case SHOAL_STATS_SECONDS:
                return seconds(v, out);
        case SHOAL_STATS_PERCENT:
                return percent(v, out);
        }
        cell(out, "   ?", ' ');
        return SHOAL_STATS_TONE_ZERO;
}

void shoal_stats_section_title(const char *name, size_t width, char *out)
{
        size_t n = strlen(name);
        if (n > width)
                n = width;
        size_t left = (width - n) / 2;
        memset(out, '-', width);
        memcpy(out + left, name, n);
        out[width] = '\0';
}
