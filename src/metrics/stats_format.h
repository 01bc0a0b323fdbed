/* The 5-character cells of `shoal stats` [V4], in the manner of `juicefs stats`: four characters
 * of number and one of unit, so that every column lines up whatever the magnitude. Scaled values
 * keep at most three digits (one decimal below 10), so the unit changes at 1000.
 *   bytes    "   0 ", " 512B", " 1.0K", " 1.2G", " 120M", " 999G", " 1.0T"  (powers of 1024)
 *   counts   "   0 ", " 0.5 ", " 120 ", " 1.0K", "  12K", " 1.5M"           (powers of 1000)
 *   seconds  "   0 ", "  85u", "1.25m", "12.5m", " 250m", " 1.5s", "  12s"  (u = µs, m = ms)
 *   percent  " 0.0%", "12.5%", " 250%"
 * Pure functions; no allocation. */
#ifndef SHOAL_METRICS_STATS_FORMAT_H
#define SHOAL_METRICS_STATS_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

#define SHOAL_STATS_CELL 5 /* characters of one cell, without the NUL */

enum shoal_stats_unit {
        SHOAL_STATS_BYTES,   /* bytes or bytes per second */
        SHOAL_STATS_COUNT,   /* a count or a rate per second */
        SHOAL_STATS_SECONDS, /* a duration in seconds */
        SHOAL_STATS_PERCENT, /* a fraction: 0.125 is "12.5%" */
};

/* How loud a cell is, from the magnitude of its value; the caller maps it to a colour. */
enum shoal_stats_tone {
        SHOAL_STATS_TONE_ZERO, /* zero, negative or not a number: dim */
        SHOAL_STATS_TONE_LOW,
        SHOAL_STATS_TONE_MID,
        SHOAL_STATS_TONE_HIGH,
        SHOAL_STATS_TONE_TOP,
};

/* Formats V as exactly SHOAL_STATS_CELL characters into OUT (NUL-terminated) and returns its
 * tone. Zero, negative and NaN values are "   0 "; values past the largest unit are clamped to
 * "9999" of it (P). */
enum shoal_stats_tone shoal_stats_format(double v, enum shoal_stats_unit unit,
                                         char out[SHOAL_STATS_CELL + 1]);

/* Writes NAME centred in a field of WIDTH characters padded with '-' (the section line of the
 * header), truncating NAME if it does not fit. OUT holds at least WIDTH+1 bytes. */
void shoal_stats_section_title(const char *name, size_t width, char *out);

#endif
