/*
 * layout.h: what the C code and the Python code must agree on, each defined once here --
 * the tie-break rules (their numbers and names) and the rows both sides read and write.
 * module.c hands both tables to Python (TIE_BREAKS, SEQUENCE_ROW), and the Python modules
 * that hold their own definitions (bpe.TIE_BREAKS, sequences.SEQUENCE_ROW) check at import
 * that they are the same.
 *
 * Byte order.  A row that C and Python both read is encoded with an explicit byte order,
 * never the host's: little-endian, except a key meant to sort, which is big-endian.  The
 * other buffers crossing the boundary are the host's own typed arrays and never leave the
 * process: train()'s inputs (array('I') / bytearray symbols, array('Q') ends, array('q')
 * counts) and the encoder's ids (native uint32, read with array('I').frombytes).
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

/* -- the sequence table of the disk path (a scratch LMDB table; sequences.py) -----------
 * key:   the word id, 4 bytes big-endian -- the one key meant to sort: LMDB orders keys by
 *        their bytes, so ids ascend in key order, a load appends, and a merge's sorted
 *        word ids are read in key order.  PairIndex.take_words packs keys the same way.
 * value: the word's count, int64 little-endian, then its symbols, uint32 little-endian
 *        each (PairIndex.add_word takes the same symbols).
 * BS_SEQUENCE_ROW lists the fields in row order as (name, bytes, byte order). */
#define BS_SEQ_KEY_BYTES 4
#define BS_SEQ_COUNT_BYTES 8
#define BS_SEQ_SYMBOL_BYTES 4
#define BS_SEQUENCE_ROW(X)                    \
    X("key", BS_SEQ_KEY_BYTES, "big")         \
    X("count", BS_SEQ_COUNT_BYTES, "little")  \
    X("symbol", BS_SEQ_SYMBOL_BYTES, "little")

/* Byte by byte, so the order is the row's on every host (compilers make these one load). */
static inline uint32_t bs_seq_key(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void bs_seq_put_key(uint8_t *p, uint32_t word_id) {
    p[0] = (uint8_t)(word_id >> 24);
    p[1] = (uint8_t)(word_id >> 16);
    p[2] = (uint8_t)(word_id >> 8);
    p[3] = (uint8_t)word_id;
}

static inline int64_t bs_seq_count(const uint8_t *value) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | value[k];
    return (int64_t)v;
}

/* Symbol i of a row's symbols (the value after its count, or add_word's sequence). */
static inline uint32_t bs_seq_symbol(const uint8_t *symbols, size_t i) {
    const uint8_t *p = symbols + BS_SEQ_SYMBOL_BYTES * i;
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void bs_seq_put_symbol(uint8_t *symbols, size_t i, uint32_t sym) {
    uint8_t *p = symbols + BS_SEQ_SYMBOL_BYTES * i;
    p[0] = (uint8_t)sym;
    p[1] = (uint8_t)(sym >> 8);
    p[2] = (uint8_t)(sym >> 16);
    p[3] = (uint8_t)(sym >> 24);
}

#endif
