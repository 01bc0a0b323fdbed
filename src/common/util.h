/* Small shared helpers: clocks and deadlines, size and duration parsing, hex. */
#ifndef SHOAL_COMMON_UTIL_H
#define SHOAL_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define SHOAL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define SHOAL_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define SHOAL_MAX(a, b)     ((a) > (b) ? (a) : (b))
#define SHOAL_KiB           (1024ULL)
#define SHOAL_MiB           (1024ULL * 1024ULL)
#define SHOAL_GiB           (1024ULL * 1024ULL * 1024ULL)

/* Time is counted in nanoseconds everywhere (clocks, deadlines, durations); these name the
 * conversions. Unsigned, as the clocks are: cast for signed arithmetic (mtimes). */
#define SHOAL_NS_PER_US  1000ULL
#define SHOAL_NS_PER_MS  1000000ULL
#define SHOAL_NS_PER_SEC 1000000000ULL

/* Marks LEN bytes at P, a mapping just made, addressable for AddressSanitizer; nothing in a
 * build without it. A fresh mapping is addressable memory, but ASan's shadow of its addresses
 * may still say otherwise: in a forked child, new mappings land where glibc freed the parent's
 * thread stacks, whose shadow keeps the poison of the frames live at the fork (GCC 12's libasan
 * clears no shadow on mmap; a fork without exec is what a DataLoader worker is). A recv into such
 * a buffer was then reported as a write into a dead thread's stack frame, and the report itself
 * failed a check (docs/reliability.md, issue 24). Every mmap in src/ calls this. */
#if defined(__SANITIZE_ADDRESS__)
#define SHOAL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHOAL_ASAN 1
#endif
#endif
#ifdef SHOAL_ASAN
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#endif
static inline void shoal_mapped_fresh(void *p, size_t len)
{
#ifdef SHOAL_ASAN
        __asan_unpoison_memory_region(p, len);
#else
        (void)p;
        (void)len;
#endif
}

/* TS in nanoseconds (TS not before the clock's epoch). */
/* Stafford's variant 13 of MurmurHash3's finaliser (splitmix64's): every input bit affects every
 * output bit. Placement's rendezvous scores and the cache's spreading of blocks over folders and
 * locks both use it. */
static inline uint64_t shoal_mix64(uint64_t x)
{
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ULL;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebULL;
        x ^= x >> 31;
        return x;
}

static inline uint64_t shoal_timespec_ns(const struct timespec *ts)
{
        return (uint64_t)ts->tv_sec * SHOAL_NS_PER_SEC + (uint64_t)ts->tv_nsec;
}

/* NS nanoseconds as a timespec (absolute deadlines for pthread_cond_timedwait and friends). */
static inline struct timespec shoal_ns_timespec(uint64_t ns)
{
        return (struct timespec){.tv_sec = (time_t)(ns / SHOAL_NS_PER_SEC),
                                 .tv_nsec = (long)(ns % SHOAL_NS_PER_SEC)};
}

/* Monotonic nanoseconds (deadlines, expiry, latency). */
static inline uint64_t shoal_now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return shoal_timespec_ns(&ts);
}

/* Wall-clock nanoseconds since the epoch (signatures and display only). */
static inline uint64_t shoal_wall_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return shoal_timespec_ns(&ts);
}

/* Parses a size: "4096", "4K", "4M", "1G", "2T" (binary units, optional "i"/"iB"/"B").
 * A plain number is multiplied by DEFAULT_UNIT. "-1" is accepted only when ALLOW_NEG1 (stored
 * as -1). Returns 0, or -EINVAL for anything else (junk, overflow, other negatives). */
int shoal_parse_size(const char *s, uint64_t default_unit, bool allow_neg1, int64_t *out);

/* Parses a duration: "30s", "5m", "1h", "100ms", "2d", "1h30m", or a plain number of seconds.
 * Returns 0 and nanoseconds in *out_ns, or -EINVAL. */
int shoal_parse_duration(const char *s, uint64_t *out_ns);

/* Parses a non-negative decimal integer no larger than MAX. Returns 0 or -EINVAL. */
int shoal_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* Writes 2*LEN lowercase hex characters and a NUL into OUT (2*LEN+1 bytes). */
void shoal_hex(const void *data, size_t len, char *out);
/* The value of hex digit C (either case), or -1 when C is not one. */
int shoal_hexval(int c);

/* Formats BYTES as "4.0 MiB" style text into OUT. */
void shoal_format_bytes(uint64_t bytes, char *out, size_t outlen);

/* Formats a duration the way shoal_parse_duration reads it: "250us", "1.5ms", "200ms" below one
 * second (never "0s"), then "1.5s", "5m", "1h30m", "2m3.25s" (millisecond precision). */
void shoal_format_duration(uint64_t ns, char *out, size_t outlen);

/* Copies at most OUTLEN-1 bytes and always terminates; returns strlen(src). */
size_t shoal_strlcpy(char *out, const char *src, size_t outlen);

/* Fills BUF with LEN bytes from the kernel's CSPRNG. Returns 0 or -errno. */
int shoal_random_bytes(void *buf, size_t len);

/* A fast per-thread PRNG (xorshift), seeded from the CSPRNG; not for secrets. */
uint64_t shoal_rand64(void);

/* Sleeps for NS nanoseconds (restarting on EINTR). */
void shoal_sleep_ns(uint64_t ns);

/* Waits until FD has one of EVENTS (poll(2) flags) or the monotonic DEADLINE passes: 0,
 * -ETIMEDOUT, or -errno (EINTR restarts). */
int shoal_wait_fd(int fd, short events, uint64_t deadline);

/* write(2) loop that finishes the whole buffer; returns 0 or -errno. */
int shoal_write_all(int fd, const void *buf, size_t len);
/* pread(2) loop: returns bytes read (short only at EOF) or -errno. */
long shoal_pread_full(int fd, void *buf, size_t len, uint64_t off);

#endif
