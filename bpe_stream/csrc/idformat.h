/*
 * idformat.h: token ids as the bytes the CLI writes (ids_io.format_ids, byte for byte).
 *
 *   txt  the decimal ids separated by single spaces (no space or newline at either end)
 *   u16  little-endian 16-bit ids (an id above 65535 is BS_TOO_LARGE)
 *   u32  little-endian 32-bit ids
 *   ids  the host's own uint32 (what Python reads with array('I').frombytes)
 */
#ifndef BPE_STREAM_IDFORMAT_H
#define BPE_STREAM_IDFORMAT_H

#include "common.h"

typedef enum { BS_FMT_IDS = 0, BS_FMT_U32 = 1, BS_FMT_U16 = 2, BS_FMT_TXT = 3, BS_FMT_COUNT = 4 } bs_id_format;

/* The format named `name`, or -1. */
int bs_format_by_name(const char *name);
const char *bs_format_name(int fmt);

/* The size in *size of n ids in fmt: BS_OK, or BS_TOO_LARGE (an id that u16 cannot hold),
 * or BS_BAD_ARGUMENT (no such format). */
int bs_format_size(const uint32_t *ids, size_t n, int fmt, size_t *size);
/* Writes them to out[0:size), the size bs_format_size gave. */
void bs_format(const uint32_t *ids, size_t n, int fmt, uint8_t *out);

#endif
