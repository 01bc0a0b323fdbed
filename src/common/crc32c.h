/* CRC32C (Castagnoli), the checksum of every chunk, frame and cache header. Several
 * implementations give identical results; the fastest the CPU supports is picked once at first
 * use (x86-64: AVX-512 carry-less-multiply folding, else three interleaved SSE4.2 crc32 streams
 * combined by PCLMULQDQ, else one SSE4.2 stream, else a table). */
#ifndef SHOAL_COMMON_CRC32C_H
#define SHOAL_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* The implementations, slowest first. */
enum shoal_crc32c_impl {
        SHOAL_CRC32C_TABLE,   /* slicing-by-8 table: any CPU */
        SHOAL_CRC32C_SSE42,   /* one stream of crc32 instructions (the original hardware path) */
        SHOAL_CRC32C_SSE42X3, /* three crc32 streams combined with PCLMULQDQ */
        SHOAL_CRC32C_VPCLMUL, /* AVX-512 VPCLMULQDQ folding of 256-byte strides */
        SHOAL_CRC32C_NIMPL
};

/* Continues CRC (start with 0) over LEN bytes of DATA with the fastest implementation available;
 * returns the new CRC. Thread-safe; DATA may have any alignment. */
uint32_t shoal_crc32c(uint32_t crc, const void *data, size_t len);

/* For tests and bench/crc32c.c: whether IMPL runs on this CPU, its short name, the one
 * shoal_crc32c uses, and a CRC by IMPL (which must be available; the table otherwise). */
bool shoal_crc32c_impl_available(enum shoal_crc32c_impl impl);
const char *shoal_crc32c_impl_name(enum shoal_crc32c_impl impl);
enum shoal_crc32c_impl shoal_crc32c_impl_active(void);
uint32_t shoal_crc32c_with(enum shoal_crc32c_impl impl, uint32_t crc, const void *data, size_t len);

#endif
