/* Logging: one macro that checks the level before formatting. Lines look like the seeds':
 *   2026/11/29 18:50:00.123456 shoal[1234] <INFO>: iorpc: message
 * Thread-safe; each line is written with one write(2). */
#ifndef SHOAL_COMMON_LOG_H
#define SHOAL_COMMON_LOG_H

#include <stdbool.h>

enum shoal_log_level {
        SHOAL_LOG_ERROR = 0,
        SHOAL_LOG_WARN = 1,
        SHOAL_LOG_INFO = 2,
        SHOAL_LOG_DEBUG = 3,
        SHOAL_LOG_TRACE = 4,
};

extern int shoal_log_level_cur;

/* Opens PATH (append) as the log destination, or stderr when PATH is NULL. Returns 0 or -errno. */
int shoal_log_open(const char *path);
/* Opens the log file again under its name (logrotate moved it away), in place of the old one;
 * stderr too when it pointed at the old file. A no-op when logging to stderr. Returns 0 or
 * -errno (the old file is kept then). */
int shoal_log_reopen(void);
/* The descriptor logs go to (STDERR_FILENO unless shoal_log_open opened a file). */
int shoal_log_fd(void);
/* Parses "error|warn|info|debug|trace" (or 0..4); returns the level or -1. */
int shoal_log_parse_level(const char *s);
void shoal_log_set_level(int level);
void shoal_log_write(int level, const char *mod, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

#define SHOAL_LOG(lvl, mod, ...)                                    \
        do {                                                        \
                if ((lvl) <= shoal_log_level_cur)                   \
                        shoal_log_write((lvl), (mod), __VA_ARGS__); \
        } while (0)

#define log_error(mod, ...) SHOAL_LOG(SHOAL_LOG_ERROR, mod, __VA_ARGS__)
#define log_warn(mod, ...)  SHOAL_LOG(SHOAL_LOG_WARN, mod, __VA_ARGS__)
#define log_info(mod, ...)  SHOAL_LOG(SHOAL_LOG_INFO, mod, __VA_ARGS__)
#define log_debug(mod, ...) SHOAL_LOG(SHOAL_LOG_DEBUG, mod, __VA_ARGS__)
#define log_trace(mod, ...) SHOAL_LOG(SHOAL_LOG_TRACE, mod, __VA_ARGS__)

/* Rate-limited variant for hot paths: at most one line per second per call site. */
#define log_ratelimited(lvl, mod, ...)                                                 \
        do {                                                                           \
                static long long last_s__;                                             \
                if ((lvl) <= shoal_log_level_cur && shoal_log_ratelimit_ok(&last_s__)) \
                        shoal_log_write((lvl), (mod), __VA_ARGS__);                    \
        } while (0)
bool shoal_log_ratelimit_ok(long long *last_s);

#endif
