#include "common/block.h"

#include <errno.h>
#include <string.h>
#include <openssl/sha.h>

#include "common/crc32c.h"
#include "common/util.h"

int shoal_volume_init(struct shoal_volume *vol, const char *url, uint32_t block_size)
{
        size_t n = strlen(url);
        /* Trailing slashes go, except the third of "scheme:///" (a root directory). */
        while (n > 1 && url[n - 1] == '/' && !(n >= 4 && !strncmp(url + n - 4, ":///", 4)))
                n--;
        if (n == 0 || n >= sizeof(vol->url))
                return -EINVAL;
        if (block_size < SHOAL_BLOCK_SIZE_MIN || block_size > SHOAL_BLOCK_SIZE_MAX ||
            (block_size & (block_size - 1)))
                return -EINVAL;
        memset(vol, 0, sizeof(*vol));
        memcpy(vol->url, url, n);
        vol->url[n] = '\0';
        vol->block_size = block_size;
        unsigned char buf[sizeof(vol->url) + 16];
        size_t len = n;
        memcpy(buf, vol->url, n);
        buf[len++] = 0;
        for (int i = 0; i < 4; i++)
                buf[len++] = (unsigned char)(block_size >> (8 * i));
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256(buf, len, md);
        memcpy(vol->fp, md, sizeof(vol->fp));
        return 0;
}

uint32_t shoal_block_count(uint64_t size, uint32_t block_size)
{
        return (uint32_t)((size + block_size - 1) / block_size);
}

uint32_t shoal_block_len(uint64_t size, uint32_t block_size, uint32_t index)
{
        uint64_t start = (uint64_t)index * block_size;
        if (start >= size)
                return 0;
        return (uint32_t)SHOAL_MIN((uint64_t)block_size, size - start);
}

void shoal_block_id_derive(const struct shoal_volume *vol, const char *key, const char *version,
                           uint32_t index, struct shoal_block_id *out)
{
        /* Length-prefixed fields, so no two different tuples hash the same input. */
        unsigned char buf[16 + 2 + SHOAL_KEY_MAX + 2 + SHOAL_VERSION_MAX + 4];
        size_t klen = strnlen(key, SHOAL_KEY_MAX), vlen = strnlen(version, SHOAL_VERSION_MAX);
        size_t n = 0;
        memcpy(buf, vol->fp, 16);
        n += 16;
        buf[n++] = (unsigned char)klen;
        buf[n++] = (unsigned char)(klen >> 8);
        memcpy(buf + n, key, klen);
        n += klen;
        buf[n++] = (unsigned char)vlen;
        buf[n++] = (unsigned char)(vlen >> 8);
        memcpy(buf + n, version, vlen);
        n += vlen;
        for (int i = 0; i < 4; i++)
                buf[n++] = (unsigned char)(index >> (8 * i));
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256(buf, n, md);
        memcpy(out->b, md, SHOAL_BLOCK_ID_LEN);
}

void shoal_block_id_hex(const struct shoal_block_id *id, char out[SHOAL_BLOCK_ID_HEX])
{
        shoal_hex(id->b, SHOAL_BLOCK_ID_LEN, out);
}

uint64_t shoal_block_id_hash64(const struct shoal_block_id *id)
{
        uint64_t h;
        memcpy(&h, id->b, sizeof(h)); /* the id is already a cryptographic hash */
        return h;
}

uint32_t shoal_chunk_crc(const struct shoal_block_id *id, uint32_t chunk, const void *data,
                         size_t len)
{
        unsigned char seed[SHOAL_BLOCK_ID_LEN + 4];
        memcpy(seed, id->b, SHOAL_BLOCK_ID_LEN);
        for (int i = 0; i < 4; i++)
                seed[SHOAL_BLOCK_ID_LEN + i] = (unsigned char)(chunk >> (8 * i));
        uint32_t crc = shoal_crc32c(0, seed, sizeof(seed));
        return shoal_crc32c(crc, data, len);
}

bool shoal_range_valid(uint32_t block_len, uint32_t off, uint32_t len)
{
        if (len == 0 || off % SHOAL_CHUNK_SIZE)
                return false;
        uint64_t end = (uint64_t)off + len;
        if (end > block_len)
                return false;
        return end == block_len || end % SHOAL_CHUNK_SIZE == 0;
}

void shoal_range_align(uint32_t block_len, uint32_t off, uint32_t len, uint32_t *aoff,
                       uint32_t *alen)
{
        uint32_t start = off - off % SHOAL_CHUNK_SIZE;
        uint64_t end = (uint64_t)off + len;
        end = (end + SHOAL_CHUNK_SIZE - 1) / SHOAL_CHUNK_SIZE * SHOAL_CHUNK_SIZE;
        if (end > block_len)
                end = block_len;
        *aoff = start;
        *alen = (uint32_t)(end - start);
}

bool shoal_key_valid(const char *key, size_t len)
{
        if (len == 0 || len > SHOAL_KEY_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)key[i];
                if (c < 0x20 || c == 0x7f)
                        return false;
        }
        return true;
}

bool shoal_version_valid(const char *v, size_t len)
{
        if (len == 0 || len > SHOAL_VERSION_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)v[i];
                if (c < 0x21 || c > 0x7e)
                        return false;
        }
        return true;
}
