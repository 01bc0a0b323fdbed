/* CRC32C (Castagnoli): SSE4.2 instruction where the CPU has it, a table otherwise. */
#ifndef SHOAL_COMMON_CRC32C_H
#define SHOAL_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* Continues CRC (start with 0) over LEN bytes of DATA; returns the new CRC. Thread-safe. */
uint32_t shoal_crc32c(uint32_t crc, const void *data, size_t len);
/* The table implementation, always available (tests compare the two). */
uint32_t shoal_crc32c_sw(uint32_t crc, const void *data, size_t len);
/* True when the hardware path is in use. */
bool shoal_crc32c_hw(void);

#endif
