/*
 * counttable.h -- pretoken bytes -> 64-bit counts, in native memory (no Python objects).
 *
 * A counting worker feeds its text (scanned by scan.c and counted here, no object per
 * pretoken) and hands its table to the parent packed into one buffer, which the parent
 * merges into its own table.  The packed form is, for each entry, in no particular order:
 *
 *     u32 length (little-endian) | length bytes of the pretoken | u64 count (little-endian)
 *
 * Limits are checked, never wrapped: at most BS_CT_MAX_ENTRIES distinct pretokens, each
 * at most UINT32_MAX bytes, counts that stay below 2**64.
 */
#ifndef BS_COUNTTABLE_H
#define BS_COUNTTABLE_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct bs_counttable bs_counttable;

enum {
    BS_CT_OK = 0,
    BS_CT_ENOMEM = -1,    /* an allocation failed; the table is unchanged by the failed step */
    BS_CT_ELIMIT = -2,    /* a key, the number of entries or a count would exceed its limit */
    BS_CT_EPACKED = -3,   /* a packed buffer that does not parse (entries before it were merged) */
    BS_CT_EPATTERN = -4,  /* not a bs_scan_pattern */
};

#define BS_CT_MAX_ENTRIES (UINT32_MAX - 1u)
#define BS_CT_PACKED_OVERHEAD 12u /* bytes per packed entry besides its key */

/* The packed form's numbers, little-endian whatever the host: `bytes` of v written at out
 * (returns the byte after them), and read from in. */
static inline uint8_t *bs_ct_put_le(uint8_t *out, uint64_t v, int bytes) {
    for (int k = 0; k < bytes; k++) out[k] = (uint8_t)(v >> (8 * k));
    return out + bytes;
}

static inline uint64_t bs_ct_get_le(const uint8_t *in, int bytes) {
    uint64_t v = 0;
    for (int k = 0; k < bytes; k++) v |= (uint64_t)in[k] << (8 * k);
    return v;
}

/* The keys' order -- a sorted run's (runs.h), Python's bytes and LMDB's default: memcmp over
 * the shorter length, then the shorter first. */
static inline int bs_ct_key_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c;
    return alen < blen ? -1 : alen > blen;
}

/* One packed entry written at out (len bytes of key; key may be NULL when len is 0);
 * returns the byte after it. */
static inline uint8_t *bs_ct_put_entry(uint8_t *out, const uint8_t *key, size_t len, uint64_t count) {
    out = bs_ct_put_le(out, len, 4);
    if (len) memcpy(out, key, len);
    return bs_ct_put_le(out + len, count, 8);
}

/* The packed entry of buf[0:len) at *off: 1 with its key, length and count, *off moved
 * past it; 0 at the end; BS_CT_EPACKED when what is left is not a whole entry. */
static inline int bs_ct_next_entry(const uint8_t *buf, size_t len, size_t *off, const uint8_t **key, size_t *klen,
                                   uint64_t *count) {
    size_t rest = len - *off;
    if (rest == 0) return 0;
    if (rest < BS_CT_PACKED_OVERHEAD || bs_ct_get_le(buf + *off, 4) > rest - BS_CT_PACKED_OVERHEAD) return BS_CT_EPACKED;
    *klen = (size_t)bs_ct_get_le(buf + *off, 4);
    *key = buf + *off + 4;
    *count = bs_ct_get_le(*key + *klen, 8);
    *off += BS_CT_PACKED_OVERHEAD + *klen;
    return 1;
}

bs_counttable *bs_ct_new(void);
void bs_ct_free(bs_counttable *t);
void bs_ct_clear(bs_counttable *t);

size_t bs_ct_len(const bs_counttable *t);      /* distinct pretokens */
uint64_t bs_ct_total(const bs_counttable *t);  /* the sum of the counts */

/* Adds n to the count of key[0:len). */
int bs_ct_add(bs_counttable *t, const uint8_t *key, size_t len, uint64_t n);

/* Scans data[0:len) with a bs_scan_pattern and counts each pretoken once, a pretoken
 * longer than max_bytes (0: no cap) as its pieces (bs_scan_pieces); *pretokens (if not
 * NULL) gets how many were counted, also when an error stops the feed part way. */
int bs_ct_feed(bs_counttable *t, int pattern, size_t max_bytes, const uint8_t *data, size_t len, uint64_t *pretokens);

/* bs_ct_feed of each stretch of data[0:len) between the special tokens of `specials`
 * (found as bs_specials_find finds them: leftmost first, the longest at a position; the
 * tokens themselves are not counted); *found (if not NULL) gets how many there were. */
struct bs_specials;
int bs_ct_feed_between(bs_counttable *t, const struct bs_specials *specials, int pattern, size_t max_bytes,
                       const uint8_t *data, size_t len, uint64_t *pretokens, uint64_t *found);

/* The i-th entry (0 <= i < bs_ct_len), in insertion order; the key stays valid until the
 * table changes. */
void bs_ct_entry(const bs_counttable *t, size_t i, const uint8_t **key, size_t *len, uint64_t *count);

/* Hints that the i-th entry is read soon; with_key, its key too (found by reading the
 * entry: hint the entry alone a few reads before). */
void bs_ct_prefetch(const bs_counttable *t, size_t i, int with_key);

/* Fills order[0:bs_ct_len) with the entries' indexes in the order of their keys: bytes
 * compared as memcmp does, a key before every longer one it begins (Python's bytes order,
 * and LMDB's default key order).  BS_CT_ENOMEM if its scratch cannot be allocated. */
int bs_ct_sorted(const bs_counttable *t, uint32_t *order);

/* The size of the packed form, and the packing itself into out[0:bs_ct_packed_size). */
size_t bs_ct_packed_size(const bs_counttable *t);
void bs_ct_pack(const bs_counttable *t, uint8_t *out);

/* Adds every entry of a packed buffer. */
int bs_ct_merge_packed(bs_counttable *t, const uint8_t *buf, size_t len);

#endif
