/* The group secret as it travels through configuration: a byte string with a length [S1, S3].
 * Every byte counts, NUL included, so nothing here is a C string. The bytes belong to whoever
 * filled the struct (the command line keeps them for the process's life); components that need
 * the secret after start-up derive their own key from it (wire/handshake.h) and keep no copy. */
#ifndef SHOAL_COMMON_SECRET_H
#define SHOAL_COMMON_SECRET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHOAL_SECRET_MIN 16   /* bytes; a shorter secret is refused */
#define SHOAL_SECRET_MAX 4096 /* bytes; a longer secret file is refused */

struct shoal_secret {
        const uint8_t *bytes; /* LEN bytes, or NULL when LEN is 0 */
        size_t len;           /* 0: no secret (loopback only) */
};

/* True when S names a secret (S may be NULL). */
static inline bool shoal_secret_set(const struct shoal_secret *s)
{
        return s && s->len > 0;
}

#endif
