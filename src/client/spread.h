/* Spread by load (issue 29): what a requester knows of its own load on each member, and when a
 * block's owner counts as busy. A process counts the reads it has in flight to each member; a
 * read that would be the BUSY-th or later to the block's owner goes to the next member in the
 * block's rendezvous order instead (at most COPIES members hold a block: the owner, and the next
 * one in memory while it is hot). Placement stays what shoal_group_owners says; only the choice
 * between its first COPIES members depends on the load.
 *
 * Off by default (one copy): a member that fills in a dead owner's place from a second copy it
 * holds in memory serves it without a store fetch, which the kill battery's ownership model
 * (tests/integration/ownership.py) does not know yet. Thread-safe. */
#ifndef SHOAL_CLIENT_SPREAD_H
#define SHOAL_CLIENT_SPREAD_H

#include <stdbool.h>
#include <stdint.h>

#define SHOAL_SPREAD_COPIES_DEFAULT 1 /* off unless SHOAL_SPREAD_COPIES=2 (see below) */
#define SHOAL_SPREAD_COPIES_MAX     2 /* the member fills as the owner or the next member only */
#define SHOAL_SPREAD_BUSY_DEFAULT   9

struct shoal_spread;

/* COPIES: 1 (no spread reads) to SHOAL_SPREAD_COPIES_MAX; 0 takes SHOAL_SPREAD_COPIES or the
 * default. BUSY: 0 takes SHOAL_SPREAD_BUSY or the default. NULL when out of memory. */
struct shoal_spread *shoal_spread_create(unsigned copies, unsigned busy);
void shoal_spread_destroy(struct shoal_spread *sp);

unsigned shoal_spread_copies(const struct shoal_spread *sp);

/* Counts a read to member ID in flight (begin) and done (end). */
void shoal_spread_begin(struct shoal_spread *sp, const char *id);
void shoal_spread_end(struct shoal_spread *sp, const char *id);
unsigned shoal_spread_inflight(struct shoal_spread *sp, const char *id);

/* Whether a read of a block owned by OWNER should go to NEXT instead: spread reads are on, the
 * owner would get its BUSY-th read in flight or more, and NEXT has fewer in flight. */
bool shoal_spread_choose_next(struct shoal_spread *sp, const char *owner, const char *next);

/* A 64-bit hash of a string (an object's key or version), for copies to be told apart. */
uint64_t shoal_spread_hash(const char *s);

#endif
