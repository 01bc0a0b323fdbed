/* The host-local secret: how a member started without a group secret still authenticates every
 * connection, with no set-up (docs/operations.md "Who can read, who can write into caches").
 *
 * A sharing member without --group-secret-file / SHOAL_GROUP_SECRET reads the file at its
 * local-secret-file path, creating it on first start: 32 random bytes written as 64 hex digits
 * and a newline, mode 0600, owned by the member's user. Every transport's handshake then uses
 * those 64 characters as the group secret, so the file also works as a --group-secret-file. A
 * client on the host without a group secret reads the same path: a process that can read the
 * file (the member's user, root) gets sessions; one that cannot has no secret, fails every
 * handshake and reads the store itself. The default path is /var/lib/shoal/local.secret as root
 * and ~/.shoal/local.secret otherwise, beside the default registry; "off" turns the mechanism
 * off (a member then trusts every local process, as before it existed). */
#ifndef SHOAL_CLIENT_LOCAL_SECRET_H
#define SHOAL_CLIENT_LOCAL_SECRET_H

#include <stddef.h>
#include <stdint.h>

#define SHOAL_LOCAL_SECRET_LEN 64 /* hex digits of 32 random bytes: the secret's bytes */

/* Member: reads the secret at PATH into OUT, creating the file first when there is none (and
 * the folders above it, 0755). Refuses (-EPERM) a file that is not a regular file owned by this
 * user without group-write or any "other" permission, a folder above it that another user could
 * swap it in, and (-EINVAL) contents that are not 64 hex digits. Returns 0, or a negative errno
 * with one line in ERR. */
int shoal_local_secret_create(const char *path, uint8_t out[SHOAL_LOCAL_SECRET_LEN], char *err,
                              size_t errlen);

/* Client: reads the secret at PATH into OUT. Returns 0; 1 when this process has none (no file,
 * or one it may not read: then it gets no session from a member that uses it); or a negative
 * errno with one line in ERR for a file that is not a local secret (not regular, writable by
 * others, not 64 hex digits): that is a warning, and the caller goes on without a secret. */
int shoal_local_secret_read(const char *path, uint8_t out[SHOAL_LOCAL_SECRET_LEN], char *err,
                            size_t errlen);

#endif
