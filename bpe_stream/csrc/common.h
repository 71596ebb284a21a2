/*
 * common.h: what every algorithm file of bpe_stream/csrc shares -- the index sentinels,
 * the status codes, the hash, and checked growth of arrays (allocated through filearena.h's
 * bs_* functions, so that an array lands in a file arena when one is current).
 *
 * The algorithms (merge_loop, encoder, the pairs they share, the file arena, ...) include no
 * Python.h: they take plain C buffers, return a status (BS_OK or a negative bs_status), and
 * could be linked into a C program.  module.c alone converts Python objects to buffers and
 * statuses to exceptions.
 */
#ifndef BPE_STREAM_COMMON_H
#define BPE_STREAM_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "filearena.h"

/* Seconds on the monotonic clock: the phase times the merge loop reports (BPE_STREAM_DEBUG). */
static inline double bs_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Index sentinels: no position, no record, a symbol merged away.  No array indexed by a
 * uint32 may reach them, which is what bs_limit32 guarantees. */
#define BS_NONE 0xFFFFFFFFu
#define BS_DEAD 0xFFFFFFFFu

/* What the algorithm functions return; module.c maps each code to an exception. */
typedef enum {
    BS_OK = 0,
    BS_NO_MEMORY = -1,         /* MemoryError */
    BS_TOO_LARGE = -2,         /* a 32-bit count would pass bs_limit32: OverflowError */
    BS_UNKNOWN_SYMBOL = -3,    /* a symbol id without a token */
    BS_BAD_WORD_ENDS = -4,     /* word ends that fall, or do not end at the last symbol */
    BS_UNKNOWN_TIE_BREAK = -5, /* not one of layout.h's rules */
    BS_BAD_ROW = -6,           /* a sequence-table row of the wrong size */
    BS_OUT_OF_ORDER = -7,      /* a call out of its sequence (see each type's header) */
    BS_BAD_ARGUMENT = -8,      /* an argument outside what the function takes */
    BS_COUNT_OVERFLOW = -9,    /* a pair count would pass INT64_MAX: ValueError */
    BS_NO_DISK = -10           /* a scratch file could not grow; errno says why: OSError */
} bs_status;

/* The error's text, for a C caller or an exception. */
const char *bs_status_text(int status);

/* The most items any array counted in 32 bits may hold (positions, pairs, tokens, lists):
 * BS_NONE - 1 unless a test lowers it (module.c's _set_limit32) to reach the checks with
 * small inputs.  Every growth of such an array is checked against it and fails with
 * BS_TOO_LARGE instead of wrapping around. */
extern uint32_t bs_limit32;

static inline uint64_t hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* The capacity an array of `cap` items grows to so that it holds `need`: doubling from
 * `first`, clamped to `limit`; 0 when `need` itself passes the limit. */
static inline uint64_t bs_grown_cap(uint64_t cap, uint64_t need, uint64_t first, uint64_t limit) {
    if (need > limit) return 0;
    uint64_t n = cap ? cap : (first ? first : 1);
    while (n < need && n <= limit / 2) n *= 2;
    if (n < need || n > limit) n = limit;
    return n;
}

/* realloc(data, n * item), the product checked; NULL when it overflows or fails.  In an
 * arena's scope (filearena.h) a new array comes from the arena; an array grows where it is. */
static inline void *bs_realloc_n(void *data, uint64_t n, size_t item) {
    if (item && n > SIZE_MAX / item) return NULL;
    return bs_realloc(data, (size_t)(n ? n : 1) * item);
}

/* In a function that returns a status: makes room for `need` items in the array `arr`
 * whose capacity is `cap` (both lvalues), growing it from `first` up to `limit` items.
 * Returns BS_TOO_LARGE or BS_NO_MEMORY from the enclosing function when it cannot. */
#define BS_RESERVE_OR_RETURN(arr, cap, need, first, limit)                      \
    do {                                                                        \
        if ((uint64_t)(need) > (uint64_t)(cap)) {                               \
            uint64_t bs_n_ = bs_grown_cap((cap), (need), (first), (limit));     \
            if (!bs_n_) return BS_TOO_LARGE;                                    \
            void *bs_d_ = bs_realloc_n((arr), bs_n_, sizeof *(arr));            \
            if (!bs_d_) return BS_NO_MEMORY;                                    \
            (arr) = bs_d_;                                                      \
            (cap) = bs_n_;                                                      \
        }                                                                       \
    } while (0)

/* The limit of an array counted in 64 bits: what its byte size allows. */
#define BS_LIMIT64(arr) ((uint64_t)(SIZE_MAX / sizeof *(arr)))

#endif
