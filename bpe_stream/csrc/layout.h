/*
 * layout.h: what the C code and the Python code must agree on, each defined once here --
 * the tie-break rules (their numbers and names).  module.c hands them to Python
 * (TIE_BREAKS), and bpe.TIE_BREAKS is checked at import to be the same.
 *
 * Byte order.  The merge loop's and the encoder's buffers are the host's own typed arrays
 * and never leave the process (array('I') / bytearray symbols, array('Q') ends,
 * array('q') counts; native uint32 ids, read with array('I').frombytes).  What is kept or
 * handed between processes is little-endian whatever the host: the packed counts and runs
 * (counttable.h, bs_ct_put_le / bs_ct_get_le), and the store's 8-byte counts -- written by
 * module.c's le64_values and add_le64 with those helpers (by int.to_bytes without the
 * extension), read by storecheck.c and by Python.
 */
#ifndef BPE_STREAM_LAYOUT_H
#define BPE_STREAM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

/* -- tie-breaks -------------------------------------------------------------------------
 * Among pairs of equal count: max-bytes takes the greatest (bytes(left), bytes(right)),
 * min-bytes the smallest, min-ids the smallest (id(left), id(right)).  Pairs with the same
 * bytes (a word-end marker spelled like a byte) fall back to the smaller ids. */
#define BS_TIE_BREAKS(X)           \
    X(TB_MAX_BYTES, "max-bytes")   \
    X(TB_MIN_BYTES, "min-bytes")   \
    X(TB_MIN_IDS, "min-ids")

#define BS_TB_ENUM_(id, name) id,
enum { BS_TIE_BREAKS(BS_TB_ENUM_) TB_COUNT };
#undef BS_TB_ENUM_

/* The rule's name ("max-bytes", ...), or NULL for a number that is none. */
static inline const char *bs_tie_break_name(int rule) {
#define BS_TB_CASE_(id, name) if (rule == id) return name;
    BS_TIE_BREAKS(BS_TB_CASE_)
#undef BS_TB_CASE_
    return (const char *)0;
}

#endif
