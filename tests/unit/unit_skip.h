/* Skipping a unit test case. On a developer's machine a case may skip (it is recorded in
 * $SHOAL_SKIP_LOG, which scripts/test.sh lists at the end of the run); in CI (CI=true) a skip is a
 * failure, so that a case that cannot run there never passes silently.
 * Include after <cmocka.h>. */
#ifndef SHOAL_TESTS_UNIT_SKIP_H
#define SHOAL_TESTS_UNIT_SKIP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Skips the calling test case because of WHY (fails it instead when CI is "true" or "1"). */
#define SHOAL_UNIT_SKIP(why) shoal_unit_skip(__func__, (why), __FILE__, __LINE__)

static inline void shoal_unit_skip(const char *test, const char *why, const char *file, int line)
{
        const char *ci = getenv("CI");
        if (ci && (!strcmp(ci, "true") || !strcmp(ci, "1"))) {
                print_error("%s skipped in CI (CI=%s): %s\n", test, ci, why);
                _fail(file, line); /* cmocka: prints the location and ends the case as failed */
        }
        const char *log = getenv("SHOAL_SKIP_LOG");
        FILE *f = log && *log ? fopen(log, "a") : NULL;
        if (f) {
                fprintf(f, "unit %s: %s\n", test, why);
                fclose(f);
        }
        print_message("SKIP %s: %s\n", test, why);
        _skip(file, line);
}

#endif
