/* The data model [D1-D3]: volumes, objects, blocks, chunks and their identities.
 *
 * An object of N bytes is split into ceil(N/B) blocks of the volume's block size B. A block is
 * identified by a 16-byte id derived from (volume fingerprint, object key, object version, block
 * index); a changed object has a new version and therefore new ids. Inside a block, data is
 * checked in chunks of SHOAL_CHUNK_SIZE: each chunk's CRC32C is seeded with the block id and the
 * chunk index, so a checksum binds key, version, offset and data together. Every transfer of
 * block data (disk, TCP, RDMA) moves whole chunks, except the last chunk of a block, which may be
 * short. */
#ifndef SHOAL_COMMON_BLOCK_H
#define SHOAL_COMMON_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHOAL_CHUNK_SIZE         (64u * 1024u)
#define SHOAL_BLOCK_SIZE_MIN     (64u * 1024u)
#define SHOAL_BLOCK_SIZE_MAX     (64u * 1024u * 1024u)
#define SHOAL_BLOCK_SIZE_DEFAULT (4u * 1024u * 1024u)
#define SHOAL_MAX_CHUNKS         (SHOAL_BLOCK_SIZE_MAX / SHOAL_CHUNK_SIZE) /* 1024 */
#define SHOAL_KEY_MAX            1024 /* bytes of an object key */
#define SHOAL_VERSION_MAX        128 /* bytes of an object version (ETag, size+mtime+inode+ctime) */
#define SHOAL_BLOCK_ID_LEN       16
#define SHOAL_BLOCK_ID_HEX       (2 * SHOAL_BLOCK_ID_LEN + 1)

struct shoal_volume {
        char url[1024];      /* STORAGE as given, normalised without a trailing '/' */
        uint32_t block_size; /* bytes; a power of two in [MIN, MAX] */
        uint8_t fp[16];      /* fingerprint of (url, block_size) */
};

struct shoal_object {
        char key[SHOAL_KEY_MAX + 1];
        char version[SHOAL_VERSION_MAX + 1];
        uint64_t size;
        int64_t mtime_ns;
};

struct shoal_block_id {
        uint8_t b[SHOAL_BLOCK_ID_LEN];
};

/* Fills VOL from URL and BLOCK_SIZE. Returns 0, or -EINVAL when the block size is not a power of
 * two in range or the URL is empty or too long. */
int shoal_volume_init(struct shoal_volume *vol, const char *url, uint32_t block_size);

/* Number of blocks of an object of SIZE bytes (0 for an empty object). */
uint32_t shoal_block_count(uint64_t size, uint32_t block_size);
/* Length of block INDEX of an object of SIZE bytes (0 when INDEX is past the end). */
uint32_t shoal_block_len(uint64_t size, uint32_t block_size, uint32_t index);
/* Number of chunks in a block of LEN bytes. */
static inline uint32_t shoal_chunk_count(uint32_t len)
{
        return (len + SHOAL_CHUNK_SIZE - 1) / SHOAL_CHUNK_SIZE;
}

/* Derives the id of block INDEX of OBJ in VOL. */
void shoal_block_id_derive(const struct shoal_volume *vol, const char *key, const char *version,
                           uint32_t index, struct shoal_block_id *out);
void shoal_block_id_hex(const struct shoal_block_id *id, char out[SHOAL_BLOCK_ID_HEX]);
static inline bool shoal_block_id_eq(const struct shoal_block_id *a, const struct shoal_block_id *b)
{
        for (int i = 0; i < SHOAL_BLOCK_ID_LEN; i++)
                if (a->b[i] != b->b[i])
                        return false;
        return true;
}
/* A 64-bit hash of the id (hash tables, placement). */
uint64_t shoal_block_id_hash64(const struct shoal_block_id *id);

/* CRC of chunk CHUNK (0-based) of block ID with LEN bytes of DATA, seeded with id and index. */
uint32_t shoal_chunk_crc(const struct shoal_block_id *id, uint32_t chunk, const void *data,
                         size_t len);

/* True when [OFF, OFF+LEN) is a valid chunk-aligned range of a block of BLOCK_LEN bytes: OFF a
 * multiple of the chunk size, LEN > 0, and OFF+LEN either chunk-aligned or equal to BLOCK_LEN. */
bool shoal_range_valid(uint32_t block_len, uint32_t off, uint32_t len);
/* Rounds [OFF, OFF+LEN) out to chunk boundaries within a block of BLOCK_LEN bytes. */
void shoal_range_align(uint32_t block_len, uint32_t off, uint32_t len, uint32_t *aoff,
                       uint32_t *alen);

/* Object keys from users or the network [D3]: 1..SHOAL_KEY_MAX bytes, no NUL, no ASCII control
 * characters. (Backends add their own rules; file:// also refuses "." and ".." components.) */
bool shoal_key_valid(const char *key, size_t len);
/* Versions: 1..SHOAL_VERSION_MAX printable ASCII bytes. */
bool shoal_version_valid(const char *v, size_t len);

#endif
